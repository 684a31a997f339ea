#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// The client's worker: opens audio and streams, sends audio and start/stop, and folds the
/// server's responses into segments. It runs in turns on the shared worker pool
/// (`ThreadPool.workers`), one turn at a time (the client's `workerScheduled` says so), each
/// when a command, a stream's notice or a deadline needs one. Sendable: the fields below are
/// touched only with `audioLock` held (each step of a turn, `takeDirect`, `shutdown`), except by
/// `prepare` and `announcePrepared` when the client's constructor calls them.
///
/// This file holds its state, its turns, the commands, preparing and suspend/resume. The rest,
/// by concern:
/// - `ClientWorker+Contexts`: start, stop, reading the source into a context, a context's end;
/// - `ClientWorker+Responses`: stream events, held responses, segments, lost lanes;
/// - `ClientWorker+Listening`: each chunk taken, hands-free listening, the wake-word service.
/// The parts that stand alone (and are tested alone): `LaneSupervisor` (audio out, rotation,
/// reconnection and replay; the worker is its `LaneHost`) with its `LaneSet`, `Lane`,
/// `ReplayBuffer`, `RotationPolicy` and `ReconnectionPlan`; `AudioPump`, `ContextNumbering`,
/// `WakeListener`, `ActivationBacklog`.
final class ClientWorker: @unchecked Sendable {
    /// The client, set once by its constructor. Under a lock because the event loop reads it
    /// too (a prepared stream's or the wake service's events), possibly while the constructor
    /// sets it: prepare-on-init opens the stream before the client is complete.
    var client: Client? {
        get { link.client }
        set { link.client = newValue }
    }
    /// What the worker's callbacks (its streams', the wake service's, its source's log) hold to
    /// reach the client, instead of the worker itself weakly: a weakly referenced object's every
    /// retain and release takes the runtime's slow path, and the worker is retained per chunk.
    /// Emptied when the worker goes, so a callback after that reaches no client.
    let link = ClientLink()

    let options: ClientOptions
    let service: any RecognitionService
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
    var stalledUntil: UInt64?
    /// A stall is a wait for a notice; this bounds it should one be lost.
    static let stallSafetyNanos: UInt64 = 50_000_000
    /// The live stream a file waits for to drain, its backlog then, and since when it has not
    /// fallen below that (`sendStalled`).
    var sendWatch: (generation: Int, backlog: Int, since: UInt64)?
    /// The worker looks at a microphone again after this even if its capture thread never said
    /// a chunk was there (it says so when the capture ends, too).
    static let microphoneSafetyNanos: UInt64 = 500_000_000

    /// Every stream has a generation; events of streams that are no longer ours are ignored.
    var generation = 0
    /// A stream opened before a context (prepare-on-init, resume): the next context's first lane.
    var prepared: (generation: Int, stream: any RecognitionStream)?
    /// The context's lanes, its audio kept for replay, rotation and reconnection.
    let supervisor: LaneSupervisor
    var assembler = SegmentAssembler()

    /// The microphone, file or descriptor, read into chunks.
    let audio: AudioPump
    /// Reading the source into the open context (file or microphone).
    var pumping = false
    /// A context was requested and its `finished` has not arrived.
    var contextOpen = false
    /// The user's context is over (stop, end of audio, or the server ended it): no more audio.
    var stopSent = false
    var contextId = ""
    /// Events to deliver with the stop, once every lane has finished (errors the server sent).
    var endEvents: [ClientEvent] = []
    /// The `finished` errors in `endEvents`, by code and message (`noteFinishedError`).
    var finishedErrorsNoted: Set<String> = []
    /// A start that arrived while the previous context was still finishing (after resume).
    var deferredStart = false
    /// What the application pushed and stopped for the start that waits (`deferredStart`).
    var heldForDeferredStart = HeldCommands()
    /// A start queued behind a stop begins when that stop, queued before it and meant for the
    /// context that has ended since, is taken (`endContext`).
    var startAfterStaleStop = false
    /// What the application pushed for a start it queued behind the pending stop
    /// (`Client.Command.queuedStart`), held until that start opens its context; nil when no
    /// such start waits.
    var heldForQueuedStart: HeldCommands?
    var suspended = false
    private var lastActivity = Clock.monotonicNanos()
    /// A suspend came while a context was open: SUSPENDED is reported when that context ends.
    var suspendReportPending = false
    /// The current context was already retried once after the server rejected the token.
    var authRetried = false

