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
        #expect(loop.executeAndWait { loop.processApplicationIO() } == 0)
        loop.applicationDidUnblock()
        _ = try ApplicationIO.process()  // no one blocked: the application serves again
        #expect(!loop.loopServesApplicationSetNow)
        loop.applicationWillBlock()
        loop.applicationDidUnblock()
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
