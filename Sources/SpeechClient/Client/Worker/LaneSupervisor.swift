/// What a `LaneSupervisor` asks of the worker that owns it: streams for new lanes, and what
/// becomes of the context when its audio cannot be carried on.
protocol LaneHost: AnyObject {
    /// A stream for the next lane and its generation: the prepared one, or one opened now. Nil
    /// when none could be had without an error (the lane is then not opened).
    func takeStream() throws(SpeechClientError) -> (generation: Int, stream: any RecognitionStream)?
    /// A suspend or a free interrupted the connect: what failed is not the server's fault.
    var connectCancelled: Bool { get }
    /// The user's live audio has ended (the stop was sent): no lane moves to a new stream any more.
    var liveAudioEnded: Bool { get }
    /// The user's context id, for messages ("" before its first `started`).
    var contextId: String { get }
    func report(_ state: ConnectionState, attempt: Int, delayMilliseconds: Int, reason: SpeechClientError?)
    /// The context cannot go on: its error, then its stop.
    func failContext(_ error: SpeechClientError)
    /// The context ends if its stop was sent and every lane has finished.
    func endContextIfDone()
    func log(_ level: LogLevel, _ message: String)
    /// Audio a lane still had to replay was dropped from the replay buffer (it overflowed while
    /// the lane's stream drained): samples `from..<to` of the context are not transcribed.
    func replayOverflowed(from: Int, to: Int)
}

/// The connection side of one context (issues 5 and 18): its lanes, the audio kept to replay,
/// moving the live lane to a new stream, and replacing lost lanes. Every chunk is kept in the
/// `ReplayBuffer` and sent on the live lane; at a pause (inside a chunk, which is then cut in
/// two) the live lane moves to a new stream when `RotationPolicy` says so (a byte budget, the
/// context limit, a connection going away);
/// a lost lane is replaced after the delay `ReconnectionPlan` sets by a lane that replays its
/// unfinished audio [floor, end) as its stream drains. When the buffer no longer holds that
/// audio, or the attempts run out, the error names exactly which audio was not transcribed.
///
/// The worker owns it and is its `LaneHost`, passed to each call that may need it. The worker's
/// responses tell it what the server said of a lane (started, a segment open or final, going
/// away), and remove a lane lost or finished. A class: the host's calls (a failed context) reset
/// it while one of its own calls runs. Guarded by the worker's `audioLock`, as the worker's other
/// state.
final class LaneSupervisor {
    /// The streams of the open context (see `Lane`), and the one taking live audio.
    var lanes = LaneSet()
    var replay: ReplayBuffer
    /// When the live lane moves to a new stream (byte budget, context limit, GOAWAY).
    var rotation: RotationPolicy
    /// Lanes lost and waiting to be replaced, the next attempt and how many remain.
    var reconnection: ReconnectionPlan
    /// Samples of the user's context recorded so far (sent, or held while disconnected).
    private(set) var contextSamples = 0
    /// Counts the contexts begun and ended: a call that may end the context (a move that fails
    /// it) tells by it whether the context it worked for is still the open one.
    private(set) var epoch = 0
    /// The server answered in this context (a result on any of its lanes). A lane whose
    /// `started` is the stream's own counts as served only from then: a Riva server that took
    /// streams and failed each after 5 s without a word counted each as progress, and was
    /// retried forever with no error (the attempts counting afresh at each loss).
    private(set) var serverAnswered = false
    /// The server sent results on a stream before its stop (`Lane.heardBeforeStop`): it answers
    /// as it hears, so a live stream it leaves quiet may be probed with a stop (`quietLiveDeadline`).
    private(set) var answeredAsItHeard = false
    /// The reconnection attempts ran out while earlier lanes of the context still finished
    /// (their stop sent): the context fails once they have (`failsWhenFinished`), so that their
    /// words, still to come, are delivered. The cause, the attempts, and where the audio no
    /// stream carried begins.
    private(set) var pendingFailure: (cause: SpeechClientError, attempts: Int, from: Int)?

    private let startRequest: SLURequest
    private let startTimeoutNanos: UInt64
    private let reconnectAttempts: Int

    /// A file's stream may hold this much unsent before the worker waits for it to drain; a
    /// replaying lane sends no more than that either. Below the 256 KiB at which a call fails
    /// (GRPCChannel.Configuration.maxQueuedSendBytes) by far more than one block; 64 KiB with
    /// 2 ms naps capped files at ~1,000x real time.
    static let backlogLimit = 160 * 1024

    /// The most lanes a context has open at once (a live lane and one draining are the usual
    /// two): a lane that would pass it waits (`ReconnectionPlan.waiting`) and opens as an earlier
    /// one finishes. All at once, a long outage's replay (a 600 s buffer: 21 streams at the
    /// default budget) was as many streams: a server capping its concurrent calls refused those
    /// past its cap (RESOURCE_EXHAUSTED, not retried: the context failed), one queueing them let
    /// them pass the start timeout, and a later lane's results were held, up to
    /// `Lane.maxHeldBytes`, until every earlier one finished.
    /// Only lanes earlier in audio order count against it: a later one cannot finish before the
    /// lane that waits (its results, `finished` too, are held behind it).
    static let maxOpenLanes = 4

    init(options: ClientOptions) {
        replay = ReplayBuffer(capacitySamples: SpeechAudio.samples(milliseconds: options.replayBufferMilliseconds))
        rotation = RotationPolicy(budgetBytes: options.streamBudgetBytes, contextLimitMilliseconds: options.contextRolloverMilliseconds)
        reconnection = ReconnectionPlan(attempts: options.reconnectAttempts, initialDelayMilliseconds: options.reconnectInitialDelayMilliseconds,
                                        maxDelayMilliseconds: options.reconnectMaxDelayMilliseconds)
        startRequest = SLURequest.start(appId: options.appId ?? "", options: options.contextOptions)
        startTimeoutNanos = UInt64(options.startTimeoutMilliseconds) * 1_000_000
        reconnectAttempts = options.reconnectAttempts
    }

    // MARK: - A context's beginning and end

    /// A new context: nothing recorded, nothing lost (its first lane is opened by `openLane`).
    func begin() {
        epoch += 1
        serverAnswered = false
        pendingFailure = nil
        reconnection.reset()
        replay.reset()
        contextSamples = 0
        rotation.reset()
    }