    // Reconnection with replay (issue 5). The user sees one context: the id of the first
    // `started`, segment ids and word times continuous across the server contexts that carry it.
    /// Segment ids and word times of the server contexts, in the user's context.
    var numbering = ContextNumbering()
    /// `releaseHeld` is running (it may end lanes, which would call it again).
    var releasingHeld = false
    /// The last connection state reported, so that only changes are.
    private var connectionState: ConnectionState?

    // Hands-free listening (issue 8): between a start and a stop the audio goes through the
    // endpointer, which opens and closes contexts. An activation that begins while the previous
    // context is still finishing waits in `backlog` (each as its own context, 60 s of audio
    // at most).
    var endpointer: Endpointer?
    /// Samples taken since the start (positions of listen and level events).
    var audioSamples = 0
    var backlog = ActivationBacklog()
    /// Wakeword mode: the current context's phrase was heard; its segments are delivered.
    var woken = false
    /// The open context carries on an activation whose earlier context failed before it ended
    /// (`failContext`): should it fail too, the activation is not carried on again.
    var continuesActivation = false
    /// Wakeword mode with a wake-word service: the connection that hears the listening audio
    /// (nil without one), and where the last activation ended (a detection from before it
    /// belongs to its burst).
    var wake: WakeListener?
    var lastActivationEnd = 0
    /// A file heard by a wake-word service is read at real time from here (monotonic ns): a
    /// service locates the wake word only in audio that arrives about as fast as it is spoken.
    var pacedSince: UInt64?

    init(options: ClientOptions, service: any RecognitionService,
         makeSource: @escaping @Sendable (AudioInput) -> (any AudioSource)?) {
        self.options = options
        self.service = service
        audio = AudioPump(input: options.audio, chunkMilliseconds: options.chunkMilliseconds, makeSource: makeSource)
        supervisor = LaneSupervisor(options: options)
        // Not silently: audio the microphone lost while a context (or listening) kept it.
        audio.onAudioLost = { [link] error in link.client?.emit(.error(error)) }
        if let server = options.wakeService, options.activation == .wakeword {
            let cancellation = self.cancellation
            let link = self.link
            wake = WakeListener(server: server, name: options.wakeName, connectTimeoutMilliseconds: options.connectTimeoutMilliseconds,
                                applicationDriven: options.io == .application, cancellation: cancellation) { event, gen in
                link.client?.wakeEvent(event, generation: gen)
            }
        }
    }

    deinit {
        shutdown()
        link.client = nil
    }

