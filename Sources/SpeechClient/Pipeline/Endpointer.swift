/// Hands-free endpointing: decides from the VAD when an activation (a context) opens and closes.
/// Fed 16 kHz chunks in order; answers with what the worker must do. Pure: no I/O, no clock
/// (time is counted in samples, so a file is endpointed the same at any speed).
///
/// While inactive, the last `preRoll` samples are kept; speech opens an activation, and the
/// pre-roll goes out first so the first word is not clipped. An activation closes after
/// `trailingSilence` samples without speech once it is `minActivation` long, or at
/// `maxActivation` with a timeout event.
public struct Endpointer: Sendable {
    public enum Action: Sendable, Equatable {
        case event(ListenEvent, sample: Int)
        /// Open a context: the audio actions that follow belong to it.
        case open
        case audio([Int16])
        /// Stop the context opened last.
        case close
    }

    public struct Settings: Sendable {
        public var vad = VADSettings()
        public var preRollSamples = SpeechAudio.samples(milliseconds: 300)
        public var trailingSilenceSamples = SpeechAudio.samples(milliseconds: 1_000)
        public var minActivationSamples = SpeechAudio.samples(milliseconds: 500)
        public var maxActivationSamples = SpeechAudio.samples(milliseconds: 15_000)
        /// Voice mode reports activate/deactivate here; wakeword mode reports them itself.
        public var announcesActivation = true
        /// Speech opens an activation (voice mode, and wakeword mode matching the transcript);
        /// with a wake-word service only its detections do (`activate(from:)`).
        public var opensOnSpeech = true
        /// Audio kept before a detection, beyond the pre-roll: the service hears the wake word
        /// a little after it ends, and what was said right after it belongs to the context.
        public static let detectionLatencySamples = SpeechAudio.samples(milliseconds: 2_000)
        public init() {}

        /// The settings a client's options describe (milliseconds of 16 kHz audio as samples).
        public init(options: ClientOptions) {
            vad = options.vad
            preRollSamples = SpeechAudio.samples(milliseconds: options.preRollMilliseconds)
            trailingSilenceSamples = SpeechAudio.samples(milliseconds: options.trailingSilenceMilliseconds)
            minActivationSamples = SpeechAudio.samples(milliseconds: options.minActivationMilliseconds)
            maxActivationSamples = SpeechAudio.samples(milliseconds: options.maxActivationMilliseconds)
            announcesActivation = options.activation != .wakeword
            opensOnSpeech = options.wakeService == nil || options.activation != .wakeword
        }
    }

    public let settings: Settings
    public private(set) var vad: VoiceActivityDetector
    /// Samples processed so far.
    public private(set) var position = 0
    private var preRoll: [[Int16]] = []
    private var preRollCount = 0
    /// `notBefore`: the trailing silence counts from there at the earliest (a detection's
    /// activation: where it was detected; one speech opened: its start).
    private var activation: (start: Int, lastSpeech: Int, notBefore: Int)?
    /// After an abandoned activation: no new one until the detector hears the speech end.
    private var waitForSilence = false

    public var isActive: Bool { activation != nil }

    public init(settings: Settings) {
        self.settings = settings
        vad = VoiceActivityDetector(settings: settings.vad)
    }

    public mutating func process(_ chunk: [Int16]) -> [Action] {
        let at = position
        position += chunk.count
        let end = position
        var out: [Action] = []
        var speechAt = at
        var silenceAt: Int?
        var speechBegan = false
        for t in vad.process(chunk) {
            out.append(.event(t.isSpeech ? .speech : .silence, sample: t.sample))
            if t.isSpeech && !speechBegan { speechAt = t.sample; speechBegan = true }
            if !t.isSpeech { silenceAt = t.sample }
        }
        // Speech in this chunk: at its end, or begun within it (a short burst).
        let spoke = vad.isSpeech || speechBegan
        if waitForSilence && !vad.isSpeech { waitForSilence = false }
        if var a = activation {
            out.append(.audio(chunk))
            // The trailing silence counts from where the speech ended (the detector reports
            // that position after its hold time), never from before `notBefore`: a wake word's
            // end, which the detection follows, moved it back before the detection, and the
            // command said after the chime was cut off.
            if vad.isSpeech {
                a.lastSpeech = end
            } else if let s = silenceAt {
                a.lastSpeech = max(a.notBefore, s)
            }
            activation = a
            if end - a.start >= settings.maxActivationSamples {
                out.append(.event(.timeout, sample: end))
                out += finish()
            } else if !vad.isSpeech, end - a.lastSpeech >= settings.trailingSilenceSamples,
                      end - a.start >= settings.minActivationSamples {
                out += finish()
            }
        } else if settings.opensOnSpeech && spoke && !waitForSilence {
            activation = (start: at - preRollCount, lastSpeech: end, notBefore: at - preRollCount)
            if settings.announcesActivation { out.append(.event(.activate, sample: speechAt)) }
            out.append(.open)
            for c in preRoll { out.append(.audio(c)) }
            preRoll.removeAll()
            preRollCount = 0
            out.append(.audio(chunk))
        } else {
            preRoll.append(chunk)
            preRollCount += chunk.count
            let keep = settings.preRollSamples + (settings.opensOnSpeech ? 0 : Settings.detectionLatencySamples)
            while let first = preRoll.first, preRollCount - first.count >= keep {
                preRoll.removeFirst()
                preRollCount -= first.count
            }
        }
        return out
    }

    /// Opens an activation for a wake word detected at `sample` (nil: now): the context gets
    /// the audio from the pre-roll before that point on (as much as is kept), and the trailing
    /// silence counts from now, since the speech is expected after the wake word.
    public mutating func activate(from sample: Int?) -> [Action] {
        guard activation == nil else { return [] }
        let first = position - preRollCount
        let start = min(position, max(first, (sample ?? position) - settings.preRollSamples))
        var out: [Action] = [.open]
        var at = first
        for c in preRoll {
            let end = at + c.count
            if end > start { out.append(.audio(start > at ? Array(c[(start - at)...]) : c)) }
            at = end
        }
        preRoll.removeAll()
        preRollCount = 0
        activation = (start: start, lastSpeech: position, notBefore: position)
        return out
    }

    /// Ends an activation whose context could not be opened: deactivate, nothing to close, and
    /// the speech going on does not open another one (each would fail the same way, every chunk).
    public mutating func abandon() -> [Action] {
        guard activation != nil else { return [] }
        waitForSilence = true
        return finish().filter { $0 != .close }
    }

    /// Ends the activation now (listening stopped, or the audio ended): deactivate and close.
    public mutating func finish() -> [Action] {
        guard activation != nil else { return [] }
        activation = nil
        return (settings.announcesActivation ? [.event(.deactivate, sample: position)] : []) + [.close]
    }
}
