#if canImport(Glibc)
import Glibc
#endif

/// The client's worker: opens audio and streams, sends audio and start/stop, and folds the
/// server's responses into segments. It runs in turns on the shared worker pool
/// (`ThreadPool.workers`), one turn at a time (the client's `workerScheduled` says so), each
/// when a command, a stream's notice or a deadline needs one. Sendable: the fields below are
/// touched only with `audioLock` held (each step of a turn, `takeDirect`, `shutdown`), except by
/// `prepare` and `announcePrepared` when the client's constructor calls them.
final class ClientWorker: @unchecked Sendable {
    weak var client: Client?

    private let options: ClientOptions
    private let service: any RecognitionService
    /// Cancelled by suspend and free (from the API thread) to interrupt a connect or login in
    /// progress; reset here once the suspend is handled.
    let cancellation = Cancellation()
    /// Held by the worker while it handles a command or pumps, and by a thread pushing audio
    /// that sends its chunks itself while the worker is idle (`takeDirect`): the state of the
    /// audio path is only touched under it. Never held while waiting for commands.
    let audioLock = ConditionLock()

    /// The file or replay cannot go on until the network takes what was sent (or audio becomes
    /// final, or a command comes): the worker waits for a poke, a command or this time
    /// (monotonic ns) instead of polling. The worker's turns only.
    private var stalledUntil: UInt64?
    /// A stall is a wait for a notice; this bounds it should one be lost.
    static let stallSafetyNanos: UInt64 = 50_000_000

    /// Every stream has a generation; events of streams that are no longer ours are ignored.
    private var generation = 0
    /// A stream opened before a context (prepare-on-init, resume): the next context's first lane.
    private var prepared: (generation: Int, stream: any RecognitionStream)?
    /// The streams of the open context, by generation (see `Lane`), and the one taking live audio.
    private var lanes: [Int: Lane] = [:]
    private var current: Int?
    private var assembler = SegmentAssembler()

    /// The microphone, file or descriptor, read into chunks.
    private let audio: AudioPump
    /// Reading the source into the open context (file or microphone).
    private var pumping = false
    /// A context was requested and its `finished` has not arrived.
    private var contextOpen = false
    /// The user's context is over (stop, end of audio, or the server ended it): no more audio.
    private var stopSent = false
    private var contextId = ""
    /// Events to deliver with the stop, once every lane has finished (errors the server sent).
    private var endEvents: [ClientEvent] = []
    /// A start that arrived while the previous context was still finishing (after resume).
    private var deferredStart = false
    private var suspended = false
    private var lastActivity = Clock.monotonicNanos()
    /// A suspend came while a context was open: SUSPENDED is reported when that context ends.
    private var suspendReportPending = false
    /// The current context was already retried once after the server rejected the token.
    private var authRetried = false

    // Reconnection with replay (issue 5). The user sees one context: the id of the first
    // `started`, segment ids and word times continuous across the server contexts that carry it.
    private var replay: ReplayBuffer
    /// Samples of the user's context recorded so far (sent, or held while disconnected).
    private var contextSamples = 0
    /// Segment ids and word times of the server contexts, in the user's context.
    private var numbering = ContextNumbering()
    /// When the live lane moves to a new stream (byte budget, context limit, GOAWAY).
    private var rotation: RotationPolicy
    /// Lanes lost and waiting to be replaced: the audio [from, end) they had not finished (end nil:
    /// the live lane), after a delay; all are reopened together.
    private var repairs: [(from: Int, end: Int?)] = []
    private var reconnect: (attempt: Int, at: UInt64, cause: SpeechClientError)?
    /// Connection losses since the context last made progress (a final segment, or a lane the
    /// server served for a while): a server that accepts the reconnection but fails again still
    /// runs out of attempts.
    private var lossesWithoutProgress = 0
    /// Audio (user-context samples) the replay buffer no longer held at a reconnection, reported
    /// once the server has taken the replay (its `started`), so an outage with several attempts
    /// gives one error naming the whole loss.
    private var pendingLoss: (from: Int, to: Int)?
    /// The last connection state reported, so that only changes are.
    private var connectionState: ConnectionState?

    // Hands-free listening (issue 8): between a start and a stop the audio goes through the
    // endpointer, which opens and closes contexts. An activation that begins while the previous
    // context is still finishing waits in `backlog` (bounded by the maximum activation).
    private var endpointer: Endpointer?
    /// Samples taken since the start (positions of listen and level events).
    private var audioSamples = 0
    private var backlog = ActivationBacklog()
    /// Wakeword mode: the current context's phrase was heard; its segments are delivered.
    private var woken = false
    /// Wakeword mode with a wake-word service: the connection that hears the listening audio
    /// (nil without one), and where the last activation ended (a detection from before it
    /// belongs to its burst).
    private var wake: WakeListener?
    private var lastActivationEnd = 0
    /// A file heard by a wake-word service is read at real time from here (monotonic ns): a
    /// service locates the wake word only in audio that arrives about as fast as it is spoken.
    private var pacedSince: UInt64?

    init(options: ClientOptions, service: any RecognitionService,
         makeSource: @escaping @Sendable (AudioInput) -> (any AudioSource)?) {
        self.options = options
        self.service = service
        audio = AudioPump(input: options.audio, chunkMilliseconds: options.chunkMilliseconds, makeSource: makeSource)
        replay = ReplayBuffer(capacitySamples: SpeechAudio.samples(milliseconds: options.replayBufferMilliseconds))
        rotation = RotationPolicy(budgetBytes: options.streamBudgetBytes, contextLimitMilliseconds: options.contextRolloverMilliseconds)
        if let server = options.wakeService, options.activation == .wakeword {
            let cancellation = self.cancellation
            wake = WakeListener(server: server, name: options.wakeName, connectTimeoutMilliseconds: options.connectTimeoutMilliseconds,
                                applicationDriven: options.io == .application, cancellation: cancellation) { [weak self] event, gen in
                self?.client?.wakeEvent(event, generation: gen)
            }
        }
    }

    deinit { shutdown() }

    /// Below the 256 KiB at which a call fails (GRPCChannel.Configuration.maxQueuedSendBytes)
    /// by far more than one block; 64 KiB with 2 ms naps capped files at ~1,000x real time.
    static let fileBacklogLimit = 160 * 1024

    /// A lane the server served this long before it was lost counts as progress: a proxy's idle
    /// timeout cutting streams during a long pause must not use up the reconnect attempts.
    static let servedLongEnoughNanos: UInt64 = 5_000_000_000

    // MARK: - Turns

    enum Turn {
        /// More to do now (pumping a file): queue again, behind other clients' work.
        case more
        /// Nothing to do until a command, a poke, or this time (monotonic ns; nil: none).
        case wait(until: UInt64?)
        /// The client is being freed.
        case closed
    }

    /// Steps taken per turn before the thread goes to other clients' work.
    static let stepsPerTurn = 64

