/// The lanes of the open context, by generation, and the one taking the live audio (`Lane`).
///
/// Audio order: a lane comes before another when its audio starts earlier, or, starting at the
/// same sample, when its stream was opened first (a lane's generation grows with each stream).
/// A lane's responses are applied only when no lane before it is open, so that segments reach
/// the application in the order of their audio whatever order the streams answer in.
struct LaneSet {
    /// Oldest stream first. An array, not a dictionary: a context has one to three lanes (up to
    /// `LaneSupervisor.maxOpenLanes` while a long replay goes out on several streams), and
    /// sending a chunk in place through a dictionary (`_modify`) heap-allocated three coroutine
    /// frames per chunk (a malloc probe on a file: 3 of the worker's 9 allocations per chunk)
    /// and hashed the generation at every look-up.
    private var entries: [(generation: Int, lane: Lane)] = []
    /// The lane taking live audio: nil before the first, and between a lane's end (rotation,
    /// loss, stop, or the server ending it) and the next.
    private(set) var live: Int?

    private func index(of generation: Int) -> Int? {
        var i = 0
        while i < entries.count {
            if entries[i].generation == generation { return i }
            i += 1
        }
        return nil
    }

    /// A lane by generation. Setting one replaces the lane of that generation or adds it (not
    /// live); setting nil takes it out (`remove` also ends it being live).
    subscript(generation: Int) -> Lane? {
        get { index(of: generation).map { entries[$0].lane } }
        set {
            if let newValue {
                add(newValue, generation: generation, live: false)
            } else if let i = index(of: generation) {
                entries.remove(at: i)
            }
        }
    }

    /// Reads a lane where it is, copying nothing but what `body` returns: a copy of a lane
    /// retains its stream, its sets and its strings, and the worker looks at a lane for every
    /// response and every chunk. Nil when there is no lane of that generation.
    func read<R>(_ generation: Int, _ body: (borrowing Lane) -> R) -> R? {
        guard let i = index(of: generation) else { return nil }
        return body(entries[i].lane)
    }

    /// Changes a lane where it is (no copy and write-back). Nil when there is none.
    @discardableResult
    mutating func update<R>(_ generation: Int, _ body: (inout Lane) -> R) -> R? {
        guard let i = index(of: generation) else { return nil }
        return body(&entries[i].lane)
    }

    func contains(_ generation: Int) -> Bool { index(of: generation) != nil }

    var isEmpty: Bool { entries.isEmpty }
    var count: Int { entries.count }
    /// The generations, oldest stream first.
    var generations: [Int] { entries.map(\.generation) }

    /// The live lane's stream, and whether it is still replaying: read per chunk of a file, in place.
    var liveStream: (any RecognitionStream)? { live.flatMap { read($0) { $0.stream } } }
    var liveIsReplaying: Bool { live.flatMap { read($0) { $0.cursor != nil } } ?? false }

    /// Adds a lane, or replaces the lane of its generation (live stays live).
    mutating func add(_ lane: Lane, generation: Int, live isLive: Bool) {
        if let i = index(of: generation) {
            entries[i].lane = lane
        } else {
            // Each stream has a newer generation: nearly always at the end.
            let at = entries.lastIndex { $0.generation < generation }.map { $0 + 1 } ?? 0
            entries.insert((generation, lane), at: at)
        }
        if isLive { live = generation }
    }

    /// Removes a lane; whether it was the live one (no lane is live then). The lane first in
    /// audio order after it, if that changed, starts its finish clock afresh (`nextFinishDeadline`).
    @discardableResult
    mutating func remove(_ generation: Int) -> Bool {
        let firstBefore = firstIndex.map { entries[$0].generation }
        self[generation] = nil
        if let i = firstIndex, entries[i].generation != firstBefore {
            if entries[i].lane.awaitingFinishSince != nil { entries[i].lane.startFinishClock(at: Clock.monotonicNanos()) }
            // Its replay's clock too: the server may not have read it while the lane before it ran.
            entries[i].lane.replayStall = nil
        }
        guard live == generation else { return false }
        live = nil
        return true
    }

    /// The live lane stops taking live audio (it stays, to drain or replay what it has).
    mutating func endLive() { live = nil }

    /// Empties the set; the lanes that were in it, for their streams to be cancelled.
    mutating func removeAll() -> [Lane] {
        let lanes = entries.map(\.lane)
        entries = []
        live = nil
        return lanes
    }

    /// Sends a chunk on the live lane, unless there is none or it is still replaying. In place
    /// (an array element): a copy of the lane and its write-back were a few percent of a file's time.
    mutating func sendLive(_ chunk: [Int16]) {
        if let gen = live, let i = index(of: gen) { entries[i].lane.sendLive(chunk) }
    }

    // MARK: - Audio order

    /// The first lane in audio order.
    var first: (generation: Int, lane: Lane)? {
        firstIndex.map { entries[$0] }
    }

    /// Where the first lane in audio order is (read per step: no lane is copied).
    private var firstIndex: Int? {
        guard !entries.isEmpty else { return nil }
        var best = 0
        var i = 1
        while i < entries.count {
            if precedes(i, best) { best = i }
            i += 1
        }
        return best
    }

    /// The generations in audio order.
    var inAudioOrder: [Int] {
        entries.indices.sorted { precedes($0, $1) }.map { entries[$0].generation }
    }

    /// Whether a lane before `generation` in audio order is open (false for a lane not here).
    func hasEarlier(than generation: Int) -> Bool {
        guard let i = index(of: generation) else { return false }
        for j in entries.indices where j != i && precedes(j, i) { return true }
        return false
    }