    /// A lane the server served this long before it was lost counts as progress: a proxy's idle
    /// timeout cutting streams during a long pause must not use up the reconnect attempts.
    static let servedLongEnoughNanos: UInt64 = 5_000_000_000
    /// After the server ended an utterance by itself, the live stream moves at the next pause,
    /// however far: not forced (a forced cut falls inside a word when the server's answer comes
    /// at the start of the next sentence), the stream's budget still bounds it.
    static let moveAfterEndpointNanos = UInt64.max / 2

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
        // Taken every step (a file's every chunk): no arrays built for it.
        let deadline = Self.earliest(Self.earliest(Self.earliest(supervisor.reconnection.due?.at, idleDeadline), Self.earliest(laneDeadlines, stalledUntil)),
                                     listeningRetryDue)
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
        // A step may end a lane's wait without ending a lane (a replacement opened after it in
        // audio order): what it held goes out now, before any later result.
        if supervisor.lanes.holdsResponses { releaseHeld() }
        return nil
    }

    /// A lane still has replay audio to send.
    var replaying: Bool { supervisor.lanes.replaying }

    /// When hands-free listening tries again to open a context for the speech waiting for one.
    private var listeningRetryDue: UInt64? { contextOpen ? nil : backlog.retry?.at }

    /// The source is being read and can take audio now (a file waits while a reconnection is
    /// pending: nothing would take its audio but the replay buffer; a microphone is read all the same).
    private var pumpWanted: Bool { pumping && !(waitsForServer && (supervisor.reconnection.due != nil || (contextOpen && !stopSent && supervisor.lanes.live == nil))) }

    /// The earliest of a lane's move off a going-away connection, a start acknowledgement due
    /// and a finish due.
    private var laneDeadlines: UInt64? {
        Self.earliest(Self.earliest(Self.earliest(supervisor.lanes.nextMoveDeadline, supervisor.lanes.nextStartDeadline),
                                    Self.earliest(supervisor.lanes.nextFinishDeadline(timeout: finishTimeoutNanos),
                                                  supervisor.lanes.nextReplayStallDeadline(timeout: finishTimeoutNanos))),
                      Self.earliest(hangDeadline, quietLiveDeadline))
    }

    var finishTimeoutNanos: UInt64 { UInt64(options.finishTimeoutMilliseconds) * 1_000_000 }
    /// How long a stopped stream's server may say nothing while its unfinished audio ages out
    /// of the replay buffer (`LaneSupervisor.hangDeadline`): as long as it may take to
    /// acknowledge a start, the other answer a live server gives at once.
    var quietLimitNanos: UInt64 { UInt64(options.startTimeoutMilliseconds) * 1_000_000 }

    /// When a stopped stream is taken as hung, the live audio still coming into the context
    /// about to age out of the replay buffer (`LaneSupervisor.hangDeadline`). Nil for a file,
    /// which waits for the server, and once the context's stop is sent: nothing ages out then.
    private var hangDeadline: UInt64? { hangDue(now: Clock.monotonicNanos())?.at }

    private func hangDue(now: UInt64) -> (generation: Int, at: UInt64, unfinished: Int, probed: Bool)? {
        guard !waitsForServer, contextOpen, !stopSent else { return nil }
        return supervisor.hangDeadline(now: now, quietNanos: quietLimitNanos)
    }

    /// When the live stream, its server quiet while it takes audio, is moved to a new stream,
    /// its stop the probe that tells a hung server from silence
    /// (`LaneSupervisor.quietLiveDeadline`). Nil where `hangDeadline` is.
    private var quietLiveDeadline: UInt64? { quietLiveDue(now: Clock.monotonicNanos())?.at }

    private func quietLiveDue(now: UInt64) -> (generation: Int, at: UInt64)? {
        guard !waitsForServer, contextOpen, !stopSent else { return nil }
        return supervisor.quietLiveDeadline(now: now, quietNanos: quietLimitNanos)
    }

    /// The live stream's server has been quiet while its audio came to fill half the replay
    /// buffer: the stream moves to a new one at its next pause (within a second, or an eighth of
    /// a replay buffer under 8 s), and its stop
    /// shows whether the server is there (`expireHung` if it stays silent).
    private func probeQuietLive(now: UInt64) {
        guard let quiet = quietLiveDue(now: now), now >= quiet.at else { return }
        // Within a second, or an eighth of a small replay buffer.
        let wait = min(Self.quietMoveNanos, UInt64(SpeechAudio.milliseconds(samples: supervisor.replay.capacitySamples / 8)) * 1_000_000)
        if supervisor.moveLiveLane(quiet.generation, by: now &+ wait, why: Lane.serverQuiet) {
            supervisor.lanes.update(quiet.generation) { $0.probedQuiet = true }
            client?.log(.info, "context \(contextId): \(Lane.serverQuiet): it moves to a new stream at its next pause")
        }
    }

    /// How long a move off a quiet stream waits for a pause.
    static let quietMoveNanos: UInt64 = 1_000_000_000

    static func earliest(_ a: UInt64?, _ b: UInt64?) -> UInt64? {
        guard let a else { return b }
        guard let b else { return a }
        return min(a, b)
    }

    /// A stream whose start the server did not acknowledge in time is lost (issue 19 item 1: a
    /// hung server once left a context STARTING for 40 s): it is retried like a lost connection,
    /// its audio replayed, until the reconnect attempts run out. Here and in the two below the
    /// stream's connection is retired: the pool gave each new attempt the same connection, to a
    /// server (or proxy) stuck on it while it still answered PINGs, and each failed the same way.
    private func expireUnacknowledgedStarts(now: UInt64) {
        for (gen, _) in supervisor.lanes.unacknowledged(at: now) {
            supervisor.stream(of: gen)?.retireConnection()
            handleStream(.closed(SpeechClientError(.timeout, "the server did not acknowledge the start of the context within \(options.startTimeoutMilliseconds) ms",
                                                   grpcStatus: GRPCStatus.unavailable)), generation: gen)
        }
    }

    /// A stream whose `finished` did not come within the finish timeout of its stop (or of its
    /// last final that went a second further, `Lane.awaitingFinishSince`) is lost: a server (or
    /// a replica behind a balancer) that hangs left the context STOPPING for good. It is
    /// retried as a lost connection, its unfinished audio replayed on a new stream.
    private func expireUnfinished(now: UInt64) {
        for gen in supervisor.lanes.unfinished(at: now, timeout: finishTimeoutNanos) {
            supervisor.stream(of: gen)?.retireConnection()
            handleStream(.closed(SpeechClientError(.timeout, "the server did not finish the context within \(options.finishTimeoutMilliseconds / 1000) s (counted from its stop, the end of the stream before it, or its last final words)",
                                                   grpcStatus: GRPCStatus.unavailable)), generation: gen)
        }
    }

    /// A lane whose replay the server has taken none of for the finish timeout (its send backlog
    /// never fell: a hung handler behind a connection that still answers PINGs) is lost: a file
    /// waited for it for ever, and a microphone's audio aged out of the replay buffer unsaid.
    private func expireStalledReplays(now: UInt64) {
        for gen in supervisor.lanes.replayStalled(at: now, timeout: finishTimeoutNanos) {
            supervisor.stream(of: gen)?.retireConnection()
            handleStream(.closed(SpeechClientError(.timeout, "the server took none of the audio replayed on its stream for \(SpeechAudio.secondsText(Double(options.finishTimeoutMilliseconds) / 1000)) s (its flow-control window stayed closed)",
                                                   grpcStatus: GRPCStatus.unavailable)), generation: gen)
        }
    }

    /// A stopped stream whose server said nothing for the start timeout while its live audio
    /// not yet final came to fill half the replay buffer is lost (`LaneSupervisor.hangDeadline`):
    /// replayed on a new connection while the buffer still holds that audio.
    private func expireHung(now: UInt64) {
        guard let hung = hangDue(now: now), now >= hung.at else { return }
        let unfinished = SpeechAudio.secondsText(SpeechAudio.seconds(samples: hung.unfinished))
        let capacity = SpeechAudio.secondsText(SpeechAudio.seconds(samples: supervisor.replay.capacitySamples))
        supervisor.stream(of: hung.generation)?.retireConnection()
        let quiet = SpeechAudio.secondsText(Double(options.startTimeoutMilliseconds) / (hung.probed ? 4_000 : 1_000))
        let when = hung.probed ? "after the stop made to find out whether it was there (it had said nothing for \(SpeechAudio.secondsText(Double(options.startTimeoutMilliseconds) / 1000)) s before)" : "after its stop"
        handleStream(.closed(SpeechClientError(.timeout, "the server said nothing on the stream for \(quiet) s \(when) while the \(unfinished) s of audio since its last final words aged in the \(capacity) s replay buffer: taken as hung",
                                               grpcStatus: GRPCStatus.unavailable)), generation: hung.generation)
    }

    /// What the worker does between commands: reconnect, replay, pump the source, move a lane
    /// off a closing connection, close an idle stream.
    private func idleStep(idleDeadline: UInt64?) {
        guard let client else { return }
        let now = Clock.monotonicNanos()
        if let due = supervisor.lanes.nextStartDeadline, now >= due {
            expireUnacknowledgedStarts(now: now)
        } else if let due = supervisor.lanes.nextFinishDeadline(timeout: finishTimeoutNanos), now >= due {
            expireUnfinished(now: now)
        } else if let due = supervisor.lanes.nextReplayStallDeadline(timeout: finishTimeoutNanos), now >= due {
            expireStalledReplays(now: now)
        } else if let due = hangDeadline, now >= due {
            expireHung(now: now)
        } else if let due = quietLiveDeadline, now >= due {
            probeQuietLive(now: now)
        } else if let due = supervisor.reconnection.due, now >= due.at {
            supervisor.attemptReconnect(host: self)
        } else if let due = listeningRetryDue, now >= due {
            openWaitingActivation()
            finishListeningIfDone()  // listening was stopped and its last speech was given up
        } else if replaying || pumping {
            let replayed = replaying && supervisor.pumpReplay(host: self)
            if pumpWanted { pumpOnce() } else if !replayed {
                // Replay lanes wait for their streams to drain; a file waits for a reconnection.
                stall(waitingFor: supervisor.lanes.replayingStreams)
            }
        } else if let by = supervisor.lanes.nextMoveDeadline, now >= by {
            supervisor.rotate(reason: supervisor.lanes.liveMoveWhy, host: self)
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

    /// Whether the pushing thread may take these chunks itself now (the caller holds
    /// `audioLock`): not when they may move the live lane to a new stream without one ready,
    /// since that may connect and log in, and a push never waits for those (the header's
    /// promise). The worker takes them then.
    func takesDirectWithoutBlocking(_ chunks: Chunker.Chunks) -> Bool {
        if deferredStart || heldForQueuedStart != nil || !contextOpen || stopSent || prepared != nil { return true }
        return !supervisor.mayRotate(before: chunks)
    }

    func takeDirect(_ chunks: Chunker.Chunks) {
        if holdForDeferredStart(chunks: chunks, stop: false) { return }
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
        guard supervisor.lanes.contains(gen), case .response(let response) = event else { return }
        serverAnswered(response, lane: gen)
        if supervisor.dropsResult(response, lane: gen) { return }
        let error = supervisor.isHeld(gen) ? hold(response, lane: gen) : applySegmentUpdate(response, lane: gen)
        if let error {
            supervisor.stream(of: gen)?.cancel()
            client?.enqueue(.stream(.closed(error), generation: gen))
        }
    }

    /// A file or a descriptor is read as fast as the server takes it (a microphone cannot wait).
    var waitsForServer: Bool { audio.waitsForServer }

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
        for lane in supervisor.lanes.removeAll() { lane.stream.cancel() }
        prepared?.stream.cancel()
        prepared = nil
        audio.close()
        closeWake()
    }

    private func handle(_ command: Client.Command) {
        switch command {
        case .start: handleStart()
        case .stop:
            if startAfterStaleStop {
                // The stop of the context that ended; the start queued behind it begins now.
                startAfterTheStaleStop()
            } else if !holdForDeferredStart(chunks: Chunker.Chunks(), stop: true) {
                endpointer != nil ? stopListening(auto: false) : sendStop()
            }
        case .audio(let chunks):
            if !holdForDeferredStart(chunks: chunks, stop: false) {
                for c in chunks { take(c) }
            }
            if options.pushWaitMilliseconds > 0 {
                client?.pushedNotTaken.subtract(chunks.sampleCount, ordering: .relaxed)
            }
        case .pushEnd(let rest):
            if startAfterStaleStop {
                startAfterTheStaleStop()
            } else if !holdForDeferredStart(chunks: rest, stop: true) {
                for c in rest { take(c) }
                endpointer != nil ? stopListening(auto: false) : sendStop()
            }
        case .queuedStart(let queued):
            if queued {
                // Unless it began already (the context before it ended while this waited).
                guard client?.hasQueuedStart == true else { break }
                heldForQueuedStart = HeldCommands()
                // A microphone keeps what it hears from now on, for that start's context.
                audio.collectAhead()
            } else {
                heldForQueuedStart = nil
                audio.stopCollectingAhead()
            }
        case .queuedStartEnds(let tail):
            if !endHeldForQueuedStart(with: tail) {
                // That start began before this was taken: its context is open, and ends now.
                for c in tail { take(c) }
                endpointer != nil ? stopListening(auto: false) : sendStop()
            }
        case .suspend(let tail): handleSuspend(pushedTail: tail)
        case .resume: handleResume()
        case .stream(let event, let gen, _):
            handleStream(event, generation: gen)
        case .wake(let event, let gen):
            if gen == wake?.generation { handleWake(event) }
        }
    }

    // MARK: - Preparing

    /// Opens the microphone (for a microphone source) and a stream. Called by the constructor
    /// before `client` is set (errors are thrown to spc_client_new), or by the worker on resume.
    func prepare() throws(SpeechClientError) {
        client?.flushDeferredWake()  // opening a device may block
        // Through the worker: with prepare-on-init the client is not set yet, and ALSA's later
        // messages must still reach it.
        try audio.openMicrophone(log: { [link] level, message in link.client?.log(level, message) })
        try ensureStream()
    }

    /// A stream ready for the next lane (`prepared`): opened now unless one is waiting.
    /// `reportsFailure` false: the caller says what a failure means (UNAVAILABLE, or a retry).
    func ensureStream(reportsFailure: Bool = true) throws(SpeechClientError) {
        if prepared != nil { return }
        client?.flushDeferredWake()  // a connect and a login may take a while: callbacks first
        generation += 1
        let gen = generation
        let config = SLUConfig(languageCode: options.language)
        // (A retry of hands-free listening's open said RECONNECTING, as a context's does.)
        if supervisor.reconnection.due == nil && contextOpen == false && backlog.retry == nil { report(.connecting) }
        client?.log(.debug, "opening an SLU stream (language \(options.language))")
        let stream: any RecognitionStream
        do throws(SpeechClientError) {
            stream = try service.openStream(config: config, cancellation: cancellation) { [link] event in
                link.client?.streamEvent(event, generation: gen)
            }
        } catch {
            if reportsFailure && supervisor.reconnection.due == nil && !contextOpen && !cancellation.isCancelled { report(.unavailable, reason: error) }
            throw error
        }
        stream.send(.config(config))
        prepared = (gen, stream)
        client?.log(.debug, "SLU stream open")
        report(.ready)
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
    func report(_ state: ConnectionState, attempt: Int = 0, delayMilliseconds: Int = 0, reason: SpeechClientError? = nil) {
        if state == connectionState && state != .reconnecting { return }
        connectionState = state
        client?.emit(.connection(state, attempt: Int32(clamping: attempt), delayMilliseconds: Int32(clamping: delayMilliseconds), reason: reason))
    }

    // MARK: - Suspend / resume

    private func handleSuspend(pushedTail: Chunker.Chunks) {
        // Whatever the suspend interrupted has given up by now; later work may block again.
        cancellation.reset()
        suspended = true
        // SUSPENDED once the connection is really let go: after the stop of a context still
        // open (its last results come first), at once otherwise (issue 19 item 5).
        if contextOpen { suspendReportPending = true } else { report(.suspended) }
        deferredStart = false
        heldForDeferredStart = HeldCommands()
        startAfterStaleStop = false
        heldForQueuedStart = nil
        audio.stopCollectingAhead()
        if endpointer?.isActive == true {
            // An activation in progress ends with what the microphone captured and the worker
            // had not taken yet (the chunk in progress, the resampler's tail): closing the
            // source first dropped them, up to a chunk of its last words. (`stopListening`.)
            for c in audio.takeCapturedAndStop() { take(c, toWakeService: false) }
            for c in audio.drain() { take(c, toWakeService: false) }
            for c in pushedTail { take(c, toWakeService: false) }
        }
        if endpointer != nil { closeFileSource() }  // listening ends; a file is not read on
        if endpointer?.isActive == true && (wake != nil || options.activation == .voice) {
            // The activation says its end at its endpoint, which it will not reach now (a
            // transcript's wake phrase says it with its context's stop: `endContext`).
            client?.emit(.listen(.deactivate, positionMilliseconds: Int64(SpeechAudio.milliseconds(samples: audioSamples))))
        }
        endpointer = nil
        closeWake()
        if backlog.isWaiting {
            // Speech that waited for the previous context: not transcribed, and said so.
            client?.emit(.error(SpeechClientError(.network, "the client was suspended while \(backlog.count) activation(s) (\(SpeechAudio.secondsText(samples: backlog.heldSamples)) s of speech) waited for a context (the previous one finishing, or the server unreachable): not transcribed")))
            sayEndOfDroppedContinuation()
        }
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
            try prepare()
        } catch {
            // A suspend right after the resume interrupted it: nothing to report.
            if !cancellation.isCancelled { client?.emit(.error(error)) }
        }
    }
}