    /// One turn: commands and the work between them (pumping, replay, deadlines), until there
    /// is nothing to do now or the turn's steps are used up.
    func runTurn() -> Turn {
        for _ in 0..<Self.stepsPerTurn {
            // The whole step under `audioLock`: a pushing thread or the event loop may fold
            // audio or a segment in directly between steps, and the deadlines read the lanes.
            // (Lock order: `audioLock`, then the client's lock.)
            if let end = audioLock.withLock({ step() }) { return end }
        }
        return .more
    }

    /// One command, or the work between commands; nil to go on with the turn.
    private func step() -> Turn? {
        guard let client else { return .closed }
        // While pumping, commands are taken between reads. A prepared stream with no context
        // is closed after `idleStreamMilliseconds` (protocol.md: the official clients did the
        // same) and reopened by the next start.
        let idleDeadline = (prepared != nil && !contextOpen && endpointer == nil) ? lastActivity + UInt64(options.idleStreamMilliseconds) * 1_000_000 : nil
        let deadline = [reconnect?.at, idleDeadline, moveDeadline, startDeadline, stalledUntil].compactMap { $0 }.min()
        switch client.takeCommand() {
        case .closing:
            return .closed
        case .command(let command):
            stalledUntil = nil
            lastActivity = Clock.monotonicNanos()
            handle(command)
        case .nothing(let poked):
            let due = deadline.map { Clock.monotonicNanos() >= $0 } ?? false
            // Whatever ended a stall (a poke, its time), the pump looks again.
            if poked || due { stalledUntil = nil }
            let busy = (pumpWanted || replaying) && stalledUntil == nil
            guard busy || poked || due else { return .wait(until: deadline) }
            idleStep(idleDeadline: idleDeadline)
        }
        return nil
    }

    /// A lane still has replay audio to send.
    private var replaying: Bool { lanes.values.contains { $0.cursor != nil } }

    /// The source is being read and can take audio now (a file waits while a reconnection is
    /// pending: nothing would take its audio but the replay buffer; a microphone is read all the same).
    private var pumpWanted: Bool { pumping && !(waitsForServer && (reconnect != nil || (contextOpen && !stopSent && current == nil))) }

    /// The earliest time a lane on a going-away connection must move.
    private var moveDeadline: UInt64? { lanes.values.compactMap(\.moveBy).min() }

    /// The earliest start acknowledgement due (lanes the server has not acknowledged yet).
    private var startDeadline: UInt64? { lanes.values.map(\.startDue).filter { $0 != .max }.min() }

    /// A stream whose start the server did not acknowledge in time is lost (issue 19 item 1: a
    /// hung server once left a context STARTING for 40 s): it is retried like a lost connection,
    /// its audio replayed, until the reconnect attempts run out.
    private func expireUnacknowledgedStarts(now: UInt64) {
        for (gen, lane) in lanes.sorted(by: { $0.key < $1.key }) where now >= lane.startDue {
            lane.stream.cancel()
            handleStream(.closed(SpeechClientError(.timeout, "the server did not acknowledge the start of the context within \(options.startTimeoutMilliseconds) ms",
                                                   grpcStatus: GRPCStatus.unavailable)), generation: gen)
        }
    }

    /// What the worker does between commands: reconnect, replay, pump the source, move a lane
    /// off a closing connection, close an idle stream.
    private func idleStep(idleDeadline: UInt64?) {
        guard let client else { return }
        let now = Clock.monotonicNanos()
        if let due = startDeadline, now >= due {
            expireUnacknowledgedStarts(now: now)
        } else if let r = reconnect, now >= r.at {
            attemptReconnect()
        } else if replaying || pumping {
            let replayed = replaying && pumpReplay()
            if pumpWanted { pumpOnce() } else if !replayed {
                // Replay lanes wait for their streams to drain; a file waits for a reconnection.
                stall(waitingFor: lanes.values.filter { $0.cursor != nil }.map(\.stream))
            }
        } else if let by = moveDeadline, now >= by {
            rotate(reason: "the connection is closing (GOAWAY)")
        } else if let idleDeadline, now >= idleDeadline {
            client.log(.debug, "closing the idle SLU stream")
            prepared?.stream.finish()
            prepared = nil
        }
    }

    /// Chunks pushed while the worker is idle, sent from the pushing thread with `audioLock`
    /// held (the caller took it): the same as the worker taking them, without a thread hand-off
    /// per chunk. Only in manual activation, where taking a chunk never blocks (listening may
    /// have to connect to open a context).
    var takesDirect: Bool { options.activation == .manual }

    func takeDirect(_ chunks: [[Int16]]) {
        for c in chunks { take(c) }
    }

    /// Segment updates (nearly all of a stream's traffic) that may be folded in by the thread
    /// that received them, with `audioLock` held, while the worker is idle: one thread hand-off
    /// less per response. They change none of the state the worker's loop decides on (streams,
    /// context, pumping, reconnection); everything else goes through the worker.
    static func isDirectUpdate(_ event: StreamEvent) -> Bool {
        guard case .response(let response) = event else { return false }
        switch response.payload {
        case .started, .finished, .rttRequest: return false
        default: return true
        }
    }

    /// A segment update taken on the receiving thread (see `isDirectUpdate`); the caller holds
    /// `audioLock`. A response the assembler refuses ends the stream through the worker.
    func takeDirect(_ event: StreamEvent, generation gen: Int) {
        guard let lane = lanes[gen], case .response(let response) = event else { return }
        if isHeld(gen) {
            if let error = hold(response, lane: gen) {
                lane.stream.cancel()
                client?.enqueue(.stream(.closed(error), generation: gen))
            }
            return
        }
        if let error = applySegmentUpdate(response, lane: gen) {
            lane.stream.cancel()
            client?.enqueue(.stream(.closed(error), generation: gen))
        }
    }

    /// A file or a descriptor is read as fast as the server takes it (a microphone cannot wait).
    private var waitsForServer: Bool { audio.waitsForServer }

    /// Called once the last turn has ended (free, or deinit): releases the streams and the
    /// source. Segments of an open context that had words are delivered final first (their words
    /// unconfirmed): a free after a wait that gave up drops nothing heard (issue 24).
    func shutdown() {
        audioLock.withLock {
            if contextOpen {
                for event in closeUnfinishedSegments(why: "the client was freed before the context finished") { client?.emit(event, whileClosing: true) }
            }
            releaseAll()
        }
    }

    private func releaseAll() {
        for lane in lanes.values { lane.stream.cancel() }
        lanes = [:]
        current = nil
        prepared?.stream.cancel()
        prepared = nil
        audio.close()
        closeWake()
    }

    private func handle(_ command: Client.Command) {
        switch command {
        case .start: handleStart()
        case .stop: endpointer != nil ? stopListening(auto: false) : sendStop()
        case .audio(let chunks):
            for c in chunks { take(c) }
            if options.pushWaitMilliseconds > 0 {
                client?.pushedNotTaken.subtract(chunks.reduce(0) { $0 + $1.count }, ordering: .relaxed)
            }
        case .pushEnd(let rest):
            for c in rest { take(c) }
            endpointer != nil ? stopListening(auto: false) : sendStop()
        case .suspend: handleSuspend()
        case .resume: handleResume()
        case .stream(let event, let gen):
            handleStream(event, generation: gen)
        case .wake(let event, let gen):
            if gen == wake?.generation { handleWake(event) }
        }
    }

