import Testing
import Synchronization
@testable import SpeechClient
#if canImport(Glibc)
import Glibc
#endif

/// The worker's parts that stand alone: the numbering of server contexts, the rotation policy
/// and the audio pump, each without a client or a server.
@Suite struct WorkerPartsTests {
    // MARK: ContextNumbering

    @Test func segmentIdsAreGivenInOrderAcrossServerContextsAndWordTimesMoveByTheirStart() {
        var n = ContextNumbering()
        n.started(serverContext: "a", atSample: 0)
        #expect(n.userSegment(serverContext: "a", segment: 0) == 0)
        #expect(n.userSegment(serverContext: "a", segment: 1) == 1)
        #expect(n.userSegment(serverContext: "a", segment: 0) == 0)
        // A rotation 2.5 s in: the new server context numbers from 0, the user's ids go on.
        n.started(serverContext: "b", atSample: SpeechAudio.samples(milliseconds: 2_500))
        #expect(n.userSegment(serverContext: "b", segment: 0) == 2)
        let word = SLUWord(text: "hi", index: 0, startMilliseconds: 100, endMilliseconds: 300, confidence: 1)
        guard case .transcript(let moved) = n.userTimes(.transcript(word), serverContext: "b") else {
            Issue.record("not a transcript")
            return
        }
        #expect(moved.startMilliseconds == 2_600 && moved.endMilliseconds == 2_800)
        // Unknown times (Wyoming's) stay unknown.
        let unknown = SLUWord(text: "hi", index: 0, startMilliseconds: -1, endMilliseconds: -1, confidence: 1)
        guard case .transcript(let kept) = n.userTimes(.transcript(unknown), serverContext: "b") else { return }
        #expect(kept.startMilliseconds == -1)
        n.reset()
        #expect(n.userSegment(serverContext: "c", segment: 7) == 0)
    }

    /// A server's absurd word time (near Int32.max) on a stream starting 60 s in wrapped to a
    /// large negative time, which reads as "unknown": it saturates now.
    @Test func anAbsurdWordTimeSaturatesInsteadOfWrapping() {
        var n = ContextNumbering()
        n.started(serverContext: "late", atSample: SpeechAudio.samples(milliseconds: 60_000))
        let word = SLUWord(text: "x", index: 0, startMilliseconds: 2_147_483_000, endMilliseconds: .max, confidence: 1)
        guard case .transcript(let moved) = n.userTimes(.transcript(word), serverContext: "late") else {
            Issue.record("not a transcript")
            return
        }
        #expect(moved.startMilliseconds == .max && moved.endMilliseconds == .max)
    }

    @Test func aLostStreamsOpenSegmentIdsAreGivenBackOnlyWhenNothingLaterWasGiven() {
        var n = ContextNumbering()
        _ = n.userSegment(serverContext: "a", segment: 0)  // 0, final
        _ = n.userSegment(serverContext: "a", segment: 1)  // 1, open when "a" is lost
        n.forget(serverContext: "a")
        n.giveBack([1], latestOpenElsewhere: nil)
        #expect(n.nextUserSegment == 1)
        #expect(n.userSegment(serverContext: "a2", segment: 0) == 1)
        // Another stream holds a later open segment: the ids are not given twice.
        _ = n.userSegment(serverContext: "b", segment: 0)  // 2
        n.giveBack([1], latestOpenElsewhere: 2)
        #expect(n.nextUserSegment == 3)
    }

    // MARK: RotationPolicy

    @Test func aChunksEnergyIsTheSumOfItsSquares() {
        #expect(RotationPolicy.energy([]) == 0)
        #expect(RotationPolicy.energy([3, -4, .min, .max]) == 9 + 16 + 32_768 * 32_768 + 32_767 * 32_767)
        #expect(RotationPolicy.energy([Int16](repeating: .min, count: 1_600)) == 1_600 * 32_768 * 32_768)
        // Eight at a time, then the rest one by one: every length up to 40 against the plain
        // sum. Samples 0 and 1 share a lane and are both Int16.min (the largest pair, 2^31);
        // the rest mixes signs and extremes, the same on every run.
        for count in 0...40 {
            let chunk = (0..<count).map { i -> Int16 in
                if i < 2 || i % 5 == 0 { return .min }
                if i % 7 == 3 { return .max }
                return Int16(truncatingIfNeeded: i &* 7_919 &+ 13)
            }
            #expect(RotationPolicy.energy(chunk) == chunk.reduce(Int64(0)) { $0 + Int64($1) * Int64($1) })
        }
    }

