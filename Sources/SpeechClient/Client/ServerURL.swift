/// A parsed server address; its scheme names the protocol (the backend):
/// - Speechly SLU over gRPC: `grpc+tls://host[:port]`, `grpcs://` or `https://` (TLS, 443);
///   `grpc://host[:port]` or `http://` (plaintext h2c, 80).
/// - Wyoming (Home Assistant, Rhasspy): `wyoming://host[:port]` (TCP, 10300, the port
///   wyoming-faster-whisper's documentation uses) or `wyoming+unix:///absolute/path` (a Unix socket).
/// - NVIDIA Riva: `riva://host[:port]` (plaintext, 50051, Riva's own default) or
///   `rivas://host[:port]` (TLS, 443).
/// IPv6 literals go in brackets.
public struct ServerURL: Sendable, Equatable, CustomStringConvertible {
    public enum Backend: Sendable, Equatable {
        case speechly
        case wyoming
        case riva
    }

    public var backend: Backend
    public var useTLS: Bool
    public var host: String
    public var port: UInt16
    /// The socket's path for `wyoming+unix://` (then `host` is empty and `port` 0).
    public var unixPath: String?

    public init(parsing text: String) throws(SpeechClientError) {
        func bad(_ why: String) -> SpeechClientError {
            SpeechClientError(.invalidArgument, "server URL '\(text)': \(why)")
        }
        let schemes: [(String, Bool, UInt16, Backend)] = [
            ("grpc+tls://", true, 443, .speechly), ("grpcs://", true, 443, .speechly), ("https://", true, 443, .speechly),
            ("grpc://", false, 80, .speechly), ("http://", false, 80, .speechly),
            ("wyoming://", false, 10300, .wyoming),
            ("rivas://", true, 443, .riva), ("riva://", false, 50051, .riva),
        ]
        let lower = text.lowercased()
        if lower.hasPrefix("wyoming+unix://") {
            let path = String(text.dropFirst("wyoming+unix://".count))
            // sun_path holds 108 bytes with the terminating NUL.
            guard path.hasPrefix("/"), path.utf8.count <= 107, !path.utf8.contains(0) else {
                throw bad("wyoming+unix:// needs an absolute socket path of at most 107 bytes (wyoming+unix:///run/whisper.sock)")
            }
            backend = .wyoming
            useTLS = false
            host = ""
            port = 0
            unixPath = path
            return
        }
        guard let (scheme, tls, defaultPort, backend) = schemes.first(where: { lower.hasPrefix($0.0) }) else {
            throw bad("the scheme must be grpc+tls://, grpcs://, grpc://, https://, http:// (Speechly), "
                      + "wyoming:// or wyoming+unix:// (Wyoming), riva:// or rivas:// (NVIDIA Riva)")
        }
        var rest = Substring(text.dropFirst(scheme.count))
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        if rest.contains(where: { $0 == "/" || $0 == "?" || $0 == "#" || $0 == "@" }) {
            throw bad("only a host and a port are allowed (no path, query or user)")
        }
        var host: Substring
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw bad("unclosed '[' in the IPv6 address") }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw bad("unexpected text after the IPv6 address") }
                portText = after.dropFirst()
            }
            if host.isEmpty || !host.allSatisfy({ $0.isHexDigit || $0 == ":" || $0 == "." || $0 == "%" }) {
                throw bad("'\(host)' is not an IPv6 address")
            }
        } else {
            if let colon = rest.firstIndex(of: ":") {
                host = rest[..<colon]
                portText = rest[rest.index(after: colon)...]
            } else {
                host = rest
            }
            if host.isEmpty { throw bad("the host is missing") }
            let allowed: (Character) -> Bool = { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "." || $0 == "_" }
            if !host.allSatisfy({ $0.isASCII && allowed($0) }) {
                throw bad("'\(host)' is not a valid host name")
            }
        }
        var port = defaultPort
        if let portText {
            guard !portText.isEmpty, portText.count <= 5, portText.allSatisfy({ $0.isASCII && $0.isNumber }),
                  let value = Int(portText), value >= 1, value <= 65535 else {
                throw bad("the port must be a number from 1 to 65535")
            }
            port = UInt16(value)
        }
        self.backend = backend
        self.useTLS = tls
        self.host = String(host)
        self.port = port
        self.unixPath = nil
    }

    /// The `:authority` value: host, plus the port when it is not the scheme's default.
    public var authority: String {
        let h = host.contains(":") ? "[\(host)]" : host
        return port == (useTLS ? 443 : 80) ? h : "\(h):\(port)"
    }

    public var description: String {
        switch backend {
        case .speechly: return (useTLS ? "grpc+tls://" : "grpc://") + authority
        case .riva: return (useTLS ? "rivas://" : "riva://") + authority
        case .wyoming:
            if let unixPath { return "wyoming+unix://" + unixPath }
            return "wyoming://" + (host.contains(":") ? "[\(host)]" : host) + ":\(port)"
        }
    }

    /// Loopback hosts and Unix sockets, where plaintext carries no risk worth a warning.
    public var isLoopback: Bool {
        unixPath != nil || host == "localhost" || host.hasPrefix("127.") || host == "::1"
    }
}
