import CSpeechClientAPI
import SpeechClient

@c @implementation
public func spc_segment_context_id(_ segment: OpaquePointer?) -> UnsafePointer<CChar>? {
    segmentFrom(segment)?.contextIdC.constPointer ?? StaticText.empty.constPointer
}

@c @implementation
public func spc_segment_id(_ segment: OpaquePointer?) -> Int32 {
    segmentFrom(segment)?.segmentId ?? -1
}

@c @implementation
public func spc_segment_is_final(_ segment: OpaquePointer?) -> Int32 {
    segmentFrom(segment)?.isFinal == true ? 1 : 0
}

@c @implementation
public func spc_segment_transcript(_ segment: OpaquePointer?) -> UnsafePointer<CChar>? {
    segmentFrom(segment)?.transcriptC.constPointer ?? StaticText.empty.constPointer
}

@c @implementation
public func spc_segment_word_count(_ segment: OpaquePointer?) -> Int {
    segmentFrom(segment)?.words.count ?? 0
}

/// The word at a C index, or nil when the segment is NULL or the index out of range.
private func word(_ segment: OpaquePointer?, _ i: Int) -> (Segment, Segment.Word)? {
    guard let s = segmentFrom(segment), i >= 0, i < s.words.count else { return nil }
    return (s, s.words[i])
}

@c @implementation
public func spc_segment_word_text(_ segment: OpaquePointer?, _ i: Int) -> UnsafePointer<CChar>? {
    guard let (s, _) = word(segment, i) else { return nil }
    return s.wordTextC[i].constPointer
}

@c @implementation
public func spc_segment_word_index(_ segment: OpaquePointer?, _ i: Int) -> Int32 {
    word(segment, i)?.1.index ?? -1
}

@c @implementation
public func spc_segment_word_start_ms(_ segment: OpaquePointer?, _ i: Int) -> Int32 {
    word(segment, i)?.1.startMilliseconds ?? -1
}

@c @implementation
public func spc_segment_word_end_ms(_ segment: OpaquePointer?, _ i: Int) -> Int32 {
    word(segment, i)?.1.endMilliseconds ?? -1
}

@c @implementation
public func spc_segment_word_is_final(_ segment: OpaquePointer?, _ i: Int) -> Int32 {
    word(segment, i)?.1.isFinal == true ? 1 : 0
}

@c @implementation
public func spc_segment_word_confidence(_ segment: OpaquePointer?, _ i: Int) -> Float {
    word(segment, i)?.1.confidence ?? -1
}

@c @implementation
public func spc_segment_confidence(_ segment: OpaquePointer?) -> Float {
    segmentFrom(segment)?.confidence ?? -1
}

@c @implementation
public func spc_segment_intent(_ segment: OpaquePointer?) -> UnsafePointer<CChar>? {
    segmentFrom(segment)?.intentC.constPointer ?? StaticText.empty.constPointer
}

@c @implementation
public func spc_segment_intent_is_final(_ segment: OpaquePointer?) -> Int32 {
    segmentFrom(segment)?.intentIsFinal == true ? 1 : 0
}

@c @implementation
public func spc_segment_entity_count(_ segment: OpaquePointer?) -> Int {
    segmentFrom(segment)?.entities.count ?? 0
}

private func entity(_ segment: OpaquePointer?, _ i: Int) -> (Segment, Segment.Entity)? {
    guard let s = segmentFrom(segment), i >= 0, i < s.entities.count else { return nil }
    return (s, s.entities[i])
}

@c @implementation
public func spc_segment_entity_type(_ segment: OpaquePointer?, _ i: Int) -> UnsafePointer<CChar>? {
    guard let (s, _) = entity(segment, i) else { return nil }
    return s.entityTypeC[i].constPointer
}

@c @implementation
public func spc_segment_entity_value(_ segment: OpaquePointer?, _ i: Int) -> UnsafePointer<CChar>? {
    guard let (s, _) = entity(segment, i) else { return nil }
    return s.entityValueC[i].constPointer
}

@c @implementation
public func spc_segment_entity_start(_ segment: OpaquePointer?, _ i: Int) -> Int32 {
    entity(segment, i)?.1.start ?? -1
}

@c @implementation
public func spc_segment_entity_end(_ segment: OpaquePointer?, _ i: Int) -> Int32 {
    entity(segment, i)?.1.end ?? -1
}

@c @implementation
public func spc_segment_entity_is_final(_ segment: OpaquePointer?, _ i: Int) -> Int32 {
    entity(segment, i)?.1.isFinal == true ? 1 : 0
}

@c @implementation
public func spc_segment_json(_ segment: OpaquePointer?) -> UnsafePointer<CChar>? {
    segmentFrom(segment)?.jsonC.constPointer ?? StaticText.empty.constPointer
}

/// Segments are immutable, so a copy is the same object with one more reference.
@c @implementation
public func spc_segment_copy(_ segment: OpaquePointer?) -> OpaquePointer? {
    guard let s = segmentFrom(segment) else { return nil }
    return OpaquePointer(Unmanaged.passRetained(s).toOpaque())
}

@c @implementation
public func spc_segment_free(_ segment: OpaquePointer?) {
    guard let segment else { return }
    Unmanaged<Segment>.fromOpaque(UnsafeRawPointer(segment)).release()
}