    // MARK: - Preparing

    /// Opens the microphone (for a microphone source) and a stream. Called with `client` nil
    /// from the constructor (errors are thrown to spc_client_new) or from the worker.
    func prepare(client: Client?) throws(SpeechClientError) {
        if let opened = try audio.openMicrophone(log: { [weak client] message in client?.log(.warning, message) }) {
            client?.log(.debug, opened)
        }
        try ensureStream()
    }

    /// A stream ready for the next lane (`prepared`): opened now unless one is waiting.
    private func ensureStream() throws(SpeechClientError) {
        if prepared != nil { return }
        generation += 1
        let gen = generation
        let config = SLUConfig(languageCode: options.language)
        if reconnect == nil && contextOpen == false { report(.connecting) }
        client?.log(.debug, "opening an SLU stream (language \(options.language))")
        let stream: any RecognitionStream
        do throws(SpeechClientError) {
            stream = try service.openStream(config: config, cancellation: cancellation) { [weak self] event in
                self?.client?.streamEvent(event, generation: gen)
            }
        } catch {
            if reconnect == nil && !contextOpen && !cancellation.isCancelled { report(.unavailable, reason: error) }
            throw error
        }
        stream.send(.config(config))
        prepared = (gen, stream)
        client?.log(.debug, "SLU stream open")
        report(.ready)
    }

    /// A new lane on a new stream for the audio [from, end) (end nil: live audio), its start sent.
    /// Audio before what was recorded so far is replayed from the replay buffer as the stream drains.
    private func openLane(from: Int, end: Int?) throws(SpeechClientError) {
        try ensureStream()
        guard let (gen, stream) = prepared else { return }
        prepared = nil
        let replayFrom = from < (end ?? contextSamples) ? from : nil
        var lane = Lane(stream: stream, start: from, end: end, replayFrom: replayFrom)
        lane.startDue = Clock.monotonicNanos() + UInt64(options.startTimeoutMilliseconds) * 1_000_000
        let start = SLURequest.start(appId: options.appId ?? "", options: options.contextOptions)
        stream.send(start)
        lane.bytes = start.encoded().count + 5  // the gRPC prefix
        if end != nil && replayFrom == nil {
            stream.send(.stop)
            stream.finish()
            lane.stopSent = true
        }
        lanes[gen] = lane
        if end == nil {
            current = gen
            rotation.reset()
        }
    }

    /// After a successful prepare-on-init (which ran before the client existed, so its reports
    /// went nowhere): the application still sees connecting, then ready, as its first events.
    func announcePrepared() {
        // Under `audioLock`: a turn (a stream event of the prepared stream) may report already.
        audioLock.withLock {
            guard connectionState == .ready else { return }
            client?.emit(.connection(.connecting, attempt: 0, delayMilliseconds: 0, reason: nil))
            client?.emit(.connection(.ready, attempt: 0, delayMilliseconds: 0, reason: nil))
        }
    }

    /// Reports a connection state change (and every reconnection attempt).
    private func report(_ state: ConnectionState, attempt: Int = 0, delayMilliseconds: Int = 0, reason: SpeechClientError? = nil) {
        if state == connectionState && state != .reconnecting { return }
        connectionState = state
        client?.emit(.connection(state, attempt: Int32(clamping: attempt), delayMilliseconds: Int32(clamping: delayMilliseconds), reason: reason))
    }

    // MARK: - Contexts

    private func handleStart() {
        guard let client else { return }
        if contextOpen {
            deferredStart = true
            return
        }
        if options.activation != .manual {
            startListening()
            return
        }
        do throws(SpeechClientError) {
            try openAudioForContext()
            try ensureStream()
        } catch {
            closeFileSource()
            if cancellation.isCancelled {
                abandonContext()
            } else {
                failContext(error)
            }
            return
        }
        audioSamples = 0
        beginContext()
        client.log(.debug, "start sent")
        pumping = audio.isOpen
    }

    /// Opens a context on the prepared stream: the bookkeeping, then its first lane.
    private func beginContext() {
        contextOpen = true
        stopSent = false
        woken = false
        contextId = ""
        endEvents = []
        lossesWithoutProgress = 0
        pendingLoss = nil
        replay.reset()
        contextSamples = 0
        numbering.reset()
        rotation.reset()
        repairs = []
        client?.transition({ _, _ in }, contextOpen: true)
        do throws(SpeechClientError) {
            try openLane(from: 0, end: nil)
        } catch {
            // Only reached when the prepared stream vanished in between: retried as a loss.
            laneLost(from: 0, end: nil, cause: error, servedLongEnough: false)
        }
    }

    private func openAudioForContext() throws(SpeechClientError) {
        let client = self.client
        try audio.openForContext(log: { [weak client] message in client?.log(.warning, message) },
                                 warn: { client?.log(.warning, $0) })
    }

    /// Whether `samples` more pushed audio fit in the replay buffer beside what is not final yet
    /// (the caller holds `audioLock`). Outside a context everything fits (it is dropped).
    func hasRoom(forSamples samples: Int) -> Bool {
        (contextOpen && !stopSent ? unfinishedSamples : 0) + samples <= replay.capacitySamples
    }

    /// Audio recorded and not yet final (in flight at the server, or waiting): a file is never
    /// let ahead of what the replay buffer can hold, so a stream lost at any moment loses nothing.
    private var unfinishedSamples: Int { contextSamples - replayPoint }

