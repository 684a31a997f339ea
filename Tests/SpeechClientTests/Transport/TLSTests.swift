import Foundation
import Synchronization
import Testing
@testable import SpeechClient

/// TLS against real peers: grpcio with certificates made by the openssl CLI, and the h2 script
/// for a server without ALPN h2. The server certificate names DNS:localhost only.
private let servers = Locked<[String: PeerProcess]>([:])

private func server(_ name: String, script: String, _ arguments: @autoclosure () throws -> [String]) throws -> PeerProcess {
    let args = try arguments()
    return try servers.withLock { all in
        if let s = all[name] { return s }
        let s = try PeerProcess(script: script, arguments: args)
        all[name] = s
        return s
    }
}

private func goodServer() throws -> PeerProcess {
    let certs = try TestCertificates.get()
    return try server("good", script: "grpc_echo_server.py", ["--tls", certs.serverCert, certs.serverKey])
}

private func echo(host: String, port: UInt16, tls: TLSSettings) throws(SpeechClientError) -> [UInt8] {
    let ch = GRPCChannel.shared(server: try ServerURL(parsing: "grpc+tls://\(host):\(port)"), tls: tls,
                                connectTimeoutMilliseconds: 5000)
    return try ch.unary(path: "/test.Echo/Unary", metadata: [], request: [4, 2], timeoutMilliseconds: 5000)
}

private func tlsError(host: String, port: UInt16, tls: TLSSettings) -> SpeechClientError? {
    do { _ = try echo(host: host, port: port, tls: tls); return nil } catch { return error }
}