    /// The context is over: every lane goes (those that did not send their stop are cancelled)
    /// and the audio kept for them with it.
    func end() {
        epoch += 1
        serverAnswered = false
        pendingFailure = nil
        reconnection.reset()
        // Every lane left is let go, those still finishing too: nothing would read their results
        // any more, and a stream whose server never answers held its connection (a Wyoming or
        // Riva socket) and itself for ever, even past spc_client_free.
        for lane in lanes.removeAll() { lane.stream.cancel() }
        replay.reset()
    }

    /// A new lane on a new stream for the audio [from, end) (end nil: live audio), its start
    /// sent. Audio before what was recorded so far is replayed from the buffer as the stream drains.
    func openLane(from: Int, end: Int?, host: some LaneHost) throws(SpeechClientError) {
        guard let (gen, stream) = try host.takeStream() else { return }
        let replayFrom = from < (end ?? contextSamples) ? from : nil
        var lane = Lane(stream: stream, start: from, end: end, replayFrom: replayFrom)
        lane.startDue = Clock.monotonicNanos() + startTimeoutNanos
        stream.send(startRequest)
        lane.bytes = startRequest.encoded().count + 5  // the gRPC prefix
        if end != nil && replayFrom == nil { lane.stop() }
        lanes.add(lane, generation: gen, live: end == nil)
        if end == nil { rotation.reset() }
    }

    /// Opens the lane for [from, end) unless `maxOpenLanes` lanes before it are open: it then
    /// waits, and opens as one of them finishes (`openWaitingPieces`). Returns whether it opened.
    @discardableResult
    private func openOrWait(from: Int, end: Int?, host: some LaneHost) throws(SpeechClientError) -> Bool {
        guard lanes.countStarting(before: from) < Self.maxOpenLanes else {
            reconnection.wait([(from, end)][...])
            return false
        }
        try openLane(from: from, end: end, host: host)
        return true
    }

    // MARK: - Audio out

    /// Every chunk of the context is kept for replay, then sent on the live lane when it is
    /// caught up. Where its budget says so (before the chunk or inside it), the lane moves to a
    /// new stream: the audio before that point ends the old stream, the rest begins the new one.
    func sendAudio(_ chunk: [Int16], host: some LaneHost) {
        let context = epoch
        if let cut = cutIfDue(in: chunk, host: host) {
            // The audio before the pause ends the old stream; the rest begins the new one.
            if cut.offset > 0 {
                append(Array(chunk[..<cut.offset]), host: host)
                guard epoch == context else { return }
            }
            rotate(reason: cut.why, host: host)
            // A move that failed ended the context (and a start queued behind it may have begun
            // the next): the chunk belonged to the ended one, and goes with it, as later ones do.
            guard epoch == context else { return }
            if cut.offset > 0 {
                append(Array(chunk[cut.offset...]), host: host)
                return
            }
        }
        append(chunk, host: host)
    }

    /// A chunk of the context's audio: kept for replay, and sent on the live lane.
    private func append(_ chunk: [Int16], host: some LaneHost) {
        replay.append(chunk)
        contextSamples += chunk.count
        // In place: a copy of the lane and its write-back were a few percent of a file's time.
        lanes.sendLive(chunk)
        if let piece = reconnection.nextWaiting, contextSamples - piece.from >= replay.capacitySamples / 2 {
            openWaitingPieces(host: host, beforeTheirAudioIsDropped: true)
        }
    }

    /// Sending these chunks of live audio may move the live lane to a new stream (which may
    /// connect and log in): the pushing thread then leaves them to the worker.
    /// Once a move is due (past half the budget) it waits for a pause: whether one comes in
    /// these chunks is asked of a copy of `rotation`, the very question `sendAudio` asks of it
    /// next (the same audio, bytes and samples). Answered "due" instead, every chunk of a
    /// stream in its second half without a pause (speech over steady noise, a tone) went
    /// through a worker thread: at 1,000 pushed streams (`make bench`'s paced run, 15-23 s in)
    /// the process made 201,000 context switches in 8 s instead of 20,000, for 80,000 chunks.
    /// A move asked by a deadline (`moveBy`) depends on the time, so the worker decides those.
    func mayRotate(before chunks: Chunker.Chunks) -> Bool {
        // A stream waiting for room may open past the window before any chunk (`sendAudio`).
        if reconnection.nextWaiting != nil { return true }
        guard let gen = lanes.live,
              let (bytes, start, moveBy) = lanes.read(gen, { $0.cursor == nil ? ($0.bytes, $0.start, $0.moveBy) : nil }) ?? nil
        else { return false }
        var streamBytes = bytes, samples = 0
        for c in chunks {  // each chunk is a message of its own: its bytes as `sendAudio` counts them
            streamBytes += Lane.audioBytes(samples: c.count)
            samples += c.count
        }
        guard rotation.isDue(streamBytes: streamBytes, sentSamples: contextSamples + samples - start, moveBy: moveBy) else { return false }
        if moveBy != nil { return true }
        var probe = rotation
        streamBytes = bytes
        samples = 0
        for c in chunks {
            if probe.cut(in: c, streamBytes: streamBytes, sentSamples: contextSamples + samples - start, moveBy: nil, now: 0) != nil { return true }
            streamBytes += Lane.audioBytes(samples: c.count)
            samples += c.count
        }
        return false
    }

    /// The live audio ends here: the live lane (or the repair waiting to replace it) gets its
    /// end, and its stop goes out once its replay has caught up.
    func endLiveAudio() {
        if let gen = lanes.live {
            let end = contextSamples
            lanes.update(gen) { lane in
                lane.end = end
                if lane.cursor == nil { lane.stop() }
            }
            lanes.endLive()
        }
        reconnection.endLiveAudio(at: contextSamples)
    }

    /// The first sample not yet final in every lane (and every lane waiting to be replaced): the
    /// replay buffer keeps audio from here, and a file is not let further ahead than it holds.
    var replayPoint: Int {
        var point = contextSamples
        if let floor = lanes.lowestFloor { point = min(point, floor) }
        if let from = reconnection.earliestRepair { point = min(point, from) }
        return point
    }

    /// Audio recorded and not yet final (in flight at the server, or waiting to be replayed).
    var unfinishedSamples: Int { contextSamples - replayPoint }

