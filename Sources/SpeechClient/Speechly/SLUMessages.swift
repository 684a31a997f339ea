/// The messages of `speechly.slu.v1` as Swift values (protocol.md). The protobuf codec turns
/// them into bytes and back; everything above it works with these.

public struct SLUConfig: Sendable, Equatable {
    public var sampleRateHertz = Int32(SpeechAudio.sampleRate)
    public var channels: Int32 = 1
    public var languageCode: String = "en-US"
    public var options: [ContextOption] = []
    public init(sampleRateHertz: Int32 = Int32(SpeechAudio.sampleRate), channels: Int32 = 1, languageCode: String, options: [ContextOption] = []) {
        self.sampleRateHertz = sampleRateHertz
        self.channels = channels
        self.languageCode = languageCode
        self.options = options
    }
}

public enum SLURequest: Sendable, Equatable {
    case config(SLUConfig)
    case start(appId: String, options: [ContextOption])
    /// LINEAR16 little-endian samples, one chunk.
    case audio([Int16])
    case stop
    case rttResponse(id: Int32)
}

public struct SLUWord: Sendable, Equatable {
    public var text: String
    public var index: Int32
    public var startMilliseconds: Int32
    public var endMilliseconds: Int32
    /// 0...1 where the protocol gives one (Riva), else -1 (Speechly and Wyoming have none).
    public var confidence: Float
    public init(text: String, index: Int32, startMilliseconds: Int32, endMilliseconds: Int32, confidence: Float = -1) {
        self.text = text
        self.index = index
        self.startMilliseconds = startMilliseconds
        self.endMilliseconds = endMilliseconds
        self.confidence = confidence
    }

    /// A server's confidence as the API gives it: 0...1, or -1 for none (absent, NaN, out of range).
    static func confidence(_ value: Float?) -> Float {
        guard let value, value >= 0, value <= 1 else { return -1 }
        return value
    }
}

public struct SLUEntity: Sendable, Equatable {
    public var type: String
    public var value: String
    public var startPosition: Int32
    public var endPosition: Int32
    public init(type: String, value: String, startPosition: Int32, endPosition: Int32) {
        self.type = type
        self.value = value
        self.startPosition = startPosition
        self.endPosition = endPosition
    }
}

public struct SLUResponse: Sendable, Equatable {
    /// The error code of a `finished` a server sends at its limit on a context's length (the
    /// reference server's and Speechly's: 5 minutes).
    static let contextTooLong = "context_too_long"

    public enum Payload: Sendable, Equatable {
        case transcript(SLUWord)
        case entity(SLUEntity)
        case intent(String)
        case segmentEnd
        /// A whole segment at once, final: its words, then its end (what a backend whose protocol
        /// gives whole transcripts, such as Wyoming, turns into one final update), with the
        /// server's confidence in the whole transcript (0...1; -1: none).
        case finalTranscript([SLUWord], confidence: Float)
        case tentativeTranscript(text: String, words: [SLUWord])
        case tentativeEntities([SLUEntity])
        case tentativeIntent(String)
        case started
        case finished(errorCode: String?, errorMessage: String?)
        case rttRequest(id: Int32)
        /// A response with no known payload field: ignored, as protobuf readers do.
        case none
    }

    public var audioContext: String
    public var segmentId: Int32
    public var payload: Payload
    /// On a final whose words have no times, from a backend whose server does not say where
    /// its utterances end otherwise (Riva without word offsets): how much of the stream's audio
    /// the server had processed when it sent it, ms from the stream's start (its
    /// `audio_processed`; `Int32.max` when not said). The worker finds the pause that ended the
    /// utterance before that, so a loss does not replay what is final. Nil: nothing to find.
    public var heardMilliseconds: Int32?

    public init(audioContext: String, segmentId: Int32, payload: Payload) {
        self.audioContext = audioContext
        self.segmentId = segmentId
        self.payload = payload
    }
}

extension SLUResponse {
    /// About what the response keeps in memory: its texts plus a fixed cost per word/entity.
    var heldBytes: Int {
        let base = 64 + audioContext.utf8.count
        switch payload {
        case .transcript(let w): return base + 32 + w.text.utf8.count
        case .tentativeTranscript(let text, let words): return base + text.utf8.count + words.reduce(0) { $0 + 32 + $1.text.utf8.count }
        case .finalTranscript(let words, _): return base + words.reduce(0) { $0 + 32 + $1.text.utf8.count }
        case .entity(let e): return base + 32 + e.type.utf8.count + e.value.utf8.count
        case .tentativeEntities(let es): return base + es.reduce(0) { $0 + 32 + $1.type.utf8.count + $1.value.utf8.count }
        case .intent(let i), .tentativeIntent(let i): return base + i.utf8.count
        case .finished(let code, let message): return base + (code?.utf8.count ?? 0) + (message?.utf8.count ?? 0)
        default: return base
        }
    }
}

extension SLUWord {
    /// The words of a whole transcript, for backends that give text (Wyoming, Riva's interim
    /// results): split at white space and control characters (a NUL would cut a C string short),
    /// indexed from `firstIndex`, times unknown (-1). Nil when there are more than `limit`,
    /// found before any word is made: a 4 MiB transcript of one-letter words made two million
    /// words, about 60 times its size in memory, before the segment's bound refused them.
    ///
    /// Split by scalars, not characters: a character's white space is its first scalar's, so a
    /// space after a Prepend mark (U+0600) did not split, and a mark combined onto a space was
    /// dropped with it; and a transcript streamed in pieces (`StreamedTranscript`) is split the
    /// same way piece by piece.
    static func words(_ text: String, atMost limit: Int = SegmentAssembler.maxWordsPerSegment,
                      firstIndex: Int = 0) -> [SLUWord]? {
        // Counted first, allocating nothing.
        var count = 0
        var inWord = false
        for scalar in text.unicodeScalars {
            if separates(scalar) {
                inWord = false
            } else if !inWord {
                inWord = true
                count += 1
                if count > limit { return nil }
            }
        }
        var words: [SLUWord] = []
        words.reserveCapacity(count)
        for word in text.unicodeScalars.split(whereSeparator: separates) {
            words.append(SLUWord(text: String(String.UnicodeScalarView(word)), index: Int32(clamping: firstIndex + words.count),
                                 startMilliseconds: -1, endMilliseconds: -1))
        }
        return words
    }

    /// What ends a word: white space, and control characters.
    static func separates(_ scalar: Unicode.Scalar) -> Bool {
        scalar.properties.isWhitespace || scalar.properties.generalCategory == .control
    }
}