    /// Reads one block from the source into the context; at the end of a file, stops it.
    /// A file is read as fast as the server takes it: while the stream's backlog is above
    /// `fileBacklogLimit`, or the audio in flight fills the replay buffer, the worker waits
    /// (checking commands between waits) instead of sending more. The microphone is never held
    /// back: its audio cannot wait.
    private func pumpOnce() {
        guard pumping, audio.isOpen else { pumping = false; return }
        if waitsForServer {
            let unsent = current.flatMap { lanes[$0]?.stream.backlogBytes } ?? 0
            let chunkSamples = SpeechAudio.samples(milliseconds: options.chunkMilliseconds)
            var full = unfinishedSamples + 2 * chunkSamples > replay.capacitySamples
            if full && lanes.count == 1 && contextOpen && !stopSent && endpointer == nil {
                // Nothing is draining that would free the buffer: end this server context (the
                // server then finishes every word of it) and go on in a new one.
                rotate(reason: "the audio in flight filled the replay buffer")
                full = unfinishedSamples + 2 * chunkSamples > replay.capacitySamples
            }
            // A file heard by a wake-word service is not read ahead of real time (a command
            // still ends the wait).
            let ahead = aheadOfRealTime()
            if ahead > 0 {
                stalledUntil = Clock.monotonicNanos() + ahead
                return
            }
            // A file also waits while an activation waits for the previous context to finish
            // (a command ends that), for audio to become final (`releaseReplay` pokes), or for
            // the current lane's replay to catch up (its stream drains).
            if backlog.isWaiting || full {
                stall(waitingFor: [])
                return
            }
            if current.flatMap({ lanes[$0]?.cursor }) != nil {
                stall(waitingFor: lanes.values.filter { $0.cursor != nil }.map(\.stream))
                return
            }
            if unsent > Self.fileBacklogLimit, let stream = current.flatMap({ lanes[$0]?.stream }) {
                stall(waitingFor: [stream])
                if stalledUntil != nil { return }
            }
        }
        switch audio.read() {
        case .chunks(let chunks):
            for c in chunks { take(c) }
        case .ended(let last):
            // End of stream: send what is left and stop the context, as if the user had.
            for c in last { take(c) }
            closeFileSource()
            endpointer != nil ? stopListening(auto: true) : sendStop(auto: true)
        case .failed(let error):
            closeFileSource(failed: error.message)
            client?.emit(.error(error))
            if endpointer != nil {
                stopListening(auto: true)
            } else if contextOpen && !stopSent {
                sendStop(auto: true)
            }
        }
    }

    private func sendStop(auto: Bool = false) {
        guard contextOpen, !stopSent else { return }
        // While listening, the audio goes on after a context: only the context ends.
        if endpointer == nil {
            if pumping, waitsForServer { closeFileSource() }
            pumping = false
            // A descriptor goes on in the next context: the resampler's tail belongs to this one.
            var descriptor = false
            if case .descriptor = options.audio { descriptor = true }
            for c in audio.drain(resamplerTail: descriptor) { sendAudio(c) }
        }
        stopSent = true
        client?.log(.debug, "stop sent for context \(contextId.isEmpty ? "(not started yet)" : contextId)\(auto ? " (end of the audio)" : "")\(replaying ? " (after the replay)" : "")")
        endLiveAudio()
        if auto {
            client?.transition { state, _ in
                if state == .starting || state == .listening { state = .stopping }
            }
        }
    }

    /// The live audio ends here: the current lane (or the repair waiting to replace it) gets its
    /// end, and its stop goes out once its replay has caught up.
    private func endLiveAudio() {
        if let gen = current, var lane = lanes[gen] {
            lane.end = contextSamples
            if lane.cursor == nil { stopLane(&lane) }
            lanes[gen] = lane
            current = nil
        }
        for i in repairs.indices where repairs[i].end == nil { repairs[i].end = contextSamples }
    }

    /// Stop, then the end of the request side: the server finishes the words and ends the stream.
    private func stopLane(_ lane: inout Lane) {
        guard !lane.stopSent else { return }
        lane.stream.send(.stop)
        lane.stream.finish()
        lane.stopSent = true
    }

    /// The end of a context's reading (see `AudioPump.endContext`).
    private func closeFileSource(failed: String? = nil) {
        audio.endContext(failed: failed)
        pumping = false
    }

    /// A context could not run: report the error, then the stop. A start queued behind it still
    /// happens (the header promises it after the pending stop completes; an error completes it).
    /// `pendingLoss` is not reported: the error names everything from the last final segment on.
    private func failContext(_ error: SpeechClientError) {
        endContext(events: closeUnfinishedSegments(why: "the context failed") + [.error(error), .stop(contextId: contextId)], startQueued: true)
    }

    /// A context whose start a suspend (or free) interrupted before the server opened it: it
    /// ends with the stop callback alone. It had no start callback and no results; the audio
    /// pushed into it is dropped, as audio pushed while suspended is.
    private func abandonContext() {
        client?.log(.info, "a context that had not started yet was abandoned (suspend or free)")
        endContext(events: [.stop(contextId: "")], startQueued: false)
    }

    /// Segments that had words and never got their final update (the server never ended them):
    /// each is delivered final, its unconfirmed words flagged `final` false, so nothing heard is
    /// dropped silently. Returns the events, with a warning per context.
    private func closeUnfinishedSegments(why: String) -> [ClientEvent] {
        guard !contextId.isEmpty else { return [] }
        let closed = assembler.closeUnfinished(context: contextId)
        guard !closed.isEmpty else { return [] }
        let words = closed.reduce(0) { $0 + $1.words.count }
        client?.log(.warning, "context \(contextId): \(why) with \(closed.count) segment(s) the server never ended; their \(words) word(s) are delivered as a final update with the words marked unconfirmed")
        return closed.map { .segment($0) }
    }

    /// Every way a context ends (finished, failed, abandoned): the per-context state is reset,
    /// `events` are queued with the state change, and then, with `startQueued`, a start the
    /// application queued behind this context (or made during a resume) begins.
    private func endContext(events: [ClientEvent], startQueued: Bool) {
        pendingLoss = nil
        authRetried = false
        reconnect = nil
        repairs = []
        for lane in lanes.values where !lane.stopSent { lane.stream.cancel() }
        lanes = [:]
        current = nil
        replay.reset()
        contextOpen = false
        stopSent = false
        endEvents = []
        // While listening the source keeps being read between contexts.
        if endpointer == nil { pumping = false }
        if !contextId.isEmpty { _ = assembler.apply(SLUResponse(audioContext: contextId, segmentId: 0, payload: .finished(errorCode: nil, errorMessage: nil))) }
        contextId = ""
        var events = events
        if woken {
            woken = false
            events.insert(.listen(.deactivate, positionMilliseconds: Int64(SpeechAudio.milliseconds(samples: audioSamples))), at: max(0, events.count - 1))
        }
        if (endpointer != nil || backlog.isWaiting) && !suspended {
            client?.transition({ _, _ in }, contextOpen: false, events: events)
            if backlog.isWaiting { openWaitingActivation() }
            if endpointer == nil && !backlog.isWaiting && !contextOpen { finishListening() }
            return
        }
        var restart = false
        client?.transition({ state, pending in
            if state == .suspended { pending = false; return }
            if pending && startQueued {
                state = .starting
                restart = true
            } else {
                state = .idle
            }
            pending = false
        }, contextOpen: false, events: events)
        let deferred = deferredStart && startQueued
        deferredStart = false
        if suspended {
            prepared?.stream.finish()
            prepared = nil
            if suspendReportPending {
                suspendReportPending = false
                report(.suspended)
            }
        } else if restart || deferred {
            handleStart()
        }
    }

    /// The context ends once the user's stop was sent and every lane has finished.
    private func endContextIfDone() {
        guard contextOpen, stopSent, current == nil, lanes.isEmpty, repairs.isEmpty, reconnect == nil else { return }
        let id = contextId
        client?.log(.debug, "context \(id) finished")
        endContext(events: closeUnfinishedSegments(why: "the context ended") + endEvents + [.stop(contextId: id)], startQueued: true)
    }

    // MARK: - Responses

