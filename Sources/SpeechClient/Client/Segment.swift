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
    public let intent: String?
    public let intentIsFinal: Bool
    /// The server's confidence in the whole final transcript, 0...1, where it gives one (Riva's
    /// final results); -1 otherwise, and for tentative updates.
    public let confidence: Float
    /// About what the snapshot holds in memory (the words, the transcript and their C copies):
    /// what the client's queue of undelivered events counts against its byte bound.
    public let heldBytes: Int

    /// What the words and entities are made from: given whole, or the assembler's state at the
    /// update, shared with it (issue 23: an update used to copy the whole segment; now the
    /// words, the transcript and their C copies are made on first use, once per snapshot, so a
    /// snapshot nobody reads costs what changed).
    enum Parts: Sendable {
        case given(words: [Word], entities: [Entity])
        case shared(finals: FinalWords, tentatives: [SLUWord], finalEntities: [SLUEntity], tentativeEntities: [SLUEntity])
    }
    private let parts: Parts

    struct View: Sendable {
        var words: [Word]
        var entities: [Entity]
        var transcript: String
    }
    struct CView: Sendable {
        var transcript: OwnedCString
        var words: [OwnedCString]
        var entityTypes: [OwnedCString]
        var entityValues: [OwnedCString]
    }
    /// What is made on first use, once per snapshot, under one lock kept inside the object. An
    /// update nobody reads (most tentative ones) then costs the snapshot alone: before, it made
    /// three locks and two C strings at once, 10 allocations of the worker's per segment.
    private struct Caches {
        var view: View?
        var cView: CView?
        var json: OwnedCString?
        var contextIdC: OwnedCString?
        var intentC: OwnedCString?
    }
    private let caches = Mutex(Caches())

    public convenience init(contextId: String, segmentId: Int32, isFinal: Bool, words: [Word], intent: String?,
                            intentIsFinal: Bool, entities: [Entity], confidence: Float = -1) {
        let text = words.reduce(0) { $0 + $1.text.utf8.count + 1 }
        let held = 256 + 3 * text + 96 * words.count
            + entities.reduce(0) { $0 + 96 + 2 * ($1.type.utf8.count + $1.value.utf8.count) }
        self.init(contextId: contextId, segmentId: segmentId, isFinal: isFinal, parts: .given(words: words, entities: entities),
                  intent: intent, intentIsFinal: intentIsFinal, confidence: confidence, heldBytes: held)
    }

    init(contextId: String, segmentId: Int32, isFinal: Bool, parts: Parts, intent: String?, intentIsFinal: Bool,
         confidence: Float, heldBytes: Int) {
        self.contextId = contextId
        self.segmentId = segmentId
        self.isFinal = isFinal
        self.parts = parts
        self.intent = intent
        self.intentIsFinal = intentIsFinal
        self.confidence = confidence
        self.heldBytes = heldBytes
    }

    /// C copies for the C accessors: made once, and kept as long as the snapshot.
    public var contextIdC: OwnedCString { cachedC(\.contextIdC) { OwnedCString(contextId) } }
    public var intentC: OwnedCString { cachedC(\.intentC) { OwnedCString(intent ?? "") } }

    private func cachedC(_ slot: WritableKeyPath<Caches, OwnedCString?>, _ make: () -> OwnedCString) -> OwnedCString {
        caches.withLock { c in
            if let made = c[keyPath: slot] { return made }
            let made = make()
            c[keyPath: slot] = made
            return made
        }
    }

    public var words: [Word] { view.words }
    public var entities: [Entity] { view.entities }
    public var transcript: String { view.transcript }

    public var transcriptC: OwnedCString { cView.transcript }
    public var wordTextC: [OwnedCString] { cView.words }
    public var entityTypeC: [OwnedCString] { cView.entityTypes }
    public var entityValueC: [OwnedCString] { cView.entityValues }

    private var view: View {
        caches.withLock { c in Self.view(&c, parts, isFinal: isFinal) }
    }

    private static func view(_ c: inout Caches, _ parts: Parts, isFinal: Bool) -> View {
        if let made = c.view { return made }
        let made = makeView(parts, isFinal: isFinal)
        c.view = made
        return made
    }

    private var cView: CView {
        caches.withLock { c in
            if let made = c.cView { return made }
            let v = Self.view(&c, parts, isFinal: isFinal)
            let made = CView(transcript: OwnedCString(v.transcript), words: v.words.map { OwnedCString($0.text) },
                             entityTypes: v.entities.map { OwnedCString($0.type) },
                             entityValues: v.entities.map { OwnedCString($0.value) })
            c.cView = made
            return made
        }
    }

    /// The words in index order: the final ones, then (before the segment is final) the
    /// tentative ones at the indices not final yet; the entities likewise, by position.
    private static func makeView(_ parts: Parts, isFinal: Bool) -> View {
        switch parts {
        case .given(let words, let entities):
            return View(words: words, entities: entities, transcript: words.map(\.text).joined(separator: " "))
        case .shared(let finals, let tentatives, let finalEntities, let tentativeEntities):
            var words: [Word] = []
            words.reserveCapacity(finals.count + tentatives.count)
            for chunk in finals.chunks {
                for w in chunk.words {
                    words.append(Word(text: w.text, index: w.index, startMilliseconds: w.startMilliseconds,
                                      endMilliseconds: w.endMilliseconds, isFinal: true, confidence: w.confidence))
                }
            }
            if !isFinal {
                var added = false
                for w in tentatives where finals.word(at: w.index) == nil {
                    words.append(Word(text: w.text, index: w.index, startMilliseconds: w.startMilliseconds,
                                      endMilliseconds: w.endMilliseconds, isFinal: false, confidence: w.confidence))
                    added = true
                }
                if added { words.sort { $0.index < $1.index } }
            }
            var entities: [Entity] = finalEntities.map {
                Entity(type: $0.type, value: $0.value, start: $0.startPosition, end: $0.endPosition, isFinal: true)
            }
            if !isFinal {
                for e in tentativeEntities where !finalEntities.contains(where: {
                    $0.type == e.type && $0.startPosition == e.startPosition && $0.endPosition == e.endPosition
                }) {
                    entities.append(Entity(type: e.type, value: e.value, start: e.startPosition, end: e.endPosition, isFinal: false))
                }
            }
            entities.sort { ($0.start, $0.end) < ($1.start, $1.end) }
            return View(words: words, entities: entities, transcript: words.map(\.text).joined(separator: " "))
        }
    }

    /// The stable JSON line (documented in the header at spc_segment_json), made on first use.
    public var json: String { jsonC.string }

    public var jsonC: OwnedCString {
        if let made = caches.withLock({ $0.json }) { return made }
        // Rendered outside the lock (it reads the words, which take it); two threads that both
        // render keep the first one's.
        let rendered = OwnedCString(renderJSON())
        return caches.withLock { c in
            if let made = c.json { return made }
            c.json = rendered
            return rendered
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
