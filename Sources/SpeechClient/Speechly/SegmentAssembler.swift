/// Folds the server's responses for one stream into segment snapshots (protocol.md, "Stream
/// behaviour"): tentative data is cumulative and replaced by final words keyed by index;
/// `segment_end` makes a segment final; `finished` drops what is not final.
public struct SegmentAssembler: Sendable {
    private struct Key: Hashable {
        var context: String
        var segment: Int32
    }

    private struct State {
        /// Shared with the snapshots (see `FinalWords`): an update copies what it changes.
        var finalWords = FinalWords()
        var tentativeWords: [SLUWord] = []
        var finalIntent: String?
        var tentativeIntent: String?
        var finalEntities: [SLUEntity] = []
        var tentativeEntities: [SLUEntity] = []
        /// The server's confidence in the whole transcript (a final result's), -1: none.
        var confidence: Float = -1

        // What it holds, in bytes of text plus `itemBytes` per word and entity (so that empty
        // words count too), kept up to date by `apply`: what `maxSegmentBytes` bounds.
        var finalWordBytes = 0
        var tentativeWordBytes = 0
        var finalEntityBytes = 0
        var tentativeEntityBytes = 0
        var bytes: Int {
            finalWordBytes + tentativeWordBytes + finalEntityBytes + tentativeEntityBytes
                + (finalIntent?.utf8.count ?? 0) + (tentativeIntent?.utf8.count ?? 0)
        }

        static func size(_ w: SLUWord) -> Int { SegmentAssembler.itemBytes + w.text.utf8.count }
        static func size(_ e: SLUEntity) -> Int { SegmentAssembler.itemBytes + e.type.utf8.count + e.value.utf8.count }
        static func size(_ words: [SLUWord]) -> Int { words.reduce(0) { $0 + size($1) } }
        static func size(_ entities: [SLUEntity]) -> Int { entities.reduce(0) { $0 + size($1) } }

        /// The bytes after `payload`, without applying it.
        func bytes(after payload: SLUResponse.Payload) -> Int {
            switch payload {
            case .transcript(let w):
                return bytes + Self.size(w) - (finalWords.word(at: w.index).map(Self.size) ?? 0)
            case .tentativeTranscript(_, let words):
                return bytes - tentativeWordBytes + Self.size(words)
            case .finalTranscript(let words, _):
                return bytes - tentativeWordBytes + words.reduce(0) { $0 + Self.size($1) - (finalWords.word(at: $1.index).map(Self.size) ?? 0) }
            case .entity(let e):
                return bytes + Self.size(e)
            case .tentativeEntities(let es):
                return bytes - tentativeEntityBytes + Self.size(es)
            case .intent(let i):
                return bytes + i.utf8.count - (finalIntent?.utf8.count ?? 0)
            case .tentativeIntent(let i):
                return bytes + i.utf8.count - (tentativeIntent?.utf8.count ?? 0)
            default:
                return bytes
            }
        }
    }

    private var segments: [Key: State] = [:]
    /// Segments already ended, so a late duplicate cannot resurrect one (`maxEndedSegments`).
    private var ended: Set<Key> = []

    public init() {}

    /// Forgets the segments of a context that are not final (before a reconnection replays
    /// their audio; the final ones stay ended, so no word is delivered twice).
    public mutating func dropUnfinished(context: String) {
        segments = segments.filter { $0.key.context != context }
    }

    /// Forgets some segments of a context that are not final (a lost stream's: the stream that
    /// replaces it recognises their audio again).
    public mutating func drop(context: String, segments ids: Set<Int32>) {
        guard !ids.isEmpty else { return }
        segments = segments.filter { $0.key.context != context || !ids.contains($0.key.segment) }
    }

    /// Ends every segment of the context that is not final and had words, as the server never
    /// did: each snapshot is final, its words keep `isFinal` false (the server never confirmed
    /// them). In segment order; the segments are then ended.
    public mutating func closeUnfinished(context: String) -> [Segment] {
        close(segments.filter { $0.key.context == context })
    }

    /// The same for some segments of the context: those a server context left open when it
    /// finished (a context carried by several streams, each ending its own).
    public mutating func closeUnfinished(context: String, segments ids: Set<Int32>) -> [Segment] {
        guard !ids.isEmpty else { return [] }
        return close(segments.filter { $0.key.context == context && ids.contains($0.key.segment) })
    }

    private mutating func close(_ open: [Key: State]) -> [Segment] {
        let open = open.sorted { $0.key.segment < $1.key.segment }
        var out: [Segment] = []
        for (key, state) in open {
            segments[key] = nil
            ended.insert(key)
            let snapshot = Self.snapshot(key: key, state: state, isFinal: false)
            guard !snapshot.words.isEmpty else { continue }
            out.append(Segment(contextId: snapshot.contextId, segmentId: snapshot.segmentId, isFinal: true,
                               words: snapshot.words, intent: snapshot.intent, intentIsFinal: snapshot.intentIsFinal,
                               entities: snapshot.entities, confidence: snapshot.confidence))
        }
        return out
    }