    private func handleStream(_ event: StreamEvent, generation gen: Int) {
        if let p = prepared, p.generation == gen {
            // The prepared stream, before any context: only its loss matters.
            switch event {
            case .closed(let error):
                prepared = nil
                if let error {
                    client?.log(.warning, "stream closed: \(error.message)")
                    report(.unavailable, reason: error)
                }
            case .goingAway:
                // A new context goes to a new connection.
                p.stream.finish()
                prepared = nil
            case .response(let response):
                if case .rttRequest(let id) = response.payload { p.stream.send(.rttResponse(id: id)) }
            }
            return
        }
        guard var lane = lanes[gen] else { return }
        if isHeld(gen) {
            switch event {
            case .response(let response):
                if case .started = response.payload { lanes[gen]?.startDue = .max }  // acknowledged, applied later
                if case .rttRequest(let id) = response.payload {
                    lane.stream.send(.rttResponse(id: id))
                } else if let error = hold(response, lane: gen) {
                    lane.stream.cancel()
                    handleStream(.closed(error), generation: gen)
                }
                return
            case .closed(nil):
                lanes[gen]?.endedWhileHeld = true
                return
            default:
                break
            }
        }
        switch event {
        case .closed(let error):
            lanes[gen] = nil
            defer { releaseHeld() }
            let wasCurrent = current == gen
            if wasCurrent { current = nil }
            let cause = error ?? SpeechClientError(.network, "the server ended the stream before it finished the context", grpcStatus: GRPCStatus.unavailable)
            dropSegments(of: lane)
            // A rejected token (expired, or a server restarted with a new secret), before the
            // context started or during it: the relay has dropped the cached token. Once, log in
            // afresh and replay the lane's audio, as after a connection loss.
            if !authRetried, cause.code == .auth {
                authRetried = true
                client?.log(.info, "the server rejected the token\(contextId.isEmpty ? "" : " during context \(contextId)"); logging in again")
                repairs.append((lane.floor, wasCurrent ? nil : lane.end))
                scheduleReconnect(attempt: 1, cause: cause)
                return
            }
            let served = lane.startedAt.map { Clock.monotonicNanos() &- $0 >= Self.servedLongEnoughNanos } ?? false
            laneLost(from: lane.floor, end: wasCurrent ? nil : lane.end, cause: cause, servedLongEnough: served)
        case .goingAway:
            // The server or a proxy worker is draining: a lane still taking audio moves to a new
            // connection at its next pause, within the drain timeout.
            if gen == current && lane.moveBy == nil {
                lane.moveBy = Clock.monotonicNanos() + UInt64(options.drainTimeoutMilliseconds) * 1_000_000
                lanes[gen] = lane
                client?.log(.info, "the connection is closing (GOAWAY): context \(contextId) moves to a new connection at its next pause")
            }
        case .response(let response):
            handleResponse(response, lane: gen)
        }
    }

    /// Keeps a response of a lane that waits for an earlier one; an error past the byte bound.
    private func hold(_ response: SLUResponse, lane gen: Int) -> SpeechClientError? {
        guard let held = lanes[gen]?.held else { return nil }
        // Across the context's lanes: each one may be short (a rotation every few seconds).
        let total = lanes.values.reduce(0) { $0 + $1.held.bytes }
        if total + response.heldBytes > Lane.maxHeldBytes {
            return SpeechClientError(.parse, "the server sent more than \(Lane.maxHeldBytes >> 20) MiB of results on later streams while an earlier stream of the context was still open; the stream was ended")
        }
        held.push(response)
        return nil
    }

    /// Whether a lane's responses wait: an earlier lane (by its audio) is still open.
    private func isHeld(_ gen: Int) -> Bool {
        guard let lane = lanes[gen] else { return false }
        // A lost earlier lane waiting to be replaced holds it as well: its words come first.
        return lanes.contains { $0.key != gen && ($0.value.start, $0.key) < (lane.start, gen) }
            || repairs.contains { $0.from < lane.start }
    }

    private var releasingHeld = false

    /// After a lane ended: the earliest open lane applies the responses it was holding, in order
    /// (which may end it too, and so on).
    private func releaseHeld() {
        if releasingHeld { return }
        releasingHeld = true
        defer { releasingHeld = false }
        while contextOpen, let (gen, lane) = lanes.min(by: { ($0.value.start, $0.key) < ($1.value.start, $1.key) }) {
            if isHeld(gen) { return }
            if let response = lane.held.pop() {
                handleResponse(response, lane: gen)
                continue
            }
            guard lane.endedWhileHeld else { return }
            lanes[gen]?.endedWhileHeld = false
            handleStream(.closed(nil), generation: gen)
        }
    }

    /// A lane was lost: its unfinished audio [from, end) is replayed on a new stream after a
    /// delay when the loss is retryable and attempts remain; otherwise the context fails.
    private func laneLost(from: Int, end: Int?, cause: SpeechClientError, servedLongEnough: Bool) {
        if servedLongEnough { lossesWithoutProgress = 0 }
        lossesWithoutProgress += 1
        let unlimited = options.reconnectAttempts == ClientOptions.unlimitedReconnects
        if Self.isRetryable(cause) && (unlimited || lossesWithoutProgress <= options.reconnectAttempts) {
            repairs.append((from, end))
            if reconnect == nil { scheduleReconnect(attempt: lossesWithoutProgress, cause: cause) }
        } else if Self.isRetryable(cause) && options.reconnectAttempts > 0 {
            failContext(lostAudioError(cause, attempts: lossesWithoutProgress - 1, from: from))
        } else {
            failContext(cause)
        }
    }

    /// Forgets a lost lane's unfinished segments (its replacement recognises that audio again)
    /// and its server context's mappings.
    private func dropSegments(of lane: Lane) {
        assembler.drop(context: contextId, segments: lane.openSegments)
        if let id = lane.serverContext { numbering.forget(serverContext: id) }
        numbering.giveBack(lane.openSegments, latestOpenElsewhere: lanes.values.compactMap { $0.openSegments.max() }.max())
    }

    /// Connection losses are retried; what the server or the login said no to is not.
    static func isRetryable(_ error: SpeechClientError) -> Bool {
        error.code == .network || error.code == .timeout
    }