    /// Forgets audio every lane has finished with.
    func releaseReplay() { replay.release(upTo: replayPoint) }

    // MARK: - What the server says of a lane (the worker's responses)

    /// Whether a lane's responses wait: it waits behind earlier audio (`waitsBehindEarlierAudio`),
    /// or it still holds responses not applied yet, which a later one must not overtake. The
    /// wait can end between two of the worker's steps (a replacement opening at or after the
    /// lane's start, as after a replay buffer that no longer held the lost audio), and what the
    /// lane held is applied at the end of that step: meanwhile a result taken on the receiving
    /// thread went ahead of the lane's held `started`, and the context failed as malformed.
    func isHeld(_ gen: Int) -> Bool {
        guard let (start, holding) = lanes.read(gen, { ($0.start, !$0.held.isEmpty || $0.endsWhileHeld) }) else { return false }
        return holding || lanes.hasEarlier(than: gen) || reconnection.holdsAudio(before: start)
    }

    /// Whether audio before the lane's is still to be recognised: a lane before it in audio
    /// order is open, or a lost one waits to be replaced (its words come first).
    func waitsBehindEarlierAudio(_ gen: Int) -> Bool {
        guard let start = lanes.read(gen, { $0.start }) else { return false }
        return lanes.hasEarlier(than: gen) || reconnection.holdsAudio(before: start)
    }

    /// The server's context on the lane's stream, once it said `started`.
    func serverContext(of gen: Int) -> String? { lanes.read(gen) { $0.serverContext } ?? nil }

    /// The lane's stream (nil: no such lane).
    func stream(of gen: Int) -> (any RecognitionStream)? { lanes.read(gen) { $0.stream } }

    /// The server acknowledged the lane (`started`), naming its server context: the start
    /// timeout no longer applies. Returns the lane's first sample (nil: no such lane).
    func laneStarted(_ gen: Int, serverContext: String) -> Int? {
        let now = Clock.monotonicNanos()
        let answered = serverAnswered
        return lanes.update(gen) { lane in
            lane.serverContext = serverContext
            if lane.stream.serverAcknowledgesStart || answered { lane.startedAt = now }
            lane.startDue = .max
            return lane.start
        }
    }


    /// A held lane's `started` arrived (applied later, in order): its start timeout no longer applies.
    func laneAcknowledged(_ gen: Int) { lanes.update(gen) { $0.startDue = .max } }

    /// A held lane's `finished` arrived (applied later, in order): its finish timeout no longer applies.
    func laneFinishedHeld(_ gen: Int) {
        lanes.update(gen) { lane in
            lane.awaitingFinishSince = nil
            // Before the lane's stop: the server ended its context early. Said now, as its stop
            // may go out while the `finished` waits (`ClientWorker.handleResponse`).
            if !lane.stopSent { lane.finishedBeforeStop = true }
        }
    }

    /// A response arrived on the lane, applied now or held (or dropped, `dropsResult`): a final
    /// is counted (`Lane.finalsArrived`), and its words restart the clock
    /// of its `finished` once they reach a second further into its audio (`Lane.finalArrived`).
    func responseArrived(_ response: SLUResponse, lane gen: Int) {
        let now = Clock.monotonicNanos()
        lanes.update(gen) { lane in
            lane.heard(at: now)
            // A result while a move to find out whether the server is there waits for a pause:
            // it is there, the move is called off.
            if !lane.stopSent && lane.probedQuiet {
                lane.probedQuiet = false
                lane.moveBy = nil
            }
        }
        if !answeredAsItHeard, lanes.read(gen, { !$0.stopSent }) == true { answeredAsItHeard = true }
        if !serverAnswered {
            serverAnswered = true
            for other in lanes.generations {
                lanes.update(other) { lane in
                    if lane.startedAt == nil && lane.serverContext != nil { lane.startedAt = now }
                }
            }
        }
        let end: Int32
        switch response.payload {
        case .transcript(let word): end = word.endMilliseconds
        case .finalTranscript(let words, _):
            // Counted against its ends of speech (`serverEndpointed`); not those it drops.
            lanes.update(gen) { if !$0.dropsLaterResults { $0.finalsArrived += 1 } }
            guard let last = words.lazy.map(\.endMilliseconds).max() else { return }
            if last < 0 {
                // Words without times (Wyoming, Riva without word offsets): each final is an
                // utterance the server finished, so it is still at work.
                lanes.update(gen) { $0.untimedFinalArrived(now: now) }
                return
            }
            end = last
        default: return
        }
        lanes.update(gen) { $0.finalArrived(endMilliseconds: Int(end), now: now) }
    }

    /// A lane stopped to probe its quiet server (`quietLiveDeadline`, `Lane.probedQuiet`) is
    /// judged too, after a quarter of `quietNanos`: it heard nothing for that long before.
    /// When the first lane in audio order, stopped and awaiting its `finished`, is taken as hung
    /// (nil: not foreseen). The caller asks only while live audio (a microphone, pushed audio,
    /// hands-free listening) still comes into the context: only then does the replay buffer
    /// drop audio (a file waits for the server). Its server answered as it heard
    /// (`Lane.heardBeforeStop`), has said nothing on it for `quietNanos` since its stop (or its
    /// last response, or the end of the lane before it), and the context's audio from the
    /// lane's floor on fills half of the replay buffer: a replica that hung behind a proxy
    /// (which answers the PINGs and takes the audio into its buffers) was waited for until the
    /// finish timeout (60 s) or the proxy's own (HAProxy: 50 s), and by then the buffer (30 s)
    /// had dropped that audio, so its words were lost. The half left is the time a new stream
    /// has to take it, a stream that lands on the hung replica again included (found by the
    /// start timeout). Audio already dropped does not keep it waiting: the replay says what it
    /// no longer holds. A healthy server answers a stop at once, and one slower than real time
    /// still sends finals meanwhile (each restarts the quiet); one that says nothing until a
    /// stream ends (Wyoming, Whisper) is not judged by this.
    /// `unfinished`: that audio, in samples (for the error).
    func hangDeadline(now: UInt64, quietNanos: UInt64) -> (generation: Int, at: UInt64, unfinished: Int, probed: Bool)? {
        guard let first = lanes.firstAwaitingFinish, first.floor < (first.end ?? .max) else { return nil }
        let unfinished = replay.endSample - first.floor
        let atRisk = replay.capacitySamples / 2
        // Not at risk yet: looked at again when the live audio could have brought it there (at
        // least 100 ms on, so that a source that stopped delivering is not polled). At risk, the
        // quiet alone decides (not `now`: a deadline read again later would never be due).
        let riskAt = unfinished >= atRisk ? 0
            : now &+ max(UInt64(SpeechAudio.milliseconds(samples: atRisk - unfinished)) * 1_000_000, 100_000_000)
        // A lane stopped to probe its quiet server has been quiet that long already: a live
        // server answers the stop at once, so a quarter of the quiet decides.
        let quiet = first.probed ? quietNanos / 4 : quietNanos
        return (first.generation, max(first.quietSince &+ quiet, riskAt), unfinished, first.probed)
    }

