import Foundation
import Synchronization
import Testing
@testable import SpeechClient

/// GRPCChannel against grpclib (Tests/peers/grpclib_echo_server.py): a second, independent gRPC
/// server, pure Python on the `h2` package, so its HTTP/2 framing, flow control, trailers and
/// grpc-message encoding owe nothing to grpcio's C-core. Same /test.Echo methods as the grpcio peer.
private let grpclibServers = Locked<[String: PeerProcess]>([:])

private func grpclibServer(tls: Bool = false) throws -> PeerProcess {
    var arguments: [String] = []
    if tls {
        let certs = try TestCertificates.get()
        arguments = ["--tls", certs.serverCert, certs.serverKey]
    }
    return try grpclibServers.withLock { all in
        let name = tls ? "tls" : "h2c"
        if let s = all[name] { return s }
        let s = try PeerProcess(script: "grpclib_echo_server.py", arguments: arguments)
        all[name] = s
        return s
    }
}

private func grpclibChannel() throws -> GRPCChannel {
    GRPCChannel.shared(server: try ServerURL(parsing: "grpc://127.0.0.1:\(try grpclibServer().port)"), tls: TLSSettings(),
                       connectTimeoutMilliseconds: 5000)
}

@Suite(.timeLimit(.minutes(2))) struct GRPClibInteropTests {
    @Test func unaryEchoOfSeveralSizes() throws {
        let ch = try grpclibChannel()
        // 70,000 and 1 MB cross the 65,535-byte initial windows and 16 KB frames both ways.
        for size in [0, 1, 3200, 16_385, 70_000, 1_000_000] {
            let request = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ size) }
            let response = try ch.unary(path: "/test.Echo/Unary", metadata: [], request: request, timeoutMilliseconds: 20_000)
            #expect(response == request, "size \(size)")
        }
    }

    @Test func bidiEchoesManyMessagesInOrder() throws {
        let ch = try grpclibChannel()
        let events = EventCollector()
        let call = try ch.openStreamingCall(path: "/test.Echo/Bidi", metadata: []) { events.handle($0) }
        var sent: [[UInt8]] = []
        for i in 0..<200 {
            // 100 ms of 16 kHz PCM16 and a few odd sizes, among them an empty message
            let size = i % 10 == 9 ? (i * 37) % 5000 : 3200
            let m = (0..<size).map { UInt8(truncatingIfNeeded: $0 &+ i &* 13) }
            sent.append(m)
            call.send(m)
        }
        call.halfClose()
        #expect(events.waitClosed(seconds: 30) == .some(nil))
        #expect(events.messages.count == sent.count)
        #expect(events.messages == sent)
        #expect(events.eventsAfterClose == 0)
    }

    @Test func bidiAnswersBeforeTheRequestSideEnds() throws {
        // The echo of each message arrives while the stream is still open: real streaming, not
        // a batch at half-close.
        let ch = try grpclibChannel()
        let events = EventCollector()
        let call = try ch.openStreamingCall(path: "/test.Echo/Bidi", metadata: []) { events.handle($0) }
        for i in 1...5 {
            call.send([UInt8(i)])
            #expect(events.wait { $0.messages.count == i }, "echo \(i)")
        }
        #expect(!events.isClosed)
        call.halfClose()
        #expect(events.waitClosed() == .some(nil))
    }

    @Test func metadataRoundTrip() throws {
        let ch = try grpclibChannel()
        let response = try ch.unary(path: "/test.Echo/Metadata",
                                    metadata: [("authorization", "Bearer abc.def"), ("X-Custom", "v1"), ("x-empty", "")],
                                    request: [], timeoutMilliseconds: 5000)
        let text = String(decoding: response, as: UTF8.self)
        #expect(text.contains("authorization=Bearer abc.def\n"), "\(text)")
        #expect(text.contains("x-custom=v1\n"), "\(text)")
        #expect(text.contains("x-empty=\n"), "\(text)")
        #expect(text.contains("user-agent=libspeechclient/\(LibraryVersion.string)"), "\(text)")
    }

    @Test func errorStatusWithPercentEncodedMessage() throws {
        let ch = try grpclibChannel()
        func fail(_ request: String) -> SpeechClientError? {
            do {
                _ = try ch.unary(path: "/test.Echo/Fail", metadata: [], request: Array(request.utf8), timeoutMilliseconds: 5000)
                return nil
            } catch { return error }
        }
        // grpclib percent-encodes '%', non-ASCII and control characters of grpc-message.
        let message = "no such thing: caf\u{e9} 100% \u{2713} a%20b"
        let notFound = fail("5 " + message)
        #expect(notFound?.code == .api)
        #expect(notFound?.grpcStatus == 5)
        #expect(notFound?.message.contains(message) == true, "\(String(describing: notFound))")
        let unavailable = fail("14 down")
        #expect(unavailable?.code == .network)
        #expect(unavailable?.grpcStatus == 14)
        let unauthenticated = fail("16 bad token")
        #expect(unauthenticated?.grpcStatus == 16)
        #expect(unauthenticated.map(GRPCStatus.isAuthFailure) == true)
    }

    @Test func unknownMethodIsUnimplementedTrailersOnly() throws {
        // grpclib answers an unknown path with one HEADERS frame: :status 200, grpc-status 12,
        // grpc-message, END_STREAM, and no content-type (the spec's Trailers-Only has one).
        // grpcio's C-core client takes the grpc-status (UNIMPLEMENTED), and so does the library.
        let ch = try grpclibChannel()
        var caught: SpeechClientError?
        do {
            _ = try ch.unary(path: "/test.Echo/Nope", metadata: [], request: [], timeoutMilliseconds: 5000)
        } catch { caught = error }
        #expect(caught?.grpcStatus == 12, "\(String(describing: caught))")
        // The connection is still fine for other calls.
        #expect(try ch.unary(path: "/test.Echo/Unary", metadata: [], request: [9], timeoutMilliseconds: 5000) == [9])
    }

    @Test func deadlineExceeded() throws {
        // grpclib also enforces the grpc-timeout we send; whichever side fires first, the
        // caller sees DEADLINE_EXCEEDED well before the 2 s sleep ends.
        let ch = try grpclibChannel()
        let start = Clock.monotonicNanos()
        #expect {
            _ = try ch.unary(path: "/test.Echo/Sleep", metadata: [], request: Array("2000".utf8), timeoutMilliseconds: 200)
        } throws: { error in
            let e = error as? SpeechClientError
            return e?.code == .timeout && e?.grpcStatus == 4
        }
        let elapsed = (Clock.monotonicNanos() - start) / 1_000_000
        #expect(elapsed < 1500)
        // A short sleep inside its deadline succeeds on the same connection.
        #expect(try ch.unary(path: "/test.Echo/Sleep", metadata: [], request: Array("20".utf8), timeoutMilliseconds: 5000)
                == Array("20".utf8))
    }

    @Test func concurrentStreamsOnOneConnection() throws {
        let ch = try grpclibChannel()
        var calls: [(EventCollector, any GRPCStreamingCall)] = []
        for _ in 0..<100 {
            let events = EventCollector()
            calls.append((events, try ch.openStreamingCall(path: "/test.Echo/Bidi", metadata: []) { events.handle($0) }))
        }
        for (i, (_, call)) in calls.enumerated() {
            call.send(Array("stream \(i)".utf8))
            call.halfClose()
        }
        for (i, (events, _)) in calls.enumerated() {
            #expect(events.waitClosed(seconds: 30) == .some(nil), "stream \(i)")
            #expect(events.messages == [Array("stream \(i)".utf8)])
        }
    }

    @Test func tlsWithALPN() throws {
        // grpclib serves TLS through Python's ssl module with ALPN h2 and the test CA's certificate.
        let certs = try TestCertificates.get()
        let peer = try grpclibServer(tls: true)
        let ch = GRPCChannel.shared(server: try ServerURL(parsing: "grpc+tls://localhost:\(peer.port)"),
                                    tls: TLSSettings(caFile: certs.caFile), connectTimeoutMilliseconds: 5000)
        let request = (0..<100_000).map { UInt8(truncatingIfNeeded: $0) }
        #expect(try ch.unary(path: "/test.Echo/Unary", metadata: [], request: request, timeoutMilliseconds: 10_000) == request)
        let events = EventCollector()
        let call = try ch.openStreamingCall(path: "/test.Echo/Bidi", metadata: []) { events.handle($0) }
        for i in 0..<20 { call.send([UInt8](repeating: UInt8(i), count: 3200)) }
        call.halfClose()
        #expect(events.waitClosed() == .some(nil))
        #expect(events.messages.count == 20)
    }
}
