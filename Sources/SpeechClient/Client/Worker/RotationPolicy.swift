/// When and where the stream taking a context's live audio moves to a new stream (issue 18). A
/// stream is bounded: proxies cap a request's bytes (nginx's default 1 MB) and duration, and a
/// server context lasts at most 5 minutes (protocol.md). From half the byte budget, past the
/// context limit, or once the connection is going away, the move waits for a pause in the audio
/// sent; at the byte budget itself, 20 s past the context limit or at the drain deadline, it
/// happens at once: in the chunk that would pass the budget, at a frame of it markedly quieter
/// than its start if the part that still fits has one, else where the chunk starts. Decided on
/// the audio sent, not on the server's answers: a file is sent far ahead of them.
///
/// A cut inside a word loses that word on both streams, so where the cut falls matters:
/// - a pause is quiet against the room's own noise floor, not only in absolute terms: in a room
///   at 20 dB SNR the absolute rule never found one, and every cut of a long dictation fell
///   where the budget ran out, 10 of 12 inside a word (three real recordings; stop 43's note);
/// - the pause asked for shrinks as the budget runs out (200 ms, then 100 ms from three
///   quarters of it, 40 ms, the gap between two words, from nine tenths);
/// - the cut falls inside the chunk where the pause is (150 ms into a 200 ms pause, in the middle
///   of a shorter one), not before the chunk.
struct RotationPolicy {
    /// The stream's byte budget (`ClientOptions.streamBudgetBytes`).
    let budgetBytes: Int
    /// The longest server context (`contextRolloverMilliseconds`).
    let contextLimitMilliseconds: Int

    /// Where to cut a chunk, and why: its first `offset` samples still go on the old stream.
    /// `offset` is 0 (the whole chunk goes on the new stream) or inside the chunk: never its
    /// whole length, so both parts of a cut chunk have audio.
    struct Cut: Equatable {
        let offset: Int
        let why: String
    }

    /// The audio is measured in 20 ms frames, by the mean square of their samples (the energy
    /// per sample: chunks of any size compare).
    static let frameSamples = SpeechAudio.samples(milliseconds: 20)
    static let pauseSamples = SpeechAudio.samples(milliseconds: 200)
    static let lateSamples = SpeechAudio.samples(milliseconds: 20_000)
    /// Quiet in absolute terms: RMS 200 (-44 dBFS).
    static let quietMeanSquare: Int64 = 200 * 200

    /// Samples of quiet up to the last frame measured; the loudest recent frame (falling 0.85 dB
    /// a second); the quietest recent frame, the noise floor (rising 0.42 dB a second; -1 before
    /// the first frame).
    private var quietRun = 0
    private var loud: Int64 = 0
    private var floor: Int64 = -1

    init(budgetBytes: Int, contextLimitMilliseconds: Int) {
        self.budgetBytes = budgetBytes
        self.contextLimitMilliseconds = contextLimitMilliseconds
    }

    /// A new stream takes the audio: the pause and the levels are measured afresh.
    mutating func reset() {
        quietRun = 0
        loud = 0
        floor = -1
    }

    /// The stream may move now (at a pause, or at once when forced): no move happens before.
    func isDue(streamBytes: Int, sentSamples: Int, moveBy: UInt64?) -> Bool {
        streamBytes > budgetBytes / 2 || sentSamples >= SpeechAudio.samples(milliseconds: contextLimitMilliseconds) || moveBy != nil
    }

