import Foundation
import Synchronization
import Testing
@testable import SpeechClient

/// One grpcio echo server (h2c) shared by the tests of this suite.
private let sharedEchoServer = Locked<PeerProcess?>(nil)

private func echoServer() throws -> PeerProcess {
    try sharedEchoServer.withLock { slot in
        if let s = slot { return s }
        let s = try PeerProcess(script: "grpc_echo_server.py")
        slot = s
        return s
    }
}

private func channel(_ peer: PeerProcess, host: String = "127.0.0.1",
                     configuration: GRPCChannel.Configuration = .init()) throws -> GRPCChannel {
    GRPCChannel.shared(server: try ServerURL(parsing: "grpc://\(host):\(peer.port)"), tls: TLSSettings(),
                       connectTimeoutMilliseconds: 5000, configuration: configuration)
}

@Suite(.timeLimit(.minutes(2))) struct GRPCInteropTests {
    @Test func ipv6Loopback() throws {
        // A grpcio server listening on [::1] only: the URL's bracketed literal, an AF_INET6
        // socket, :authority with brackets.
        let peer = try PeerProcess(script: "grpc_echo_server.py", arguments: ["--ipv6"])
        let ch = try channel(peer, host: "[::1]")
        #expect(try ch.unary(path: "/test.Echo/Unary", metadata: [], request: [6, 6], timeoutMilliseconds: 5000) == [6, 6])
        // The same port on IPv4 has no listener: refused, and said so.
        #expect {
            _ = try channel(peer).unary(path: "/test.Echo/Unary", metadata: [], request: [1], timeoutMilliseconds: 5000)
        } throws: { ($0 as? SpeechClientError)?.code == .network }
    }

    /// A server that allows 2 streams per connection (SETTINGS_MAX_CONCURRENT_STREAMS; nginx
    /// allows 128 and HAProxy 100 by default) and 5 calls open at once: each is answered at
    /// once. nghttp2 parks a request past the limit until a stream closes: every client of a
    /// process shares the connection, and past ~50 clients a context's stream waited there,
    /// its audio queuing, until its start timed out and its words were lost.
    @Test func callsPastTheServersStreamLimitGoToAnotherConnection() throws {
        let peer = try PeerProcess(script: "grpc_echo_server.py", arguments: ["--max-concurrent-streams", "2"])
        let ch = try channel(peer)
        var calls: [(any GRPCStreamingCall, EventCollector)] = []
        for i in 0..<5 {
            let events = EventCollector()
            let call = try ch.openStreamingCall(path: "/test.Echo/Bidi", metadata: []) { events.handle($0) }
            call.send([UInt8(i)])
            calls.append((call, events))
        }
        for (i, (_, events)) in calls.enumerated() {
            #expect(events.wait(seconds: 3) { !$0.messages.isEmpty }, "call \(i) was not answered while the others stayed open")
            #expect(events.messages.first == [UInt8(i)])
        }
        for (call, events) in calls {
            call.halfClose()
            #expect(events.waitClosed() == .some(nil))
        }
    }

    /// A server that allows no stream at all (SETTINGS_MAX_CONCURRENT_STREAMS 0, as the RFC
    /// allows under load): the call fails at once, UNAVAILABLE, naming it. nghttp2 held the
    /// request for ever (until the call's deadline), and connections opened for it piled up.
    @Test func aServerAllowingNoStreamFailsTheCallAtOnce() throws {
        let peer = try PeerProcess(script: "grpc_echo_server.py", arguments: ["--max-concurrent-streams", "0"])
        let began = Clock.monotonicNanos()
        #expect {
            _ = try channel(peer).unary(path: "/test.Echo/Unary", metadata: [], request: [1], timeoutMilliseconds: 5000)
        } throws: { error in
            guard let e = error as? SpeechClientError else { return false }
            return e.grpcStatus == 14 && e.message.contains("allows no streams")
        }
        #expect(Clock.monotonicNanos() - began < 3_000_000_000)
    }

    @Test func unaryEcho() throws {
        let ch = try channel(echoServer())
        for size in [0, 1, 3200, 70_000, 1_000_000] {
            let request = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            let response = try ch.unary(path: "/test.Echo/Unary", metadata: [], request: request, timeoutMilliseconds: 10_000)
            #expect(response == request, "size \(size)")
        }
    }

    @Test func requestHeadersAndMetadata() throws {
        let peer = try echoServer()
        let ch = try channel(peer)
        let response = try ch.unary(path: "/test.Echo/Metadata", metadata: [("authorization", "Bearer abc.def"), ("X-Custom", "v1")],
                                    request: [], timeoutMilliseconds: 5000)
        let text = String(decoding: response, as: UTF8.self)
        #expect(text.contains("authorization=Bearer abc.def\n"))
        #expect(text.contains("x-custom=v1\n"))
        #expect(text.contains("user-agent=libspeechclient/\(LibraryVersion.string)"))
    }

    @Test func statusesMapToErrors() throws {
        let ch = try channel(echoServer())
        func fail(_ request: String) -> SpeechClientError? {
            do {
                _ = try ch.unary(path: "/test.Echo/Fail", metadata: [], request: Array(request.utf8), timeoutMilliseconds: 5000)
                return nil
            } catch { return error }
        }
        let notFound = fail("5 no such thing: caf\u{e9} 100% \u{2713}")
        #expect(notFound?.code == .api)
        #expect(notFound?.grpcStatus == 5)
        #expect(notFound?.message.contains("no such thing: caf\u{e9} 100% \u{2713}") == true, "\(String(describing: notFound))")
        let unavailable = fail("14 down")
        #expect(unavailable?.code == .network)
        #expect(unavailable?.grpcStatus == 14)
        let unauthenticated = fail("16 bad token")
        #expect(unauthenticated?.code == .api)
        #expect(unauthenticated?.grpcStatus == 16)
        #expect(unauthenticated.map(GRPCStatus.isAuthFailure) == true)
    }

    @Test func deadlineExceeded() throws {
        let ch = try channel(echoServer())
        let start = Clock.monotonicNanos()
        #expect {
            _ = try ch.unary(path: "/test.Echo/Sleep", metadata: [], request: Array("2000".utf8), timeoutMilliseconds: 200)
        } throws: { error in
            let e = error as? SpeechClientError
            // The message names the deadline the caller set.
            return e?.code == .timeout && e?.grpcStatus == 4 && e?.message.contains("200 ms") == true
        }
        let elapsed = (Clock.monotonicNanos() - start) / 1_000_000
        #expect(elapsed < 1500)
    }

    @Test func unknownMethodIsUnimplemented() throws {
        let ch = try channel(echoServer())
        #expect {
            _ = try ch.unary(path: "/test.Echo/Nope", metadata: [], request: [], timeoutMilliseconds: 5000)
        } throws: { ($0 as? SpeechClientError)?.grpcStatus == 12 }
    }

    @Test func bidiEchoesInOrder() throws {
        let ch = try channel(echoServer())
        let events = EventCollector()
        let call = try ch.openStreamingCall(path: "/test.Echo/Bidi", metadata: []) { events.handle($0) }
        var sent: [[UInt8]] = []
        for i in 0..<50 {
            let m = (0..<3200).map { UInt8(truncatingIfNeeded: $0 + i) }
            sent.append(m)
            call.send(m)
        }
        call.halfClose()
        let closed = events.waitClosed()
        #expect(closed == .some(nil))
        #expect(events.messages == sent)
        #expect(events.eventsAfterClose == 0)
    }

    /// Requests handed over from two threads: one thread's requests wait in its cork (a worker
    /// turn) while another thread sends and half-closes. The end of the body must not overtake
    /// anything sent before it, whoever sent it.
    @Test func aHalfCloseNeverOvertakesRequestsHandedOverBeforeIt() throws {
        let ch = try channel(echoServer())
        let events = EventCollector()
        let call = try ch.openStreamingCall(path: "/test.Echo/Bidi", metadata: []) { events.handle($0) }
        let other = DispatchSemaphore(value: 0)
        try EventLoop.shared().corking {
            call.send([1])  // the task that takes it waits in this thread's cork
            Thread {
                call.send([2])
                call.halfClose()
                other.signal()
            }.start()
            other.wait()
        }
        let closed = events.waitClosed()
        #expect(closed == .some(nil))
        #expect(events.messages == [[1], [2]])
    }

    @Test func cancelStopsEvents() throws {
        let ch = try channel(echoServer())
        let events = EventCollector()
        let call = try ch.openStreamingCall(path: "/test.Echo/Bidi", metadata: []) { events.handle($0) }
        call.send([1, 2, 3])
        #expect(events.wait { $0.messages.count == 1 })
        call.cancel()
        let countAfterCancel = events.messages.count + events.closed.count
        call.send([4, 5, 6])  // ignored
        Thread.sleep(forTimeInterval: 0.2)
        #expect(events.messages.count + events.closed.count == countAfterCancel)
        // The connection is still fine for other calls.
        #expect(try ch.unary(path: "/test.Echo/Unary", metadata: [], request: [9], timeoutMilliseconds: 5000) == [9])
    }

    /// Whoever a call delivers to often holds the call (the Speechly stream's relay does): the
    /// call lets go of its handler when it ends, finished or cancelled, so that neither is kept
    /// for the life of the process (a cancelled stream kept its queued audio and its connection).
    @Test(arguments: [true, false]) func anEndedCallLetsGoOfItsHandler(cancelled: Bool) throws {
        final class Holder: @unchecked Sendable {
            var call: (any GRPCStreamingCall)?
            let events = EventCollector()
        }
        let ch = try channel(echoServer())
        weak var weakHolder: Holder?
        weak var weakCall: AnyObject?
        do {
            let holder = Holder()
            let call = try ch.openStreamingCall(path: "/test.Echo/Bidi", metadata: []) { holder.events.handle($0) }
            holder.call = call  // the cycle: holder -> call -> handler -> holder
            weakHolder = holder
            weakCall = call
            call.send([1, 2, 3])
            #expect(holder.events.wait { $0.messages.count == 1 })
            if cancelled {
                call.send([UInt8](repeating: 7, count: 100_000))  // may still be queued: let go too
                call.cancel()
            } else {
                call.halfClose()
                #expect(holder.events.waitClosed() == .some(nil))
            }
        }
        _ = try EventLoop.shared().executeAndWait { 0 }  // the loop is done with the last event
        #expect(weakHolder == nil)
        #expect(weakCall == nil)
    }

    @Test func manyConcurrentStreamsShareOneConnection() throws {
        let count = 1000  // about a second here; the issue asks for it in CI
        let ch = try channel(echoServer())
        var calls: [(EventCollector, any GRPCStreamingCall)] = []
        for _ in 0..<count {
            let events = EventCollector()
            calls.append((events, try ch.openStreamingCall(path: "/test.Echo/Bidi", metadata: []) { events.handle($0) }))
        }
        for (i, (_, call)) in calls.enumerated() {
            call.send(Array("stream \(i) a".utf8))
            call.send(Array("stream \(i) b".utf8))
            call.halfClose()
        }
        for (i, (events, _)) in calls.enumerated() {
            let closed = events.waitClosed(seconds: 60)
            #expect(closed == .some(nil), "stream \(i)")
            #expect(events.messages == [Array("stream \(i) a".utf8), Array("stream \(i) b".utf8)])
        }
    }

    @Test func refusedPortIsNetworkError() throws {
        // Bind a port and close it so nothing listens there.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        let port = UInt16(bigEndian: addr.sin_port)
        close(fd)
        let ch = GRPCChannel.shared(server: try ServerURL(parsing: "grpc://127.0.0.1:\(port)"), tls: TLSSettings(),
                                    connectTimeoutMilliseconds: 2000)
        #expect {
            _ = try ch.unary(path: "/test.Echo/Unary", metadata: [], request: [], timeoutMilliseconds: 1000)
        } throws: { ($0 as? SpeechClientError)?.code == .network }
    }

    @Test func unresolvableHostIsNetworkError() throws {
        let ch = GRPCChannel.shared(server: try ServerURL(parsing: "grpc://no-such-host.invalid:50051"), tls: TLSSettings(),
                                    connectTimeoutMilliseconds: 2000)
        #expect {
            _ = try ch.openStreamingCall(path: "/test.Echo/Bidi", metadata: []) { _ in }
        } throws: { error in
            let e = error as? SpeechClientError
            return e?.code == .network && e?.message.contains("no-such-host.invalid") == true
        }
    }

    @Test func invalidMetadataIsRejected() throws {
        let ch = try channel(echoServer())
        #expect(throws: SpeechClientError.self) {
            _ = try ch.unary(path: "/test.Echo/Unary", metadata: [("bad name", "x")], request: [], timeoutMilliseconds: 1000)
        }
        #expect(throws: SpeechClientError.self) {
            _ = try ch.unary(path: "/test.Echo/Unary", metadata: [("x", "a\r\nb")], request: [], timeoutMilliseconds: 1000)
        }
    }
}