    /// When the live lane, still taking audio, is moved to a new stream because its server has
    /// gone quiet (nil: not foreseen), so that a hung server is found by the rule above while
    /// the replay buffer still holds the lane's audio. The caller asks only while live audio
    /// comes in, as for `hangDeadline`. Only a stop gives a silent server away (a healthy one is
    /// silent in silence, and answers a stop at once): so a live lane that has heard nothing
    /// for `quietNanos` since its last result (or its start), on a server that answers as it
    /// hears (results on a stream before its stop: `answeredAsItHeard`), is stopped at its next
    /// pause once the context's audio from its floor on fills half the replay buffer. Before, a
    /// replica that froze early in a stream without a pause was stopped only at the full stream
    /// budget (28 s), found hung 10 s later, by when a 30 s buffer had dropped the stream's
    /// first seconds. In speech, a server that answers as it hears is never that quiet; in
    /// silence the lane would move at its half budget anyway.
    /// Not with a replay buffer under twice the quiet: the stop, its answer's wait and the
    /// replay could not come before its audio is dropped, and each probe would cost a stream.
    func quietLiveDeadline(now: UInt64, quietNanos: UInt64) -> (generation: Int, at: UInt64)? {
        guard answeredAsItHeard,
              UInt64(SpeechAudio.milliseconds(samples: replay.capacitySamples)) * 1_000_000 >= 2 * quietNanos,
              let gen = lanes.live,
              let (floor, quietSince) = lanes.read(gen, { lane -> (Int, UInt64)? in
                  guard !lane.stopSent, lane.cursor == nil, lane.moveBy == nil, lane.startDue == .max,
                        let since = lane.lastHeardAt ?? lane.startedAt else { return nil }
                  return (lane.floor, since)
              }) ?? nil else { return nil }
        let unfinished = replay.endSample - floor
        let atRisk = replay.capacitySamples / 2
        let riskAt = unfinished >= atRisk ? 0
            : now &+ max(UInt64(SpeechAudio.milliseconds(samples: atRisk - unfinished)) * 1_000_000, 100_000_000)
        return (gen, max(quietSince &+ quietNanos, riskAt))
    }

    /// The server ended a held lane's stream cleanly (or that was dealt with: `false`).
    func setEndedWhileHeld(_ gen: Int, _ ended: Bool) { lanes.update(gen) { $0.endedWhileHeld = ended } }
    /// A held lane failed (its failure waits for the lanes before it), or that was dealt with.
    /// Failed, it is inert: nothing of it is due any more (a start not acknowledged, a finish,
    /// a replay), it takes no audio and does not move. Its start deadline stayed due: each step
    /// expired it again, found it failed already and changed nothing, and the worker spun, the
    /// finish timeout and reconnection behind that expiry never reached (a context hung).
    func setFailedWhileHeld(_ gen: Int, _ failure: SpeechClientError?) {
        lanes.update(gen) { lane in
            lane.failedWhileHeld = failure
            guard failure != nil else { return }
            lane.startDue = .max
            lane.awaitingFinishSince = nil
            lane.replayStall = nil
            lane.cursor = nil
            lane.moveBy = nil
        }
        if failure != nil && lanes.live == gen { lanes.endLive() }
    }

    /// The connection of a lane is going away: the live lane moves to a new stream at its next
    /// pause, by `moveBy`. Returns whether that was set now (not before, and the lane is live).
    func moveLiveLane(_ gen: Int, by moveBy: UInt64, why: String) -> Bool {
        guard gen == lanes.live else { return false }
        return lanes.update(gen) { lane -> Bool in
            guard lane.moveBy == nil else { return false }
            lane.moveBy = moveBy
            lane.moveWhy = why
            return true
        } ?? false
    }

    /// The server ended an utterance on the lane by itself (`StreamEvent.endpointed`): where, as
    /// far as the audio tells, in what the lane was sent after the last such point. Returns
    /// where a new stream would resume (`RotationPolicy.resumePoint`; nil: no pause found, or
    /// its audio no longer held).
    /// The lane's floor rises once the finals that arrived before are applied (`finalApplied`),
    /// so a lane lost after it replays only what follows: to that point when the server may
    /// ignore the rest (the lane ends there), else to the first pause of 200 ms after speech, 60
    /// ms into it, before that point or at it: a guess past the server's real end of speech
    /// would lose, on a loss, the words between (one before it repeats them; shorter pauses are
    /// common inside an utterance, and no server ends one on less).
    /// `heard`: the server had heard the lane's audio up to this sample (an untimed final's
    /// `heardMilliseconds`): the pause is looked for before it.
    @discardableResult
    func serverEndpointed(lane gen: Int, ignoresTheRest: Bool, heard: Int? = nil, host: some LaneHost) -> Int? {
        let live = gen == lanes.live && !host.liveAudioEnded
        guard let (after, sent) = lanes.read(gen, { lane in
            (max(lane.floor, lane.lastEndpoint ?? lane.start),
             min(lane.cursor ?? (live ? contextSamples : (lane.end ?? contextSamples)), heard ?? .max))
        }), after >= replay.oldestSample, after < sent else { return nil }
        let audio = replay.chunks(from: after, upTo: sent)
        let found = RotationPolicy.pausesAfterSpeech(in: audio, from: after, [(300, 100), (200, 60)])
        let point = found[0], floor = ignoresTheRest ? point : found[1]
        lanes.update(gen) { lane in
            if let point { lane.lastEndpoint = point }
            if let floor { lane.endpoints.append((lane.finalsArrived, floor)) }
            _ = raiseFloorToEndpoints(&lane)
        }
        return point
    }

