import Testing
@testable import SpeechClient

/// The connection side of a context alone, without a client, a worker or a server: which audio
/// each stream is given, in which order, when a lane moves, is lost, is replaced, and what the
/// context is told when its audio cannot be carried on. Chunk k holds the sample value k, so a
/// stream's log names exactly the chunks it was sent.
@Suite struct LaneSupervisorTests {
    /// A stream that writes down what it is given.
    final class RecordingStream: RecognitionStream, @unchecked Sendable {
        var log: [String] = []
        /// The samples of each audio message, in order.
        var audioCounts: [Int] = []
        var backlog = 0
        /// Bytes each audio message adds to `backlog` (a stream that does not drain by itself).
        var backlogPerAudio = 0
        /// Its `started` is its own (Riva, Wyoming).
        var ownStarted = false
        var serverAcknowledgesStart: Bool { !ownStarted }
        func send(_ request: SLURequest) {
            if case .audio(let samples) = request { audioCounts.append(samples.count); backlog += backlogPerAudio }
            switch request {
            case .config: log.append("config")
            case .start: log.append("start")
            case .audio(let samples): log.append("audio \(samples.first ?? -1)")
            case .stop: log.append("stop")
            case .rttResponse: log.append("rtt")
            }
        }
        func finish() { log.append("finish") }
        func cancel() { log.append("cancel") }
        var backlogBytes: Int { backlog }
        func notifyWhenBacklog(atMost bytes: Int, _ body: @escaping @Sendable () -> Void) -> Bool { false }
    }

    /// The worker's side: a stream per lane (or an error), and what the supervisor reports.
    final class Host: LaneHost {
        var streams: [RecordingStream] = []
        var openError: SpeechClientError?
        var newStreamBacklog = 0
        var newStreamBacklogPerAudio = 0
        var connectCancelled = false
        var liveAudioEnded = false
        var contextId = "ctx"
        /// Each report as its state, attempt and reason ("reconnecting 1", "unavailable 0 connection refused").
        var reports: [String] = []
        var failure: SpeechClientError?
        /// What the worker does when a context fails: it ends it, and may begin the next at once.
        var onFail: (() -> Void)?
        var logs: [String] = []

        /// Opening fails with `openError` once this many streams are open.
        var openFailsAfter = Int.max
        /// New streams say `started` themselves.
        var ownStarted = false

        func takeStream() throws(SpeechClientError) -> (generation: Int, stream: any RecognitionStream)? {
            if let openError, streams.count >= openFailsAfter || openFailsAfter == .max { throw openError }
            let stream = RecordingStream()
            stream.backlog = newStreamBacklog
            stream.backlogPerAudio = newStreamBacklogPerAudio
            stream.ownStarted = ownStarted
            streams.append(stream)
            return (streams.count, stream)
        }
        func report(_ state: ConnectionState, attempt: Int, delayMilliseconds: Int, reason: SpeechClientError?) {
            reports.append("\(state) \(attempt)" + (reason.map { " \($0.message)" } ?? ""))
        }
        func failContext(_ error: SpeechClientError) {
            failure = error
            onFail?()
        }
        func endContextIfDone() {}
        func log(_ level: LogLevel, _ message: String) { logs.append(message) }
        var overflows: [Range<Int>] = []
        func replayOverflowed(from: Int, to: Int) { overflows.append(from..<to) }
    }

    static let chunkSamples = 1_600  // 100 ms

    func chunk(_ k: Int) -> [Int16] { [Int16](repeating: Int16(k), count: Self.chunkSamples) }

    /// Reconnection at once (no delay), so a test can attempt it right after the loss.
    func supervisor(_ configure: (inout ClientOptions) -> Void = { _ in }) -> LaneSupervisor {
        var options = ClientOptions()
        options.reconnectInitialDelayMilliseconds = 0
        configure(&options)
        let s = LaneSupervisor(options: options)
        s.begin()
        return s
    }

    func lost(_ s: LaneSupervisor, lane gen: Int, host: Host) {
        // What the worker does when a lane's stream closes before its `finished`.
        guard let lane = s.lanes[gen] else { Issue.record("no lane \(gen)"); return }
        let wasLive = s.lanes.remove(gen)
        s.laneLost(from: lane.floor, end: wasLive ? nil : lane.end, cause: SpeechClientError(.network, "connection reset"),
                   servedLongEnough: false, host: host)
    }

    /// Chunks 0-2 on lane 1, a rotation, chunk 3 on lane 2.
    func rotateAfterThreeChunks(_ s: LaneSupervisor, host: Host) throws {
        try s.openLane(from: 0, end: nil, host: host)
        for k in 0..<3 { s.sendAudio(chunk(k), host: host) }
        s.rotate(reason: "a test", host: host)
        s.sendAudio(chunk(3), host: host)
    }

    /// Whether a pushed chunk may move the live lane (the pushing thread then leaves it to the
    /// worker) is answered exactly: past half the budget, a chunk with no pause in it does not
    /// move the lane, and is not handed to the worker. Before, every chunk from half the budget
    /// on was (a worker wake-up per chunk of a stream without pauses).
    @Test func mayRotateSaysExactlyWhetherAChunkMovesTheLane() throws {
        let s = supervisor { $0.streamBudgetBytes = 65_536 }, host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        var mispredicted: [Int] = []
        var moves = 0
        for k in 0..<90 {
            // Loud (steady, no pause), with 200 ms of silence every 3 s.
            let c = [Int16](repeating: k % 30 >= 28 ? 0 : 3_000, count: Self.chunkSamples)
            var chunks = Chunker.Chunks()
            chunks.append(c)
            let predicted = s.mayRotate(before: chunks)
            // A move is logged (its new stream may wait for a slot: the fake finishes none).
            let movesLogged = { host.logs.filter { $0.contains("continues on a new stream") }.count }
            let before = movesLogged()
            s.sendAudio(c, host: host)
            let moved = movesLogged() > before
            if moved { moves += 1 }
            if predicted != moved { mispredicted.append(k) }
            // The fake finishes no stream: once the lanes in flight are at their bound, the next
            // waits for a slot, and every chunk is the worker's (it may open it).
            if s.reconnection.nextWaiting != nil { break }
        }
        #expect(moves >= 3)
        #expect(mispredicted.isEmpty, "\(mispredicted)")
    }

