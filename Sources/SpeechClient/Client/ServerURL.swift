/// A parsed server address: `grpc+tls://host[:port]` / `https://` (TLS, 443) or
/// `grpc://host[:port]` / `http://` (plaintext h2c, 80). IPv6 literals go in brackets.
public struct ServerURL: Sendable, Equatable, CustomStringConvertible {
    public var useTLS: Bool
    public var host: String
    public var port: UInt16

    public init(parsing text: String) throws(SpeechClientError) {
        func bad(_ why: String) -> SpeechClientError {
            SpeechClientError(.invalidArgument, "server URL '\(text)': \(why)")
        }
        let schemes: [(String, Bool, UInt16)] = [
            ("grpc+tls://", true, 443), ("https://", true, 443),
            ("grpc://", false, 80), ("http://", false, 80),
        ]
        let lower = text.lowercased()
        guard let (scheme, tls, defaultPort) = schemes.first(where: { lower.hasPrefix($0.0) }) else {
            throw bad("the scheme must be grpc+tls://, grpc://, https:// or http://")
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
        self.useTLS = tls
        self.host = String(host)
        self.port = port
    }

    /// The `:authority` value: host, plus the port when it is not the scheme's default.
    public var authority: String {
        let h = host.contains(":") ? "[\(host)]" : host
        return port == (useTLS ? 443 : 80) ? h : "\(h):\(port)"
    }

    public var description: String { (useTLS ? "grpc+tls://" : "grpc://") + authority }

    /// Loopback hosts, where plaintext carries no risk worth a warning.
    public var isLoopback: Bool {
        host == "localhost" || host.hasPrefix("127.") || host == "::1"
    }
}