    /// A final whose words have no times came on the lane, the server having heard its audio
    /// up to `heardMilliseconds` from the lane's start (`SLUResponse.heardMilliseconds`; Riva
    /// without word offsets). Its end is looked for as a server's end of speech is
    /// (`serverEndpointed`), before what the server had heard: without it, a lost lane replayed
    /// every word already final since its last timed one, and they came twice.
    func untimedFinalArrived(lane gen: Int, heardMilliseconds: Int, host: some LaneHost) {
        guard let heard = lanes.read(gen, { lane in
            heardMilliseconds >= Int(Int32.max) ? nil : lane.contextSample(streamMilliseconds: heardMilliseconds)
        }) else { return }
        serverEndpointed(lane: gen, ignoresTheRest: false, heard: heard, host: host)
    }

    /// Where a new stream would resume after the server's last end of speech on the lane, found
    /// now if it was not then (its pause not all sent yet).
    func lastEndpoint(of gen: Int, host: some LaneHost) -> Int? {
        // Flattened first: the lane's nil (no pause found then) is what asks for the search.
        if let point = lanes.read(gen, { $0.lastEndpoint }) ?? nil { return point }
        return serverEndpointed(lane: gen, ignoresTheRest: true, host: host)
    }

    /// Whether the lane carried audio that is all in final segments (a server's end of speech
    /// ended it there), and holds no results: lost, it has nothing to replay or deliver. Not an
    /// empty lane (a replay whose audio the buffer no longer held: its loss is still to be said).
    func isAllFinal(_ gen: Int) -> Bool {
        lanes.read(gen) { lane in
            guard let end = lane.end, lane.start < end, lane.floor >= end else { return false }
            return lane.held.isEmpty && !lane.endsWhileHeld
        } ?? false
    }

    /// A final result of the lane was applied (in arrival order, by the worker or the receiving
    /// thread, under `audioLock`). Returns whether
    /// its floor rose (audio may be released).
    func finalApplied(lane gen: Int) -> Bool {
        lanes.update(gen) { lane -> Bool in
            lane.finalsApplied += 1
            return raiseFloorToEndpoints(&lane)
        } ?? false
    }

    /// The floor rises to each end of speech whose finals are all applied.
    private func raiseFloorToEndpoints(_ lane: inout Lane) -> Bool {
        var rose = false
        while let first = lane.endpoints.first, first.finalsBefore <= lane.finalsApplied {
            lane.endpoints.removeFirst()
            let floor = min(first.at, lane.end ?? first.at)
            if floor > lane.floor {
                lane.floor = floor
                rose = true
            }
        }
        return rose
    }

    /// A response of the lane that is dropped on arrival: a result after the lane's end
    /// (`Lane.dropsLaterResults`), and one of a kind this client does not know (a newer server's
    /// message), whatever context it names or none. Checked, that one ended the stream when it
    /// came before `started` or named no context; held behind an earlier lane, it counted
    /// against the held results; numbered, it took a user segment id.
    func dropsResult(_ response: SLUResponse, lane gen: Int) -> Bool {
        switch response.payload {
        case .started, .finished, .rttRequest: return false
        case .none: return true
        default: return lanes.read(gen) { $0.dropsLaterResults } == true
        }
    }

    /// How far past the audio a lane sent a final word may end and still count (a server's
    /// frame rounding); further, the time is no evidence of what is final.
    static let finalEndPastTheAudioMilliseconds = 200

    /// A segment update came on the lane. Not final: the lane has it open (dropped if the lane
    /// is lost). Final: the lane ended it, and its audio up to `endMilliseconds` (its last
    /// word's end, within the lane) is final: the lane's floor rises there. Returns whether it
    /// was a final one on a lane still here (audio may then be released).
    /// A final with no words (words a server took back) is no progress: a server that takes its
    /// words back and drops the stream each time must still run out of attempts.
    @discardableResult
    func segmentUpdated(lane gen: Int, segment id: Int32, isFinal: Bool, endMilliseconds: Int?, hasWords: Bool = true) -> Bool {
        let recorded = contextSamples
        let found = lanes.update(gen) { (lane: inout Lane) -> Void in
            if isFinal {
                lane.openSegments.remove(id)
                lane.endedSegments.insert(id)
                // Only a time within the audio the lane sent (a replaying lane has sent up to its
                // cursor) says that audio is final. A server's word ending past it (a hostile or
                // broken one: Riva's end_time of 2e9 ms) once raised the floor over audio not yet
                // transcribed, which a loss then neither replayed nor reported: a time past the
                // sent audio by more than rounding is not taken.
                let sent = lane.cursor ?? lane.end ?? recorded
                if let end = endMilliseconds,
                   SpeechAudio.samples(milliseconds: end) <= sent + SpeechAudio.samples(milliseconds: Self.finalEndPastTheAudioMilliseconds) {
                    lane.floor = min(max(lane.floor, SpeechAudio.samples(milliseconds: end)), sent)
                }
            } else {
                lane.openSegments.insert(id)
            }
        } != nil
        guard found, isFinal else { return false }
        if hasWords { reconnection.progressed() }
        return true
    }

    // MARK: - Rotation

    /// Before each chunk of live audio: where in it the lane moves to a new stream, when
    /// `rotation` says so.
    private func cutIfDue(in chunk: [Int16], host: some LaneHost) -> RotationPolicy.Cut? {
        // Read in place: this runs for every chunk.
        guard let gen = lanes.live,
              let (bytes, start, moveBy) = lanes.read(gen, { $0.cursor == nil ? ($0.bytes, $0.start, $0.moveBy) : nil }) ?? nil,
              !host.liveAudioEnded else { return nil }
        return rotation.cut(in: chunk, streamBytes: bytes, sentSamples: contextSamples - start,
                            moveBy: moveBy, now: Clock.monotonicNanos(), moveWhy: moveBy == nil ? Lane.goingAway : lanes.liveMoveWhy)
    }