    @Test func aRotationEndsTheLiveLaneAndTheNextChunkGoesToANewStream() throws {
        let s = supervisor(), host = Host()
        try rotateAfterThreeChunks(s, host: host)
        #expect(host.streams[0].log == ["start", "audio 0", "audio 1", "audio 2", "stop", "finish"])
        #expect(host.streams[1].log == ["start", "audio 3"])
        #expect(s.lanes.live == 2)
        #expect(s.lanes[1]?.end == 3 * Self.chunkSamples && s.lanes[1]?.stopSent == true)
        #expect(s.replayPoint == 0 && s.unfinishedSamples == 4 * Self.chunkSamples)  // nothing final yet
        // After the user's stop no lane moves any more.
        host.liveAudioEnded = true
        s.rotate(reason: "too late", host: host)
        #expect(host.streams.count == 2)
    }

    /// A stream whose `started` is its own is served from the server's first answer in the
    /// context, not from its open: a server that takes every stream and fails it after 5 s
    /// without a word must run out of attempts (each loss counted as progress before).
    @Test func aLaneWhoseStartedIsItsOwnIsServedOnlyOnceTheServerAnswered() throws {
        let s = supervisor(), host = Host()
        host.ownStarted = true
        let five: UInt64 = 5_000_000_000
        let reset = SpeechClientError(.network, "connection reset")
        try s.openLane(from: 0, end: nil, host: host)
        _ = s.laneStarted(1, serverContext: "r1")
        let later = Clock.monotonicNanos() + 2 * five
        #expect(s.lanes[1]?.wasServed(until: later, servedFor: five, lostTo: reset) == false)
        s.responseArrived(SLUResponse(audioContext: "r1", segmentId: 0, payload: .transcript(SLUWord(text: "hi", index: 0, startMilliseconds: 0, endMilliseconds: 100))), lane: 1)
        #expect(s.lanes[1]?.wasServed(until: Clock.monotonicNanos() + 2 * five, servedFor: five, lostTo: reset) == true)
        // Its next lane in the context: served from its own `started`, the server proven.
        s.rotate(reason: "a test", host: host)
        s.sendAudio(chunk(0), host: host)
        _ = s.laneStarted(2, serverContext: "r2")
        #expect(s.lanes[2]?.wasServed(until: Clock.monotonicNanos() + 2 * five, servedFor: five, lostTo: reset) == true)
        // A new context starts unproven again.
        s.end()
        s.begin()
        try s.openLane(from: 0, end: nil, host: host)
        _ = s.laneStarted(3, serverContext: "r3")
        #expect(s.lanes[3]?.wasServed(until: Clock.monotonicNanos() + 2 * five, servedFor: five, lostTo: reset) == false)
        // A server's own `started` (Speechly) is its answer.
        host.ownStarted = false
        s.end()
        s.begin()
        try s.openLane(from: 0, end: nil, host: host)
        _ = s.laneStarted(4, serverContext: "s4")
        #expect(s.lanes[4]?.wasServed(until: Clock.monotonicNanos() + 2 * five, servedFor: five, lostTo: reset) == true)
    }

    @Test func aLostLiveLaneIsReplayedFromItsFloorThenTakesLiveAudioAgain() throws {
        let s = supervisor(), host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        for k in 0..<4 { s.sendAudio(chunk(k), host: host) }
        s.lanes[1]?.floor = 2 * Self.chunkSamples  // chunks 0 and 1 are in final segments
        lost(s, lane: 1, host: host)
        #expect(host.reports == ["reconnecting 1"])
        s.sendAudio(chunk(4), host: host)  // recorded while disconnected: kept for the replay
        #expect(host.streams.count == 1)
        s.attemptReconnect(host: host)
        s.sendAudio(chunk(5), host: host)
        #expect(host.streams[1].log == ["start", "audio 2", "audio 3", "audio 4", "audio 5"])
        #expect(host.reports == ["reconnecting 1", "ready 0"])
        #expect(host.logs.contains("reconnected; replaying 0.3 s of audio"), "\(host.logs)")
        #expect(s.lanes.live == 2 && !s.lanes.replaying && host.failure == nil)
    }

    /// A final word's end raises the floor only within the audio the lane sent: a server's time
    /// far past it (Riva's end_time of 2e9 ms) raised the floor over every sample recorded, so a
    /// loss replayed nothing and the words still open on the lane were lost without an error.
    @Test func aFinalWordEndingPastTheSentAudioDoesNotRaiseTheFloor() throws {
        let s = supervisor(), host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        for k in 0..<4 { s.sendAudio(chunk(k), host: host) }
        s.segmentUpdated(lane: 1, segment: 0, isFinal: true, endMilliseconds: 2_000_000_000)
        #expect(s.lanes[1]?.floor == 0)
        s.segmentUpdated(lane: 1, segment: 1, isFinal: true, endMilliseconds: 150)  // a real one
        #expect(s.lanes[1]?.floor == 2_400)
        // Within rounding past the sent audio (400 ms): capped at what was sent.
        s.segmentUpdated(lane: 1, segment: 2, isFinal: true, endMilliseconds: 450)
        #expect(s.lanes[1]?.floor == 4 * Self.chunkSamples)
        // Lost now, the lane's open words are replayed from there, not from past every sample.
        s.segmentUpdated(lane: 1, segment: 3, isFinal: false, endMilliseconds: nil)
        s.sendAudio(chunk(4), host: host)
        lost(s, lane: 1, host: host)
        s.attemptReconnect(host: host)
        #expect(host.streams[1].log == ["start", "audio 4"])
    }

