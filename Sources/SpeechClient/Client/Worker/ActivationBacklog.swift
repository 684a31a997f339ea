/// Hands-free listening: activations that begin while the previous context is still finishing
/// (its last results not in yet) wait here, in order, each with its audio, until the context
/// before ends and a new one opens for the first of them. Each waiting activation is a context
/// of its own: run together, two activations became one context with no stop between them, and
/// the silence cut out between them made every later word time early by it.
/// Bounded in audio: a server that never finishes the previous context cannot make the
/// microphone's audio pile up (the oldest is dropped, and that said once).
/// Activations also wait here while no context can be opened for the first of them (the server
/// cannot be reached): `retry` says when the next try is.
struct ActivationBacklog {
    /// 60 s of audio across the waiting activations, however it is cut into chunks (a count of
    /// chunks was 12 s at 20 ms chunks, under the default maximum activation of 15 s).
    static let maxSamples = SpeechAudio.samples(milliseconds: 60_000)

    private struct Waiting {
        var chunks: [[Int16]] = []
        /// It has ended too (its stop goes out right after its audio).
        var closed = false
        /// It goes on from a context that failed before it ended (`continuing`).
        var continuing: Continuing?
    }

    /// What an activation going on after its context failed keeps of it.
    struct Continuing: Equatable {
        /// Its context had delivered its segments (the wake phrase was heard): so does the next.
        var woken: Bool
    }

    /// The first waiting activation, taken out by `take`.
    struct Taken {
        var chunks: [[Int16]]
        var closed: Bool
        var continuing: Continuing?
    }

    private var waiting: [Waiting] = []
    private var samples = 0
    private var overflowed = false
    /// No context could be opened for the first waiting activation: the attempts made and when
    /// (monotonic ns) the next is due. Cleared when one opens (`take`) or nothing waits.
    private(set) var retry: (attempt: Int, at: UInt64)?

    /// Activations wait for the previous context to end.
    var isWaiting: Bool { !waiting.isEmpty }
    /// How many.
    var count: Int { waiting.count }
    /// The audio they hold, in samples.
    var heldSamples: Int { samples }
    /// One of them carries on an activation the wake phrase had woken (its end not said yet).
    var holdsWokenContinuation: Bool { waiting.contains { $0.continuing?.woken == true } }

    /// An activation begins while a context is open (or none can be opened): it waits, after
    /// those already waiting. `continuing`: it is the rest of one whose context failed.
    mutating func wait(continuing: Continuing? = nil) {
        waiting.append(Waiting(continuing: continuing))
    }

    /// Opening a context for the first waiting activation failed: try again at `at`.
    mutating func retryOpening(attempt: Int, at: UInt64) {
        guard !waiting.isEmpty else { return }
        retry = (attempt, at)
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
            // (One carrying on a failed context's activation stays: its context says its end.)
            if waiting[i].chunks.isEmpty && waiting[i].closed && waiting[i].continuing == nil {
                waiting.remove(at: i)
                if waiting.isEmpty { retry = nil }  // nothing is left to open a context for
            }
        }
        return first
    }

    /// Audio that goes before what the first waiting activation holds (what a context that
    /// failed while it was sent did not take). Bounded as `append` is not: it was held already.
    mutating func prependToFirst(_ chunks: ArraySlice<[Int16]>) {
        guard !waiting.isEmpty else { return }
        waiting[0].chunks.insert(contentsOf: chunks, at: 0)
        samples += chunks.reduce(0) { $0 + $1.count }
    }

    /// The latest waiting activation ended.
    mutating func close() {
        guard !waiting.isEmpty else { return }
        waiting[waiting.count - 1].closed = true
    }

    /// The previous context ended (or a context opened for it): the first waiting activation's
    /// audio, whether it ended too, and whether it continues a failed one; the others wait on.
    mutating func take() -> Taken {
        guard !waiting.isEmpty else { return Taken(chunks: [], closed: false, continuing: nil) }
        let first = waiting.removeFirst()
        samples -= first.chunks.reduce(0) { $0 + $1.count }
        retry = nil
        if waiting.isEmpty { overflowed = false }
        return Taken(chunks: first.chunks, closed: first.closed, continuing: first.continuing)
    }

    /// Listening starts, stops or fails: nothing waits.
    mutating func clear() { self = ActivationBacklog() }
}