    /// The server ended an utterance on the lane and may take nothing more on it: the lane
    /// ends, and a new one starts from `point`, the pause where the server ended the utterance
    /// (`serverEndpointed`), replayed: what was said after it is not lost. Results the old lane
    /// sends later are of that audio, and dropped. No such pause (or its audio no longer held):
    /// the new lane starts where the lane's audio went so far (said in the log).
    /// A lane whose audio had ended already (its stop went out before the server's answer, as a
    /// file's does, or it was learnt only at its close), or that is still replaying, keeps
    /// [start, pause); a new lane takes the rest.
    func resumeAfterServerEndpoint(lane gen: Int, from point: Int?, host: some LaneHost) {
        guard let (end, cursor) = lanes.read(gen, { ($0.end, $0.cursor) }) else { return }
        let live = gen == lanes.live && !host.liveAudioEnded
        let upTo = live ? contextSamples : (end ?? contextSamples)
        // Sent so far: a lane still replaying has not sent the rest.
        let sent = cursor ?? upTo
        let from = min(point ?? sent, upTo)
        let again = point == nil ? "; no pause found after its speech (or its audio is no longer held): nothing is sent again"
            : from < sent ? "; \(SpeechAudio.secondsText(samples: sent - from)) s from its pause are sent again" : ""
        // Sent audio past the pause: what it says of it later, the new lane says again.
        if from < sent { lanes.update(gen) { $0.dropsLaterResults = true } }
        if live && cursor == nil {
            rotate(reason: Lane.serverEndpointed + again, host: host, from: from)
            return
        }
        guard from < upTo else {
            host.log(.info, "context \(host.contextId): \(Lane.serverEndpointed)\(again)")
            return
        }
        // Its audio ends at the pause: a replay not past it yet goes on to it, then stops.
        lanes.update(gen) { lane in
            lane.end = from
            if let cursor = lane.cursor, cursor < from { return }
            lane.cursor = nil
            lane.stop()
        }
        if live {
            lanes.endLive()
            rotation.reset()
        }
        host.log(.info, "context \(host.contextId) goes on on a new stream from \(SpeechAudio.secondsText(samples: from)) s: \(Lane.serverEndpointed)\(again)")
        do throws(SpeechClientError) {
            _ = try openOrWait(from: from, end: live ? nil : upTo, host: host)
        } catch {
            laneLost(from: from, end: live ? nil : upTo, cause: error, servedLongEnough: false, host: host)
        }
    }

    /// The live lane ends here (stop, then end of stream: it drains) and a new lane on a new
    /// stream takes the audio from here (or from `from`, before it: replayed). The application
    /// sees one context.
    func rotate(reason: String, host: some LaneHost, from: Int? = nil) {
        guard let gen = lanes.live, lanes.read(gen, { $0.cursor == nil }) == true, !host.liveAudioEnded else { return }
        let end = min(from ?? contextSamples, contextSamples)
        lanes.update(gen) { lane in
            lane.end = end
            lane.moveBy = nil
            lane.stop()
        }
        lanes.endLive()
        rotation.reset()
        let id = host.contextId
        host.log(.info, "context \(id.isEmpty ? "(not started yet)" : id) continues on a new stream at \(SpeechAudio.secondsText(samples: contextSamples)) s: \(reason)")
        let resume = min(from ?? contextSamples, contextSamples)
        do throws(SpeechClientError) {
            try openOrWait(from: resume, end: nil, host: host)
        } catch {
            // A suspend interrupted the connect: the live audio from here is replayed once it is
            // handled (its stop gives the repair an end), while the lane before drains. Before,
            // that audio was never sent and nothing said so.
            let cause = host.connectCancelled ? SpeechClientError(.network, "the client was suspended while the context moved to a new stream") : error
            laneLost(from: resume, end: nil, cause: cause, servedLongEnough: false, host: host)
        }
    }

    // MARK: - Lost lanes

    /// A lane was lost: its unfinished audio [from, end) is replayed on a new stream after a
    /// delay when the loss is retryable and attempts remain; otherwise the context fails.
    func laneLost(from: Int, end: Int?, cause: SpeechClientError, servedLongEnough: Bool, lane lost: Int? = nil, host: some LaneHost) {
        if let pending = pendingFailure {
            // Given up already, waiting for the lanes before: this one's words will not come.
            pendingFailure = nil
            host.failContext(lostAudioError(pending.cause, attempts: pending.attempts, from: min(pending.from, from)))
            return
        }
        switch reconnection.laneLost((from, end), cause: cause, servedLongEnough: servedLongEnough, now: Clock.monotonicNanos()) {
        case .retry(let attempt, let delay): reportReconnecting(attempt: attempt, delayMilliseconds: delay, cause: cause, host: host)
        case .joinsScheduledAttempt: break
        case .fail(let attempts?): giveUp(cause, attempts: attempts, from: from, besides: lost, host: host)
        case .fail(nil): host.failContext(notTranscribedError(cause, from: from, end: end))
        }
    }

    /// The reconnection attempts ran out for the audio from `from` on. While lanes before it
    /// still finish (their stop sent; `besides` is the lost one itself), the context fails once
    /// they have, their words delivered first: failed at once, it dropped them, and a Wyoming
    /// server, which sends no tentative words, had all of that utterance lost. Their finish
    /// timeout bounds the wait; a loss meanwhile fails it at once.
    private func giveUp(_ cause: SpeechClientError, attempts: Int, from: Int, besides lost: Int? = nil, host: some LaneHost) {
        let others = lanes.generations.filter { $0 != lost }
        let finishing = !others.isEmpty && others.allSatisfy { gen in
            lanes.read(gen) { $0.stopSent && $0.cursor == nil && ($0.end ?? Int.max) <= from } == true
        }
        guard finishing else {
            host.failContext(lostAudioError(cause, attempts: attempts, from: from))
            return
        }
        pendingFailure = (cause, attempts, from)
        // Nothing else opens meanwhile (a piece waiting for room would open as an earlier lane
        // finishes, and the lanes would never all end).
        reconnection.dropRepairs()
        host.log(.info, "context \(host.contextId): reconnection failed after \(attempts) attempt(s) (\(cause.message)); the context fails once the \(others.count) stream(s) before that audio have finished")
    }

    /// A failure waits for the lanes before it (`giveUp`): now none is left, it is the context's.
    func failsWhenFinished() -> SpeechClientError? {
        guard let pending = pendingFailure, lanes.isEmpty else { return nil }
        pendingFailure = nil
        return lostAudioError(pending.cause, attempts: pending.attempts, from: pending.from)
    }