    @Test func aLiveChunkNeverOvertakesTheReplay() throws {
        let s = supervisor(), host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        for k in 0..<2 { s.sendAudio(chunk(k), host: host) }
        lost(s, lane: 1, host: host)
        host.newStreamBacklog = LaneSupervisor.backlogLimit + 1  // the new stream has not drained
        s.attemptReconnect(host: host)
        s.sendAudio(chunk(2), host: host)
        #expect(host.streams[1].log == ["start"] && s.lanes.replaying)
        host.streams[1].backlog = 0
        #expect(s.pumpReplay(host: host))
        s.sendAudio(chunk(3), host: host)
        #expect(host.streams[1].log == ["start", "audio 0", "audio 1", "audio 2", "audio 3"])
    }

    @Test func aLaneLostWhileDrainingIsReplayedToItsEndAndStopped() throws {
        let s = supervisor(), host = Host()
        try rotateAfterThreeChunks(s, host: host)
        lost(s, lane: 1, host: host)  // the old lane, before its finished
        s.attemptReconnect(host: host)
        #expect(host.streams[2].log == ["start", "audio 0", "audio 1", "audio 2", "stop", "finish"])
        #expect(s.lanes.live == 2)  // the live lane was not touched
        #expect(host.streams[1].log == ["start", "audio 3"])
    }

    @Test func audioTheBufferNoLongerHeldIsNotedAsLost() throws {
        let s = supervisor { $0.replayBufferMilliseconds = 200 }, host = Host()  // two chunks
        try s.openLane(from: 0, end: nil, host: host)
        for k in 0..<4 { s.sendAudio(chunk(k), host: host) }
        lost(s, lane: 1, host: host)
        s.attemptReconnect(host: host)
        #expect(host.streams[1].log == ["start", "audio 2", "audio 3"])
        let pending = s.reconnection.takePendingLoss()  // reported by the worker at `started`
        let loss = try #require(pending)
        #expect(loss.from == 0 && loss.to == 2 * Self.chunkSamples)
    }

    /// Audio the buffer drops while a replay waits for its stream to drain (the buffer filled
    /// meanwhile) is said lost, with its range: the replay skipped it quietly.
    @Test func audioDroppedWhileAReplayWaitsIsSaidLost() throws {
        let s = supervisor { $0.replayBufferMilliseconds = 300 }, host = Host()  // three chunks
        try s.openLane(from: 0, end: nil, host: host)
        for k in 0..<2 { s.sendAudio(chunk(k), host: host) }
        lost(s, lane: 1, host: host)
        host.newStreamBacklog = LaneSupervisor.backlogLimit + 1  // the new stream has not drained
        s.attemptReconnect(host: host)
        #expect(s.reconnection.takePendingLoss() == nil)  // nothing lost when it reconnected
        for k in 2..<5 { s.sendAudio(chunk(k), host: host) }  // chunks 0 and 1 leave the buffer
        host.streams[1].backlog = 0
        #expect(s.pumpReplay(host: host))
        #expect(host.streams[1].log == ["start", "audio 2", "audio 3", "audio 4"])
        #expect(host.overflows == [0..<2 * Self.chunkSamples])
        // The stream's audio begins 200 ms later in the context than the lane: its times move.
        #expect(s.lanes[2]?.gaps == [Lane.Gap(streamMilliseconds: 0, milliseconds: 200)])
    }

    /// Audio dropped in the middle of a replay (after some of it went out): the stream's audio
    /// jumps there, so the server's times after that point are early by the gap. The lane
    /// keeps where and how long, and the times are moved by it (before: early by the gap).
    @Test func audioDroppedInTheMiddleOfAReplayMovesTheTimesAfterIt() throws {
        let s = supervisor { $0.replayBufferMilliseconds = 300 }, host = Host()  // three chunks
        try s.openLane(from: 0, end: nil, host: host)
        for k in 0..<2 { s.sendAudio(chunk(k), host: host) }
        lost(s, lane: 1, host: host)
        // The new stream takes chunk 0, then fills (it is not draining).
        host.newStreamBacklog = LaneSupervisor.backlogLimit
        host.newStreamBacklogPerAudio = 1
        s.attemptReconnect(host: host)
        #expect(host.streams[1].log == ["start", "audio 0"])
        for k in 2..<5 { s.sendAudio(chunk(k), host: host) }  // chunks 0 and 1 leave the buffer
        host.streams[1].backlog = 0
        host.streams[1].backlogPerAudio = 0
        #expect(s.pumpReplay(host: host))
        #expect(host.streams[1].log == ["start", "audio 0", "audio 2", "audio 3", "audio 4"])
        #expect(host.overflows == [Self.chunkSamples..<2 * Self.chunkSamples])
        let gaps = try #require(s.lanes[2]?.gaps)
        #expect(gaps == [Lane.Gap(streamMilliseconds: 100, milliseconds: 100)])
        let word = { (start: Int32, end: Int32) in SLUWord(text: "w", index: 0, startMilliseconds: start, endMilliseconds: end) }
        let words = [word(0, 100), word(100, 150), word(150, 250), word(-1, -1)]
        guard case .finalTranscript(let moved, _) = ContextNumbering().userTimes(.finalTranscript(words, confidence: -1), serverContext: "x", gaps: gaps) else {
            Issue.record("not a final")
            return
        }
        // Ending at the gap: before it; starting at it: after it; unknown: unknown.
        #expect(moved.map(\.startMilliseconds) == [0, 200, 250, -1])
        #expect(moved.map(\.endMilliseconds) == [100, 250, 350, -1])
        #expect(s.lanes[2]?.contextSample(streamMilliseconds: 150) == 250 * 16)
        #expect(s.lanes[2]?.contextSample(streamMilliseconds: 50) == 50 * 16)
    }