/// Pushed audio (bounded by the replay buffer) and a stop, held for a start that waits for the
/// previous context to finish.
struct HeldCommands {
    var chunks: [[Int16]] = []
    var samples = 0
    var stop = false
    var overflowed = false
}

/// What the worker is to its `LaneSupervisor`.
extension ClientWorker: LaneHost {
    /// The prepared stream, or one opened now (`ensureStream`).
    func takeStream() throws(SpeechClientError) -> (generation: Int, stream: any RecognitionStream)? {
        try ensureStream()
        guard let taken = prepared else { return nil }
        prepared = nil
        return taken
    }

    var connectCancelled: Bool { cancellation.isCancelled }
    var liveAudioEnded: Bool { stopSent }

    func log(_ level: LogLevel, _ message: String) { client?.log(level, message) }

    func replayOverflowed(from: Int, to: Int) {
        client?.emit(.error(SpeechClientError(.network,
            "the replay buffer overflowed while replaying: \(SpeechAudio.secondsText(samples: to - from)) s of audio from \(SpeechAudio.secondsText(samples: from)) s into context \(contextId) were not transcribed")))
    }
}

/// The client as its worker's callbacks reach it (`ClientWorker.link`): weakly, behind a lock,
/// because the event loop reads it while the constructor may still be setting it.
/// Sendable: the reference is only touched under the mutex.
final class ClientLink: Sendable {
    private struct WeakClient: Sendable { weak var client: Client? }
    private let slot = Mutex(WeakClient())

    var client: Client? {
        get { slot.withLock { $0.client } }
        set { slot.withLock { $0.client = newValue } }
    }
}
