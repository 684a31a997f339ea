/// The parts of a Speechly JWT the client reads (protocol.md): claims from the payload, read
/// without verifying the signature (the server verifies it; the client only needs the expiry).
public struct JWTClaims: Sendable, Equatable {
    public var appId: String?
    public var projectId: String?
    public var deviceId: String?
    public var scope: String?
    /// Unix seconds.
    public var expiresAt: Int64

    public static func decode(_ token: String) throws(SpeechClientError) -> JWTClaims {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw SpeechClientError(.parse, "token is not a JWT (expected 3 dot-separated parts, got \(parts.count))") }
        guard let payload = Base64URL.decode(parts[1]) else {
            throw SpeechClientError(.parse, "token payload is not valid base64url")
        }
        let json = try JSONValue.parse(payload)
        guard case .object = json else { throw SpeechClientError(.parse, "token payload is not a JSON object") }
        guard let exp = json["exp"]?.numberValue else {
            throw SpeechClientError(.parse, "token payload has no numeric exp claim")
        }
        guard exp.isFinite, exp > 0, exp < 1e15 else {
            throw SpeechClientError(.parse, "token's exp claim \(exp) is out of range (unix seconds)")
        }
        return JWTClaims(appId: json["appId"]?.stringValue, projectId: json["projectId"]?.stringValue,
                         deviceId: json["deviceId"]?.stringValue, scope: json["scope"]?.stringValue,
                         expiresAt: Int64(exp))
    }
}

/// base64url without padding (RFC 4648 §5), as JWTs use; padded input is accepted too.
public enum Base64URL {
    public static func decode<S: StringProtocol>(_ text: S) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count * 3 / 4)
        var buffer: UInt32 = 0
        var bits = 0
        var sawPadding = false
        for c in text.utf8 {
            let v: UInt32
            switch c {
            case 0x41...0x5A: v = UInt32(c - 0x41)
            case 0x61...0x7A: v = UInt32(c - 0x61 + 26)
            case 0x30...0x39: v = UInt32(c - 0x30 + 52)
            case 0x2D, 0x2B: v = 62   // '-' (url) or '+' (standard)
            case 0x5F, 0x2F: v = 63   // '_' (url) or '/' (standard)
            case 0x3D: sawPadding = true; continue
            default: return nil
            }
            if sawPadding { return nil }
            buffer = buffer << 6 | v
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: buffer >> UInt32(bits)))
                buffer &= (1 << UInt32(bits)) - 1
            }
        }
        // A single leftover character (6 bits) cannot be valid base64.
        if bits >= 6 { return nil }
        return out
    }

    public static func encode(_ bytes: [UInt8]) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        var out: [UInt8] = []
        var i = 0
        while i + 3 <= bytes.count {
            let n = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
            for shift in stride(from: 18, through: 0, by: -6) { out.append(alphabet[Int((n >> UInt32(shift)) & 63)]) }
            i += 3
        }
        let rest = bytes.count - i
        if rest > 0 {
            var n = UInt32(bytes[i]) << 16
            if rest == 2 { n |= UInt32(bytes[i + 1]) << 8 }
            out.append(alphabet[Int((n >> 18) & 63)])
            out.append(alphabet[Int((n >> 12) & 63)])
            if rest == 2 { out.append(alphabet[Int((n >> 6) & 63)]) }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