    @Test func whenTheAttemptsRunOutTheErrorNamesTheAudioNotTranscribed() throws {
        let s = supervisor { $0.reconnectAttempts = 1 }, host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        for k in 0..<4 { s.sendAudio(chunk(k), host: host) }
        s.lanes[1]?.floor = Self.chunkSamples
        lost(s, lane: 1, host: host)
        host.openError = SpeechClientError(.network, "connection refused")
        s.attemptReconnect(host: host)
        let failure = try #require(host.failure)
        #expect(failure.code == .network)
        #expect(failure.message.contains("reconnection failed after 1 attempt(s) (connection refused)"), "\(failure.message)")
        #expect(failure.message.contains("the last 0.3 s of audio, from 0.1 s into the context, were not transcribed"), "\(failure.message)")
        #expect(host.reports == ["reconnecting 1", "unavailable 0 connection refused"])
    }

    @Test func aSuspendDuringAnOutageFailsTheContextNamingTheAudio() throws {
        let s = supervisor(), host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        for k in 0..<2 { s.sendAudio(chunk(k), host: host) }
        lost(s, lane: 1, host: host)
        host.openError = SpeechClientError(.network, "interrupted")
        host.connectCancelled = true
        s.attemptReconnect(host: host)
        let failure = try #require(host.failure)
        #expect(failure.message.contains("the client was suspended while reconnecting"), "\(failure.message)")
        #expect(failure.message.contains("the last 0.2 s of audio, from 0.0 s"), "\(failure.message)")
    }

    /// Chunk k, loud unless `quiet`: its first sample is k, the rest decide its level.
    func voiced(_ k: Int, quiet: Bool = false) -> [Int16] {
        var c = [Int16](repeating: quiet ? 0 : 5_000, count: Self.chunkSamples)
        c[0] = Int16(k)
        return c
    }

    /// Each stream's audio chunk numbers, and whether it sent its stop.
    func carried(_ host: Host, from first: Int) -> [(chunks: [Int], stopped: Bool)] {
        host.streams[first...].map { stream in
            (stream.log.compactMap { $0.hasPrefix("audio ") ? Int($0.dropFirst(6)) : nil }, stream.log.contains("stop"))
        }
    }

    /// The bytes a lane of `chunks` chunks carries, as the budget counts them (its start too).
    func laneBytes(chunks: Int) -> Int {
        SLURequest.start(appId: "", options: ClientOptions().contextOptions).encoded().count + 5
            + chunks * Lane.audioBytes(samples: Self.chunkSamples)
    }

    /// Chunks 0...50 carried once, in order, on three lanes each within the 64 KiB budget, the
    /// first two stopped and the last taking live audio.
    func expectChunksZeroToFiftyOnThreeLanesWithinTheBudget(_ s: LaneSupervisor, _ host: Host) {
        let lanes = carried(host, from: 1)
        #expect(lanes.flatMap(\.chunks) == Array(0...50))
        #expect(lanes.count == 3, "\(lanes.map(\.chunks.count))")
        #expect(lanes.allSatisfy { laneBytes(chunks: $0.chunks.count) <= 65_536 })
        #expect(lanes.map(\.stopped) == [true, true, false])
        #expect(s.lanes.live == host.streams.count && !s.lanes.replaying && host.failure == nil)
    }

    /// An outage longer than a stream's budget (64 KiB: 20 chunks of 100 ms): the replay goes
    /// out on several lanes, each within the budget, in order, only the last taking live audio.
    /// Without a pause each is cut at the budget itself.
    @Test func aReplayLongerThanTheBudgetIsCutIntoLanesWithinIt() throws {
        let s = supervisor { $0.streamBudgetBytes = 65_536 }, host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        s.sendAudio(voiced(0), host: host)
        lost(s, lane: 1, host: host)
        for k in 1..<50 { s.sendAudio(voiced(k), host: host) }  // recorded while disconnected
        s.attemptReconnect(host: host)
        s.sendAudio(voiced(50), host: host)
        expectChunksZeroToFiftyOnThreeLanesWithinTheBudget(s, host)
        #expect(host.logs.contains("the replay of 5.0 s is longer than a stream's budget: it goes out on 3 streams"), "\(host.logs)")
    }

    /// The server goes down again after two of a split replay's streams opened: the pieces not
    /// opened wait for the next attempt, and that attempt reopens exactly them, in order.
    @Test func piecesNotOpenedWaitForTheNextAttempt() throws {
        let s = supervisor { $0.streamBudgetBytes = 65_536 }, host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        lost(s, lane: 1, host: host)
        for k in 0..<50 { s.sendAudio(voiced(k), host: host) }
        s.endLiveAudio()
        host.openError = SpeechClientError(.network, "connection refused")
        host.openFailsAfter = 3  // the first stream and two pieces
        s.attemptReconnect(host: host)
        #expect(host.streams.count == 3 && host.failure == nil)
        #expect(host.reports == ["reconnecting 1", "reconnecting 2"])
        host.openError = nil
        s.attemptReconnect(host: host)  // due at once: no delay in these tests
        let lanes = carried(host, from: 1)
        #expect(lanes.flatMap(\.chunks) == Array(0..<50), "\(lanes.map(\.chunks))")
        #expect(lanes.count == 3 && lanes.allSatisfy(\.stopped))
    }

    /// Each lane ended by its stop finishes (the server's `finished`, earliest first) and the
    /// pieces waiting for room open; returns the most lanes that were open at once.
    func finishStoppedLanes(_ s: LaneSupervisor, host: Host) -> Int {
        var most = s.lanes.count
        while let (gen, lane) = s.lanes.first, lane.stopSent {
            s.lanes.remove(gen)
            s.openWaitingPieces(host: host)
            most = max(most, s.lanes.count)
            while s.pumpReplay(host: host) { most = max(most, s.lanes.count) }  // a live lane's moves
        }
        return most
    }

