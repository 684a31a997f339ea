import Testing
@testable import SpeechClient

@Suite struct DeadlineQueueTests {
    /// Takes every timer due at `now` (added before the call), in order.
    static func due(_ q: inout DeadlineQueue<String>, now: UInt64) -> [String] {
        var out: [String] = []
        let before = q.nextTimerID
        while let b = q.takeDue(now: now, addedBefore: before) { out.append(b) }
        return out
    }

    @Test func dueTimersComeEarliestFirstAndTiesInTheOrderAdded() {
        var q = DeadlineQueue<String>()
        // A scrambled set: deadlines 0..<200 (each twice), added in a shuffled order.
        var deadlines = (0..<400).map { UInt64($0 / 2) }
        var rng = SystemRandomNumberGenerator()
        deadlines.shuffle(using: &rng)
        var added: [(UInt64, String)] = []
        for (k, d) in deadlines.enumerated() {
            _ = q.add(deadline: d, "t\(k)")
            added.append((d, "t\(k)"))
        }
        #expect(q.nextDeadline() == 0)
        #expect(Self.due(&q, now: 99) == added.enumerated().filter { $0.element.0 <= 99 }
            .sorted { ($0.element.0, $0.offset) < ($1.element.0, $1.offset) }.map(\.element.1))
        #expect(q.count == 200)
        #expect(q.nextDeadline() == 100)
        #expect(Self.due(&q, now: 1_000).count == 200)
        #expect(q.isEmpty && q.nextDeadline() == nil)
    }

    @Test func aCancelledTimerNeverComesAndStaleEntriesStayBounded() {
        var q = DeadlineQueue<String>()
        let a = q.add(deadline: 10, "a")
        _ = q.add(deadline: 20, "b")
        q.cancel(a)
        q.cancel(a)  // twice: a no-op
        #expect(q.nextDeadline() == 20)
        #expect(Self.due(&q, now: 100) == ["b"])
        // A thousand timers each replaced by a later one (a deadline moved): the heap is rebuilt
        // when stale entries outnumber live ones.
        var ids = (0..<1_000).map { q.add(deadline: UInt64(1_000 + $0), "x\($0)") }
        for round in 1...5 {
            for k in ids.indices {
                q.cancel(ids[k])
                ids[k] = q.add(deadline: UInt64(1_000 * (round + 1) + k), "x\(k)")
            }
        }
        #expect(q.count == 1_000)
        #expect(q.entriesForTests <= 2 * q.count + 64)
        #expect(q.nextDeadline() == 6_000)
        #expect(Self.due(&q, now: 6_009) == (0..<10).map { "x\($0)" })
    }

    @Test func aTimerAddedWhileDueOnesRunWaitsForTheNextTurn() {
        var q = DeadlineQueue<String>()
        _ = q.add(deadline: 5, "first")
        let before = q.nextTimerID
        #expect(q.takeDue(now: 10, addedBefore: before) == "first")
        // Added by "first"'s body, already due: not in this turn, in the next one.
        _ = q.add(deadline: 0, "again")
        #expect(q.takeDue(now: 10, addedBefore: before) == nil)
        #expect(q.nextDeadline() == 0)
        #expect(Self.due(&q, now: 10) == ["again"])
    }
}