    /// Forgets that some ended segments of a context ended: nothing can update them any more
    /// (the stream that carried them is over, and its ids are not given out again), and a
    /// context carried by many streams would otherwise keep one entry per segment for as long
    /// as it runs.
    public mutating func forgetEnded(context: String, segments ids: Set<Int32>) {
        for id in ids { ended.remove(Key(context: context, segment: id)) }
    }

    /// Whether a segment of the context has started and not ended.
    public func hasUnfinished(context: String) -> Bool {
        segments.keys.contains { $0.context == context }
    }

    /// Bounds on what a server may make the client hold (issue 9: memory stays bounded against a
    /// hostile server). Far above what speech produces: a segment ends at a pause.
    public static let maxOpenSegments = 256
    /// Segments ended and remembered (so a late update cannot reopen one) until their stream
    /// finishes: a stream lasts at most minutes, and speech ends a segment every few seconds.
    public static let maxEndedSegments = 16_384
    public static let maxWordsPerSegment = 16_384
    public static let maxEntitiesPerSegment = 1_024
    /// Bytes (issue 23: bounds in bytes, not only counts). A spoken word is a few bytes and a
    /// segment, which ends at a pause, a few hundred; an hour of speech never ended is ~40 KB.
    /// One word, entity value or intent; the text of one segment; the open segments of a context.
    public static let maxWordBytes = 1_024
    static let itemBytes = 16
    public static let maxSegmentBytes = 64 * 1_024
    public static let maxContextBytes = 1_024 * 1_024

    /// `apply`, after checking the response against the bounds above: a server past them is
    /// misbehaving, and the stream ends with this parse error instead of growing without limit.
    public mutating func applyChecked(_ response: SLUResponse) throws(SpeechClientError) -> Segment? {
        let key = Key(context: response.audioContext, segment: response.segmentId)
        let state = segments[key]
        func violation(_ what: String) -> SpeechClientError {
            SpeechClientError(.parse, "the server \(what) (context \(response.audioContext), segment \(response.segmentId)); the stream was ended")
        }
        try checkBytes(response, state: state ?? State(), violation: violation)
        switch response.payload {
        case .transcript(let word):
            if word.index < 0 || word.index >= Int32(Self.maxWordsPerSegment) {
                throw violation("sent a word index \(word.index) outside 0..<\(Self.maxWordsPerSegment)")
            }
        case .tentativeTranscript(_, let words), .finalTranscript(let words, _):
            if words.count > Self.maxWordsPerSegment || words.contains(where: { $0.index < 0 || $0.index >= Int32(Self.maxWordsPerSegment) }) {
                throw violation("sent a tentative transcript beyond \(Self.maxWordsPerSegment) words")
            }
        case .entity:
            if (state?.finalEntities.count ?? 0) >= Self.maxEntitiesPerSegment {
                throw violation("sent more than \(Self.maxEntitiesPerSegment) entities for one segment")
            }
        case .tentativeEntities(let entities):
            if entities.count > Self.maxEntitiesPerSegment {
                throw violation("sent more than \(Self.maxEntitiesPerSegment) tentative entities")
            }
        default:
            break
        }
        if !ended.contains(key), ended.count >= Self.maxEndedSegments {
            switch response.payload {
            case .segmentEnd, .finalTranscript:
                // Each is remembered until its stream finishes: a server ending new segments
                // without end (a segment_end is a few bytes) grew that record without limit.
                throw violation("ended more than \(Self.maxEndedSegments) segments on streams that have not finished")
            default: break
            }
        }
        if state == nil, !ended.contains(key), segments.count >= Self.maxOpenSegments {
            switch response.payload {
            case .started, .finished, .rttRequest, .none, .segmentEnd: break
            default: throw violation("kept more than \(Self.maxOpenSegments) segments open at once")
            }
        }
        return apply(response)
    }