    /// An outage of 20 s against a budget of 2 s: ten pieces. At most `maxOpenLanes` are open
    /// at once; each of the rest opens as an earlier lane finishes, in audio order, every chunk
    /// once, the last taking live audio. Before, all ten streams opened together.
    @Test func aLongReplayOpensAtMostFourStreamsAtOnce() throws {
        let s = supervisor { $0.streamBudgetBytes = 65_536 }, host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        lost(s, lane: 1, host: host)
        for k in 0..<200 { s.sendAudio(voiced(k), host: host) }
        s.attemptReconnect(host: host)
        #expect(host.streams.count == 1 + LaneSupervisor.maxOpenLanes)
        #expect(host.logs.contains { $0.hasPrefix("the replay goes out on 10 streams, at most 4 open at once") }, "\(host.logs)")
        #expect(s.lanes.live == nil && !s.reconnection.isSettled)  // the live piece waits its turn
        #expect(s.replayPoint == 0)  // the buffer keeps what waits
        let most = finishStoppedLanes(s, host: host)
        s.sendAudio(voiced(200), host: host)
        let lanes = carried(host, from: 1)
        #expect(lanes.flatMap(\.chunks) == Array(0...200))
        #expect(lanes.count >= 10 && lanes.allSatisfy { laneBytes(chunks: $0.chunks.count) <= 65_536 })
        #expect(most == LaneSupervisor.maxOpenLanes)
        #expect(s.lanes.live == host.streams.count && s.reconnection.isSettled && host.failure == nil)
    }

    /// Lost again while pieces wait: the next attempt reopens the lost lanes and the waiting
    /// pieces, in audio order, again at most `maxOpenLanes` at once; a finishing lane opens
    /// nothing meanwhile (the attempt will).
    @Test func piecesWaitingWhenTheConnectionIsLostAgainOpenWithTheNextAttempt() throws {
        let s = supervisor { $0.streamBudgetBytes = 65_536 }, host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        lost(s, lane: 1, host: host)
        for k in 0..<200 { s.sendAudio(voiced(k), host: host) }
        s.endLiveAudio()
        s.attemptReconnect(host: host)
        let first = s.lanes.generations
        #expect(first.count == LaneSupervisor.maxOpenLanes)
        for gen in first.dropFirst() { lost(s, lane: gen, host: host) }
        s.lanes.remove(first[0])  // the first finished: its audio is done
        s.openWaitingPieces(host: host)
        #expect(host.streams.count == 1 + LaneSupervisor.maxOpenLanes)
        let next = host.streams.count  // the index of the next stream opened
        s.attemptReconnect(host: host)
        let most = finishStoppedLanes(s, host: host)
        let lanes = carried(host, from: next)
        let firstPiece = carried(host, from: 1)[0].chunks
        #expect(firstPiece + lanes.flatMap(\.chunks) == Array(0..<200), "\(lanes.map(\.chunks))")
        #expect(most == LaneSupervisor.maxOpenLanes && s.lanes.isEmpty && s.reconnection.isSettled && host.failure == nil)
    }

    /// The live piece waits while live audio goes on (a microphone): when it opens it has more
    /// to replay than a stream carries, and moves on the way; each move waits too while four
    /// lanes before it are open. Before, each move opened a stream whatever was open (up to 7).
    /// A 120 s buffer: the 18 s waiting here do not fill half of it (past that, the first piece
    /// waiting opens past the window rather than lose its audio:
    /// `aStreamWaitingForRoomOpensBeforeTheBufferDropsItsAudio`).
    @Test func theLivePieceCatchingUpAfterItsWaitStaysWithinTheWindow() throws {
        let s = supervisor { $0.streamBudgetBytes = 65_536; $0.replayBufferMilliseconds = 120_000 }, host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        lost(s, lane: 1, host: host)
        for k in 0..<200 { s.sendAudio(voiced(k), host: host) }
        s.attemptReconnect(host: host)
        for k in 200..<260 { s.sendAudio(voiced(k), host: host) }  // live, while the live piece waits
        let most = finishStoppedLanes(s, host: host)
        s.sendAudio(voiced(260), host: host)
        let lanes = carried(host, from: 1)
        #expect(lanes.flatMap(\.chunks) == Array(0...260))
        #expect(lanes.allSatisfy { laneBytes(chunks: $0.chunks.count) <= 65_536 })
        #expect(most <= LaneSupervisor.maxOpenLanes, "\(most) lanes open at once")
        #expect(s.lanes.live == host.streams.count && s.reconnection.isSettled && host.failure == nil)
    }

    /// A waiting lane that cannot be opened (the login refused): the context fails, and the
    /// error names the audio not transcribed, from the piece that could not open. The lanes
    /// before it, still finishing, are waited for first (their words still to come): the failure
    /// is the context's once none is left. It failed at once, dropping them.
    @Test func aWaitingPieceThatCannotOpenFailsNamingTheAudioLost() throws {
        let s = supervisor { $0.streamBudgetBytes = 65_536 }, host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        lost(s, lane: 1, host: host)
        for k in 0..<200 { s.sendAudio(voiced(k), host: host) }
        s.attemptReconnect(host: host)
        let (first, _) = try #require(s.lanes.first)
        s.lanes.remove(first)  // finished: as the worker does then, progress, then what waits opens
        s.reconnection.progressed()
        let from = try #require(s.reconnection.nextWaiting?.from)
        host.openError = SpeechClientError(.auth, "login refused")
        s.openWaitingPieces(host: host)
        #expect(host.failure == nil && !s.lanes.isEmpty && s.failsWhenFinished() == nil)  // the lanes before it finish first
        #expect(host.reports.last == "unavailable 0 login refused")
        for gen in s.lanes.generations { s.lanes.remove(gen) }
        let failure = try #require(s.failsWhenFinished())
        #expect(failure.message.contains("reconnection failed after 1 attempt(s) (login refused)"), "\(failure.message)")
        #expect(failure.message.contains("of audio, from \(SpeechAudio.secondsText(samples: from)) s into the context, were not transcribed"), "\(failure.message)")
        #expect(s.failsWhenFinished() == nil)  // once
    }