    private func handleResponse(_ response: SLUResponse, lane gen: Int) {
        guard var lane = lanes[gen] else { return }
        switch response.payload {
        case .started:
            authRetried = false
            lane.serverContext = response.audioContext
            lane.startedAt = Clock.monotonicNanos()
            lane.startDue = .max
            lanes[gen] = lane
            numbering.started(serverContext: response.audioContext, atSample: lane.start)
            if let loss = pendingLoss {
                // The replay was taken: now the loss is final, and reported once.
                pendingLoss = nil
                let lost = SpeechAudio.seconds(samples: loss.to - loss.from)
                client?.emit(.error(SpeechClientError(.network,
                    "the replay buffer overflowed while reconnecting: \(Self.seconds(lost)) s of audio from \(Self.seconds(SpeechAudio.seconds(samples: loss.from))) s into context \(contextId) were not transcribed")))
            }
            if contextId.isEmpty {
                contextId = response.audioContext
                client?.log(.debug, "context \(contextId) started")
                client?.transition({ state, _ in
                    if state == .starting { state = .listening }
                }, events: [.start(contextId: response.audioContext)])
            } else {
                client?.log(.info, "context \(contextId) continues on the server as \(response.audioContext) from \(Self.seconds(SpeechAudio.seconds(samples: lane.start))) s")
            }
        case .finished(let code, let message):
            // Everything this lane carried is final now.
            lanes[gen] = nil
            if gen == current {
                // The server ended the context by itself (a limit, an error): no more audio.
                current = nil
                if !stopSent {
                    stopSent = true
                    if endpointer == nil {
                        closeFileSource()
                        client?.transition { state, _ in
                            if state == .starting || state == .listening { state = .stopping }
                        }
                    }
                }
            }
            if !lane.stopSent { lane.stream.finish() }
            if let id = lane.serverContext { numbering.forget(serverContext: id) }
            let id = contextId.isEmpty ? response.audioContext : contextId
            if let code {
                endEvents.append(.error(SpeechClientError(.api, "context \(id)\(response.audioContext == id ? "" : " (server context \(response.audioContext))") finished with error \(code): \(message ?? "")")))
            }
            lossesWithoutProgress = 0
            releaseReplay()
            releaseHeld()
            endContextIfDone()
        case .rttRequest(let id):
            lane.stream.send(.rttResponse(id: id))
        default:
            if let error = applySegmentUpdate(response, lane: gen) {
                // A server past the assembler's bounds: end the stream as for a malformed message.
                lane.stream.cancel()
                handleStream(.closed(error), generation: gen)
            }
        }
    }

    /// Forgets audio every lane has finished with, and wakes a push waiting for room (and a
    /// file waiting for it: this may run on the thread that received the final segment).
    private func releaseReplay() {
        replay.release(upTo: replayPoint)
        audioLock.broadcast()
        if pumping && waitsForServer { client?.pokeWorker() }
    }

    /// The pump waits: until one of `streams` has drained to `fileBacklogLimit` (each is asked
    /// to say so), a command, a poke, or the safety bound. A stream that has drained already
    /// means no wait.
    private func stall(waitingFor streams: [any RecognitionStream]) {
        let client = self.client
        for stream in streams where !stream.notifyWhenBacklog(atMost: Self.fileBacklogLimit, { [weak client] in client?.pokeWorker() }) {
            stalledUntil = nil
            return
        }
        stalledUntil = Clock.monotonicNanos() + Self.stallSafetyNanos
    }

    /// The first sample not yet final in every lane (and every lane waiting to be replaced): the
    /// replay buffer keeps audio from here, and a file is not let further ahead than it holds.
    private var replayPoint: Int {
        var point = contextSamples
        for lane in lanes.values { point = min(point, lane.floor) }
        for r in repairs { point = min(point, r.from) }
        return point
    }

    /// Folds a segment update into the user's context (its id, continuous segment ids and word
    /// times) and emits the segment. Returns the error when the assembler refuses it.
    private func applySegmentUpdate(_ response: SLUResponse, lane gen: Int) -> SpeechClientError? {
        // A result for another context than the one this stream carries was filed under the
        // current one (issue 23 item 3): it is a protocol error that ends the stream.
        if let expected = lanes[gen]?.serverContext, response.audioContext != expected {
            let named = String(response.audioContext.unicodeScalars.prefix(64).map {
                $0.properties.generalCategory == .control ? "?" : Character($0)
            })
            return SpeechClientError(.parse, "the server sent a result for audio context '\(named)' on the stream of context '\(expected)'; the stream was ended",
                                     grpcStatus: GRPCStatus.internal)
        }
        var mapped = response
        mapped.audioContext = contextId.isEmpty ? response.audioContext : contextId
        mapped.segmentId = numbering.userSegment(serverContext: response.audioContext, segment: response.segmentId)
        mapped.payload = numbering.userTimes(response.payload, serverContext: response.audioContext)
        let applied: Segment?
        do throws(SpeechClientError) {
            applied = try assembler.applyChecked(mapped)
        } catch {
            return error
        }
        guard let segment = applied else { return nil }
        if var lane = lanes[gen] {
            if segment.isFinal {
                lane.openSegments.remove(segment.segmentId)
                lossesWithoutProgress = 0
                if let end = segment.words.map(\.endMilliseconds).max() {
                    lane.floor = min(max(lane.floor, SpeechAudio.samples(milliseconds: Int(end))), lane.end ?? contextSamples)
                }
            } else {
                lane.openSegments.insert(segment.segmentId)
            }
            lanes[gen] = lane
            if segment.isFinal { releaseReplay() }
        }
        if options.activation == .wakeword && !woken {
            // Withheld until the phrase is heard; from that snapshot on, the context's
            // segments are delivered.
            guard Self.contains(segment.words.map(\.text), phrase: options.wakeword) else { return nil }
            woken = true
            client?.emit(.listen(.activate, positionMilliseconds: Int64(SpeechAudio.milliseconds(samples: audioSamples)), name: options.wakeword.joined(separator: " ")))
        }
        client?.emit(.segment(segment))
        if segment.isFinal, let client, client.isOverwhelmed {
            // Finals are never dropped, so the queue is bounded by ending the context.
            return SpeechClientError(.noMemory, "the application has not taken its results: \(client.pendingMebibytes) MiB of them wait for its callbacks, over the \(Client.maxPendingFinalBytes >> 20) MiB limit; the context was ended (what waits is still delivered)")
        }
        return nil
    }

    /// Whether the words hold the phrase (normalised words, contiguous).
    static func contains(_ words: [String], phrase: [String]) -> Bool {
        guard !phrase.isEmpty else { return true }
        let normalized = words.flatMap { ClientOptions.normalizedWords($0) }
        guard normalized.count >= phrase.count else { return false }
        for i in 0...(normalized.count - phrase.count) where Array(normalized[i..<i + phrase.count]) == phrase {
            return true
        }
        return false
    }

    // MARK: - Audio out, bounded streams, reconnection

    /// Every chunk of the context is kept for replay, then sent on the current lane when it is
    /// caught up. Before it, the lane moves to a new stream when its budget says so.
    private func sendAudio(_ chunk: [Int16]) {
        rotateIfDue(before: chunk)
        replay.append(chunk)
        contextSamples += chunk.count
        if let gen = current, var lane = lanes[gen], lane.cursor == nil {
            lane.stream.send(.audio(chunk))
            lane.bytes += Lane.audioBytes(samples: chunk.count)
            lanes[gen] = lane
        }
    }

    /// Before each chunk of live audio: the lane moves to a new stream when `rotation` says so.
    private func rotateIfDue(before chunk: [Int16]) {
        guard let gen = current, let lane = lanes[gen], lane.cursor == nil, !stopSent else { return }
        if let why = rotation.reason(before: chunk, streamBytes: lane.bytes, sentSamples: contextSamples - lane.start,
                                     moveBy: lane.moveBy, now: Clock.monotonicNanos()) {
            rotate(reason: why)
        }
    }