    private let loud = [Int16](repeating: 8_000, count: 1_600)
    private let quiet = [Int16](repeating: 10, count: 1_600)

    @Test func pastHalfTheBudgetTheStreamMovesAtThe200msPauseAndNotInSpeech() {
        var p = RotationPolicy(budgetBytes: 100_000, contextLimitMilliseconds: 300_000)
        #expect(p.cut(in: loud, streamBytes: 10_000, sentSamples: 0, moveBy: nil, now: 0) == nil)
        // Past half: speech goes on on the same stream...
        for _ in 0..<5 { #expect(p.cut(in: loud, streamBytes: 60_000, sentSamples: 0, moveBy: nil, now: 0) == nil) }
        // ...and 200 ms of quiet (two 100 ms chunks) move it.
        #expect(p.cut(in: quiet, streamBytes: 60_000, sentSamples: 0, moveBy: nil, now: 0) == nil)
        let cut = p.cut(in: quiet, streamBytes: 60_000, sentSamples: 0, moveBy: nil, now: 0)
        #expect(cut?.why.contains("at a pause") == true)
        // Late in the pause: 150 ms into it (the soft end of a word may still be in its first 100 ms).
        #expect(cut?.offset == 800)
        p.reset()
        #expect(p.cut(in: quiet, streamBytes: 60_000, sentSamples: 0, moveBy: nil, now: 0) == nil)
    }

    @Test func theFullBudgetTheContextLimitAndTheDrainDeadlineMoveTheStreamAtOnce() {
        var p = RotationPolicy(budgetBytes: 100_000, contextLimitMilliseconds: 10_000)
        #expect(p.cut(in: loud, streamBytes: 99_000, sentSamples: 0, moveBy: nil, now: 0)?.why.contains("all of its") == true)
        let late = SpeechAudio.samples(milliseconds: 30_000)
        #expect(p.cut(in: loud, streamBytes: 0, sentSamples: late, moveBy: nil, now: 0)?.why.contains("reached 10 s") == true)
        #expect(p.cut(in: loud, streamBytes: 0, sentSamples: 0, moveBy: 5, now: 4) == nil)
        #expect(p.cut(in: loud, streamBytes: 0, sentSamples: 0, moveBy: 5, now: 5)?.why.contains("GOAWAY") == true)
    }

    /// Moving off a connection going away: 200 ms pauses at first, shorter ones as the drain
    /// deadline nears (under 5 s left: 100 ms; under 2 s: 40 ms, a gap between two words).
    /// Held at 200 ms, continuous speech was cut where the deadline fell, inside a word.
    @Test func theDrainDeadlineNearingTakesAShorterPause() {
        // 20 ms of speech, a 60 ms gap between words, 20 ms of speech.
        let gap = [Int16](repeating: 8_000, count: 320) + [Int16](repeating: 10, count: 960) + [Int16](repeating: 8_000, count: 320)
        let second: UInt64 = 1_000_000_000
        var p = RotationPolicy(budgetBytes: 100_000, contextLimitMilliseconds: 300_000)
        for left: UInt64 in [9, 6, 4] {
            #expect(p.cut(in: gap, streamBytes: 0, sentSamples: 0, moveBy: 100 * second, now: (100 - left) * second) == nil, "\(left) s left")
            p.reset()
        }
        let cut = p.cut(in: gap, streamBytes: 0, sentSamples: 0, moveBy: 100 * second, now: 99 * second)
        #expect(cut.map { (320..<1_280).contains($0.offset) } == true, "\(String(describing: cut))")
        #expect(cut?.why.contains("GOAWAY") == true)
    }

    @Test func aPauseIsAlsoQuietAgainstTheSpeechBeforeIt() {
        // A noisy room: nothing is under the absolute threshold, but 25 dB under the speech is a pause.
        var p = RotationPolicy(budgetBytes: 100_000, contextLimitMilliseconds: 300_000)
        let noise = [Int16](repeating: 400, count: 1_600)
        _ = p.cut(in: loud, streamBytes: 60_000, sentSamples: 0, moveBy: nil, now: 0)
        #expect(p.cut(in: noise, streamBytes: 60_000, sentSamples: 0, moveBy: nil, now: 0) == nil)
        #expect(p.cut(in: noise, streamBytes: 60_000, sentSamples: 0, moveBy: nil, now: 0) != nil)
    }

    /// White noise at about `rms`, the same on every run (a room's steady noise).
    private func roomNoise(_ count: Int, rms: Double, seed: UInt32 = 7) -> [Int16] {
        var state = seed
        let amplitude = rms * 3.0.squareRoot()  // uniform in [-a, a] has RMS a/sqrt(3)
        return (0..<count).map { _ in
            state = state &* 1_664_525 &+ 1_013_904_223
            return Int16(amplitude * (Double(state >> 8) / Double(1 << 24) * 2 - 1))
        }
    }

    /// A voice-like tone (a square wave at RMS 8,000, 400 Hz) over `noise`.
    private func speech(over noise: ArraySlice<Int16>) -> [Int16] {
        noise.enumerated().map { i, n in Int16(clamping: Int(n) + ((i / 20) % 2 == 0 ? 8_000 : -8_000)) }
    }

    /// Speech at 20 dB over a steady noise (a fan, a car): the noise between the words is neither
    /// under the absolute threshold nor 25 dB under the speech. Before, no pause was ever found
    /// there and every move fell where the budget ran out, inside a word; now the pause is quiet
    /// against the noise floor.
    @Test func aPauseIsQuietAgainstTheRoomsNoiseFloor() {
        var p = RotationPolicy(budgetBytes: 100_000, contextLimitMilliseconds: 300_000)
        let room = roomNoise(1_600 * 30, rms: 800)
        func piece(_ k: Int) -> ArraySlice<Int16> { room[(k * 1_600)..<((k + 1) * 1_600)] }
        // Speech from a third of the budget (the levels are learnt) past its half, with no pause.
        for k in 0..<20 {
            #expect(p.cut(in: speech(over: piece(k)), streamBytes: 40_000 + k * 1_000, sentSamples: 0, moveBy: nil, now: 0) == nil)
        }
        // Then the room alone, 200 ms: the stream moves there.
        #expect(p.cut(in: Array(piece(20)), streamBytes: 60_000, sentSamples: 0, moveBy: nil, now: 0) == nil)
        let cut = p.cut(in: Array(piece(21)), streamBytes: 62_000, sentSamples: 0, moveBy: nil, now: 0)
        #expect(cut?.why.contains("at a pause") == true)
        #expect(cut?.offset == 800)
        // A chunk ending in a few samples of silence (a chunk cut in two at a zero crossing)
        // before the pause: too short a frame to learn the floor from (it set it near 0, and the
        // room's noise was no pause for the rest of the stream).
        var q = RotationPolicy(budgetBytes: 100_000, contextLimitMilliseconds: 300_000)
        for k in 0..<19 { _ = q.cut(in: speech(over: piece(k)), streamBytes: 40_000 + k * 1_000, sentSamples: 0, moveBy: nil, now: 0) }
        #expect(q.cut(in: speech(over: piece(19)) + [Int16](repeating: 0, count: 10), streamBytes: 59_000, sentSamples: 0, moveBy: nil, now: 0) == nil)
        _ = q.cut(in: Array(piece(20)), streamBytes: 60_000, sentSamples: 0, moveBy: nil, now: 0)
        #expect(q.cut(in: Array(piece(21)), streamBytes: 62_000, sentSamples: 0, moveBy: nil, now: 0)?.why.contains("at a pause") == true)
        // A steady tone alone (the floor is not under the loudest sound) is no pause.
        var tone = RotationPolicy(budgetBytes: 100_000, contextLimitMilliseconds: 300_000)
        for _ in 0..<10 { #expect(tone.cut(in: loud, streamBytes: 60_000, sentSamples: 0, moveBy: nil, now: 0) == nil) }
    }

    /// Where a new stream resumes after a server ended an utterance and ignores the rest: in the
    /// first pause of 300 ms or more after the first speech, 100 ms into it; a shorter gap inside
    /// the speech and the silence before it are no end of speech. No such pause: nil.
    @Test func aResumeFallsInTheFirstLongPauseAfterTheSpeech() {
        let silence = [Int16](repeating: 0, count: 1_600)
        // 200 ms of silence, 300 ms of speech, a 200 ms gap, 200 ms of speech, 500 ms of pause,
        // 200 ms of speech; in 100 ms chunks, the first at sample 16,000 of the context.
        let chunks = [silence, silence, loud, loud, loud, silence, silence, loud, loud,
                      silence, silence, silence, silence, silence, loud, loud]
        #expect(RotationPolicy.resumePoint(in: chunks, from: 16_000) == 16_000 + 9 * 1_600 + 1_600)
        #expect(RotationPolicy.resumePoint(in: [silence, silence, silence], from: 0) == nil)
        #expect(RotationPolicy.resumePoint(in: [loud, silence, silence, loud], from: 0) == nil)
        #expect(RotationPolicy.resumePoint(in: [], from: 0) == nil)
        // A click (one loud 20 ms frame) before the speech is not its start: the pause after
        // the click is no end of speech.
        var click = silence
        for i in 0..<320 { click[i] = 20_000 }
        #expect(RotationPolicy.resumePoint(in: [click, silence, silence, silence, silence, loud, loud, silence, silence, silence, silence], from: 0)
                == 7 * 1_600 + 1_600)
    }

    /// The pause asked for shrinks as the budget runs out: 200 ms from half of it, 100 ms from
    /// three quarters, 40 ms (a gap between two words) from nine tenths; the cut falls in the
    /// middle of the gap, inside the chunk.
    @Test func thePauseAskedForShrinksAsTheBudgetRunsOut() {
        // 100 ms: 40 ms of speech, a 40 ms gap, 20 ms of speech.
        let gapped = (0..<1_600).map { i -> Int16 in (640..<1_280).contains(i) ? 10 : ((i / 20) % 2 == 0 ? 8_000 : -8_000) }
        for (bytes, expected) in [(60_000, nil), (80_000, nil), (92_000, 960)] as [(Int, Int?)] {
            var p = RotationPolicy(budgetBytes: 100_000, contextLimitMilliseconds: 300_000)
            _ = p.cut(in: loud, streamBytes: bytes - 4_000, sentSamples: 0, moveBy: nil, now: 0)
            let cut = p.cut(in: gapped, streamBytes: bytes, sentSamples: 0, moveBy: nil, now: 0)
            #expect(cut?.offset == expected, "at \(bytes) bytes: \(String(describing: cut))")
        }
        // 100 ms of quiet from three quarters, 40 ms of it in one chunk and 60 in the next: the
        // cut is in its middle, 10 ms into the second chunk.
        var p = RotationPolicy(budgetBytes: 100_000, contextLimitMilliseconds: 300_000)
        let endsQuiet = (0..<1_600).map { i -> Int16 in i >= 960 ? 10 : 8_000 }
        let startsQuiet = (0..<1_600).map { i -> Int16 in i < 960 ? 10 : 8_000 }
        #expect(p.cut(in: endsQuiet, streamBytes: 80_000, sentSamples: 0, moveBy: nil, now: 0) == nil)
        #expect(p.cut(in: startsQuiet, streamBytes: 83_000, sentSamples: 0, moveBy: nil, now: 0)?.offset == 160)
        // Past the context limit the same shrinking, on the time left before the forced move.
        var late = RotationPolicy(budgetBytes: 100_000, contextLimitMilliseconds: 10_000)
        let pastLimit = SpeechAudio.samples(milliseconds: 10_000 + 17_000)
        _ = late.cut(in: loud, streamBytes: 0, sentSamples: pastLimit, moveBy: nil, now: 0)
        #expect(late.cut(in: gapped, streamBytes: 0, sentSamples: pastLimit, moveBy: nil, now: 0)?.offset == 960)
    }

    /// Forced at the budget with no pause, the cut falls in a markedly quieter frame of the chunk
    /// if it has one, within what the budget still takes; in steady sound, where the chunk starts.
    @Test func aForcedCutFallsInTheQuietestFrameWithinTheBudget() {
        var p = RotationPolicy(budgetBytes: 100_000, contextLimitMilliseconds: 300_000)
        let softer = (0..<1_600).map { i -> Int16 in (640..<960).contains(i) ? 5_000 : 8_000 }
        let cut = p.cut(in: softer, streamBytes: 97_500, sentSamples: 0, moveBy: nil, now: 0)
        #expect(cut == RotationPolicy.Cut(offset: 800, why: "the stream carried all of its 97 KiB budget (no pause before it)"))
        // 1,000 bytes left take 492 samples: the softer frame is past them.
        p.reset()
        #expect(p.cut(in: softer, streamBytes: 99_000, sentSamples: 0, moveBy: nil, now: 0)?.offset == 0)
        p.reset()
        #expect(p.cut(in: loud, streamBytes: 97_500, sentSamples: 0, moveBy: nil, now: 0)?.offset == 0)
        // A pause past what the budget still takes is no place for the cut: it is forced, within
        // what fits (it was cut at the budget's last sample, in the speech, "at a pause").
        p.reset()
        let gapLate = (0..<1_600).map { i -> Int16 in i >= 960 ? 10 : 8_000 }
        #expect(p.cut(in: gapLate, streamBytes: 99_000, sentSamples: 0, moveBy: nil, now: 0)
                == RotationPolicy.Cut(offset: 0, why: "the stream carried all of its 97 KiB budget (no pause before it)"))
    }