    /// Lanes later in audio order than a waiting one do not count against the window: they
    /// cannot finish before it (their results wait behind its audio), so it would wait for good.
    @Test func lanesLaterThanAWaitingOneDoNotKeepItWaiting() throws {
        let s = supervisor(), host = Host()
        for k in 0..<10 { s.sendAudio(chunk(k), host: host) }
        for i in 0..<4 {
            let start = (5 + i) * Self.chunkSamples
            s.lanes.add(Lane(stream: RecordingStream(), start: start, end: start + Self.chunkSamples, replayFrom: nil), generation: 100 + i, live: false)
        }
        s.reconnection.wait([(0, 5 * Self.chunkSamples)][...])
        #expect(s.isHeld(100))
        s.openWaitingPieces(host: host)
        #expect(host.streams.count == 1 && s.reconnection.isSettled)
        #expect(host.streams[0].log == ["start"] + (0..<5).map { "audio \($0)" } + ["stop", "finish"])
    }

    /// With a pause past half the budget, the replay is cut inside it, as a live stream moves.
    @Test func aLongReplayIsCutAtAPause() throws {
        let s = supervisor { $0.streamBudgetBytes = 65_536 }, host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        lost(s, lane: 1, host: host)
        for k in 0..<30 { s.sendAudio(voiced(k, quiet: (12...14).contains(k)), host: host) }
        s.endLiveAudio()
        s.attemptReconnect(host: host)
        let lanes = carried(host, from: 1)
        // The cut falls 150 ms into the pause (chunks 12-14), inside chunk 13: the second stream
        // begins with the rest of it (quiet: its first sample is 0).
        #expect(lanes.count == 2 && lanes.allSatisfy(\.stopped))
        #expect(lanes.first?.chunks == Array(0...13), "\(lanes.map(\.chunks))")
        #expect(lanes.last?.chunks == [0] + Array(14..<30), "\(lanes.map(\.chunks))")
    }

    /// Live audio with a pause inside a chunk: the chunk is cut there, the audio before the cut
    /// ending the old stream and the rest beginning the new one; nothing lost or sent twice.
    @Test func theLiveLaneMovesInsideTheChunkWhereThePauseIs() throws {
        let s = supervisor { $0.streamBudgetBytes = 65_536 }, host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        for k in 0..<30 { s.sendAudio(voiced(k, quiet: (12...14).contains(k)), host: host) }
        #expect(host.streams.count == 2)
        let first = host.streams[0], second = host.streams[1]
        #expect(first.audioCounts.reduce(0, +) == 13 * Self.chunkSamples + 800, "\(first.audioCounts)")
        #expect(first.audioCounts.last == 800 && Array(first.log.suffix(2)) == ["stop", "finish"])
        #expect(second.audioCounts.first == 800 && second.log.first == "start")
        #expect(first.audioCounts.reduce(0, +) + second.audioCounts.reduce(0, +) == 30 * Self.chunkSamples)
        #expect(s.contextSamples == 30 * Self.chunkSamples)
    }

    /// A short replay on a stream that drains slowly while live audio goes on (an uplink barely
    /// faster than the audio): the live lane's replay grows past the budget before it catches up.
    /// It moves to new streams on the way, as it would once caught up; before, all of it went
    /// out on the one stream.
    @Test func aLiveLaneFallingBehindWhileReplayingMovesWithinTheBudget() throws {
        let s = supervisor { $0.streamBudgetBytes = 65_536 }, host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        for k in 0..<5 { s.sendAudio(voiced(k), host: host) }
        lost(s, lane: 1, host: host)
        host.newStreamBacklog = LaneSupervisor.backlogLimit + 1  // the new stream drains slowly
        s.attemptReconnect(host: host)
        #expect(host.streams.count == 2)  // 0.5 s to replay: one lane
        for k in 5..<50 { s.sendAudio(voiced(k), host: host) }  // kept for its replay meanwhile
        host.newStreamBacklog = 0
        host.streams[1].backlog = 0
        var rounds = 0
        while s.pumpReplay(host: host) && rounds < 10 { rounds += 1 }
        s.sendAudio(voiced(50), host: host)
        expectChunksZeroToFiftyOnThreeLanesWithinTheBudget(s, host)
    }

    /// A draining lane's replay (it has an end) is cut too; a short one is not.
    @Test func aDrainingLanesLongReplayIsCutAndAShortOneIsNot() throws {
        let s = supervisor { $0.streamBudgetBytes = 65_536 }, host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        for k in 0..<19 { s.sendAudio(voiced(k), host: host) }  // within the budget, no pause: no move
        #expect(host.streams.count == 1)
        #expect(s.replayPieces(from: 0, end: 19 * Self.chunkSamples).count == 1)
        #expect(s.replayPieces(from: 0, end: nil).count == 1)
        s.rotate(reason: "a test", host: host)
        for k in 19..<45 { s.sendAudio(voiced(k), host: host) }
        let pieces = s.replayPieces(from: 0, end: 45 * Self.chunkSamples)
        #expect(pieces.count == 3 && pieces.last?.end == 45 * Self.chunkSamples)
        #expect(zip(pieces, pieces.dropFirst()).allSatisfy { $0.end == $1.from })
    }

