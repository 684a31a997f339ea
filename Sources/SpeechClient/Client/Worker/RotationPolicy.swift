/// When the stream taking a context's live audio moves to a new stream (issue 18). A stream is
/// bounded: proxies cap a request's bytes (nginx's default 1 MB) and duration, and a server
/// context lasts at most 5 minutes (protocol.md). From half the byte budget, past the context
/// limit, or once the connection is going away, the move waits for a pause in the audio sent
/// (200 ms of quiet); at the byte budget itself, 20 s past the context limit or at the drain
/// deadline, it happens at once. Decided on the audio sent, not on the server's answers: a file
/// is sent far ahead of them.
struct RotationPolicy {
    /// The stream's byte budget (`ClientOptions.streamBudgetBytes`).
    let budgetBytes: Int
    /// The longest server context (`contextRolloverMilliseconds`).
    let contextLimitMilliseconds: Int

    /// How long the audio sent has been quiet (samples), and the loudest recent chunk energy:
    /// a pause is quiet in absolute terms or against the speech before it.
    private var silentRun = 0
    private var loudEnergy: Int64 = 0

    static let pauseSamples = SpeechAudio.samples(milliseconds: 200)
    static let lateSamples = SpeechAudio.samples(milliseconds: 20_000)

    init(budgetBytes: Int, contextLimitMilliseconds: Int) {
        self.budgetBytes = budgetBytes
        self.contextLimitMilliseconds = contextLimitMilliseconds
    }

    /// A new stream takes the audio: the pause is measured afresh.
    mutating func reset() {
        silentRun = 0
        loudEnergy = 0
    }

    /// The stream may move now (at a pause, or at once when forced): no move happens before.
    func isDue(streamBytes: Int, sentSamples: Int, moveBy: UInt64?) -> Bool {
        streamBytes > budgetBytes / 2 || sentSamples >= SpeechAudio.samples(milliseconds: contextLimitMilliseconds) || moveBy != nil
    }

    /// Why the stream should move before `chunk` is sent on it, or nil to send it there.
    /// `streamBytes` it has carried, `sentSamples` of audio since its start, `moveBy` the drain
    /// deadline of a connection going away.
    mutating func reason(before chunk: [Int16], streamBytes: Int, sentSamples: Int, moveBy: UInt64?,
                         now: UInt64) -> String? {
        let chunkBytes = Lane.audioBytes(samples: chunk.count)
        let limit = SpeechAudio.samples(milliseconds: contextLimitMilliseconds)
        let due = isDue(streamBytes: streamBytes + chunkBytes, sentSamples: sentSamples, moveBy: moveBy)
        // Only the audio shortly before the rotation point is measured (not every chunk of a
        // stream): 2 s to learn the recent level, then the pause itself.
        let nearlyDue = due || streamBytes + 20 * chunkBytes > budgetBytes / 2
            || sentSamples + SpeechAudio.samples(milliseconds: 2_000) >= limit
        if nearlyDue {
            let energy = Self.energy(chunk)
            let quiet = energy <= Int64(chunk.count) * 200 * 200 || energy * 300 <= loudEnergy
            silentRun = quiet ? silentRun + chunk.count : 0
            loudEnergy = max(energy, loudEnergy - loudEnergy / 8)
        }
        let forced = streamBytes + chunkBytes > budgetBytes || sentSamples >= limit + Self.lateSamples
            || (moveBy.map { now >= $0 } ?? false)
        guard forced || (due && silentRun >= Self.pauseSamples) else { return nil }
        if moveBy != nil { return "the connection is closing (GOAWAY)" }
        if sentSamples >= limit { return "the server context reached \(contextLimitMilliseconds / 1000) s" }
        if forced { return "the stream carried all of its \(budgetBytes / 1024) KiB budget (no pause before it)" }
        return "at a pause after \(streamBytes / 1024) KiB of its \(budgetBytes / 1024) KiB budget"
    }

    /// Sum of squares of a chunk (its energy). Runs for every chunk of a stream's second half,
    /// so it works 8 samples at a time: a square of an Int16 is at most 2^30, so two of them fit
    /// a UInt32 lane, and pairs of squares are summed in UInt64 lanes (3x faster than one
    /// sample at a time, which the compiler did not vectorise).
    static func energy(_ chunk: [Int16]) -> Int64 {
        chunk.withUnsafeBufferPointer { samples -> Int64 in
            guard let base = samples.baseAddress else { return 0 }
            var pairs = SIMD4<UInt64>()
            var i = 0
            while i + 8 <= samples.count {
                let v = SIMD8<Int32>(truncatingIfNeeded: UnsafeRawPointer(base + i).loadUnaligned(as: SIMD8<Int16>.self))
                let squares = SIMD8<UInt32>(truncatingIfNeeded: v &* v)
                pairs &+= SIMD4<UInt64>(truncatingIfNeeded: squares.evenHalf &+ squares.oddHalf)
                i += 8
            }
            var sum = Int64(truncatingIfNeeded: pairs.wrappedSum())
            while i < samples.count {
                let v = Int64(base[i])
                sum &+= v &* v
                i += 1
            }
            return sum
        }
    }
}