    /// A cut is 0 or inside the chunk, never its whole length (the callers split at it without
    /// further checks): chunks of every size from empty to past a chunk, forced by the budget, by
    /// the time past the context limit, and at a 40 ms pause.
    @Test func aCutIsAtTheStartOrInsideTheChunk() {
        for count in [0, 1, 2, 159, 160, 319, 320, 321, 639, 640, 800, 1_599, 1_600, 2_000] {
            let loudThenQuiet = (0..<count).map { i -> Int16 in i < count / 3 ? 8_000 : 10 }
            for (bytes, sent) in [(99_990, 0), (99_000, 0), (92_000, 0), (0, SpeechAudio.samples(milliseconds: 40_000))] {
                for chunk in [loudThenQuiet, [Int16](repeating: 8_000, count: count)] {
                    var p = RotationPolicy(budgetBytes: 100_000, contextLimitMilliseconds: 10_000)
                    _ = p.cut(in: loud, streamBytes: max(0, bytes - 3_300), sentSamples: sent, moveBy: nil, now: 0)
                    if let cut = p.cut(in: chunk, streamBytes: bytes, sentSamples: sent, moveBy: nil, now: 0) {
                        #expect(cut.offset == 0 || cut.offset < count, "\(count) samples at \(bytes) bytes: \(cut)")
                    }
                }
            }
        }
    }