    /// An error not retried (the server's refusal, a protocol error) lost the lane's audio
    /// [from, end) (end nil: to the end of the context): the error says which, as a failed
    /// reconnection does. Later lanes' words are delivered (`applyHeldBeforeFailing`).
    func notTranscribedError(_ error: SpeechClientError, from: Int, end: Int?) -> SpeechClientError {
        let to = min(end ?? contextSamples, contextSamples)
        // The application not taking its results is no audio lost to the server.
        guard to > from, error.code != .noMemory else { return error }
        let span = end == nil ? "from \(SpeechAudio.secondsText(samples: from)) s into the context on"
            : "from \(SpeechAudio.secondsText(samples: from)) s to \(SpeechAudio.secondsText(samples: to)) s into the context"
        return SpeechClientError(error.code, "\(error.message); the audio \(span) was not transcribed (words of it already heard are delivered, unconfirmed)", grpcStatus: error.grpcStatus)
    }

    /// A lost lane will be replaced after `delayMilliseconds` (`reconnection` scheduled it).
    func reportReconnecting(attempt: Int, delayMilliseconds delayMs: UInt64, cause: SpeechClientError, host: some LaneHost) {
        host.report(.reconnecting, attempt: attempt, delayMilliseconds: Int(delayMs), reason: nil)
        let of = reconnectAttempts == ClientOptions.unlimitedReconnects ? "unlimited" : "of \(reconnectAttempts)"
        host.log(.warning, "connection lost during context \(host.contextId) (\(cause.message)); reconnecting in \(delayMs) ms, attempt \(attempt) \(of)")
    }

    /// When it is time: opens a new stream for each lost lane and replays the audio it had not
    /// finished. When the buffer no longer holds all of it, an error says what was lost.
    func attemptReconnect(host: some LaneHost) {
        guard let (attempt, repairs) = reconnection.takeDue(now: Clock.monotonicNanos()) else { return }
        var pending: [ReconnectionPlan.Repair] = []
        for repair in repairs {
            let from = reconnection.replayStart(of: repair, oldestSample: replay.oldestSample)
            let pieces = replayPieces(from: from, end: repair.end)
            if pieces.count > 1 {
                host.log(.info, "the replay of \(SpeechAudio.secondsText(samples: (repair.end ?? contextSamples) - from)) s is longer than a stream's budget: it goes out on \(pieces.count) streams")
            }
            pending += pieces
        }
        if pending.count > Self.maxOpenLanes {
            host.log(.info, "the replay goes out on \(pending.count) streams, at most \(Self.maxOpenLanes) open at once: the rest open as earlier ones finish")
        }
        for (k, repair) in pending.enumerated() {
            let from = repair.from
            do throws(SpeechClientError) {
                // In audio order: once one waits, so does every later one.
                guard try openOrWait(from: from, end: repair.end, host: host) else {
                    reconnection.wait(pending[(k + 1)...])
                    break
                }
            } catch {
                if host.connectCancelled {
                    // Suspended (or freed) during an outage: the context cannot finish. The lanes
                    // not reopened are out of the plan (`takeDue`), so not in `replayPoint`: their
                    // audio, from this one's on (the earliest left), was not transcribed either.
                    host.failContext(lostAudioError(SpeechClientError(.network, "the client was suspended while reconnecting"),
                                                    attempts: attempt, from: min(replayPoint, repair.from)))
                    return
                }
                openFailed(remaining: pending[k...], error: error, attempt: attempt, host: host)
                return
            }
            host.log(.info, "reconnected; replaying \(SpeechAudio.secondsText(samples: (repair.end ?? contextSamples) - from)) s of audio")
        }
        host.report(.ready, attempt: 0, delayMilliseconds: 0, reason: nil)
        _ = pumpReplay(host: host)
        host.endContextIfDone()
    }

    /// Opening the lanes for `remaining` failed with `error` (the first of them): they wait for
    /// the next attempt, or, when none is left, the context fails naming the audio not transcribed.
    private func openFailed(remaining: ArraySlice<ReconnectionPlan.Repair>, error: SpeechClientError, attempt: Int, host: some LaneHost) {
        switch reconnection.attemptFailed(remaining: remaining, error: error, now: Clock.monotonicNanos()) {
        case .giveUp:
            // Where the audio no stream carries begins: the repairs and the pieces waiting are
            // named too; the floors of lanes still finishing are not (their words may come).
            let lost = min(remaining.first?.from ?? contextSamples, reconnection.earliestRepair ?? contextSamples)
            let point = replayPoint
            reconnection.dropRepairs()
            host.report(.unavailable, attempt: 0, delayMilliseconds: 0, reason: error)
            if lanes.isEmpty {
                host.failContext(lostAudioError(error, attempts: attempt, from: point))
            } else {
                giveUp(error, attempts: attempt, from: lost, host: host)
            }
        case .retry(let next, let delay):
            reportReconnecting(attempt: next, delayMilliseconds: delay, cause: error, host: host)
        }
    }

    /// A lane finished: the lanes waiting for room (`openOrWait`) open, in audio order. One that
    /// cannot be opened waits for the next attempt with those after it, as after a lost connection.
    /// `beforeTheirAudioIsDropped`: the first waiting one opens past the window, its audio having
    /// filled half the replay buffer. A server slower than real time (Whisper on a small
    /// machine) kept four streams open for minutes; the microphone's audio waited for room,
    /// and once it filled the buffer, it was lost (52.8 s at the reproduction that found it).
    func openWaitingPieces(host: some LaneHost, beforeTheirAudioIsDropped: Bool = false) {
        guard pendingFailure == nil else { return }  // given up: nothing more opens
        var opened = false
        var pastTheWindow = beforeTheirAudioIsDropped
        while let piece = reconnection.nextWaiting, pastTheWindow || lanes.countStarting(before: piece.from) < Self.maxOpenLanes {
            if pastTheWindow {
                host.log(.info, "context \(host.contextId): a stream opens past the window of \(Self.maxOpenLanes) open streams: its \(SpeechAudio.secondsText(samples: contextSamples - piece.from)) s of audio waiting for room would otherwise leave the replay buffer")
                pastTheWindow = false
            }
            _ = reconnection.takeWaiting()
            let from = reconnection.replayStart(of: piece, oldestSample: replay.oldestSample)
            do throws(SpeechClientError) {
                try openLane(from: from, end: piece.end, host: host)
            } catch {
                if host.connectCancelled {  // as for a move a suspend interrupted (`rotate`)
                    laneLost(from: piece.from, end: piece.end, cause: SpeechClientError(.network, "the client was suspended while a stream of the context opened"),
                             servedLongEnough: false, host: host)
                } else {
                    openFailed(remaining: [piece][...], error: error, attempt: reconnection.lossesWithoutProgress + 1, host: host)
                }
                return
            }
            opened = true
        }
        if opened { _ = pumpReplay(host: host) }
    }

