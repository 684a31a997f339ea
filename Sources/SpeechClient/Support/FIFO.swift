/// A first-in first-out queue with O(1) amortised push and pop (Array.removeFirst is O(n)).
public struct FIFO<Element> {
    private var items: [Element?] = []
    private var head = 0

    public init() {}

    public var isEmpty: Bool { head == items.count }
    public var count: Int { items.count - head }

    public mutating func push(_ item: Element) { items.append(item) }

    public mutating func pop() -> Element? {
        guard head < items.count else { return nil }
        let item = items[head]
        items[head] = nil
        head += 1
        if head == items.count {
            items.removeAll(keepingCapacity: items.count <= 1024)
            head = 0
        } else if head >= 1024 && head * 2 >= items.count {
            items.removeFirst(head)
            head = 0
        }
        return item
    }

    public mutating func removeAll() { items.removeAll(); head = 0 }
}
