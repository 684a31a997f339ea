/// How the server contexts that carry one user context are numbered for the user (issue 5):
/// segment ids given in order of first appearance across the server contexts, and word times
/// moved by where each server context's audio starts in the user's context. A rotation or a
/// reconnection opens a new server context; the application sees one context.
struct ContextNumbering {
    /// Added to a server context's word times: where its audio starts (ms into the user's context).
    private var timeOffsets: [String: Int32] = [:]
    /// User segment ids by server context and server segment id.
    private var segmentMap: [String: [Int32: Int32]] = [:]
    private(set) var nextUserSegment: Int32 = 0

    /// A new user context: ids start again at 0.
    mutating func reset() {
        self = ContextNumbering()
    }

    /// A server context started; its audio begins `startSample` into the user's context.
    mutating func started(serverContext id: String, atSample startSample: Int) {
        timeOffsets[id] = Int32(clamping: SpeechAudio.milliseconds(samples: startSample))
    }

    /// A server context is over (finished, or its stream lost): its mappings go.
    mutating func forget(serverContext id: String) {
        segmentMap[id] = nil
        timeOffsets[id] = nil
    }

    /// The user's id for a server context's segment: the next free one the first time it is seen.
    mutating func userSegment(serverContext id: String, segment: Int32) -> Int32 {
        if let user = segmentMap[id]?[segment] { return user }
        let user = nextUserSegment
        nextUserSegment &+= 1
        segmentMap[id, default: [:]][segment] = user
        return user
    }

    /// A server context's payload with its word times in the user's context. `gaps`: audio its
    /// stream skipped (`Lane.gaps`): a time from each gap's point of the stream on is later by it.
    func userTimes(_ payload: SLUResponse.Payload, serverContext id: String, gaps: [Lane.Gap] = []) -> SLUResponse.Payload {
        Self.shift(payload, by: timeOffsets[id] ?? 0, gaps: gaps)
    }

    /// A lost stream's unfinished segments are recognised again by its replacement: their ids
    /// are given out again when they were the last ones given and no other stream holds a later
    /// open segment (`latestOpenElsewhere`), so the user's ids stay continuous.
    mutating func giveBack(_ openSegments: Set<Int32>, latestOpenElsewhere: Int32?) {
        guard let low = openSegments.min(), let high = openSegments.max(),
              (latestOpenElsewhere ?? -1) <= low, high &+ 1 == nextUserSegment else { return }
        nextUserSegment = low
    }

    static func shift(_ payload: SLUResponse.Payload, by ms: Int32, gaps: [Lane.Gap] = []) -> SLUResponse.Payload {
        guard ms != 0 || !gaps.isEmpty else { return payload }
        // Negative times are unknown ones (Wyoming gives none) and stay so. A word starting at a
        // gap's point comes after it; one ending there, before it.
        // Saturating: an absurd time from a server (near Int32.max) wrapped to a negative one,
        // which reads as "unknown"; it stays the latest time there is.
        func plus(_ a: Int32, _ b: Int32) -> Int32 {
            let (sum, overflow) = a.addingReportingOverflow(b)
            return overflow ? (b > 0 ? .max : .min) : sum
        }
        func moved(_ t: Int32, isEnd: Bool) -> Int32 {
            guard t >= 0 else { return t }
            var total = ms
            for gap in gaps where isEnd ? gap.streamMilliseconds < t : gap.streamMilliseconds <= t { total = plus(total, gap.milliseconds) }
            return plus(t, total)
        }
        func move(_ w: SLUWord) -> SLUWord {
            SLUWord(text: w.text, index: w.index, startMilliseconds: moved(w.startMilliseconds, isEnd: false),
                    endMilliseconds: moved(w.endMilliseconds, isEnd: true), confidence: w.confidence)
        }
        switch payload {
        case .transcript(let w): return .transcript(move(w))
        case .tentativeTranscript(let text, let words): return .tentativeTranscript(text: text, words: words.map(move))
        case .finalTranscript(let words, let confidence): return .finalTranscript(words.map(move), confidence: confidence)
        default: return payload
        }
    }
}