    /// The lanes whose audio starts before `sample`: those a lane starting there waits behind.
    func countStarting(before sample: Int) -> Int {
        var n = 0
        for i in entries.indices where entries[i].lane.start < sample { n += 1 }
        return n
    }

    /// Whether the lane at `i` comes before the lane at `j` in audio order (read in place).
    private func precedes(_ i: Int, _ j: Int) -> Bool {
        (entries[i].lane.start, entries[i].generation) < (entries[j].lane.start, entries[j].generation)
    }

    // MARK: - Across the lanes (those read per chunk or per worker step go by index: their
    // fields are read in place, no lane is copied and no array built)

    /// Some lane holds responses not applied yet (or an end behind them).
    var holdsResponses: Bool {
        for i in entries.indices where !entries[i].lane.held.isEmpty || entries[i].lane.endsWhileHeld { return true }
        return false
    }
    /// The responses held across the lanes, in bytes (bounded by `Lane.maxHeldBytes`).
    var heldBytes: Int { entries.reduce(0) { $0 + $1.lane.held.bytes } }
    /// Some lane is still sending audio from the replay buffer.
    var replaying: Bool {
        for i in entries.indices where entries[i].lane.cursor != nil { return true }
        return false
    }
    /// The streams of the lanes still replaying (what a stalled file waits for).
    var replayingStreams: [any RecognitionStream] { entries.filter { $0.lane.cursor != nil }.map(\.lane.stream) }
    /// The lowest floor: no lane needs audio from before it.
    var lowestFloor: Int? {
        var lowest: Int?
        for i in entries.indices { lowest = min(lowest ?? .max, entries[i].lane.floor) }
        return lowest
    }
    /// The latest segment id a lane has open (a lost lane gives back the ids above it).
    var latestOpenSegment: Int32? { entries.compactMap { $0.lane.openSegments.max() }.max() }
    /// When the live lane must move to a new connection (GOAWAY). Only the live lane moves, and
    /// only once it has caught up with its replay (`LaneSupervisor.rotate`): a deadline of any
    /// other lane (one a stop ended before its move) or of a replaying one was due at every
    /// step, and the worker's turns spun until that lane finished.
    var nextMoveDeadline: UInt64? {
        guard let live, let i = index(of: live), entries[i].lane.cursor == nil else { return nil }
        return entries[i].lane.moveBy
    }
    /// Why the live lane is to move by `nextMoveDeadline`.
    var liveMoveWhy: String { live.flatMap { read($0) { $0.moveWhy } } ?? Lane.goingAway }
    /// The earliest time a lane's start must be acknowledged by.
    var nextStartDeadline: UInt64? {
        var next: UInt64?
        for i in entries.indices where entries[i].lane.startDue != .max { next = min(next ?? .max, entries[i].lane.startDue) }
        return next
    }
    /// When the replay of the first lane in audio order, held back by a backlog that has not
    /// fallen, is due to be given up. Only that lane's clock runs, as for `nextFinishDeadline`: a
    /// server that serves a context's streams one at a time reads a later one only once the
    /// earlier one is done (that lane's clock starts afresh when it becomes the first, `remove`).
    func nextReplayStallDeadline(timeout: UInt64) -> UInt64? {
        firstIndex.flatMap { entries[$0].lane.replayStall.map { $0.since &+ timeout } }
    }
    /// The first lane in audio order when its replay has not moved for `timeout`: its server
    /// took none of it.
    func replayStalled(at now: UInt64, timeout: UInt64) -> [Int] {
        guard let i = firstIndex, let stall = entries[i].lane.replayStall, now >= stall.since &+ timeout else { return [] }
        return [entries[i].generation]
    }

    /// When the `finished` of the first lane in audio order is due (since when it is awaited
    /// plus `timeout`). Only that lane's clock runs: a server working through a context's
    /// streams in order (one Whisper model, a small machine) answers a later stream only after
    /// the earlier one, and a later stream timed from its own stop was cut while the server
    /// was still busy with the stream before it (its words lost once the replay buffer no
    /// longer held them). A later lane's clock starts when it becomes the first (`remove`).
    func nextFinishDeadline(timeout: UInt64) -> UInt64? {
        firstIndex.flatMap { entries[$0].lane.awaitingFinishSince.map { $0 &+ timeout } }
    }
    /// The first lane in audio order when it is stopped, caught up with its replay, awaits its
    /// `finished`, and its server answered as it heard (`Lane.heardBeforeStop`): its floor and
    /// end, and since when its server has been silent (the finish clock's start or restart, or
    /// the last response on it, whichever is later).
    /// A lane stopped to probe a quiet server (`Lane.probedQuiet`) counts too, said by `probed`.
    var firstAwaitingFinish: (generation: Int, floor: Int, end: Int?, quietSince: UInt64, probed: Bool)? {
        guard let i = firstIndex else { return nil }
        let lane = entries[i].lane
        guard lane.stopSent, lane.heardBeforeStop || lane.probedQuiet, lane.cursor == nil,
              let since = lane.awaitingFinishSince else { return nil }
        return (entries[i].generation, lane.floor, lane.end, max(since, lane.lastHeardAt ?? 0), lane.probedQuiet)
    }
    /// The first lane in audio order when it is stopped and not finished within `timeout`.
    func unfinished(at now: UInt64, timeout: UInt64) -> [Int] {
        guard let i = firstIndex, let at = entries[i].lane.awaitingFinishSince, now >= at &+ timeout else { return [] }
        return [entries[i].generation]
    }
    /// The lanes whose start was not acknowledged in time, oldest stream first, as they are now
    /// (ending one may change or remove the others: each is still cancelled).
    func unacknowledged(at now: UInt64) -> [(generation: Int, lane: Lane)] {
        entries.filter { now >= $0.lane.startDue }
    }
}
