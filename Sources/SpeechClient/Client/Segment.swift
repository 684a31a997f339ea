import Synchronization

/// An immutable snapshot of one segment as known at one moment, handed to the segment callback.
/// It keeps C copies of its strings so the C accessors can return pointers that live as long as
/// the snapshot.
public final class Segment: Sendable {
    public struct Word: Sendable, Equatable {
        public var text: String
        public var index: Int32
        public var startMilliseconds: Int32
        public var endMilliseconds: Int32
        public var isFinal: Bool
        /// 0...1 where the server gives one (Riva), else -1.
        public var confidence: Float = -1
    }

    public struct Entity: Sendable, Equatable {
        public var type: String
        public var value: String
        public var start: Int32
        public var end: Int32
        public var isFinal: Bool
    }

    public let contextId: String
    public let segmentId: Int32
    public let isFinal: Bool
    public let words: [Word]
    public let intent: String?
    public let intentIsFinal: Bool
    public let entities: [Entity]
    public let transcript: String
    /// The server's confidence in the whole final transcript, 0...1, where it gives one (Riva's
    /// final results); -1 otherwise, and for tentative updates.
    public let confidence: Float
    /// About what the snapshot holds in memory (the words, the transcript and their C copies):
    /// what the client's queue of undelivered events counts against its byte bound.
    public let heldBytes: Int

    // C views, made once per snapshot.
    public let contextIdC: OwnedCString
    public let transcriptC: OwnedCString
    public let wordTextC: [OwnedCString]
    public let intentC: OwnedCString
    public let entityTypeC: [OwnedCString]
    public let entityValueC: [OwnedCString]
    private let jsonCache = Locked<OwnedCString?>(nil)

    public init(contextId: String, segmentId: Int32, isFinal: Bool, words: [Word], intent: String?,
                intentIsFinal: Bool, entities: [Entity], confidence: Float = -1) {
        self.confidence = confidence
        self.contextId = contextId
        self.segmentId = segmentId
        self.isFinal = isFinal
        self.words = words
        self.intent = intent
        self.intentIsFinal = intentIsFinal
        self.entities = entities
        self.transcript = words.map(\.text).joined(separator: " ")
        contextIdC = OwnedCString(contextId)
        transcriptC = OwnedCString(transcript)
        wordTextC = words.map { OwnedCString($0.text) }
        intentC = OwnedCString(intent ?? "")
        entityTypeC = entities.map { OwnedCString($0.type) }
        entityValueC = entities.map { OwnedCString($0.value) }
        heldBytes = 256 + 3 * transcript.utf8.count + 96 * words.count
            + entities.reduce(0) { $0 + 96 + 2 * ($1.type.utf8.count + $1.value.utf8.count) }
    }

    /// The stable JSON line (documented in the header at spc_segment_json), made on first use.
    public var json: String { jsonC.string }

    public var jsonC: OwnedCString {
        jsonCache.withLock { cache in
            if let cache { return cache }
            let made = OwnedCString(renderJSON())
            cache = made
            return made
        }
    }

    /// A confidence with three decimals, as JSON ("0.93", "1.0").
    static func rounded(_ c: Float) -> String { "\(Double((Double(c) * 1000).rounded()) / 1000)" }

    private func renderJSON() -> String {
        var s = "{\"type\":\"segment\",\"context_id\":\(JSON.quote(contextId)),\"segment_id\":\(segmentId)"
        s += ",\"final\":\(isFinal),\"transcript\":\(JSON.quote(transcript))"
        // Only where the server gave one (0.8): the lines of servers without stay as they were.
        if confidence >= 0 { s += ",\"confidence\":\(Self.rounded(confidence))" }
        s += ",\"words\":["
        s += words.map {
            "{\"text\":\(JSON.quote($0.text)),\"index\":\($0.index),\"start_ms\":\($0.startMilliseconds),\"end_ms\":\($0.endMilliseconds),\"final\":\($0.isFinal)"
                + ($0.confidence >= 0 ? ",\"confidence\":\(Self.rounded($0.confidence))}" : "}")
        }.joined(separator: ",")
        s += "],\"intent\":"
        if let intent {
            s += "{\"intent\":\(JSON.quote(intent)),\"final\":\(intentIsFinal)}"
        } else {
            s += "null"
        }
        s += ",\"entities\":["
        s += entities.map {
            "{\"type\":\(JSON.quote($0.type)),\"value\":\(JSON.quote($0.value)),\"start\":\($0.start),\"end\":\($0.end),\"final\":\($0.isFinal)}"
        }.joined(separator: ",")
        s += "]}"
        return s
    }
}