    // MARK: AudioPump

    /// Reads until the source ends (at most `reads` reads): every chunk, the last ones included.
    /// Nil when it did not end; a read's error is thrown.
    private func readToEnd(_ pump: AudioPump, reads: Int = 200) throws -> [[Int16]]? {
        var chunks: [[Int16]] = []
        for _ in 0..<reads {
            switch pump.read() {
            case .chunks(let c): chunks += c
            case .ended(let last): return chunks + last
            case .failed(let e): throw e
            }
        }
        return nil
    }

    /// A pipe holding `bytes`, its writing end closed; returns the reading end.
    private func pipeHolding(_ bytes: [UInt8]) -> Int32 {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        _ = bytes.withUnsafeBytes { write(fds[1], $0.baseAddress, $0.count) }
        close(fds[1])
        return fds[0]
    }

    private func wavFile(seconds: Double, rate: UInt32 = 16_000) -> String {
        let frames = Int(Double(rate) * seconds)
        var data: [UInt8] = []
        for i in 0..<frames { data += AudioFixtures.le16(UInt16(bitPattern: Int16(truncatingIfNeeded: (i % 200) * 100))) }
        return AudioFixtures.writeTemp(AudioFixtures.wav(rate: rate, data: data), name: "pump.wav")
    }

    @Test func aFileIsReadIntoChunksThenItsTailAndEachContextReadsItFromItsStart() throws {
        let path = wavFile(seconds: 0.25, rate: 8_000)
        let pump = AudioPump(input: .file(path: path), chunkMilliseconds: 100, makeSource: Client.realSource)
        for _ in 0..<2 {
            try pump.openForContext(log: { level, m in if level == .warning { Issue.record("unexpected warning \(m)") } })
            #expect(pump.isOpen && pump.waitsForServer)
            let read = try readToEnd(pump, reads: 20)
            #expect(read != nil)
            let chunks = read ?? []
            #expect(chunks.dropLast().allSatisfy { $0.count == 1_600 })
            // 0.25 s at 8 kHz is 4,000 samples at 16 kHz, whole (the resampler's tail included).
            #expect(chunks.reduce(0) { $0 + $1.count } == 4_000)
            pump.endContext()
            #expect(!pump.isOpen)
        }
    }

