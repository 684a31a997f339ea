import Foundation
import Synchronization
import Testing
@testable import SpeechClient

@Suite struct EventLoopTests {
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
}