@Suite(.timeLimit(.minutes(2))) struct TLSTests {
    @Test func verifiedConnectionWithCAFile() throws {
        let certs = try TestCertificates.get()
        let peer = try goodServer()
        #expect(try echo(host: "localhost", port: peer.port, tls: TLSSettings(caFile: certs.caFile)) == [4, 2])
        // A bidi stream over the same TLS connection.
        let ch = GRPCChannel.shared(server: try ServerURL(parsing: "grpc+tls://localhost:\(peer.port)"),
                                    tls: TLSSettings(caFile: certs.caFile), connectTimeoutMilliseconds: 5000)
        let events = EventCollector()
        let call = try ch.openStreamingCall(path: "/test.Echo/Bidi", metadata: []) { events.handle($0) }
        for i in 0..<20 { call.send([UInt8](repeating: UInt8(i), count: 3200)) }
        call.halfClose()
        #expect(events.waitClosed() == .some(nil))
        #expect(events.messages.count == 20)
    }

    /// The first ClientHello carries a P-256 key share (`TLSContext`): a server that accepts that
    /// group alone, as a gRPC server built on the system OpenSSL does, answers it at once. With
    /// OpenSSL's default (an X25519 share alone) it asked again (a HelloRetryRequest): a second
    /// ClientHello and one more round trip on every connection. The peer closes the connection
    /// once it has counted the handshake's ClientHellos, so the call fails after the count.
    @Test func theFirstClientHelloNeedsNoRetryFromAP256OnlyServer() throws {
        let certs = try TestCertificates.get()
        let peer = try PeerProcess(script: "tls_hello_counter.py", arguments: [certs.serverCert, certs.serverKey])
        defer { peer.stop() }
        let e = tlsError(host: "localhost", port: peer.port, tls: TLSSettings(caFile: certs.caFile))
        #expect(e != nil)
        let counts = peer.log.split(separator: "\n").filter { $0.hasPrefix("client hellos: ") }
        #expect(!counts.isEmpty, "\(peer.log)")
        #expect(counts.allSatisfy { $0 == "client hellos: 1" }, "\(peer.log)")
    }

    @Test func unknownCAIsRejected() throws {
        let peer = try goodServer()
        // The system store does not know the test CA.
        let e = tlsError(host: "localhost", port: peer.port, tls: TLSSettings())
        #expect(e?.code == .tls)
        #expect(e?.message.contains("unknown CA") == true, "\(String(describing: e))")
        #expect(e?.message.contains("localhost") == true)
        // Nor does another CA.
        let other = tlsError(host: "localhost", port: peer.port, tls: TLSSettings(caFile: try TestCertificates.get().otherCAFile))
        #expect(other?.message.contains("unknown CA") == true, "\(String(describing: other))")
    }

    @Test func hostnameMismatchIsRejected() throws {
        let peer = try goodServer()
        let e = tlsError(host: "127.0.0.1", port: peer.port, tls: TLSSettings(caFile: try TestCertificates.get().caFile))
        #expect(e?.code == .tls)
        #expect(e?.message.contains("hostname mismatch") == true, "\(String(describing: e))")
        #expect(e?.message.contains("127.0.0.1") == true)
    }

    /// A certificate naming its host only in its subject's CN (no subjectAltName) is refused,
    /// as RFC 6125 and browsers do: OpenSSL fell back to the CN.
    @Test func aHostNamedOnlyInTheSubjectIsRejected() throws {
        let certs = try TestCertificates.get()
        let peer = try server("subject-only", script: "grpc_echo_server.py", ["--tls", certs.subjectOnlyCert, certs.serverKey])
        let e = tlsError(host: "localhost", port: peer.port, tls: TLSSettings(caFile: certs.caFile))
        #expect(e?.code == .tls)
        #expect(e?.message.contains("hostname mismatch") == true, "\(String(describing: e))")
    }

    /// A fully qualified name with its trailing dot ("api.example.com.") is the same host:
    /// certificates and SNI carry it without the dot (it matched no certificate: "hostname
    /// mismatch"); an IPv6 literal with a zone is an address, checked against IP SANs (it was
    /// taken for a host name, and sent as SNI).
    @Test func theNameACertificateIsCheckedAgainst() {
        #expect(TLSStream.certificateName("api.example.com.") == "api.example.com")
        #expect(TLSStream.certificateName("localhost") == "localhost")
        #expect(TLSStream.certificateName("fe80::1%eth0") == "fe80::1")
        #expect(TLSStream.certificateName(".") == ".")
    }

    @Test func expiredCertificateIsRejected() throws {
        let certs = try TestCertificates.get()
        let peer = try server("expired", script: "grpc_echo_server.py", ["--tls", certs.expiredCert, certs.serverKey])
        let e = tlsError(host: "localhost", port: peer.port, tls: TLSSettings(caFile: certs.caFile))
        #expect(e?.code == .tls)
        // The server's own certificate, with the day it expired (the day before it was made).
        let message = e?.message ?? ""
        #expect(message.hasPrefix("the certificate of localhost:\(peer.port) has expired (on 20"), "\(message)")
    }

    @Test func insecureSwitchSkipsVerification() throws {
        let certs = try TestCertificates.get()
        let peer = try goodServer()
        #expect(try echo(host: "127.0.0.1", port: peer.port, tls: TLSSettings(insecure: true)) == [4, 2])
        let expired = try server("expired", script: "grpc_echo_server.py", ["--tls", certs.expiredCert, certs.serverKey])
        #expect(try echo(host: "localhost", port: expired.port, tls: TLSSettings(insecure: true)) == [4, 2])
    }

    @Test func serverWithoutALPNh2IsRejected() throws {
        let certs = try TestCertificates.get()
        let peer = try server("no-alpn", script: "h2_fault_server.py", ["--tls-no-alpn", certs.serverCert, certs.serverKey])
        let e = tlsError(host: "localhost", port: peer.port, tls: TLSSettings(caFile: certs.caFile))
        #expect(e?.code == .tls)
        #expect(e?.message.contains("ALPN") == true, "\(String(describing: e))")
    }

    @Test func plaintextServerIsAHandshakeFailure() throws {
        // A TLS client talking to an h2c server: the handshake fails, clearly.
        let peer = try server("plain", script: "h2_fault_server.py", [])
        let e = tlsError(host: "localhost", port: peer.port, tls: TLSSettings(insecure: true))
        #expect(e?.code == .tls)
        #expect(e?.message.contains("handshake") == true, "\(String(describing: e))")
    }

    @Test func missingCAFileIsAClearError() throws {
        let peer = try goodServer()
        let e = tlsError(host: "localhost", port: peer.port, tls: TLSSettings(caFile: "/nonexistent/ca.pem"))
        #expect(e?.code == .tls)
        #expect(e?.message.contains("/nonexistent/ca.pem") == true)
    }

    /// A server that drops the connection without close_notify (a FIN, or an RST) is a lost
    /// connection, which the client answers by reconnecting: reading reports it as closed, not
    /// as a TLS error (which is not retried). And going on writing into it, then closing it,
    /// raises no SIGPIPE (OpenSSL writes with write(2); the default action ends the process,
    /// and these calls may run on an application thread).
    @Test(.serialized, arguments: ["eof", "reset"]) func droppedConnectionIsClosedWithoutSIGPIPE(mode: String) throws {
        let certs = try TestCertificates.get()
        let peer = try server("drop-" + mode, script: "h2_fault_server.py", ["--tls", certs.serverCert, certs.serverKey, "--drop", mode])
        let counter = SIGPIPECounter()
        defer { counter.restore() }
        let stream = try Connector.open(host: "localhost", port: peer.port, useTLS: true,
                                        tls: TLSSettings(caFile: certs.caFile), timeoutMilliseconds: 5000)
        let chunk = [UInt8](repeating: 7, count: 16 * 1024)
        _ = chunk.withUnsafeBytes { stream.write($0) }  // the server drops the connection on it
        var pfd = pollfd(fd: stream.fd, events: Int16(POLLIN), revents: 0)
        #expect(poll(&pfd, 1, 5000) == 1)
        Thread.sleep(forTimeInterval: 0.05)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 1)
        defer { buffer.deallocate() }
        var read = stream.read(into: buffer)
        while case .bytes = read { read = stream.read(into: buffer) }
        switch read {
        case .closed: break
        default: Issue.record("read after the drop: \(read), not .closed")
        }
        for _ in 0..<3 {
            _ = chunk.withUnsafeBytes { stream.write($0) }
            Thread.sleep(forTimeInterval: 0.02)
        }
        stream.close()
        #expect(counter.count == 0, "SIGPIPE raised \(counter.count) time(s) on this thread")
    }
}