    /// The audio [from, end) of a lost lane as the lanes that replay it, in order: one, unless
    /// it is more than one stream may carry (`replay_buffer_ms` above the stream budget's audio,
    /// or the server context's limit). Then it is cut where a live stream would have moved, by
    /// the same `RotationPolicy`: at a pause past half the budget, at the budget itself when
    /// there is none. Only the last piece of a live lane's audio (end nil) takes live audio.
    func replayPieces(from: Int, end: Int?) -> [ReconnectionPlan.Repair] {
        var pieces: [ReconnectionPlan.Repair] = []
        var policy = rotation
        policy.reset()
        let startBytes = startRequest.encoded().count + 5
        var pieceStart = from, bytes = startBytes, at = from
        for chunk in replay.chunks(from: from, upTo: end ?? contextSamples) {
            if at > pieceStart,
               let cut = policy.cut(in: chunk, streamBytes: bytes, sentSamples: at - pieceStart, moveBy: nil, now: 0) {
                pieces.append((pieceStart, at + cut.offset))
                policy.reset()
                pieceStart = at + cut.offset
                bytes = startBytes
                if cut.offset > 0 {  // the rest of the chunk begins the next piece
                    bytes += Lane.audioBytes(samples: chunk.count - cut.offset)
                    at += chunk.count
                    continue
                }
            }
            bytes += Lane.audioBytes(samples: chunk.count)
            at += chunk.count
        }
        pieces.append((pieceStart, end))
        return pieces
    }

    /// Sends replay audio on every lane that has some, while its stream's send backlog is under
    /// `backlogLimit`; a lane with an end sends its stop once all of it is out, a live lane then
    /// takes live audio again. Returns whether it made progress.
    ///
    /// The live lane's replay grows with the live audio while its stream drains slowly (an
    /// uplink barely faster than the audio): it moves to a new stream where `rotation` says,
    /// as it would once caught up, so that no stream outgrows its budget while it catches up.
    @discardableResult
    func pumpReplay(host: some LaneHost) -> Bool {
        var sent = false
        let now = Clock.monotonicNanos()
        for gen in lanes.generations {
            var lost: (from: Int, to: Int)?
            var moveAt: (sample: Int, why: String)?
            let live = gen == lanes.live && !host.liveAudioEnded
            let done = lanes.update(gen) { lane -> Bool in
                // Checked first: this runs each time the worker looks while the stream drains.
                guard let cursor = lane.cursor else { return false }
                let backlog = lane.stream.backlogBytes
                guard backlog <= Self.backlogLimit else {
                    lane.noteReplayBacklog(backlog, now: now)
                    return false
                }
                lane.replayStall = nil
                let target = lane.end ?? replay.endSample
                // The buffer dropped audio the lane had still to send (it filled while the
                // stream drained): skipped, and said, not skipped quietly.
                if cursor < replay.oldestSample {
                    let resume = min(replay.oldestSample, target)
                    lost = (cursor, resume)
                    // The stream's audio goes on after the gap: its later times are moved by it.
                    lane.skip(from: cursor, to: resume)
                }
                var at = max(cursor, replay.oldestSample)
                for chunk in replay.chunks(from: at, upTo: target) {
                    if lane.stream.backlogBytes > Self.backlogLimit { break }
                    if live, at > lane.start,
                       let cut = rotation.cut(in: chunk, streamBytes: lane.bytes, sentSamples: at - lane.start,
                                              moveBy: lane.moveBy, now: now, moveWhy: lane.moveWhy) {
                        // The audio before the pause still goes on this stream.
                        if cut.offset > 0 {
                            lane.stream.send(.audio(Array(chunk[..<cut.offset])))
                            lane.bytes += Lane.audioBytes(samples: cut.offset)
                            sent = true
                        }
                        moveAt = (at + cut.offset, cut.why)
                        break
                    }
                    lane.stream.send(.audio(chunk))
                    lane.bytes += Lane.audioBytes(samples: chunk.count)
                    at += chunk.count
                    sent = true
                }
                if let move = moveAt {  // its audio ends here: it drains, a new lane replays the rest
                    lane.end = move.sample
                    lane.moveBy = nil
                    lane.cursor = nil
                    lane.stop()
                    return true
                }
                guard at >= target else {
                    lane.cursor = at
                    return false
                }
                lane.cursor = nil
                if lane.end != nil { lane.stop() }
                return true
            }
            if done == true { host.log(.debug, "replay done") }
            if let (from, to) = lost, from < to {
                host.replayOverflowed(from: from, to: to)
            }
            if let (sample, why) = moveAt {
                lanes.endLive()
                host.log(.info, "context \(host.contextId) continues on a new stream at \(SpeechAudio.secondsText(samples: sample)) s while replaying: \(why)")
                do throws(SpeechClientError) {
                    try openOrWait(from: sample, end: nil, host: host)
                } catch {
                    let cause = host.connectCancelled ? SpeechClientError(.network, "the client was suspended while the context moved to a new stream") : error
                    laneLost(from: sample, end: nil, cause: cause, servedLongEnough: false, host: host)
                }
                sent = true
            }
        }
        return sent
    }

    /// The error that ends a context whose connection could not be restored: what failed and
    /// exactly which audio was not transcribed.
    func lostAudioError(_ error: SpeechClientError, attempts: Int, from: Int) -> SpeechClientError {
        let lost = contextSamples - from
        return SpeechClientError(error.code, "reconnection failed after \(attempts) attempt(s) (\(error.message)); "
            + "the last \(SpeechAudio.secondsText(samples: lost)) s of audio, from \(SpeechAudio.secondsText(samples: from)) s into the context, were not transcribed",
            grpcStatus: error.grpcStatus)
    }
}
