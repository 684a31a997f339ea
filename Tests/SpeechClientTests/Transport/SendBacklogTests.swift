import Synchronization
import Testing
@testable import SpeechClient

@Suite struct SendBacklogTests {
    @Test func aNoticeRunsOnceWhenTheCountFallsToItsMark() {
        let backlog = SendBacklog()
        backlog.add(1000)
        let fired = Atomic<Int>(0)
        #expect(backlog.notifyWhen(atMost: 400) { fired.add(1, ordering: .relaxed) })
        backlog.subtract(500)
        #expect(fired.load(ordering: .relaxed) == 0)  // 500 > 400
        backlog.subtract(100)
        #expect(fired.load(ordering: .relaxed) == 1)
        backlog.subtract(400)
        #expect(fired.load(ordering: .relaxed) == 1)  // one-shot
        #expect(backlog.value == 0)
    }

    @Test func aCountAlreadyAtTheMarkArmsNothing() {
        let backlog = SendBacklog()
        backlog.add(100)
        let fired = Atomic<Int>(0)
        #expect(!backlog.notifyWhen(atMost: 100) { fired.add(1, ordering: .relaxed) })
        backlog.add(500)
        backlog.subtract(600)
        #expect(fired.load(ordering: .relaxed) == 0)
    }

    @Test func clearingRunsTheNoticeAndALaterNoticeReplacesAnEarlierOne() {
        let backlog = SendBacklog()
        backlog.add(1000)
        let first = Atomic<Int>(0), second = Atomic<Int>(0)
        #expect(backlog.notifyWhen(atMost: 10) { first.add(1, ordering: .relaxed) })
        #expect(backlog.notifyWhen(atMost: 10) { second.add(1, ordering: .relaxed) })
        backlog.clear()
        #expect(first.load(ordering: .relaxed) == 0)
        #expect(second.load(ordering: .relaxed) == 1)
        #expect(backlog.value == 0)
    }

    /// A waiter arms while another thread drains: the notice is never lost (it runs, or arming
    /// says the count was low already), whatever the interleaving.
    @Test func noNoticeIsLostWhileAnotherThreadDrains() throws {
        for _ in 0..<2000 {
            let backlog = SendBacklog()
            backlog.add(64)
            let fired = Atomic<Int>(0)
            let drainer = try NativeThread(name: "drainer") {
                for _ in 0..<64 { backlog.subtract(1) }
            }
            let armed = backlog.notifyWhen(atMost: 0) { fired.add(1, ordering: .relaxed) }
            drainer.join()
            #expect(fired.load(ordering: .relaxed) == (armed ? 1 : 0))
        }
    }
}