    /// The current lane ends here (stop, then end of stream: it drains) and a new lane on a new
    /// stream takes the audio from here. The application sees one context.
    private func rotate(reason: String) {
        guard let gen = current, var lane = lanes[gen], lane.cursor == nil, !stopSent else { return }
        lane.end = contextSamples
        lane.moveBy = nil
        stopLane(&lane)
        lanes[gen] = lane
        current = nil
        rotation.reset()
        client?.log(.info, "context \(contextId.isEmpty ? "(not started yet)" : contextId) continues on a new stream at \(Self.seconds(SpeechAudio.seconds(samples: contextSamples))) s: \(reason)")
        do throws(SpeechClientError) {
            try openLane(from: contextSamples, end: nil)
        } catch {
            if cancellation.isCancelled { return }
            laneLost(from: contextSamples, end: nil, cause: error, servedLongEnough: false)
        }
    }

    private func scheduleReconnect(attempt: Int, cause: SpeechClientError) {
        let base = min(Double(options.reconnectInitialDelayMilliseconds) * Double(1 << min(attempt - 1, 20)),
                       Double(options.reconnectMaxDelayMilliseconds))
        let jitter = Double.random(in: 0.75...1.25)
        let delayMs = UInt64(max(0, base * jitter))
        reconnect = (attempt, Clock.monotonicNanos() + delayMs * 1_000_000, cause)
        report(.reconnecting, attempt: attempt, delayMilliseconds: Int(delayMs))
        let of = options.reconnectAttempts == ClientOptions.unlimitedReconnects ? "unlimited" : "of \(options.reconnectAttempts)"
        client?.log(.warning, "connection lost during context \(contextId) (\(cause.message)); reconnecting in \(delayMs) ms, attempt \(attempt) \(of)")
    }

    /// Opens a new stream for each lost lane and replays the audio it had not finished. When
    /// the buffer no longer holds all of it, an error says what was lost.
    private func attemptReconnect() {
        guard let r = reconnect else { return }
        reconnect = nil
        let pending = repairs.sorted { $0.from < $1.from }
        repairs = []
        for (k, repair) in pending.enumerated() {
            var from = repair.from
            if replay.oldestSample > from {
                pendingLoss = (pendingLoss?.from ?? from, replay.oldestSample)
                from = min(replay.oldestSample, repair.end ?? replay.oldestSample)
            }
            do throws(SpeechClientError) {
                try openLane(from: from, end: repair.end)
            } catch {
                repairs.append(contentsOf: pending[k...].map { ($0.from, $0.end) })
                if cancellation.isCancelled {
                    // Suspended (or freed) during an outage: the context cannot finish.
                    repairs = []
                    failContext(lostAudioError(SpeechClientError(.network, "the client was suspended while reconnecting"),
                                               attempts: r.attempt, from: replayPoint))
                    return
                }
                lossesWithoutProgress += 1
                let unlimited = options.reconnectAttempts == ClientOptions.unlimitedReconnects
                if (!unlimited && lossesWithoutProgress > options.reconnectAttempts) || !Self.isRetryable(error) {
                    let point = replayPoint
                    repairs = []
                    report(.unavailable, reason: error)
                    failContext(lostAudioError(error, attempts: r.attempt, from: point))
                } else {
                    scheduleReconnect(attempt: lossesWithoutProgress, cause: error)
                }
                return
            }
            client?.log(.info, "reconnected; replaying \(Self.seconds(SpeechAudio.seconds(samples: (repair.end ?? contextSamples) - from))) s of audio")
        }
        report(.ready)
        _ = pumpReplay()
        endContextIfDone()
    }

    /// Sends replay audio on every lane that has some, while its stream's send backlog is under
    /// the file limit; a lane with an end sends its stop once all of it is out, a live lane then
    /// takes live audio again. Returns whether it made progress.
    @discardableResult
    private func pumpReplay() -> Bool {
        var sent = false
        for gen in lanes.keys.sorted() {
            guard var lane = lanes[gen], let cursor = lane.cursor else { continue }
            // Checked first: this runs each time the worker looks while the stream drains.
            if lane.stream.backlogBytes > Self.fileBacklogLimit { continue }
            let target = lane.end ?? replay.endSample
            var at = max(cursor, replay.oldestSample)
            for chunk in replay.chunks(from: at, upTo: target) {
                if lane.stream.backlogBytes > Self.fileBacklogLimit { break }
                lane.stream.send(.audio(chunk))
                lane.bytes += Lane.audioBytes(samples: chunk.count)
                at += chunk.count
                sent = true
            }
            if at >= target {
                lane.cursor = nil
                if lane.end != nil { stopLane(&lane) }
                client?.log(.debug, "replay done")
            } else {
                lane.cursor = at
            }
            lanes[gen] = lane
        }
        return sent
    }

    /// The error that ends a context whose connection could not be restored: what failed and
    /// exactly which audio was not transcribed.
    private func lostAudioError(_ error: SpeechClientError, attempts: Int, from: Int) -> SpeechClientError {
        let lost = SpeechAudio.seconds(samples: contextSamples - from)
        return SpeechClientError(error.code, "reconnection failed after \(attempts) attempt(s) (\(error.message)); "
            + "the last \(Self.seconds(lost)) s of audio, from \(Self.seconds(SpeechAudio.seconds(samples: from))) s into the context, were not transcribed",
            grpcStatus: error.grpcStatus)
    }

    static func seconds(_ s: Double) -> String {
        let tenths = Int((s * 10).rounded())
        return "\(tenths / 10).\(tenths % 10)"
    }

    // MARK: - Audio in, hands-free listening

    /// One chunk of the source (or pushed): its level, then into the open context (manual) or
    /// through the endpointer (listening).
    private func take(_ chunk: [Int16]) {
        let listening = endpointer != nil
        guard listening || (contextOpen && !stopSent) else { return }
        let at = audioSamples
        audioSamples += chunk.count
        if options.reportLevels {
            client?.emit(.level(Float(VoiceActivityDetector.decibels(chunk)), positionMilliseconds: Int64(SpeechAudio.milliseconds(samples: at))))
        }
        guard var ep = endpointer else {
            sendAudio(chunk)
            return
        }
        if let wake { hearForWake(chunk, at: at, on: wake) }
        let actions = ep.process(chunk)
        endpointer = ep
        perform(actions)
    }

