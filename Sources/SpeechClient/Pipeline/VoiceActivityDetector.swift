#if canImport(Glibc)
import Glibc
#endif

/// The detector's tunables, named after the Speechly browser client's VAD options.
public struct VADSettings: Sendable, Equatable {
    /// A frame is loud when its energy above `highPassHertz` is this far above the learnt noise
    /// floor ...
    public var snrDecibels = 4.0
    /// ... and above this absolute level (dBFS, of that same filtered energy): quieter audio is
    /// never speech.
    public var noiseGateDecibels = -50.0
    /// How fast the noise floor follows the audio while nobody speaks.
    public var noiseLearnHalftimeMilliseconds = 400
    /// The loud-frame ratio is taken over this many 20 ms frames.
    public var windowFrames = 5
    /// Speech starts when at least this share of the window is loud ...
    public var activationRatio = 0.6
    /// ... and ends when at most this share is, for `holdMilliseconds` (the gaps between
    /// syllables and words are shorter).
    public var releaseRatio = 0.2
    public var holdMilliseconds = 300

    public init() {}

    /// Frames are 20 ms of 16 kHz audio.
    public static let frameSamples = 320
    /// The detector weighs only the audio above this frequency: rumble, traffic, mains hum and
    /// the low end of room and fan noise carry most of their power below the voice, and their
    /// slow swings would otherwise pass for syllables (measured in Tests/e2e: brown noise at
    /// 20 dB SNR had 51 % precision without it).
    static let highPassHertz = 200.0
}

/// A second-order Butterworth high-pass at 16 kHz (a biquad, direct form I), and the energy of
/// what it lets through. Its state runs on from frame to frame, so chunk boundaries change
/// nothing.
struct HighPass: Sendable {
    private let b0: Double, b1: Double, b2: Double, a1: Double, a2: Double
    private var x1 = 0.0, x2 = 0.0
    /// The last two outputs (readable for the tests: exactly zero once digital silence settles).
    private(set) var y1 = 0.0, y2 = 0.0

    init(cutoffHertz: Double, sampleRate: Double = Double(SpeechAudio.sampleRate)) {
        let w0 = 2 * Double.pi * cutoffHertz / sampleRate
        let alpha = sin(w0) / 2.0.squareRoot()  // Q = 1/sqrt(2)
        let a0 = 1 + alpha
        b0 = (1 + cos(w0)) / 2 / a0
        b1 = -(1 + cos(w0)) / a0
        b2 = b0
        a1 = -2 * cos(w0) / a0
        a2 = (1 - alpha) / a0
    }

    /// Filters the samples and returns their energy in dBFS (-100 for silence), as `decibels`.
    mutating func decibels(_ samples: ArraySlice<Int16>) -> Double {
        guard !samples.isEmpty else { return -100 }
        var sum = 0.0
        for s in samples {
            let x = Double(s)
            var y = b0 * x + b1 * x1 + b2 * x2 - a1 * y1 - a2 * y2
            if abs(y) < 1e-9 { y = 0 }  // after digital silence: no decay into slow subnormals
            x2 = x1; x1 = x
            y2 = y1; y1 = y
            sum += y * y
        }
        return VoiceActivityDetector.decibels(sumOfSquares: sum, count: samples.count)
    }
}

/// An adaptive energy detector: frame energy against a noise floor learnt while nobody speaks,
/// with hysteresis over a short window. Cheap enough for every chunk of an all-day microphone
/// (one pass over the samples, a logarithm per 20 ms frame). Works on 16 kHz mono PCM16.
public struct VoiceActivityDetector: Sendable {
    public let settings: VADSettings
    public private(set) var isSpeech = false
    /// The learnt noise floor in dBFS (nil before the first frame).
    public private(set) var noiseFloorDecibels: Double?
    /// Samples consumed so far (the position of the next frame).
    public private(set) var position = 0

    private var pending: [Int16] = []
    private var highPass = HighPass(cutoffHertz: VADSettings.highPassHertz)
    private var window: [Bool]
    private var windowNext = 0
    private var loudInWindow = 0
    private let learnRate: Double
    private let slowLearnRate: Double
    /// Where the window last fell to the release ratio while in speech.
    private var quietSince: Int?
    /// The quietest frame of the current block of frames: the noise is never louder than that.
    private var blockMinimum = Double.infinity
    private var blockFrames = 0
    static let blockFrameCount = 75  // 1.5 s: longer than the pauses of speech are apart

