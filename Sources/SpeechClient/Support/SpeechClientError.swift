/// The core's error: a code that maps one to one onto the C `spc_status`, a message naming what
/// was wrong, and the gRPC status when the server reported one.
public struct SpeechClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Raw values are the C `spc_status` values; they never change.
    public enum Code: Int32, Sendable, CaseIterable {
        case invalidArgument = 1
        case invalidState = 2
        case noMemory = 3
        case network = 4
        case tls = 5
        case timeout = 6
        case auth = 7
        case api = 8
        case parse = 9
        case audio = 10
        case `internal` = 11
    }

    public var code: Code
    public var message: String
    /// 0-16 when the failure is a gRPC status, otherwise nil.
    public var grpcStatus: Int32?

    public init(_ code: Code, _ message: String, grpcStatus: Int32? = nil) {
        self.code = code
        self.message = message
        self.grpcStatus = grpcStatus
    }

    public var description: String { "\(Status.text(code.rawValue)): \(message)" }

    /// An error for a failed C call that set errno, naming the function.
    static func errno(_ code: Code, _ function: String, _ value: Int32, context: String = "") -> SpeechClientError {
        let reason = String(cString: strerror(value))
        let prefix = context.isEmpty ? "" : context + ": "
        return SpeechClientError(code, "\(prefix)\(function) failed: \(reason)")
    }
}

/// Texts for status values, shared by `spc_status_str` and messages.
public enum Status {
    public static let ok: Int32 = 0

    public static func text(_ status: Int32) -> String {
        switch status {
        case 0: return "ok"
        case 1: return "invalid argument"
        case 2: return "invalid state"
        case 3: return "out of memory"
        case 4: return "network error"
        case 5: return "TLS error"
        case 6: return "timeout"
        case 7: return "authentication error"
        case 8: return "server error"
        case 9: return "malformed response"
        case 10: return "audio error"
        case 11: return "internal error"
        default: return "unknown status"
        }
    }
}

#if canImport(Glibc)
import Glibc
#endif