    /// A 16-bit file at 16 kHz mono goes out sample for sample (no round trip through Float),
    /// and a 16-bit stereo file gives what the Float path gives.
    @Test func sixteenBitFilesAreHandedOverAsTheyAre() throws {
        let samples: [Int16] = (0..<4_000).map { Int16(truncatingIfNeeded: $0 &* 7_919) }
        let mono = AudioFixtures.writeTemp(AudioFixtures.wav(data: samples.flatMap { AudioFixtures.le16(UInt16(bitPattern: $0)) }), name: "mono.wav")
        func readAll(_ path: String) throws -> [Int16]? {
            let pump = AudioPump(input: .file(path: path), chunkMilliseconds: 100, makeSource: Client.realSource)
            try pump.openForContext(log: { _, _ in })
            return try readToEnd(pump).map { Array($0.joined()) }
        }
        #expect(try readAll(mono) == samples)
        let stereoData = samples.flatMap { AudioFixtures.le16(UInt16(bitPattern: $0)) + AudioFixtures.le16(UInt16(bitPattern: $0 / 2)) }
        let stereo = AudioFixtures.writeTemp(AudioFixtures.wav(channels: 2, data: stereoData), name: "stereo.wav")
        let source = WAVFileSource(path: stereo)
        try source.open()
        #expect(source.deliversInt16)
        let floats = try AudioFixtures.readAll(source, block: 1_000)
        source.close()
        #expect(try readAll(stereo) == AudioConverter(input: AudioFormat(sampleRate: 16_000, channels: 2)).process(floats))
    }