/// Counts the SIGPIPEs raised on the creating thread (instead of the process dying of one) until
/// `restore`, which puts the previous disposition back.
private final class SIGPIPECounter: @unchecked Sendable {
    nonisolated(unsafe) static var thread: pthread_t = 0
    static let hits = Atomic<Int>(0)
    private var previous = sigaction()

    init() {
        Self.thread = pthread_self()
        Self.hits.store(0, ordering: .relaxed)
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { _ in
            if pthread_equal(pthread_self(), SIGPIPECounter.thread) != 0 {
                SIGPIPECounter.hits.add(1, ordering: .relaxed)
            }
        }
        sigemptyset(&action.sa_mask)
        sigaction(SIGPIPE, &action, &previous)
    }

    var count: Int { Self.hits.load(ordering: .relaxed) }

    func restore() { sigaction(SIGPIPE, &previous, nil) }
}

@Suite(.timeLimit(.minutes(1))) struct ConnectTimeoutTests {
    /// A listener with backlog 0 whose queue is already full drops further SYNs (Linux), so a
    /// connect to it neither succeeds nor fails: deterministic, unlike an unroutable address.
    @Test func connectTimesOutWhenTheServerNeverAccepts() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, len) } }
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &len) } }
        #expect(listen(listener, 0) == 0)
        var fillers: [Int32] = []
        defer { fillers.forEach { close($0) } }
        for _ in 0..<3 {
            let c = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(c, $0, len) } }
            fillers.append(c)
        }
        Thread.sleep(forTimeInterval: 0.1)
        let port = UInt16(bigEndian: addr.sin_port)
        let ch = GRPCChannel.shared(server: try ServerURL(parsing: "grpc://127.0.0.1:\(port)"), tls: TLSSettings(),
                                    connectTimeoutMilliseconds: 300)
        let start = Clock.monotonicNanos()
        #expect {
            _ = try ch.openStreamingCall(path: "/test.Echo/Bidi", metadata: []) { _ in }
        } throws: { error in
            let e = error as? SpeechClientError
            return e?.code == .timeout && e?.message.contains("127.0.0.1") == true
        }
        let elapsed = (Clock.monotonicNanos() - start) / 1_000_000
        #expect(elapsed >= 250 && elapsed < 2000, "\(elapsed) ms")
    }
}