    /// Carries out the endpointer's actions. Its sample positions are ours: both count from the
    /// start of listening.
    private func perform(_ actions: [Endpointer.Action]) {
        for action in actions {
            switch action {
            case .event(let e, let sample):
                client?.emit(.listen(e, positionMilliseconds: Int64(SpeechAudio.milliseconds(samples: sample))))
            case .open:
                if contextOpen {
                    // The previous context is still finishing: this one waits for it.
                    backlog.wait()
                } else {
                    openListeningContext()
                }
            case .audio(let chunk):
                if backlog.isWaiting {
                    if backlog.append(chunk) {
                        client?.emit(.error(SpeechClientError(.network, "the server has not finished the previous context; speech heard meanwhile is being dropped")))
                    }
                } else if contextOpen && !stopSent {
                    sendAudio(chunk)
                }
            case .close:
                lastActivationEnd = audioSamples
                if backlog.isWaiting {
                    backlog.close()
                } else if contextOpen && !stopSent {
                    sendStop()
                }
            }
        }
    }

    /// Start in voice or wakeword mode: open the audio and the stream, then listen.
    private func startListening() {
        do throws(SpeechClientError) {
            try openAudioForContext()
            try ensureStream()
        } catch {
            closeFileSource()
            if cancellation.isCancelled { abandonContext() } else { failContext(error) }
            return
        }
        audioSamples = 0
        lastActivationEnd = 0
        pacedSince = nil
        if let wake {
            do throws(SpeechClientError) {
                client?.log(.info, try wake.open(origin: audioSamples))
            } catch {
                closeFileSource()
                if cancellation.isCancelled { abandonContext() } else { failContext(error) }
                return
            }
        }
        endpointer = Endpointer(settings: Endpointer.Settings(options: options))
        backlog.clear()
        client?.log(.debug, "listening (\(options.activation == .voice ? "voice" : "wakeword") activation)")
        client?.transition { state, _ in if state == .starting { state = .listening } }
        pumping = audio.isOpen
    }

    /// A context for an activation. Failing to open one ends that activation with an error;
    /// listening goes on.
    private func openListeningContext() {
        do throws(SpeechClientError) {
            try ensureStream()
        } catch {
            client?.emit(.error(SpeechClientError(error.code, "a context could not be opened for the speech heard: \(error.message)", grpcStatus: error.grpcStatus)))
            if var ep = endpointer, ep.isActive {
                perform(ep.abandon())
                endpointer = ep
            }
            backlog.clear()
            return
        }
        beginContext()
    }

    /// The previous context has ended: the activation that waited for it opens its own.
    private func openWaitingActivation() {
        let (chunks, closed) = backlog.take()
        openListeningContext()
        guard contextOpen else { return }
        for c in chunks { sendAudio(c) }
        if closed { sendStop() }
    }

    /// Stop (or the end of the audio) while listening: the open activation ends, its context
    /// delivers its last results, then the client is idle.
    private func stopListening(auto: Bool) {
        guard var ep = endpointer else { return }
        let actions = ep.finish()
        endpointer = nil
        closeWake()
        perform(actions)
        pumping = false
        closeFileSource()
        if auto {
            client?.transition { state, _ in
                if state == .starting || state == .listening { state = .stopping }
            }
        }
        if !contextOpen && !backlog.isWaiting { finishListening() }
    }

    /// Listening is over and no context is open: idle (or a start queued meanwhile runs).
    private func finishListening() {
        endContext(events: [], startQueued: true)
    }

    // MARK: - Wake-word service

    /// Every chunk heard while listening goes to the service (see `WakeListener`).
    private func hearForWake(_ chunk: [Int16], at: Int, on wake: WakeListener) {
        switch wake.hear(chunk, at: at) {
        case .sent: break
        case .back(let line): client?.log(.info, line)
        case .stillDown(let line): if !line.isEmpty { client?.log(.debug, line) }
        case .stalled(let error): reportWakeLost(error)
        }
    }

    private func closeWake() {
        wake?.close()
    }

    /// The service is gone until it is back: said once per loss.
    private func reportWakeLost(_ error: SpeechClientError) {
        client?.emit(.error(SpeechClientError(error.code, "the wake-word service: \(error.message); the wake word is not heard until it is back (tried every 2 s)", grpcStatus: error.grpcStatus)))
    }

    private func handleWake(_ event: WakeEvent) {
        switch event {
        case .detection(let name, let sample):
            guard var ep = endpointer else { return }
            // One wake word comes back as a burst of detections: the first opens the context,
            // the rest find it open, or come from before its end.
            let at = min(sample ?? audioSamples, audioSamples)
            guard !ep.isActive, !contextOpen, !backlog.isWaiting, at > lastActivationEnd else { return }
            client?.log(.info, "wake word '\(name)' heard at \(Self.seconds(SpeechAudio.seconds(samples: at))) s")
            client?.emit(.listen(.activate, positionMilliseconds: Int64(SpeechAudio.milliseconds(samples: at)), name: name))
            let actions = ep.activate(from: at)
            endpointer = ep
            perform(actions)
            // The context it opened delivers every segment (set after: a new context starts unwoken).
            // One that could not open (its error is reported) ends the activation at once.
            woken = contextOpen
            if !contextOpen { client?.emit(.listen(.deactivate, positionMilliseconds: Int64(SpeechAudio.milliseconds(samples: audioSamples)))) }
        case .closed(let error):
            wake?.lost()
            reportWakeLost(error)
        }
    }

    /// A file heard by a wake-word service: how far (ns) the audio read so far is ahead of the
    /// time since listening began; 0 when it is not.
    private func aheadOfRealTime() -> UInt64 {
        guard wake != nil, endpointer != nil else { return 0 }
        let now = Clock.monotonicNanos()
        guard let since = pacedSince else { pacedSince = now; return 0 }
        let due = UInt64(audioSamples) * SpeechAudio.nanosecondsPerSample
        return due > now - since ? due - (now - since) : 0
    }

    // MARK: - Suspend / resume

    private func handleSuspend() {
        // Whatever the suspend interrupted has given up by now; later work may block again.
        cancellation.reset()
        suspended = true
        // SUSPENDED once the connection is really let go: after the stop of a context still
        // open (its last results come first), at once otherwise (issue 19 item 5).
        if contextOpen { suspendReportPending = true } else { report(.suspended) }
        deferredStart = false
        if endpointer != nil { closeFileSource() }  // listening ends; a file is not read on
        endpointer = nil
        closeWake()
        backlog.clear()
        if contextOpen && !stopSent { sendStop() }
        if case .microphone = options.audio { audio.close() }
        if !contextOpen {
            prepared?.stream.finish()
            prepared = nil
        }
    }

    /// Resumed: IDLE. With prepare-on-init the microphone and a stream are opened at once (as
    /// in the constructor); otherwise the next start opens them (issue 19 item 5: the header
    /// promised a reopening that only prepare-on-init does).
    private func handleResume() {
        suspended = false
        if suspendReportPending {
            // Resumed while the suspended context still drained: SUSPENDED was never reported.
            suspendReportPending = false
            report(.suspended)
        }
        guard options.prepareOnInit else { return }
        do throws(SpeechClientError) {
            try prepare(client: client)
        } catch {
            // A suspend right after the resume interrupted it: nothing to report.
            if !cancellation.isCancelled { client?.emit(.error(error)) }
        }
    }
}