    @Test func aFileCutShortIsStreamedAndTheLossSaid() throws {
        let bytes = AudioFixtures.wav(data: [UInt8](repeating: 0, count: 3_200), declaredDataSize: 32_000)
        let path = AudioFixtures.writeTemp(bytes, name: "short.wav")
        let pump = AudioPump(input: .file(path: path), chunkMilliseconds: 100, makeSource: Client.realSource)
        let warnings = Mutex<[String]>([])
        try pump.openForContext(log: { level, m in if level == .warning { warnings.withLock { $0.append(m) } } })
        #expect(warnings.withLock { $0.count } == 1)
        #expect(warnings.withLock { $0.first }?.contains("its last 0.9 s are missing") == true)
    }

    /// A WAV stream's format arrives with its first block: that block is converted with it.
    @Test func aDescriptorsWAVFormatAppliesFromItsFirstBlock() throws {
        let frames = 2_000  // 0.25 s at 8 kHz: 4,000 samples at 16 kHz
        var data: [UInt8] = []
        for i in 0..<frames { data += AudioFixtures.le16(UInt16(bitPattern: Int16(truncatingIfNeeded: (i % 80) * 300))) }
        let fd = pipeHolding(AudioFixtures.wav(rate: 8_000, data: data))
        defer { close(fd) }
        let pump = AudioPump(input: .descriptor(fd: fd, sampleRate: 0, channels: 0), chunkMilliseconds: 100,
                             makeSource: Client.realSource)
        try pump.openForContext(log: { _, _ in })
        #expect(try readToEnd(pump)?.reduce(0) { $0 + $1.count } == 4_000)
    }

    @Test func anEndedDescriptorCannotBeReadByALaterContextAndSaysWhy() throws {
        let fd = pipeHolding([Int16](repeating: 100, count: 1_600).flatMap { AudioFixtures.le16(UInt16(bitPattern: $0)) })
        defer { close(fd) }
        let pump = AudioPump(input: .descriptor(fd: fd, sampleRate: 16_000, channels: 1), chunkMilliseconds: 100,
                             makeSource: Client.realSource)
        try pump.openForContext(log: { _, _ in })
        #expect(try readToEnd(pump)?.reduce(0) { $0 + $1.count } == 1_600)
        pump.endContext()
        let error = #expect(throws: SpeechClientError.self) { try pump.openForContext(log: { _, _ in }) }
        #expect(error?.message.contains("the stream has ended; it cannot be read again") == true)
    }

    /// A microphone that fails (unplugged) fails its context; the next start opens the device
    /// again. It stayed open on its old error, so every later start ended at once with it.
    @Test func aMicrophoneThatFailedIsOpenedAgainByTheNextStart() throws {
        final class Unplugged: AudioSource, @unchecked Sendable {
            let opens = Locked(0)
            let closed = Locked(false)
            var format: AudioFormat { .speech }
            func open() throws(SpeechClientError) {
                opens.withLock { $0 += 1 }
                closed.withLock { $0 = false }
            }
            func read(maxFrames: Int) throws(SpeechClientError) -> [Float]? {
                if opens.withLock({ $0 }) == 1 { throw SpeechClientError(.audio, "the device was unplugged") }
                usleep(20_000)
                if closed.withLock({ $0 }) { return nil }  // as a device's close ends its read
                return [Float](repeating: 0.1, count: min(maxFrames, 320))
            }
            func close() { closed.withLock { $0 = true } }
        }
        let device = Unplugged()
        let pump = AudioPump(input: .microphone(device: "usb"), chunkMilliseconds: 100,
                             makeSource: { _ in CaptureBuffer(device) })
        try pump.openForContext(log: { _, _ in })
        var failure: SpeechClientError?
        let until = Clock.monotonicNanos() + 5_000_000_000
        while failure == nil && Clock.monotonicNanos() < until {
            if case .failed(let error) = pump.read() { failure = error } else { usleep(10_000) }
        }
        #expect(failure?.message == "the device was unplugged")
        pump.endContext(failed: failure?.message)
        try pump.openForContext(log: { _, _ in })
        #expect(device.opens.withLock { $0 } == 2)
        var samples = 0
        while samples == 0 && Clock.monotonicNanos() < until {
            if case .chunks(let chunks) = pump.read() { samples += chunks.sampleCount } else { break }
            usleep(20_000)
        }
        #expect(samples > 0)
        pump.close()
    }

