/// The lanes of the open context, by generation, and the one taking the live audio (`Lane`).
///
/// Audio order: a lane comes before another when its audio starts earlier, or, starting at the
/// same sample, when its stream was opened first (a lane's generation grows with each stream).
/// A lane's responses are applied only when no lane before it is open, so that segments reach
/// the application in the order of their audio whatever order the streams answer in.
struct LaneSet {
    private var byGeneration: [Int: Lane] = [:]
    /// The lane taking live audio: nil before the first, and between a lane's end (rotation,
    /// loss, stop, or the server ending it) and the next.
    private(set) var live: Int?

    /// In place (`_modify`): the supervisor sends every chunk through a lane, and a copy of the lane
    /// and its write-back were a few percent of a file's time.
    subscript(generation: Int) -> Lane? {
        get { byGeneration[generation] }
        _modify { yield &byGeneration[generation] }
    }

    var isEmpty: Bool { byGeneration.isEmpty }
    var count: Int { byGeneration.count }
    /// The generations, oldest stream first.
    var generations: [Int] { byGeneration.keys.sorted() }

    /// The live lane, if any.
    var liveLane: Lane? { live.flatMap { byGeneration[$0] } }

    mutating func add(_ lane: Lane, generation: Int, live isLive: Bool) {
        byGeneration[generation] = lane
        if isLive { live = generation }
    }

    /// Removes a lane; whether it was the live one (no lane is live then).
    @discardableResult
    mutating func remove(_ generation: Int) -> Bool {
        byGeneration[generation] = nil
        guard live == generation else { return false }
        live = nil
        return true
    }

    /// The live lane stops taking live audio (it stays, to drain or replay what it has).
    mutating func endLive() { live = nil }

    /// Empties the set; the lanes that were in it, for their streams to be cancelled.
    mutating func removeAll() -> [Lane] {
        let lanes = Array(byGeneration.values)
        byGeneration = [:]
        live = nil
        return lanes
    }

    /// Sends a chunk on the live lane, unless there is none or it is still replaying.
    mutating func sendLive(_ chunk: [Int16]) {
        if let gen = live { byGeneration[gen]?.sendLive(chunk) }
    }

    // MARK: - Audio order

    /// The first lane in audio order.
    var first: (generation: Int, lane: Lane)? {
        byGeneration.min { Self.precedes($0, $1) }.map { (generation: $0.key, lane: $0.value) }
    }

    /// Whether a lane before `generation` in audio order is open (false for a lane not here).
    func hasEarlier(than generation: Int) -> Bool {
        guard let lane = byGeneration[generation] else { return false }
        return byGeneration.contains { $0.key != generation && Self.precedes($0, (generation, lane)) }
    }

    private static func precedes(_ a: (key: Int, value: Lane), _ b: (key: Int, value: Lane)) -> Bool {
        (a.value.start, a.key) < (b.value.start, b.key)
    }

    // MARK: - Across the lanes (read per chunk and per worker turn: `lazy`, no array built)

    /// The responses held across the lanes, in bytes (bounded by `Lane.maxHeldBytes`).
    var heldBytes: Int { byGeneration.values.reduce(0) { $0 + $1.held.bytes } }
    /// Some lane is still sending audio from the replay buffer.
    var replaying: Bool { byGeneration.values.contains { $0.cursor != nil } }
    /// The streams of the lanes still replaying (what a stalled file waits for).
    var replayingStreams: [any RecognitionStream] { byGeneration.values.filter { $0.cursor != nil }.map(\.stream) }
    /// The lowest floor: no lane needs audio from before it.
    var lowestFloor: Int? { byGeneration.values.lazy.map(\.floor).min() }
    /// The latest segment id a lane has open (a lost lane gives back the ids above it).
    var latestOpenSegment: Int32? { byGeneration.values.compactMap { $0.openSegments.max() }.max() }
    /// The earliest time a lane must move to a new connection (GOAWAY).
    var nextMoveDeadline: UInt64? { byGeneration.values.lazy.compactMap(\.moveBy).min() }
    /// The earliest time a lane's start must be acknowledged by.
    var nextStartDeadline: UInt64? { byGeneration.values.lazy.map(\.startDue).filter { $0 != .max }.min() }
    /// The lanes whose start was not acknowledged in time, oldest stream first, as they are now
    /// (ending one may change or remove the others: each is still cancelled).
    func unacknowledged(at now: UInt64) -> [(generation: Int, lane: Lane)] {
        byGeneration.filter { now >= $0.value.startDue }.sorted { $0.key < $1.key }.map { (generation: $0.key, lane: $0.value) }
    }
}
