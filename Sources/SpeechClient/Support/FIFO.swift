/// A first-in first-out queue with O(1) amortised push and pop (Array.removeFirst is O(n)).
/// Each element pushed gets a sequence number (0, 1, 2, ...), by which an element still queued
/// can be replaced in place.
public struct FIFO<Element> {
    private var items: [Element?] = []
    private var head = 0
    /// The sequence number of `items[0]`.
    private var base = 0

    public init() {}

    /// Popped slots kept before the live ones move to the front.
    static var compactAfter: Int { 32 }
    /// Slots allocated (for tests of the bound).
    var storageCapacity: Int { items.capacity }

    public var isEmpty: Bool { head == items.count }
    public var count: Int { items.count - head }
    /// The sequence number of the element `pop` returns next.
    public var nextPopSequence: Int { base + head }
    /// The element `pop` returns next.
    public var first: Element? { head < items.count ? items[head] : nil }

    /// Returns the element's sequence number.
    @discardableResult
    public mutating func push(_ item: Element) -> Int {
        items.append(item)
        return base + items.count - 1
    }

    public mutating func pop() -> Element? {
        guard head < items.count else { return nil }
        let item = items[head]
        items[head] = nil
        head += 1
        if head == items.count {
            base += items.count
            items.removeAll(keepingCapacity: items.count <= 1024)
            head = 0
        } else if head >= Self.compactAfter && head * 2 >= items.count {
            // Amortised O(1) whatever the threshold (at most as many move as were popped). A
            // small one keeps a queue that is never empty (the replay buffer's ~10 chunks)
            // small: at 1,024 its slots grew for 100 s of audio, up to 50 KB per stream.
            items.removeFirst(head)
            base += head
            head = 0
        }
        return item
    }

    /// Replaces the element with this sequence number if it is still queued; returns the old one.
    public mutating func replace(sequence: Int, with item: Element) -> Element? {
        let i = sequence - base
        guard i >= head, i < items.count, let old = items[i] else { return nil }
        items[i] = item
        return old
    }

    public mutating func removeAll() {
        base += items.count
        items.removeAll()
        head = 0
    }
}