    /// A microphone that fails while no context uses it (unplugged between contexts, plugged
    /// in again): the next start opens it again. Its capture had ended on the error, which the
    /// next context then met at once (failed with "unplugged"); only the start after it reopened.
    @Test func aMicrophoneThatFailedWhileIdleIsOpenedAgainByTheNextStart() throws {
        final class UnpluggedWhileIdle: AudioSource, @unchecked Sendable {
            let opens = Locked(0)
            let unplugged = Locked(false)
            let closed = Locked(false)
            var format: AudioFormat { .speech }
            func open() throws(SpeechClientError) {
                opens.withLock { $0 += 1 }
                closed.withLock { $0 = false }
                unplugged.withLock { $0 = false }  // plugged in again
            }
            func read(maxFrames: Int) throws(SpeechClientError) -> [Float]? {
                if unplugged.withLock({ $0 }) { throw SpeechClientError(.audio, "the device was unplugged") }
                usleep(20_000)
                if closed.withLock({ $0 }) { return nil }
                return [Float](repeating: 0.1, count: min(maxFrames, 320))
            }
            func close() { closed.withLock { $0 = true } }
        }
        let device = UnpluggedWhileIdle()
        let buffer = CaptureBuffer(device)
        let pump = AudioPump(input: .microphone(device: "usb"), chunkMilliseconds: 100, makeSource: { _ in buffer })
        try pump.openForContext(log: { _, _ in })
        pump.endContext()  // idle: the device stays open, read every 100 ms
        let ended = OneShot<Bool>()
        if buffer.notifyWhenAvailable(samples: .max, { ended.set(true) }) {  // told when the capture ends
            device.unplugged.withLock { $0 = true }
            _ = ended.wait(untilMonotonicNanos: Clock.monotonicNanos() + 5_000_000_000)
        }
        #expect(buffer.hasEnded)
        let until = Clock.monotonicNanos() + 5_000_000_000
        try pump.openForContext(log: { _, _ in })
        var samples = 0
        var failure: SpeechClientError?
        while samples == 0 && failure == nil && Clock.monotonicNanos() < until {
            switch pump.read() {
            case .chunks(let chunks): samples += chunks.sampleCount
            case .failed(let error): failure = error
            default: break
            }
            usleep(20_000)
        }
        #expect(failure == nil && samples > 0, "\(String(describing: failure))")
        #expect(device.opens.withLock { $0 } == 2)
        pump.close()
    }

    // MARK: ActivationBacklog

    @Test func aWaitingActivationKeepsItsAudioBoundedAndSaysTheFirstDropOnce() {
        var b = ActivationBacklog()
        #expect(!b.isWaiting)
        b.wait()
        #expect(b.isWaiting)
        // Bounded in audio, whatever the chunk length: 20 ms chunks (a bound in chunks held 12 s).
        let chunk = 320, fits = ActivationBacklog.maxSamples / chunk
        var said = 0
        for i in 0..<(fits + 5) where b.append([Int16](repeating: Int16(truncatingIfNeeded: i), count: chunk)) { said += 1 }
        #expect(said == 1)
        #expect(b.heldSamples == fits * chunk)
        b.close()
        let taken = b.take()
        let chunks = taken.chunks
        #expect(taken.closed && chunks.count == fits && taken.continuing == nil)
        // The oldest went: the newest are kept, in order.
        #expect(chunks.first?.first == 5 && chunks.last?.first == Int16(truncatingIfNeeded: fits + 4))
        #expect(!b.isWaiting)
        b.wait()
        #expect(b.take().closed == false)
    }

    /// Two activations while the previous context finishes: each is taken as its own context,
    /// in order, with its own audio and end. They were one (joined, the silence between cut
    /// out, its words' times early by it, no stop between them).
    @Test func activationsThatWaitAreTakenOneAtATime() {
        var b = ActivationBacklog()
        b.wait()
        _ = b.append([1])
        _ = b.append([2])
        b.close()
        b.wait()
        _ = b.append([3])
        #expect(b.count == 2 && b.heldSamples == 3)
        let first = b.take()
        #expect(first.chunks == [[1], [2]] && first.closed)
        #expect(b.isWaiting)
        _ = b.append([4])  // the second is still going on
        let second = b.take()
        #expect(second.chunks == [[3], [4]] && !second.closed)
        #expect(!b.isWaiting && b.heldSamples == 0)
        // An ended activation whose audio was all dropped for room is not kept: it has nothing.
        b.wait()
        _ = b.append([Int16](repeating: 7, count: 100))
        b.close()
        b.wait()
        _ = b.append([Int16](repeating: 8, count: ActivationBacklog.maxSamples))
        #expect(b.count == 1)
        #expect(b.take().chunks.first?.first == 8)
    }

