/// The event loop's timers: ids by deadline in a binary min-heap, so that finding the next
/// deadline and taking the due ones costs O(log n) per timer, not a scan of every timer on
/// every turn of the loop (the scan was 5 % of the CPU of 1,000 paced streams with the library
/// reading the network).
///
/// A cancelled timer leaves its heap entry behind (found stale when it comes up, by its id);
/// the heap is rebuilt when stale entries outnumber live ones, so it stays within twice the
/// live timers. Not thread-safe: the loop's work only.
struct DeadlineQueue<Body> {
    private struct Entry {
        var deadline: UInt64
        var id: UInt64
        /// Earlier deadline first; the same deadline in the order added.
        func before(_ other: Entry) -> Bool {
            deadline != other.deadline ? deadline < other.deadline : id < other.id
        }
    }

    private var bodies: [UInt64: (deadline: UInt64, body: Body)] = [:]
    private var heap: [Entry] = []
    private var nextID: UInt64 = 1

    var count: Int { bodies.count }
    var isEmpty: Bool { bodies.isEmpty }

    /// Adds a timer; returns its id (never 0, never reused).
    mutating func add(deadline: UInt64, _ body: Body) -> UInt64 {
        let id = nextID
        nextID += 1
        bodies[id] = (deadline, body)
        push(Entry(deadline: deadline, id: id))
        return id
    }

    /// Removes a timer that has not run; a no-op for one that ran or was cancelled.
    mutating func cancel(_ id: UInt64) {
        guard bodies.removeValue(forKey: id) != nil else { return }
        if heap.count > 2 * bodies.count + 64 { rebuild() }
    }

    /// The earliest deadline of a live timer.
    mutating func nextDeadline() -> UInt64? {
        dropStaleTop()
        return heap.first?.deadline
    }

    /// Takes out the timers due at `now` that were added before the id `before` (a timer added
    /// while due ones run waits for the next turn, even with a deadline already past), earliest
    /// first; each is taken just before it is returned, so a body may cancel a later one.
    mutating func takeDue(now: UInt64, addedBefore before: UInt64) -> Body? {
        var later: [Entry] = []
        defer { for e in later { push(e) } }
        while true {
            dropStaleTop()
            guard let top = heap.first, top.deadline <= now else { return nil }
            popTop()
            if top.id >= before {
                later.append(top)
                continue
            }
            return bodies.removeValue(forKey: top.id)?.body
        }
    }

    /// The id the next timer added will get (for `takeDue(addedBefore:)`).
    var nextTimerID: UInt64 { nextID }

    // MARK: the heap

    private mutating func dropStaleTop() {
        while let top = heap.first, bodies[top.id]?.deadline != top.deadline { popTop() }
    }

    private mutating func push(_ e: Entry) {
        heap.append(e)
        var i = heap.count - 1
        while i > 0 {
            let parent = (i - 1) / 2
            guard heap[i].before(heap[parent]) else { break }
            heap.swapAt(i, parent)
            i = parent
        }
    }

    private mutating func popTop() {
        guard !heap.isEmpty else { return }
        let last = heap.removeLast()
        guard !heap.isEmpty else { return }
        heap[0] = last
        var i = 0
        while true {
            let l = 2 * i + 1, r = l + 1
            var smallest = i
            if l < heap.count && heap[l].before(heap[smallest]) { smallest = l }
            if r < heap.count && heap[r].before(heap[smallest]) { smallest = r }
            if smallest == i { return }
            heap.swapAt(i, smallest)
            i = smallest
        }
    }

    private mutating func rebuild() {
        let live = bodies.map { Entry(deadline: $0.value.deadline, id: $0.key) }
        heap = []
        heap.reserveCapacity(live.count)
        for e in live { push(e) }
    }

    /// Heap entries, live and stale (for tests: the bound on stale ones).
    var entriesForTests: Int { heap.count }
}