    @Test func theEndOfTheLiveAudioStopsTheLaneOnlyOnceItsReplayIsOut() throws {
        let s = supervisor(), host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        s.sendAudio(chunk(0), host: host)
        lost(s, lane: 1, host: host)
        host.newStreamBacklog = LaneSupervisor.backlogLimit + 1
        s.attemptReconnect(host: host)
        s.endLiveAudio()
        #expect(host.streams[1].log == ["start"])  // no stop before the replayed audio
        host.streams[1].backlog = 0
        s.pumpReplay(host: host)
        #expect(host.streams[1].log == ["start", "audio 0", "stop", "finish"])
        s.end()
        #expect(s.lanes.isEmpty && s.replay.bufferedSamples == 0)
        // A lane still finishing when the context ends (a context ends with lanes left only when
        // it failed) is let go too: nothing reads its results any more.
        #expect(host.streams[1].log.last == "cancel")
    }

    @Test func aMoveInterruptedByASuspendIsReplayedOnceTheSuspendIsHandled() throws {
        let s = supervisor(), host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        for k in 0..<2 { s.sendAudio(chunk(k), host: host) }
        host.openError = Cancellation.error
        host.connectCancelled = true
        s.rotate(reason: "a test", host: host)
        s.sendAudio(chunk(2), host: host)
        #expect(host.failure == nil && host.reports == ["reconnecting 1"])
        #expect(host.streams[0].log == ["start", "audio 0", "audio 1", "stop", "finish"])  // it drains
        host.openError = nil
        host.connectCancelled = false
        s.endLiveAudio()  // the suspend stops the context
        s.attemptReconnect(host: host)
        #expect(host.streams[1].log == ["start", "audio 2", "stop", "finish"])
    }