    /// Where the stream should move within `chunk`, the next audio for it, or nil to send all of
    /// it there. `streamBytes` it has carried, `sentSamples` of audio since its start, `moveBy`
    /// the deadline of a move asked for (`moveWhy`: a connection going away, the server's end of
    /// an utterance).
    mutating func cut(in chunk: [Int16], streamBytes: Int, sentSamples: Int, moveBy: UInt64?, now: UInt64,
                      moveWhy: String = Lane.goingAway) -> Cut? {
        let chunkBytes = Lane.audioBytes(samples: chunk.count)
        let limit = SpeechAudio.samples(milliseconds: contextLimitMilliseconds)
        let due = isDue(streamBytes: streamBytes + chunkBytes, sentSamples: sentSamples, moveBy: moveBy)
        // Only the audio before a move is measured (not all of every stream): from 35 % of the
        // budget (or 5 s before the context limit), to learn the levels before the pause.
        // Divided first: `budgetBytes` may be up to 1 GiB, and Int is 32 bits on armhf.
        let measured = due || streamBytes + chunkBytes > budgetBytes / 20 * 7
            || sentSamples + SpeechAudio.samples(milliseconds: 5_000) >= limit
        guard measured else { return nil }
        let forced = streamBytes + chunkBytes > budgetBytes || sentSamples >= limit + Self.lateSamples
            || (moveBy.map { now >= $0 } ?? false)
        let pause = due ? pauseNeeded(streamBytes: streamBytes + chunkBytes, sentSamples: sentSamples, limit: limit,
                                      moveBy: moveBy, now: now) : Int.max
        // The longest prefix that still fits the budget (a prefix is a message of its own).
        let fits = max(0, min(chunk.count, (budgetBytes - streamBytes - Lane.audioBytes(samples: 0)) / SpeechAudio.bytesPerSample))
        var quietest = (offset: 0, meanSquare: Int64.max)
        var frame = 0
        while frame < chunk.count {
            let count = min(Self.frameSamples, chunk.count - frame)
            let meanSquare = Self.energy(chunk[frame..<frame + count]) / Int64(count)
            // Forced, the cut falls where the chunk starts, or in the middle of a frame at least
            // 3 dB quieter than its first one (a gap or a soft sound: not the middle of a vowel).
            if forced {
                if frame == 0 {
                    quietest = (0, meanSquare / 2)
                } else if frame <= fits, meanSquare < quietest.meanSquare {
                    quietest = (frame + count / 2 <= fits ? frame + count / 2 : frame, meanSquare)
                }
            }
            // The levels are learnt from whole frames only: a few samples at the end of a chunk
            // cut in two (a zero crossing) would set the floor near 0 for the rest of the stream.
            if count >= Self.frameSamples / 2 {
                floor = floor < 0 ? meanSquare : min(meanSquare, floor + floor / 512 + 1)
                loud = max(meanSquare, loud - loud / 256)
            }
            let quiet = meanSquare <= Self.quietMeanSquare || meanSquare * 300 <= loud
                || (meanSquare <= 2 * floor && floor * 8 <= loud)
            quietRun = quiet ? quietRun + count : 0
            if quietRun >= pause {
                // Late in the pause, where this chunk holds it (else where the chunk starts): in
                // its middle for a gap between words, else 50 ms before the pause asked for was
                // met. The first 100-150 ms after a word may still be its soft end (a fricative,
                // the room's echo): in the LibriVox reading a cut in the middle of 200 ms fell in
                // the "f" of "self" and both streams lost the word.
                // A pause past what the budget still takes is no place to cut: the forced cut
                // below chooses within it.
                let at = max(frame + count - min(quietRun / 2, SpeechAudio.samples(milliseconds: 50)), 0)
                if at <= fits {
                    return Cut(offset: min(at, max(chunk.count - 1, 0)), why: reason(sentSamples: sentSamples, limit: limit, moveBy: moveBy, moveWhy: moveWhy, forced: false, streamBytes: streamBytes))
                }
            }
            frame += count
        }
        guard forced else { return nil }
        return Cut(offset: min(quietest.offset, max(chunk.count - 1, 0)),
                   why: reason(sentSamples: sentSamples, limit: limit, moveBy: moveBy, moveWhy: moveWhy, forced: true, streamBytes: streamBytes))
    }

    /// Where a new stream resumes after a server ended an utterance by itself and may ignore
    /// what it was sent since (`chunks`: the stream's audio, its first sample `first` of the
    /// context): the server's end of speech is the first pause after speech on the stream,
    /// however far the audio went on since (a file is sent ahead), so the new stream starts in
    /// the first pause of 300 ms (a server's end of speech waits for at least that much) or
    /// more after the first speech, 100 ms into it (past the soft end of the
    /// word before). Speech: 60 ms of loud frames (a click is none; a server's voice detection
    /// takes 100 ms and more). Quiet as for a move, against the stream's own loudest and
    /// quietest frames. Nil when there is none.
    static func resumePoint(in chunks: [[Int16]], from first: Int) -> Int? {
        pausesAfterSpeech(in: chunks, from: first, [(300, 100)])[0]
    }

