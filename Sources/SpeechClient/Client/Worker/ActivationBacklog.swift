/// Hands-free listening: activations that begin while the previous context is still finishing
/// (its last results not in yet) wait here, in order, each with its audio, until the context
/// before ends and a new one opens for the first of them. Each waiting activation is a context
/// of its own: run together, two activations became one context with no stop between them, and
/// the silence cut out between them made every later word time early by it.
/// Bounded in audio: a server that never finishes the previous context cannot make the
/// microphone's audio pile up (the oldest is dropped, and that said once).
struct ActivationBacklog {
    /// 60 s of audio across the waiting activations, however it is cut into chunks (a count of
    /// chunks was 12 s at 20 ms chunks, under the default maximum activation of 15 s).
    static let maxSamples = SpeechAudio.samples(milliseconds: 60_000)

    private struct Waiting {
        var chunks: [[Int16]] = []
        /// It has ended too (its stop goes out right after its audio).
        var closed = false
    }

    private var waiting: [Waiting] = []
    private var samples = 0
    private var overflowed = false

    /// Activations wait for the previous context to end.
    var isWaiting: Bool { !waiting.isEmpty }
    /// How many.
    var count: Int { waiting.count }
    /// The audio they hold, in samples.
    var heldSamples: Int { samples }

    /// An activation begins while a context is open: it waits, after those already waiting.
    mutating func wait() {
        waiting.append(Waiting())
    }

    /// Keeps a chunk of the latest waiting activation. Returns true the first time the oldest
    /// audio had to be dropped to make room.
    mutating func append(_ chunk: [Int16]) -> Bool {
        guard !waiting.isEmpty else { return false }
        waiting[waiting.count - 1].chunks.append(chunk)
        samples += chunk.count
        var first = false
        while samples > Self.maxSamples, let i = waiting.firstIndex(where: { !$0.chunks.isEmpty }) {
            samples -= waiting[i].chunks.removeFirst().count
            if !overflowed { first = true }
            overflowed = true
            // An activation that ended and lost all its audio has nothing left to transcribe.
            if waiting[i].chunks.isEmpty && waiting[i].closed { waiting.remove(at: i) }
        }
        return first
    }

    /// The latest waiting activation ended.
    mutating func close() {
        guard !waiting.isEmpty else { return }
        waiting[waiting.count - 1].closed = true
    }

    /// The previous context ended: the first waiting activation's audio, and whether it ended
    /// too; the others wait on.
    mutating func take() -> (chunks: [[Int16]], closed: Bool) {
        guard !waiting.isEmpty else { return ([], false) }
        let first = waiting.removeFirst()
        samples -= first.chunks.reduce(0) { $0 + $1.count }
        if waiting.isEmpty { overflowed = false }
        return (first.chunks, first.closed)
    }

    /// Listening starts, stops or fails: nothing waits.
    mutating func clear() { self = ActivationBacklog() }
}