    /// An error not retried names the audio it cost; the application too slow to take its
    /// results costs no audio, and a loss with no audio yet names none.
    @Test func anErrorNotRetriedNamesTheAudioNotTranscribed() throws {
        let s = supervisor(), host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        for k in 0..<20 { s.sendAudio(chunk(k), host: host) }  // 2 s
        let refused = SpeechClientError(.api, "refused")
        #expect(s.notTranscribedError(refused, from: 16_000, end: nil).message
                == "refused; the audio from 1.0 s into the context on was not transcribed (words of it already heard are delivered, unconfirmed)")
        #expect(s.notTranscribedError(refused, from: 0, end: 8_000).message.contains("from 0.0 s to 0.5 s into the context was not transcribed"))
        #expect(s.notTranscribedError(SpeechClientError(.noMemory, "slow"), from: 0, end: nil).message == "slow")
        #expect(s.notTranscribedError(refused, from: 32_000, end: nil).message == "refused")
    }

    /// A server's end of speech (Wyoming: words without times) raises the lane's floor to the
    /// pause it fell in, but only once the finals that arrived before it are applied (held
    /// behind an earlier lane, they are still the lane's to deliver): a loss then replays from
    /// the pause, not from the start (which repeated the utterance). From a server that
    /// transcribes all it is sent, nearer the start of the pause (60 ms into the first of 200 ms):
    /// a guess too late would lose words on a loss.
    @Test func anEndOfSpeechRaisesTheFloorOnceTheFinalsBeforeItAreApplied() throws {
        let s = supervisor(), host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        // 500 ms of speech, 400 ms of pause, 300 ms of speech.
        for k in 0..<12 { s.sendAudio(voiced(k, quiet: (5..<9).contains(k)), host: host) }
        let words = [SLUWord(text: "one", index: 0, startMilliseconds: -1, endMilliseconds: -1)]
        s.responseArrived(SLUResponse(audioContext: "a", segmentId: 0, payload: .finalTranscript(words, confidence: -1)), lane: 1)
        let point = s.serverEndpointed(lane: 1, ignoresTheRest: false, host: host)
        #expect(point == 5 * Self.chunkSamples + Self.chunkSamples)  // 100 ms into the pause
        #expect(s.lanes[1]?.floor == 0)  // its final is not applied yet
        #expect(s.finalApplied(lane: 1))
        #expect(s.lanes[1]?.floor == 5 * Self.chunkSamples + 960)
        lost(s, lane: 1, host: host)
        s.attemptReconnect(host: host)
        #expect(host.streams[1].log == ["start", "audio 0"] + (6..<12).map { "audio \($0)" }, "\(host.streams[1].log)")
        #expect(host.streams[1].audioCounts.first == Self.chunkSamples - 960)
    }

    /// A final without word times from a server that says nothing else of where it ended (Riva
    /// without word offsets): the floor rises to the pause that ended it, looked for only in
    /// what the server had heard (`audio_processed`). Before, the floor never rose on such
    /// finals and a loss replayed them (their words came twice); a pause after what the server
    /// heard may fall inside words not final yet, which a loss would then not replay.
    @Test func anUntimedFinalRaisesTheFloorToAPauseTheServerHadHeard() throws {
        let s = supervisor(), host = Host()
        host.ownStarted = true
        try s.openLane(from: 0, end: nil, host: host)
        _ = s.laneStarted(1, serverContext: "r1")
        // Speech 0-500 ms, a pause to 900 ms, speech to 1.4 s, a pause to 1.8 s, speech to 2 s.
        for k in 0..<20 { s.sendAudio(voiced(k, quiet: (5..<9).contains(k) || (14..<18).contains(k)), host: host) }
        let words = [SLUWord(text: "one", index: 0, startMilliseconds: -1, endMilliseconds: -1)]
        let final = SLUResponse(audioContext: "r1", segmentId: 0, payload: .finalTranscript(words, confidence: -1))
        // Heard to 400 ms: no pause in it, the floor stays.
        s.responseArrived(final, lane: 1)
        _ = s.finalApplied(lane: 1)
        s.untimedFinalArrived(lane: 1, heardMilliseconds: 400, host: host)
        #expect(s.lanes[1]?.floor == 0)
        // Heard to 1.2 s: the first pause, 60 ms into it; not the second one, past 1.2 s.
        s.responseArrived(final, lane: 1)
        _ = s.finalApplied(lane: 1)
        s.untimedFinalArrived(lane: 1, heardMilliseconds: 1_200, host: host)
        #expect(s.lanes[1]?.floor == 5 * Self.chunkSamples + 960)
        // Not said (Int32.max): looked for in all the lane sent, after the last one.
        s.responseArrived(final, lane: 1)
        _ = s.finalApplied(lane: 1)
        s.untimedFinalArrived(lane: 1, heardMilliseconds: Int(Int32.max), host: host)
        #expect(s.lanes[1]?.floor == 14 * Self.chunkSamples + 960)
        lost(s, lane: 1, host: host)
        s.attemptReconnect(host: host)
        #expect(host.streams[1].log == ["start", "audio 0"] + (15..<20).map { "audio \($0)" }, "\(host.streams[1].log)")
    }

    /// A lane brought back to the pause of the server's end of speech after it was sent audio
    /// past it: a new lane sends that audio again, and the old one's later results are dropped.
    @Test func aLaneEndedAtTheServersPauseDropsItsLaterResults() throws {
        let s = supervisor(), host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        for k in 0..<12 { s.sendAudio(voiced(k, quiet: (5..<9).contains(k)), host: host) }
        let later = SLUResponse(audioContext: "a", segmentId: 1, payload: .finalTranscript([], confidence: -1))
        #expect(!s.dropsResult(later, lane: 1))
        s.resumeAfterServerEndpoint(lane: 1, from: s.serverEndpointed(lane: 1, ignoresTheRest: true, host: host), host: host)
        #expect(s.dropsResult(later, lane: 1))
        #expect(!s.dropsResult(SLUResponse(audioContext: "a", segmentId: 0, payload: .finished(errorCode: nil, errorMessage: nil)), lane: 1))
        #expect(s.lanes[1]?.end == 6 * Self.chunkSamples && s.lanes.live == 2)
        // Its floor is its end: all its audio is in its transcript (lost, nothing to replay).
        #expect(s.lanes[1]?.floor == 6 * Self.chunkSamples && s.isAllFinal(1))
        // Not while it holds results (a failure delivers them), nor a lane that carried nothing.
        s.lanes[1]?.held.push(later)
        #expect(!s.isAllFinal(1))
        try s.openLane(from: 6 * Self.chunkSamples, end: 6 * Self.chunkSamples, host: host)
        #expect(!s.isAllFinal(3))
        s.pumpReplay(host: host)
        #expect(host.streams[1].log == ["start"] + (6..<12).map { "audio \($0)" }, "\(host.streams[1].log)")
    }

    /// A live lane still replaying when the server ends an utterance, with no pause in its
    /// audio: it ends where it has sent up to, and a new lane takes the rest (it went on
    /// feeding a server that may ignore it). Its later results are not dropped: nothing it was
    /// sent is sent again.
    @Test func aReplayingLaneWithNoPauseFoundMovesFromWhatItSent() throws {
        let s = supervisor(), host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        for k in 0..<10 { s.sendAudio(voiced(k), host: host) }
        lost(s, lane: 1, host: host)
        s.attemptReconnect(host: host)
        s.lanes[2]?.cursor = 5 * Self.chunkSamples  // it has replayed chunks 0-4
        s.resumeAfterServerEndpoint(lane: 2, from: s.serverEndpointed(lane: 2, ignoresTheRest: true, host: host), host: host)
        #expect(s.lanes[2]?.end == 5 * Self.chunkSamples && s.lanes[2]?.stopSent == true)
        #expect(s.lanes.live == 3 && s.lanes[3]?.start == 5 * Self.chunkSamples)
        #expect(!s.dropsResult(SLUResponse(audioContext: "a", segmentId: 1, payload: .finalTranscript([], confidence: -1)), lane: 2))
        #expect(host.logs.contains { $0.contains("no pause found after its speech") }, "\(host.logs)")
    }

    /// At the close of a server that took one utterance (`.ignoredAfterEndpoint`), the pause is
    /// looked for again when it was not all sent at its transcript.
    @Test func theServersPauseIsFoundAtItsCloseWhenNotSentAtItsTranscript() throws {
        let s = supervisor(), host = Host()
        try s.openLane(from: 0, end: nil, host: host)
        for k in 0..<6 { s.sendAudio(voiced(k, quiet: k == 5), host: host) }  // 100 ms of the pause
        #expect(s.serverEndpointed(lane: 1, ignoresTheRest: false, host: host) == nil)
        for k in 6..<12 { s.sendAudio(voiced(k, quiet: k < 9), host: host) }
        #expect(s.lastEndpoint(of: 1, host: host) == 5 * Self.chunkSamples + Self.chunkSamples)
    }

    @Test func aMoveThatEndsTheContextDoesNotCarryItsChunkIntoTheNext() throws {
        let s = supervisor { $0.reconnectAttempts = 0 }, host = Host()
        defer { host.onFail = nil }  // it holds the host: a cycle (LeakSanitizer's only report)
        host.onFail = {  // a start was queued behind the context: the next one begins at once
            s.end()
            s.begin()
            host.openError = nil
            try? s.openLane(from: 0, end: nil, host: host)
        }
        try s.openLane(from: 0, end: nil, host: host)
        s.sendAudio(chunk(0), host: host)
        s.lanes[1]?.moveBy = 0  // the connection is going away and its drain deadline has passed
        host.openError = SpeechClientError(.network, "connection refused")
        s.sendAudio(chunk(1), host: host)
        #expect(host.failure?.message == "connection refused")
        #expect(s.contextSamples == 0 && host.streams[1].log == ["start"])  // none of the old context's audio
        s.sendAudio(chunk(2), host: host)
        #expect(host.streams[1].log == ["start", "audio 2"])
    }
}
