import Foundation
import Synchronization
import Testing
@testable import SpeechClient

/// Application-driven I/O (spc_io_fd / spc_io_process) against a real gRPC server (grpcio): the
/// application's thread reads the responses while it serves its set; the loop thread takes over
/// when it stops (the watchdog) or says it will block. The set is process-wide: the suite runs
/// serialized, and no other suite registers application-driven connections.
@Suite(.serialized, .timeLimit(.minutes(2))) struct ApplicationIOTests {
    private static let peer = Locked<PeerProcess?>(nil)

    private func channel() throws -> GRPCChannel {
        let peer = try Self.peer.withLock { slot in
            if let p = slot { return p }
            let p = try PeerProcess(script: "grpc_echo_server.py")
            slot = p
            return p
        }
        var configuration = GRPCChannel.Configuration()
        configuration.http2.applicationDrivenIO = true
        return GRPCChannel.shared(server: try ServerURL(parsing: "grpc://127.0.0.1:\(peer.port)"), tls: TLSSettings(),
                                  connectTimeoutMilliseconds: 5000, configuration: configuration)
    }

    /// An application thread: polls the set's fd (and every 20 ms anyway, as a timer would) and
    /// serves it; counts the ready sockets it served.
    private final class Poller: @unchecked Sendable {
        let served = Atomic<Int>(0)
        let calls = Atomic<Int>(0)
        private let running = Atomic<Bool>(true)
        private let finished = OneShot<Bool>()

        init() throws {
            let fd = try ApplicationIO.fd()
            Thread.detachNewThread { [self] in
                var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                while running.load(ordering: .acquiring) {
                    _ = poll(&p, 1, 20)
                    if let n = try? ApplicationIO.process() { served.add(n, ordering: .relaxed) }
                    calls.add(1, ordering: .relaxed)
                }
                finished.set(true)
            }
            while calls.load(ordering: .acquiring) == 0 { usleep(1000) }
        }

        func stop() {
            running.store(false, ordering: .releasing)
            _ = finished.wait()
        }
    }

    private func echo(_ ch: GRPCChannel, sizes: [Int]) throws {
        for size in sizes {
            let request = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7) }
            let response = try ch.unary(path: "/test.Echo/Unary", metadata: [], request: request, timeoutMilliseconds: 10_000)
            #expect(response == request, "size \(size)")
        }
    }

    @Test func theApplicationThreadReadsWhileItServes() throws {
        let loop = try EventLoop.shared()
        let ch = try channel()
        let poller = try Poller()
        defer { poller.stop() }
        #expect(!loop.loopServesApplicationSetNow)
        let byLoop = loop.applicationSocketsServedByLoop.load(ordering: .relaxed)
        // 1 MB each way needs flow control (WINDOW_UPDATEs read) while the call runs.
        try echo(ch, sizes: [0, 3, 3200, 70_000, 1_000_000, 5])
        #expect(poller.served.load(ordering: .relaxed) > 0)
        #expect(loop.applicationSocketsServedByLoop.load(ordering: .relaxed) == byLoop, "the loop thread read instead")
        #expect(try ApplicationIO.fd() == ApplicationIO.fd())
    }

    @Test func theLoopThreadTakesOverWhenTheApplicationStops() throws {
        let loop = try EventLoop.shared()
        let ch = try channel()
        let poller = try Poller()
        try echo(ch, sizes: [10])
        poller.stop()  // the application is gone: the watchdog hands the set back
        let byLoop = loop.applicationSocketsServedByLoop.load(ordering: .relaxed)
        try echo(ch, sizes: [0, 3200, 1_000_000])
        #expect(loop.applicationSocketsServedByLoop.load(ordering: .relaxed) > byLoop)
        #expect(loop.loopServesApplicationSetNow)
    }

    @Test func aBlockingApplicationHandsTheSetOverAtOnce() throws {
        let loop = try EventLoop.shared()
        let ch = try channel()
        _ = try ApplicationIO.process()  // serving, from this thread
        #expect(!loop.loopServesApplicationSetNow)
        loop.applicationWillBlock()  // what wait_idle and free do
        #expect(loop.loopServesApplicationSetNow)
        try echo(ch, sizes: [5, 70_000])
        // Someone else's call while a thread is blocked serves but does not take the set back.
        _ = try ApplicationIO.process()
        #expect(loop.loopServesApplicationSetNow)
        // From inside the loop's work it does nothing (it would serve the set re-entrantly).
        #expect(loop.executeAndWait { loop.processApplicationIO().ready } == 0)
        loop.applicationDidUnblock()
        _ = try ApplicationIO.process()  // no one blocked: the application serves again
        #expect(!loop.loopServesApplicationSetNow)
        loop.applicationWillBlock()
        loop.applicationDidUnblock()
    }

    /// A client in application delivery with application-driven I/O, no server; `onTestLog`
    /// gets the text of each log event starting with "t" (the tests emit those). What the
    /// constructor queued is dispatched already.
    private func dispatchingClient(onTestLog: @escaping @Sendable (Client, String) -> Void) throws -> Client {
        var o = try pushOptions()
        o.delivery = .application
        o.io = .application
        let client = try Client(options: o, service: FakeRecognitionService()) { c, event in
            guard case .log(_, let text) = event, text.hasPrefix("t") else { return }
            onTestLog(c, text)
        }
        _ = try client.dispatch(maxEvents: 0)
        return client
    }

    /// spc_io_dispatch: events queued by the network work of this thread, for a client in
    /// application delivery with application-driven I/O, run on this thread once it let go of
    /// the loop, and leave the event fd alone. (A client's events are queued here the way a
    /// response's segment is, without a server: `alsoDoing` runs inside the work.)
    @Test func dispatchRunsTheCallbacksOfItsOwnWorkAfterLettingGoOfTheLoop() throws {
        let loop = try EventLoop.shared()
        let seen = Locked<[String]>([])
        let client = try dispatchingClient { c, text in
            seen.withLock { $0.append("\(text) inLoop=\(loop.isInLoop) inside=\(c.isOnCallbackThread)") }
        }
        defer { try? client.close() }
        let result = loop.processApplicationIO(deliver: true) {
            client.emit(.log(.error, "t1"))
            client.emit(.log(.error, "t2"))
        }
        #expect(result.callbacks == 2)
        #expect(seen.withLock { $0 } == ["t1 inLoop=false inside=true", "t2 inLoop=false inside=true"])
        var pfd = pollfd(fd: client.eventFD, events: Int16(POLLIN), revents: 0)
        #expect(poll(&pfd, 1, 0) == 0, "the event fd was made readable")
        // spc_io_process keeps them for the event fd, as before 0.4.
        #expect(loop.processApplicationIO { client.emit(.log(.error, "t3")) }.callbacks == 0)
        #expect(seen.withLock { $0.count } == 2)
        #expect(poll(&pfd, 1, 0) == 1)
        #expect(try client.dispatch(maxEvents: 0) == 1)
        #expect(seen.withLock { $0.last } == "t3 inLoop=false inside=true")
    }

    /// A client whose callback another thread is running (here: that thread's own
    /// spc_io_dispatch) gets the events of this thread's work through its event fd; that
    /// thread runs them after the one in hand, and none is lost.
    @Test func dispatchLeavesABusyClientToItsEventFd() throws {
        let loop = try EventLoop.shared()
        let seen = Locked<[String]>([])
        let inCallback = OneShot<Bool>()
        let release = OneShot<Bool>()
        let client = try dispatchingClient { _, text in
            if text == "t0" {
                inCallback.set(true)
                _ = release.wait()
            }
            seen.withLock { $0.append(text) }
        }
        defer { try? client.close() }
        let other = try NativeThread(name: "test-io-dispatch") {
            _ = loop.processApplicationIO(deliver: true) { client.emit(.log(.error, "t0")) }
        }
        _ = inCallback.wait()
        var pfd = pollfd(fd: client.eventFD, events: Int16(POLLIN), revents: 0)
        #expect(poll(&pfd, 1, 0) == 0)
        let result = loop.processApplicationIO(deliver: true) { client.emit(.log(.error, "t1")) }
        #expect(result.callbacks == 0)
        #expect(poll(&pfd, 1, 0) == 1, "t1 is announced by the event fd while t0's callback runs")
        release.set(true)
        other.join()
        #expect(seen.withLock { $0 } == ["t0", "t1"])
        #expect(poll(&pfd, 1, 0) == 0)
        // Nothing is left waiting for a delivery that will not come: the next one runs inline.
        #expect(loop.processApplicationIO(deliver: true) { client.emit(.log(.error, "t2")) }.callbacks == 1)
        #expect(seen.withLock { $0 } == ["t0", "t1", "t2"])
    }

    /// While a delivery is due, an event from another thread (the worker's stop, an error) is
    /// still announced on the event fd; the delivery then runs both and leaves the fd quiet.
    @Test func dispatchAnnouncesOtherThreadsEventsAsUsual() throws {
        let loop = try EventLoop.shared()
        let seen = Locked<[String]>([])
        let client = try dispatchingClient { _, text in seen.withLock { $0.append(text) } }
        defer { try? client.close() }
        var pfd = pollfd(fd: client.eventFD, events: Int16(POLLIN), revents: 0)
        let readableMeanwhile = Atomic<Int>(-1)
        let result = loop.processApplicationIO(deliver: true) {
            client.emit(.log(.error, "t1"))  // this work's: delivered afterwards
            let worker = try? NativeThread(name: "test-worker") { client.emit(.log(.error, "t2")) }
            worker?.join()
            var p = pollfd(fd: client.eventFD, events: Int16(POLLIN), revents: 0)
            readableMeanwhile.store(Int(poll(&p, 1, 0)), ordering: .relaxed)
        }
        #expect(readableMeanwhile.load(ordering: .relaxed) == 1, "the other thread's event was not announced")
        #expect(result.callbacks == 2)
        #expect(seen.withLock { $0 } == ["t1", "t2"])
        #expect(poll(&pfd, 1, 0) == 0)
    }

    /// The watchdog's rule (a real idle connection cannot be had here: grpcio pings after
    /// transfers): late with work waiting, or gone for long, is a take-over; late with nothing
    /// waiting keeps the set with the application.
    @Test func theWatchdogTakesTheSetOnlyWhenWorkWaitsOrTheApplicationIsGone() {
        let ms: UInt64 = 1_000_000
        let last: UInt64 = 1_000_000 * ms
        let patience = UInt64(EventLoop.applicationPatienceMilliseconds)
        let absence = UInt64(EventLoop.applicationAbsenceMilliseconds)
        var asked = false
        #expect(EventLoop.watchdogVerdict(nowNanos: last + 100 * ms, lastCallNanos: last, workWaiting: { asked = true; return true })
                == .wait(milliseconds: Int(patience) - 100))
        #expect(!asked)  // a recent call: readiness is not even looked at
        #expect(EventLoop.watchdogVerdict(nowNanos: last + patience * ms, lastCallNanos: last, workWaiting: { true }) == .takeOver)
        #expect(EventLoop.watchdogVerdict(nowNanos: last + patience * ms, lastCallNanos: last, workWaiting: { false })
                == .wait(milliseconds: Int(patience)))
        #expect(EventLoop.watchdogVerdict(nowNanos: last + (absence - 1) * ms, lastCallNanos: last, workWaiting: { false })
                == .wait(milliseconds: Int(patience)))
        #expect(EventLoop.watchdogVerdict(nowNanos: last + absence * ms, lastCallNanos: last, workWaiting: { false }) == .takeOver)
    }
}
