import Glibc
import Synchronization
import Testing
@testable import SpeechClient

/// The idle event (spc_options_set_idle_cb, 0.11): once per stretch of work, after everything
/// that work reported, and with the client idle while its callback runs.
@Suite struct IdleEventTests {
    static func options(delivery: Delivery = .thread) throws -> ClientOptions {
        var o = try pushOptions()
        o.reportIdle = true
        o.delivery = delivery
        return o
    }

    @Test func comesOnceAfterTheLastStop() throws {
        let log = EventLog()
        let client = try Client(options: try Self.options(), service: FakeRecognitionService(), handler: log.handler)
        defer { try? client.close() }
        try client.start()
        try pushThreeChunksAndEnd(client)
        #expect(log.waitFor { $0.last == "idle" }, "\(log.lines)")
        #expect(log.lines.filter { $0 == "idle" }.count == 1)
        #expect(log.lines.dropLast().last == "stop ctx-1", "\(log.lines)")
        // Nothing more while the client stays idle.
        usleepMs(100)
        #expect(log.lines.filter { $0 == "idle" }.count == 1)
    }

    @Test func withoutTheOptionNoneIsQueued() throws {
        let log = EventLog()
        let client = try Client(options: try pushOptions(), service: FakeRecognitionService(), handler: log.handler)
        defer { try? client.close() }
        try client.start()
        try pushThreeChunksAndEnd(client)
        #expect(log.lines.last == "stop ctx-1")
        #expect(!log.lines.contains("idle"))
    }

    /// A start queued behind a stop continues the same stretch of work: one idle, after both.
    @Test func aStartQueuedBehindAStopGivesOneIdleAfterBoth() throws {
        let log = EventLog()
        let client = try Client(options: try Self.options(), service: FakeRecognitionService(.init(answerDelayMilliseconds: 20)), handler: log.handler)
        defer { try? client.close() }
        try client.start()
        try client.stop()
        try client.start()
        #expect(log.waitFor { $0.contains("start ctx-2") }, "\(log.lines)")
        #expect(!log.lines.contains("idle"), "\(log.lines)")
        try client.stop()
        #expect(log.waitFor { $0.last == "idle" }, "\(log.lines)")
        let lines = log.lines
        #expect(lines.filter { $0 == "idle" }.count == 1)
        #expect(lines.firstIndex(of: "idle") ?? 0 > lines.firstIndex(of: "stop ctx-2") ?? 99, "\(lines)")
    }

    @Test func aFailedConnectEndsWithErrorStopIdle() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(failConnect: SpeechClientError(.network, "refused")))
        let client = try Client(options: try Self.options(), service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        #expect(log.waitFor { $0.last == "idle" }, "\(log.lines)")
        #expect(log.lines == ["error network", "stop ", "idle"])
    }

    @Test func aSuspendEndsWithIdleAndAResumeGivesNone() throws {
        let log = EventLog(recordStates: true)
        let client = try Client(options: try Self.options(), service: FakeRecognitionService(), handler: log.handler)
        defer { try? client.close() }
        try client.suspend()
        #expect(log.waitFor { $0.last == "idle" }, "\(log.lines)")
        #expect(log.lines == ["state suspended", "idle"])
        try client.resume()
        #expect(try client.waitIdle(timeoutMilliseconds: 5_000))
        usleepMs(100)
        #expect(log.lines == ["state suspended", "idle"])
    }

    /// Hands-free listening that heard no speech opens no context, so no stop: the idle event
    /// is the only sign its end was delivered.
    @Test func handsFreeListeningWithoutAContextEndsWithIdle() throws {
        let log = EventLog()
        var o = try HandsFreeClientTests.options(.voice)
        o.reportIdle = true
        let client = try Client(options: o, service: FakeRecognitionService(), handler: log.handler)
        defer { try? client.close() }
        try client.start()
        var g = Signals.Noise()
        HandsFreeClientTests.push(client, Signals.noise(ms: 1_000, dbfs: -50, &g))
        try client.stop()
        #expect(log.waitFor { $0.last == "idle" }, "\(log.lines)")
        #expect(!log.lines.contains { $0.hasPrefix("start") || $0.hasPrefix("stop") }, "\(log.lines)")
    }

    /// While the idle callback runs the client counts as idle: a wait_idle woken by it returns
    /// true at once, not after the callback returns (here it returns only after that wait).
    @Test(arguments: [Delivery.thread, .shared]) func waitIdleReturnsWhileTheIdleCallbackRuns(delivery: Delivery) throws {
        // Whether the callback had returned, not whether it had begun: the event is taken off
        // the queue a moment before the callback starts, and a waiter may return in between.
        let returned = Atomic<Bool>(false)
        let release = Atomic<Bool>(false)
        let released = ConditionLock()
        let client = try Client(options: try Self.options(delivery: delivery), service: FakeRecognitionService()) { _, event in
            guard case .idle = event else { return }
            let deadline = Clock.monotonicNanos() + 5_000_000_000
            released.withLock {
                while !release.load(ordering: .acquiring) {
                    if !released.wait(untilMonotonicNanos: deadline) { break }
                }
            }
            returned.store(true, ordering: .releasing)
        }
        defer { try? client.close() }
        try client.start()
        let samples = [Int16](repeating: 1000, count: 4_800)
        samples.withUnsafeBufferPointer { try? client.pushAudio($0) }
        try client.pushEnd()
        let idle = try client.waitIdle(timeoutMilliseconds: 3_000)
        let callbackStillRunning = !returned.load(ordering: .acquiring)
        released.withLock {
            release.store(true, ordering: .releasing)
            released.broadcast()
        }
        #expect(idle)
        #expect(callbackStillRunning)
        let end = Clock.monotonicNanos() + 5_000_000_000
        while !returned.load(ordering: .acquiring) && Clock.monotonicNanos() < end { sched_yield() }
        let ran = returned.load(ordering: .acquiring)
        #expect(ran, "the idle callback never ran")
    }

    /// Application delivery: the idle event makes the event fd readable and is dispatched last.
    @Test func applicationDeliveryAnnouncesIdleOnTheEventFD() throws {
        let log = EventLog()
        let client = try Client(options: try Self.options(delivery: .application), service: FakeRecognitionService(), handler: log.handler)
        defer { try? client.close() }
        try client.start()
        let samples = [Int16](repeating: 1000, count: 4_800)
        samples.withUnsafeBufferPointer { try? client.pushAudio($0) }
        try client.pushEnd()
        var pfd = pollfd(fd: client.eventFD, events: Int16(POLLIN), revents: 0)
        let deadline = Clock.monotonicNanos() + 5_000_000_000
        while log.lines.last != "idle" && Clock.monotonicNanos() < deadline {
            pfd.revents = 0
            guard poll(&pfd, 1, 1_000) == 1 else { continue }
            _ = try client.dispatch(maxEvents: 0)
        }
        #expect(log.lines.last == "idle", "\(log.lines)")
        #expect(log.lines.dropLast().last == "stop ctx-1", "\(log.lines)")
        pfd.revents = 0
        #expect(poll(&pfd, 1, 0) == 0)
    }
}