    // MARK: WakeListener

    @Test func anUnreachableWakeServiceIsANamedErrorAndIsNotRetriedBeforeItsTime() throws {
        let events = Mutex<Int>(0)
        let w = WakeListener(server: try ServerURL(parsing: "wyoming://127.0.0.1:1"), name: "hey_jarvis", connectTimeoutMilliseconds: 500,
                             applicationDriven: false, cancellation: Cancellation()) { _, _ in events.withLock { $0 += 1 } }
        do throws(SpeechClientError) {
            _ = try w.open(origin: 0)
            Issue.record("connected to port 1")
        } catch {
            #expect(error.code == .network && error.message.contains("127.0.0.1:1"), "\(error)")
        }
        #expect(!w.isConnected)
        let before = w.generation
        w.lost()
        #expect(w.generation == before + 1)
        // Lost a moment ago: the next chunks are not heard, and no connect is tried (it would block).
        guard case .stillDown(let line) = w.hear([0, 0], at: 0) else { Issue.record("not still down"); return }
        #expect(line.isEmpty)
        #expect(events.withLock { $0 } == 0)
    }

    /// A lost service that went silent (it accepts and never answers: a hung process, a host
    /// dropping packets) is tried again off the worker: a chunk heard meanwhile returns at once,
    /// and the probe's failure comes back as an event. The worker connected itself, and each
    /// try held it (the open context's audio, the application's stop) for the connect timeout.
    /// Once a probe finds the service answering, the next chunk connects.
    @Test func aLostWakeServiceIsProbedOffTheWorker() throws {
        /// A listener of the scripted service `scenario`, lost a moment ago (retried at once), and
        /// the answers of its probes.
        func lostListener(_ scenario: String) throws -> (WakeListener, Locked<[SpeechClientError?]>, PeerProcess) {
            let peer = try PeerProcess(script: "wyoming_fault_server.py", arguments: ["--scenario", scenario])
            let probed = Locked<[SpeechClientError?]>([])
            let w = WakeListener(server: try ServerURL(parsing: "wyoming://127.0.0.1:\(peer.port)"), name: nil,
                                 connectTimeoutMilliseconds: 1_500, applicationDriven: false, cancellation: Cancellation(),
                                 retryNanos: 0) { event, _ in
                if case .probed(let failure) = event { probed.withLock { $0.append(failure) } }
            }
            w.lost()
            return (w, probed, peer)
        }
        /// Waits up to 5 s for a probe's answer.
        func firstAnswer(_ probed: Locked<[SpeechClientError?]>) -> [SpeechClientError?] {
            let deadline = Clock.monotonicNanos() + 5_000_000_000
            while probed.withLock({ $0.isEmpty }) && Clock.monotonicNanos() < deadline { usleep(10_000) }
            return probed.withLock { $0 }
        }
        let (w, probed, silent) = try lostListener("NoInfo")
        defer { silent.stop() }
        let t0 = Clock.monotonicNanos()
        guard case .stillDown = w.hear([0, 0], at: 0) else { Issue.record("not still down"); return }
        _ = w.hear([0, 0], at: 2)  // a probe is running: not another
        #expect(Clock.monotonicNanos() - t0 < 500_000_000, "a chunk waited \((Clock.monotonicNanos() - t0) / 1_000_000) ms for the service")
        let answers = firstAnswer(probed)
        #expect(answers.count == 1 && answers.first??.code == .timeout, "\(answers)")
        #expect(w.probed(answers.first ?? nil).contains("still unavailable"))

        // A service that answers: the probe says so, and the next chunk connects.
        let (v, back, service) = try lostListener("WakeLongName")
        defer { service.stop() }
        _ = v.hear([0, 0], at: 0)
        let answered = firstAnswer(back)
        #expect(answered.count == 1 && answered[0] == nil, "\(answered)")
        _ = v.probed(nil)
        guard case .back = v.hear([0, 0], at: 4) else { Issue.record("not connected after the probe answered"); return }
        #expect(v.isConnected)
        v.close()
    }
}