    public init(settings: VADSettings = VADSettings()) {
        self.settings = settings
        window = [Bool](repeating: false, count: max(1, settings.windowFrames))
        let frameMs = Double(VADSettings.frameSamples) / Double(SpeechAudio.samplesPerMillisecond)
        learnRate = 1 - pow(0.5, frameMs / Double(max(1, settings.noiseLearnHalftimeMilliseconds)))
        // During speech the floor still moves, 20 times slower: a fan switched on while someone
        // talks is absorbed after a few seconds instead of holding the detector open for good.
        slowLearnRate = 1 - pow(0.5, frameMs / Double(max(1, settings.noiseLearnHalftimeMilliseconds * 20)))
    }

    /// A change of state, at the sample where the frame that caused it starts.
    public struct Transition: Sendable, Equatable {
        public var isSpeech: Bool
        public var sample: Int
    }

    /// Energy of samples in dBFS (-100 for silence).
    public static func decibels<C: Collection>(_ samples: C) -> Double where C.Element == Int16 {
        guard !samples.isEmpty else { return -100 }
        var sum = 0.0
        for s in samples { let v = Double(s); sum += v * v }
        return decibels(sumOfSquares: sum, count: samples.count)
    }

    /// dBFS of `count` samples whose squares add up to `sumOfSquares` (-100 for silence).
    static func decibels(sumOfSquares: Double, count: Int) -> Double {
        let mean = sumOfSquares / Double(count) / (32768.0 * 32768.0)
        return max(-100, 10 * log10(mean + 1e-10))
    }

    /// Feeds samples; returns the state changes they caused, in order.
    public mutating func process(_ samples: [Int16]) -> [Transition] {
        var out: [Transition] = []
        var start = 0
        let n = VADSettings.frameSamples
        if !pending.isEmpty {
            let take = min(n - pending.count, samples.count)
            pending.append(contentsOf: samples[0..<take])
            start = take
            if pending.count == n {
                if let t = frame(pending[...]) { out.append(t) }
                pending.removeAll(keepingCapacity: true)
            }
        }
        while samples.count - start >= n {
            if let t = frame(samples[start..<start + n]) { out.append(t) }
            start += n
        }
        if start < samples.count { pending.append(contentsOf: samples[start...]) }
        return out
    }

    private mutating func frame(_ samples: ArraySlice<Int16>) -> Transition? {
        let energy = highPass.decibels(samples)
        let floor = noiseFloorDecibels ?? energy
        let loud = energy > settings.noiseGateDecibels && energy > floor + settings.snrDecibels
        // The floor follows quiet frames (and any quieter one) at the learning rate; loud frames
        // move it only slowly. Digital silence counts as 20 dB under the gate, so a run of zeros
        // cannot drag the floor so low that ordinary room noise looks like speech afterwards.
        let level = max(energy, settings.noiseGateDecibels - 20)
        let rate = level < floor || !(isSpeech || loud) ? learnRate : slowLearnRate
        var newFloor = noiseFloorDecibels.map { $0 + (level - $0) * rate } ?? level
        // Speech has pauses; steady noise (a fan switched on) has none. When even the quietest
        // frame of the last 1.5 s is above the floor, the floor rises to it.
        blockMinimum = min(blockMinimum, level)
        blockFrames += 1
        if blockFrames == Self.blockFrameCount {
            newFloor = max(newFloor, blockMinimum)
            blockMinimum = .infinity
            blockFrames = 0
        }
        noiseFloorDecibels = newFloor
        if window[windowNext] { loudInWindow -= 1 }
        window[windowNext] = loud
        if loud { loudInWindow += 1 }
        windowNext = (windowNext + 1) % window.count
        let at = position
        position += samples.count
        let ratio = Double(loudInWindow) / Double(window.count)
        if !isSpeech && ratio >= settings.activationRatio {
            isSpeech = true
            return Transition(isSpeech: true, sample: at)
        }
        if isSpeech && ratio <= settings.releaseRatio {
            let since = quietSince ?? at
            quietSince = since
            if position - since >= SpeechAudio.samples(milliseconds: settings.holdMilliseconds) {
                // Reported where the quiet began: the true end of the speech.
                isSpeech = false
                quietSince = nil
                return Transition(isSpeech: false, sample: since)
            }
        } else {
            quietSince = nil
        }
        return nil
    }
}
