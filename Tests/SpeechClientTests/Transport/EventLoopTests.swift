import Foundation
import Synchronization
import Testing
@testable import SpeechClient

@Suite(.serialized) struct EventLoopTests {
    @Test func tasksRunInOrderOnTheLoopThread() throws {
        let loop = try EventLoop.shared()
        #expect(!loop.isInLoop)
        let seen = Locked<[Int]>([])
        for i in 0..<1000 {
            loop.execute { seen.withLock { $0.append(i) } }
        }
        let onLoop = loop.executeAndWait { loop.isInLoop }
        #expect(onLoop)
        #expect(seen.withLock { $0 } == Array(0..<1000))
        #expect(try EventLoop.shared() === loop)
    }

    @Test func timersFireInDeadlineOrderAndCanBeCancelled() throws {
        let loop = try EventLoop.shared()
        let fired = Locked<[String]>([])
        let done = OneShot<Bool>()
        loop.execute {
            loop.addTimer(milliseconds: 60) { fired.withLock { $0.append("late") }; done.set(true) }
            loop.addTimer(milliseconds: 20) { fired.withLock { $0.append("early") } }
            let cancelled = loop.addTimer(milliseconds: 40) { fired.withLock { $0.append("cancelled") } }
            loop.cancelTimer(cancelled)
        }
        #expect(done.wait(untilMonotonicNanos: Clock.monotonicNanos() + 5_000_000_000) == true)
        #expect(fired.withLock { $0 } == ["early", "late"])
    }

    /// A task posted while another holds the loop is queued; once the loop is free, a task run
    /// inline on the posting thread still comes after the queued ones, and every task runs with
    /// the loop held (`isInLoop`).
    @Test func inlineTasksRunAfterTheQueuedOnesAndInsideTheLoop() throws {
        let loop = try EventLoop.shared()
        let seen = Locked<[Int]>([])
        let outside = Locked<Int>(0)
        let holding = OneShot<Bool>()
        let release = OneShot<Bool>()
        let blocker = Thread {
            loop.execute {
                holding.set(true)
                _ = release.wait(untilMonotonicNanos: Clock.monotonicNanos() + 5_000_000_000)
            }
        }
        blocker.start()
        #expect(holding.wait(untilMonotonicNanos: Clock.monotonicNanos() + 5_000_000_000) == true)
        for i in 0..<100 {
            loop.execute {
                if !loop.isInLoop { outside.withLock { $0 += 1 } }
                seen.withLock { $0.append(i) }
            }
        }
        #expect(seen.withLock { $0.count } == 0)  // the loop is held: all queued
        release.set(true)
        for i in 100..<200 {
            loop.execute {
                if !loop.isInLoop { outside.withLock { $0 += 1 } }
                seen.withLock { $0.append(i) }
            }
        }
        _ = loop.executeAndWait { 0 }
        #expect(seen.withLock { $0 } == Array(0..<200))
        #expect(outside.withLock { $0 } == 0)
    }

    /// Inside `corking`, `execute`'s tasks are held and run at its end, in order and inside the
    /// loop's work; `post` and `executeAndWait` come after what is held (an `executeAndWait`
    /// would otherwise wait for a task that is never run), and `uncorkNow` hands it over early.
    @Test func tasksGivenInsideACorkRunTogetherAtItsEndInOrder() throws {
        let loop = try EventLoop.shared()
        let seen = Locked<[Int]>([])
        let outside = Locked<Int>(0)
        func give(_ i: Int) {
            loop.execute {
                if !loop.isInLoop { outside.withLock { $0 += 1 } }
                seen.withLock { $0.append(i) }
            }
        }
        let result: Int = loop.corking {
            for i in 0..<10 { give(i) }
            let count = seen.withLock { $0.count }
            #expect(count == 0)  // held
            let waited = loop.executeAndWait { seen.withLock { $0.count } }
            #expect(waited == 10)  // after the held ones, and no deadlock
            give(10)
            loop.post { seen.withLock { $0.append(11) } }
            give(12)
            loop.corking { give(13) }  // nested: the outer cork holds it
            loop.uncorkNow()
            _ = loop.executeAndWait { 0 }
            let early = seen.withLock { $0 }
            #expect(early == Array(0...13))
            give(14)
            return 7
        }
        #expect(result == 7)
        _ = loop.executeAndWait { 0 }
        #expect(seen.withLock { $0 } == Array(0...14))
        #expect(outside.withLock { $0 } == 0)
        // No cork is left behind on the thread.
        loop.execute { seen.withLock { $0.append(15) } }
        _ = loop.executeAndWait { 0 }
        #expect(seen.withLock { $0.last } == 15)
    }

    /// Wakes deferred while one read is handled are made once each at its end; outside such a
    /// handling (or outside the loop's work) nothing is deferred.
    @Test func wakesDeferredDuringAReadAreMadeAtItsEnd() throws {
        final class Waker: DeferredWake, @unchecked Sendable {
            let flushes = Atomic<Int>(0)
            func flushDeferredWake() { flushes.add(1, ordering: .relaxed) }
        }
        let loop = try EventLoop.shared()
        let a = Waker(), b = Waker()
        #expect(!loop.deferWake(a, noted: false))  // not in the loop's work
        let during: [Int] = loop.executeAndWait {
            var seen: [Int] = []
            #expect(!loop.deferWake(a, noted: false))  // in the loop, not in a read
            loop.batchingWakes {
                #expect(loop.deferWake(a, noted: false))
                #expect(loop.deferWake(a, noted: true))
                #expect(loop.deferWake(b, noted: false))
                loop.batchingWakes { #expect(loop.deferWake(b, noted: true)) }  // nested: one batch
                seen = [a.flushes.load(ordering: .relaxed), b.flushes.load(ordering: .relaxed)]
            }
            return seen
        }
        #expect(during == [0, 0])
        #expect(a.flushes.load(ordering: .relaxed) == 1)
        #expect(b.flushes.load(ordering: .relaxed) == 1)
    }

    /// A timer added by a task run inline (the loop thread asleep with no deadline) still fires:
    /// the loop thread is woken to take it into account.
    @Test func timerAddedInlineWakesTheLoop() throws {
        let loop = try EventLoop.shared()
        // Let the loop thread fall asleep (with no deadline, or a far one), so that this
        // thread's task runs inline.
        usleep(100_000)
        let fired = OneShot<UInt64>()
        let added = Clock.monotonicNanos()
        for _ in 0..<3 {
            // Whether this runs inline or on the loop thread, the timer must fire.
            loop.execute { loop.addTimer(milliseconds: 30) { fired.set(Clock.monotonicNanos()) } }
        }
        let at = fired.wait(untilMonotonicNanos: Clock.monotonicNanos() + 2_000_000_000)
        #expect(at != nil)
        if let at { #expect(at >= added + 29_000_000) }
    }
}
