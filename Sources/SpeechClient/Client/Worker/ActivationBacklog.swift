/// Hands-free listening: an activation that begins while the previous context is still
/// finishing (its last results not in yet) waits here, its audio kept, until that context ends
/// and a new one opens for it. Bounded: a server that never finishes the previous context
/// cannot make the microphone's audio pile up (the oldest is dropped, and that said once).
struct ActivationBacklog {
    /// 60 s of 100 ms chunks.
    static let maxChunks = 600

    /// An activation waits for the previous context to end.
    private(set) var isWaiting = false
    private var chunks: [[Int16]] = []
    /// The waiting activation has ended too (its stop goes out right after its audio).
    private var closed = false
    private var overflowed = false

    /// An activation begins while a context is open.
    mutating func wait() {
        isWaiting = true
        closed = false
    }

    /// Keeps a chunk of the waiting activation. Returns true the first time the oldest had to
    /// be dropped to make room.
    mutating func append(_ chunk: [Int16]) -> Bool {
        var first = false
        if chunks.count >= Self.maxChunks {
            chunks.removeFirst()
            first = !overflowed
            overflowed = true
        }
        chunks.append(chunk)
        return first
    }

    /// The waiting activation ended.
    mutating func close() { closed = true }

    /// The previous context ended: the waiting activation's audio, and whether it ended too.
    mutating func take() -> (chunks: [[Int16]], closed: Bool) {
        defer { self = ActivationBacklog() }
        return (chunks, closed)
    }

    /// Listening starts, stops or fails: nothing waits.
    mutating func clear() { self = ActivationBacklog() }
}