    /// The byte bounds, checked on what the response would make the segment and its context
    /// hold, before anything is stored: what one response carries is already bounded by the
    /// message size cap, what accumulates is bounded here.
    private func checkBytes(_ response: SLUResponse, state: State,
                            violation: (String) -> SpeechClientError) throws(SpeechClientError) {
        // Loops, not `map(...).max()`: that built an array for every response.
        var longest = 0
        switch response.payload {
        case .transcript(let word): longest = word.text.utf8.count
        case .tentativeTranscript(_, let words), .finalTranscript(let words, _):
            for w in words { longest = max(longest, w.text.utf8.count) }
        case .entity(let e): longest = max(e.type.utf8.count, e.value.utf8.count)
        case .tentativeEntities(let es):
            for e in es { longest = max(longest, e.type.utf8.count, e.value.utf8.count) }
        case .intent(let i), .tentativeIntent(let i): longest = i.utf8.count
        default: return
        }
        if longest > Self.maxWordBytes {
            throw violation("sent a word, entity or intent of \(longest) bytes, over the \(Self.maxWordBytes)-byte limit")
        }
        let after = state.bytes(after: response.payload)
        if after > Self.maxSegmentBytes {
            throw violation("made one segment hold \(after) bytes, over the \(Self.maxSegmentBytes / 1024) KiB limit")
        }
        let key = Key(context: response.audioContext, segment: response.segmentId)
        let others = segments.reduce(0) { $0 + ($1.key.context == key.context && $1.key != key ? $1.value.bytes : 0) }
        if others + after > Self.maxContextBytes {
            throw violation("made one context's open segments hold \(others + after) bytes, over the \(Self.maxContextBytes / 1024 / 1024) MiB limit")
        }
    }

    /// Applies one response; returns the snapshot of the segment it changed, if any.
    public mutating func apply(_ response: SLUResponse) -> Segment? {
        let key = Key(context: response.audioContext, segment: response.segmentId)
        switch response.payload {
        case .started, .rttRequest, .none:
            return nil
        case .finished:
            segments = segments.filter { $0.key.context != response.audioContext }
            ended = ended.filter { $0.context != response.audioContext }
            return nil
        default:
            break
        }
        if ended.contains(key) { return nil }
        var state = segments[key] ?? State()
        var isFinal = false
        switch response.payload {
        case .transcript(let word):
            state.finalWordBytes += State.size(word) - (state.finalWords.set(word).map(State.size) ?? 0)
        case .entity(let entity):
            state.finalEntities.removeAll { $0.startPosition == entity.startPosition && $0.endPosition == entity.endPosition && $0.type == entity.type }
            state.finalEntities.append(entity)
            state.finalEntityBytes = State.size(state.finalEntities)
        case .intent(let intent):
            state.finalIntent = intent
        case .tentativeTranscript(_, let words):
            state.tentativeWords = words
            state.tentativeWordBytes = State.size(words)
        case .tentativeEntities(let entities):
            state.tentativeEntities = entities
            state.tentativeEntityBytes = State.size(entities)
        case .tentativeIntent(let intent):
            state.tentativeIntent = intent
        case .segmentEnd:
            isFinal = true
        case .finalTranscript(let words, let confidence):
            state.confidence = confidence
            state.tentativeWords = []
            state.tentativeWordBytes = 0
            for word in words {
                state.finalWordBytes += State.size(word) - (state.finalWords.set(word).map(State.size) ?? 0)
            }
            isFinal = true
        case .started, .finished, .rttRequest, .none:
            return nil
        }
        let snapshot = Self.snapshot(key: key, state: state, isFinal: isFinal)
        if isFinal {
            segments[key] = nil
            ended.insert(key)
        } else {
            segments[key] = state
        }
        return snapshot
    }

    /// A snapshot sharing the state's words (made into arrays only when someone reads them).
    private static func snapshot(key: Key, state: State, isFinal: Bool) -> Segment {
        let intent = state.finalIntent ?? (isFinal ? nil : state.tentativeIntent)
        // What the snapshot holds that nothing else does. A final one: all of it (the assembler
        // lets go of the segment). A tentative one shares the final words' chunks with the
        // assembler and the snapshots after it, except the last chunk (copied by the next word);
        // its tentative words and entities are its own once the next update replaces them.
        let held: Int
        if isFinal {
            let items = state.finalWords.count + state.finalEntities.count
            held = 256 + 3 * state.bytes + 48 * items
        } else {
            let last = state.finalWords.chunks.last?.words ?? []
            let own = State.size(last) + state.tentativeWordBytes + state.tentativeEntityBytes + state.finalEntityBytes
                + (state.finalIntent?.utf8.count ?? 0) + (state.tentativeIntent?.utf8.count ?? 0)
            let items = last.count + state.tentativeWords.count + state.finalEntities.count + state.tentativeEntities.count
            held = 256 + 16 * state.finalWords.chunks.count + 3 * own + 48 * items
        }
        return Segment(contextId: key.context, segmentId: key.segment, isFinal: isFinal,
                       parts: .shared(finals: state.finalWords, tentatives: isFinal ? [] : state.tentativeWords,
                                      finalEntities: state.finalEntities, tentativeEntities: isFinal ? [] : state.tentativeEntities),
                       intent: intent, intentIsFinal: state.finalIntent != nil,
                       confidence: isFinal ? state.confidence : -1,
                       heldBytes: held)
    }
}