    /// `resumePoint` for each (pause, into) asked, in ms, the audio measured once: the first
    /// pause of each length after the first speech, that far into it (nil: none).
    static func pausesAfterSpeech(in chunks: [[Int16]], from first: Int, _ asked: [(pauseMilliseconds: Int, intoMilliseconds: Int)]) -> [Int?] {
        let none = [Int?](repeating: nil, count: asked.count)
        var levels: [Int64] = []
        var carry: [Int16] = []
        for chunk in chunks {
            carry += chunk
            var at = 0
            while carry.count - at >= frameSamples {
                levels.append(energy(carry[at..<at + frameSamples]) / Int64(frameSamples))
                at += frameSamples
            }
            carry.removeFirst(at)
        }
        guard let loud = levels.max(), let floor = levels.min() else { return none }
        let quiet = { (m: Int64) in m <= quietMeanSquare || m * 300 <= loud || (m <= 2 * floor && floor * 8 <= loud) }
        let speech = SpeechAudio.samples(milliseconds: 60) / frameSamples
        var loudFrames = 0
        guard let speechStart = levels.firstIndex(where: { level in
            if !quiet(level) { loudFrames += 1 }
            return loudFrames >= speech
        }) else { return none }
        return asked.map { pause, into in
            let needed = SpeechAudio.samples(milliseconds: pause) / frameSamples
            var i = speechStart
            while i < levels.count {
                guard quiet(levels[i]) else { i += 1; continue }
                var end = i
                while end < levels.count && quiet(levels[end]) { end += 1 }
                if end - i >= needed { return first + i * frameSamples + SpeechAudio.samples(milliseconds: into) }
                i = end
            }
            return nil
        }
    }

    /// The pause a due stream waits for: shorter as the budget, the time past the context limit
    /// or the time left to move off a connection going away runs out. The gaps between words
    /// are 40 ms and more in the recordings measured. Held at 200 ms up to a GOAWAY's drain
    /// deadline, a stream in continuous speech (or speech over noise) for the whole drain time
    /// was cut where the deadline fell, inside a word, which both streams then lost.
    private func pauseNeeded(streamBytes: Int, sentSamples: Int, limit: Int, moveBy: UInt64?, now: UInt64) -> Int {
        let late = sentSamples - limit
        let left = moveBy.map { $0 > now ? $0 - now : 0 } ?? .max
        if streamBytes >= budgetBytes / 10 * 9 || late * 5 >= Self.lateSamples * 4 || left <= 2_000_000_000 {
            return SpeechAudio.samples(milliseconds: 40)
        }
        if streamBytes >= budgetBytes / 4 * 3 || late * 2 >= Self.lateSamples || left <= 5_000_000_000 {
            return SpeechAudio.samples(milliseconds: 100)
        }
        return Self.pauseSamples
    }

    private func reason(sentSamples: Int, limit: Int, moveBy: UInt64?, moveWhy: String, forced: Bool, streamBytes: Int) -> String {
        if moveBy != nil { return moveWhy }
        if sentSamples >= limit { return "the server context reached \(contextLimitMilliseconds / 1000) s" }
        if forced { return "the stream carried all of its \(budgetBytes / 1024) KiB budget (no pause before it)" }
        return "at a pause after \(streamBytes / 1024) KiB of its \(budgetBytes / 1024) KiB budget"
    }

    /// Sum of squares of some samples (their energy). Runs for every frame of a stream's last two
    /// thirds, so it works 8 samples at a time: a square of an Int16 is at most 2^30, so two of
    /// them fit a UInt32 lane, and pairs of squares are summed in UInt64 lanes (3x faster than
    /// one sample at a time, which the compiler did not vectorise).
    static func energy(_ chunk: [Int16]) -> Int64 { energy(chunk[...]) }

    static func energy(_ samples: ArraySlice<Int16>) -> Int64 {
        samples.withUnsafeBufferPointer { samples -> Int64 in
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
