/// gRPC status codes, their names, and how a status becomes a `SpeechClientError`.
public enum GRPCStatus {
    public static let ok: Int32 = 0
    public static let cancelled: Int32 = 1
    public static let unknown: Int32 = 2
    public static let deadlineExceeded: Int32 = 4
    public static let permissionDenied: Int32 = 7
    public static let resourceExhausted: Int32 = 8
    public static let unimplemented: Int32 = 12
    public static let `internal`: Int32 = 13
    public static let unavailable: Int32 = 14
    public static let unauthenticated: Int32 = 16

    static let names = ["OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
                        "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
                        "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
                        "UNAUTHENTICATED"]

    /// PERMISSION_DENIED or UNAUTHENTICATED: the credentials were refused, so a retry with
    /// the same ones would be refused again.
    public static func isAuthFailure(_ error: SpeechClientError) -> Bool {
        error.grpcStatus == permissionDenied || error.grpcStatus == unauthenticated
    }

    public static func name(_ status: Int32) -> String {
        status >= 0 && Int(status) < names.count ? names[Int(status)] : "STATUS_\(status)"
    }

    /// The error for a status the server sent (nil for OK). UNAVAILABLE is a network error and
    /// DEADLINE_EXCEEDED a timeout; everything else is `.api`, with `grpcStatus` set so the
    /// layers above can tell auth failures (7, 16) apart.
    public static func error(status: Int32, message: String, path: String) -> SpeechClientError? {
        if status == ok { return nil }
        let text = "\(path) failed with gRPC status \(status) \(name(status))" + (message.isEmpty ? "" : ": \(message)")
        switch status {
        case unavailable: return SpeechClientError(.network, text, grpcStatus: status)
        case deadlineExceeded: return SpeechClientError(.timeout, text, grpcStatus: status)
        default: return SpeechClientError(.api, text, grpcStatus: status)
        }
    }

    /// A call's error when its connection failed under it (the HTTP/2 and transport layers
    /// know no gRPC): a broken or refused connection is UNAVAILABLE, so the layers above
    /// reconnect and replay; a malformed answer (`.parse`) is INTERNAL.
    static func callError(connectionFailure: SpeechClientError, path: String) -> SpeechClientError {
        var e = connectionFailure
        e.message = "\(path): \(e.message)"
        if e.grpcStatus == nil && e.code != .invalidState {
            e.grpcStatus = e.code == .parse ? `internal` : unavailable
        }
        return e
    }

    /// The gRPC status for an HTTP status other than 200 (the gRPC HTTP/2 mapping).
    static func fromHTTPStatus(_ http: Int) -> Int32 {
        switch http {
        case 400: return `internal`
        case 401: return unauthenticated
        case 403: return permissionDenied
        case 404: return unimplemented
        case 429, 502, 503, 504: return unavailable
        default: return unknown
        }
    }

    /// The gRPC status for a stream reset by the server (RST_STREAM error code).
    static func fromHTTP2ErrorCode(_ code: UInt32) -> Int32 {
        switch code {
        case 7: return unavailable        // REFUSED_STREAM: never processed, safe to retry
        case 8: return cancelled          // CANCEL
        case 11: return resourceExhausted // ENHANCE_YOUR_CALM
        case 12: return permissionDenied  // INADEQUATE_SECURITY
        default: return `internal`
        }
    }

    /// Decodes `grpc-message`: percent-encoded UTF-8 (malformed escapes are kept as they are,
    /// invalid UTF-8 is repaired).
    public static func percentDecode(_ text: String) -> String {
        let bytes = Array(text.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = 0
        func hex(_ b: UInt8) -> UInt8? {
            switch b {
            case 0x30...0x39: return b - 0x30
            case 0x41...0x46: return b - 0x41 + 10
            case 0x61...0x66: return b - 0x61 + 10
            default: return nil
            }
        }
        while i < bytes.count {
            if bytes[i] == 0x25, i + 2 < bytes.count, let hi = hex(bytes[i + 1]), let lo = hex(bytes[i + 2]) {
                out.append(hi << 4 | lo)
                i += 3
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// `grpc-timeout` for a deadline: at most 8 digits and a unit.
    static func timeoutHeader(milliseconds: Int) -> String {
        let ms = max(milliseconds, 0)
        if ms <= 99_999_999 { return "\(ms)m" }
        let s = ms / 1000
        if s <= 99_999_999 { return "\(s)S" }
        return "\(min(s / 3600, 99_999_999))H"
    }
}
