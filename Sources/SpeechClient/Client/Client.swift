import Synchronization
import CShims
#if canImport(Glibc)
import Glibc
#endif

/// One recognition client: an audio source, a stream to the server, and an ordered event queue
/// delivered on a callback thread (its own, or the shared pool's) or, in dispatch, the application's.
///
/// Threads. API calls run on the caller's thread and only check and change `state` and queue
/// commands. The worker (`ClientWorker`, in turns on `ThreadPool.workers`) does everything that
/// blocks or talks to the stream: opening audio, connecting, sending, folding responses into
/// segments. A `ThreadPool` thread runs the application's callbacks, one at a time, with no lock
/// held. Sendable: `lock` guards the shared fields below and `pushLock` guards `pushPath`; the
/// rest is immutable, atomic or `Locked`. `lock` is never held across I/O or a callback.
public final class Client: @unchecked Sendable, InlineDelivery, PoolWork, DeferredWake {
    public typealias EventHandler = @Sendable (Client, ClientEvent) -> Void

    enum Command {
        case start
        case stop
        case audio(Chunker.Chunks)
        case pushEnd(Chunker.Chunks)
        /// A start was queued behind the pending stop (true): the audio from now on is for its
        /// context, held until it opens; or that queued start was cancelled by a stop (false).
        case queuedStart(Bool)
        /// push_end for the start queued behind the pending stop: the push path's tail, then
        /// the end of that context as soon as it opens.
        case queuedStartEnds(Chunker.Chunks)
        /// With the pushed audio still in the push path when listening hands-free: it ends the
        /// activation in progress (outside one it is dropped, as it opened none).
        case suspend(tail: Chunker.Chunks)
        case resume
        /// `heldBytes`: an event's share of `queuedResponseBytes` (worked out once, when queued).
        case stream(StreamEvent, generation: Int, heldBytes: Int = 0)
        case wake(WakeEvent, generation: Int)
    }

    public let options: ClientOptions
    public let deviceId: String
    /// The name that came with the listen event being delivered (a wake word the wake-word
    /// service heard), for spc_listen_name() inside the listen callback; nil otherwise.
    public let deliveringListenName = Locked<OwnedCString?>(nil)
    private let service: any RecognitionService
    /// The worker's: suspend and free cancel a connect or login it is blocked in.
    private let cancellation: Cancellation
    private let handler: EventHandler?
    private let makeSource: @Sendable (AudioInput) -> (any AudioSource)?
    private let logRelay: LogRelay

    // Guarded by `lock`. Its condition wakes wait_idle and free callers.
    private let lock: ConditionLock
    private var state = ClientState.idle
    private var pendingStart = false
    /// push_end came for the start queued behind the pending stop: that context ends as soon
    /// as it opens (it begins STOPPING).
    private var queuedStartEnded = false
    /// The pending stop cut the microphone's audio at its call (`CaptureBuffer.endAtCall`): a
    /// start queued behind it collects from its own call. Not otherwise (the device still
    /// opening, nothing kept yet): it collected then what the stopped context had not read.
    private var stopCutAtCall = false
    private var commands = FIFO<Command>()
    /// Starts, and stops (or push ends), queued for the worker and not taken yet. Guarded by
    /// `lock`; the worker reads them inside a `transition` closure (which runs under it) when a
    /// context ends: a start made after a resume, while the suspended context still finished,
    /// is still to begin, and a stop queued before a start queued behind it was for the context
    /// that ended, not the next one.
    private(set) var untakenStarts = 0
    private(set) var untakenStops = 0
    /// About the bytes of the server's responses queued for the worker (`SLUResponse.heldBytes`),
    /// bounded by `maxQueuedResponseBytes`; and the streams whose responses are dropped since
    /// they passed it (each is being ended). Guarded by `lock`.
    private var queuedResponseBytes = 0
    private var overflowedStreams: Set<Int> = []
    /// Wake-word detections queued for the worker, by listening generation: a burst of one wake
    /// word is a few; a service sending them without end while the worker was held up queued
    /// them without limit. Past the bound, a generation's worker has all it needs to act on.
    private var queuedDetections: [Int: Int] = [:]
    static let maxQueuedDetections = 16
    /// Far above what speech produces while the worker is held up (a connect and a login, 15 s
    /// by default): a server sending faster is ended instead of queued without limit.
    static let maxQueuedResponseBytes = 16 << 20
    var queuedResponseBytesForTests: Int { lock.withLock { queuedResponseBytes } }
    var queuedCommandsForTests: Int { lock.withLock { commands.count } }
    private var events = FIFO<ClientEvent>()
    private var workerBusy = false
    /// Something the waiting worker waits for happened (a stream drained, audio became final).
    private var workerPoked = false
    /// The worker's turn is queued on the worker pool or running: at most one at a time.
    private var workerScheduled = false
    /// The earliest deadline an event-loop timer will poke the worker at (one timer per
    /// deadline, not one per turn that waits for it).
    private var workerTimerAt: UInt64?
    private var contextOpen = false
    /// A start or a suspend was asked for and its end not yet announced by an idle event
    /// (`reportIdle` only).
    private var idleOwed = false
    private var delivering = false
    private var closing = false
    private var callbacksClosing = false
    /// Thread delivery: the client is in the delivery pool's queue; and the thread running its
    /// callbacks now (0: none). At most one thread at a time, so they run in order.
    private var deliveryScheduled = false
    private var deliveryOwner: UInt = 0
    /// The thread running a worker turn (0: none). Its events wake the callback thread once,
    /// at the end of the turn or before the worker may block (`flushDeferredWake`), instead of
    /// once per event: a file's answers arrive while the worker pumps, and a wake per answer
    /// was most of a file transcription's context switches (each preempts the worker on a
    /// shared core). Other threads' events wake it at once, as before.
    private var turnThread: UInt = 0
    /// Tests only: run at the end of each worker turn, while its sends are still held (the
    /// window a push must not slip its audio into).
    var turnEndingForTests: (@Sendable () -> Void)? {
        get { lock.withLock { turnEnding } }
        set { lock.withLock { turnEnding = newValue } }
    }
    private var turnEnding: (@Sendable () -> Void)?
    /// Tests only: run at the start of each worker turn, before it takes a command (a test may
    /// hold it there to queue commands behind what is queued already).
    var turnStartingForTests: (@Sendable () -> Void)? {
        get { lock.withLock { turnStarting } }
        set { lock.withLock { turnStarting = newValue } }
    }
    private var turnStarting: (@Sendable () -> Void)?
    /// An event of the turn is waiting for that wake.
    private var wakeDeferred = false
    /// The network's loop (also the worker's timers): it holds the sends of a worker turn until the turn's end
    /// (`EventLoop.corking`) and, with thread delivery, defers the wakes of the responses of one
    /// read to its end (`EventLoop.batchingWakes`); and whether it has this client noted.
    private let networkLoop: EventLoop?
    private var loopWakeNoted = false
    /// SPC_DELIVERY_THREAD: the client's own; SPC_DELIVERY_SHARED: the process's; nil in
    /// application delivery.
    private let deliveryPool: ThreadPool?

    private var worker: ClientWorker?

    // Application delivery (spc_client_dispatch): an eventfd readable while events are pending,
    // the thread inside dispatch, and a lock that makes concurrent dispatch calls take turns.
    public let eventFD: Int32
    private var eventFDSignaled = false
    /// Events queued by spc_io_dispatch's network work wait for `deliverInline` on its thread
    /// (the event fd is not written for them).
    private var deliveryDeferred = false
    /// With application delivery and SPC_IO_APPLICATION: the loop whose application set holds
    /// this client's connection (for spc_io_dispatch's inline delivery).
    private let applicationLoop: EventLoop?
    private var dispatchingThread: UInt = 0
    private let dispatchLock = ConditionLock()

    // Pushed audio is converted on the caller's thread; concurrent pushers are serialised by
    // `pushLock` (a separate lock, so converting never holds up the state lock).
    private let pushLock = ConditionLock()
    private var pushPath: PushPath?

    struct PushPath {
        var converter: AudioConverter
        var chunker: Chunker
    }

    /// Builds a client and starts its threads. With `prepareOnInit`, connects and opens the
    /// microphone first and throws what stopped it.
    public init(options: ClientOptions, service: (any RecognitionService)? = nil,
                makeSource: (@Sendable (AudioInput) -> (any AudioSource)?)? = nil,
                handler: EventHandler?) throws(SpeechClientError) {
        let lock = ConditionLock()
        self.lock = lock
        try options.validateForClient()
        guard let server = options.server else {
            throw SpeechClientError(.invalidArgument, "no server URL")
        }
        self.options = options
        self.handler = handler
        networkLoop = try? EventLoop.shared()
        applicationLoop = options.io == .application && options.delivery == .application ? networkLoop : nil
        self.makeSource = makeSource ?? Client.realSource
        let identity = DeviceIdentity.resolve(options: options)
        deviceId = identity.id
        let logRelay = LogRelay()
        self.logRelay = logRelay
        self.service = service ?? Client.service(options: options, server: server, deviceId: identity.id, log: logRelay)
        let samplesPerChunk = SpeechAudio.samples(milliseconds: options.chunkMilliseconds)
        if case .push(let rate, let channels) = options.audio {
            let converter = AudioConverter(input: AudioFormat(sampleRate: rate, channels: channels))
            pushPath = PushPath(converter: converter, chunker: Chunker(samplesPerChunk: samplesPerChunk))
        }
        // A WAV file is checked now, so a wrong path fails here and not on the first start.
        if case .file = options.audio, let source = self.makeSource(options.audio) {
            try source.open()
            source.close()
        }
        // A descriptor is checked (open, readable) but not read: a pipe may not have spoken yet.
        if case .descriptor(let fd, _, _) = options.audio { try DescriptorSource.check(fd: fd) }
        let worker = ClientWorker(options: options, service: self.service, makeSource: self.makeSource)
        if options.prepareOnInit {
            // Connecting and logging in wait for the network here.
            try Client.blockingForTheNetwork(options) { () throws(SpeechClientError) in try worker.prepare() }
        }
        // Last of what may fail: a failed constructor runs no deinit, so a callback thread or
        // an eventfd made before a check that threw (a missing WAV file, a server down with
        // prepare-on-init) was never let go: one thread or descriptor per failed spc_client_new.
        switch options.delivery {
        case .application:
            let fd = eventfd(0, Int32(EFD_NONBLOCK) | Int32(EFD_CLOEXEC))
            guard fd >= 0 else { throw SpeechClientError.errno(.internal, "eventfd", errno, context: "application delivery") }
            eventFD = fd
            deliveryPool = nil
        case .thread:
            eventFD = -1
            deliveryPool = try ThreadPool.privateCallbackThread()
        case .shared:
            eventFD = -1
            deliveryPool = ThreadPool.callbacks
        }
        cancellation = worker.cancellation
        // Under the lock: with prepare-on-init the stream is open and the event loop may
        // already deliver its events (`streamEvent` reads `worker`).
        lock.withLock {
            self.worker = worker
            worker.client = self
        }
        logRelay.attach(self)
        worker.announcePrepared()
        if let warning = identity.warning { log(.warning, warning) }
        if let dir = options.cacheDir ?? DeviceIdentity.defaultCacheDirectory(), let why = Files.unsafeDirectoryReason(dir) {
            log(.warning, "login tokens are not cached on disk: \(why)")
        }
        if let server = options.server, !server.useTLS, !server.isLoopback {
            log(.warning, server.backend == .wyoming
                ? "Wyoming has no encryption: audio and transcripts cross the network to \(server.host) in clear"
                : "plaintext connection to non-loopback host \(server.host): audio and tokens are not encrypted")
        }
        if options.insecureTLS { log(.warning, "TLS certificate verification is OFF (insecure_tls)") }
        // A first turn: commands queued meanwhile, and the deadlines of a prepared stream.
        lock.withLock { requestWorkerTurnLocked() }
    }

    /// The real service: gRPC channels shared per server, login with the token cache.
    /// The backend the URL's scheme names.
    static func service(options: ClientOptions, server: ServerURL, deviceId: String, log: LogRelay) -> any RecognitionService {
        switch server.backend {
        case .speechly:
            return speechlyService(options: options, server: server, deviceId: deviceId, log: log)
        case .riva:
            return RivaService(channel: grpcChannel(options: options, server: server), peer: server.description,
                               model: options.model, metadata: options.headers,
                               timeoutMilliseconds: options.connectTimeoutMilliseconds) { level, message in
                log.log(level, message)
            }
        case .wyoming:
            // No result timer of the stream's own (0): the worker's finish clock, which runs only
            // for the first stream of a context in audio order, is the one. wyoming-faster-whisper
            // transcribes one stream at a time, and a later stream timed from its own audio-stop
            // was failed while the server was still on the stream before it.
            return WyomingService(server: server, connectTimeoutMilliseconds: options.connectTimeoutMilliseconds, resultTimeoutMilliseconds: 0,
                                  applicationDrivenIO: options.io == .application, model: options.model) { level, message in log.log(level, message) }
        }
    }

    /// The shared gRPC channel for a server, with the options' TLS, I/O and keepalive settings.
    static func grpcChannel(options: ClientOptions, server: ServerURL) -> GRPCChannel {
        GRPCChannel.shared(server: server, tls: TLSSettings(caFile: options.caFile, insecure: options.insecureTLS),
                           connectTimeoutMilliseconds: options.connectTimeoutMilliseconds, configuration: grpcConfiguration(options))
    }

    static func grpcConfiguration(_ options: ClientOptions) -> GRPCChannel.Configuration {
        var configuration = GRPCChannel.Configuration()
        configuration.http2.applicationDrivenIO = options.io == .application
        configuration.http2.keepaliveIntervalMilliseconds = options.keepaliveIntervalMilliseconds
        configuration.http2.keepaliveTimeoutMilliseconds = options.keepaliveTimeoutMilliseconds
        return configuration
    }

    static func speechlyService(options: ClientOptions, server: ServerURL, deviceId: String, log: LogRelay) -> SpeechlyService {
        let tls = TLSSettings(caFile: options.caFile, insecure: options.insecureTLS)
        let configuration = grpcConfiguration(options)
        let channel = grpcChannel(options: options, server: server)
        let identityServer = options.identityServer ?? server
        let identityChannel = identityServer == server ? channel
            : GRPCChannel.shared(server: identityServer, tls: tls, connectTimeoutMilliseconds: options.connectTimeoutMilliseconds,
                                 configuration: configuration)
        let cache = TokenCache(directory: options.cacheDir ?? DeviceIdentity.defaultCacheDirectory())
        let identity = IdentityClient(channel: identityChannel, cache: cache, deviceId: deviceId,
                                      appId: options.appId, projectId: options.projectId,
                                      server: identityServer.description, timeoutMilliseconds: options.loginTimeoutMilliseconds,
                                      headers: options.headers)
        return SpeechlyService(channel: channel, identity: identity, headers: options.headers) { level, message in
            log.log(level, message)
        }
    }

    static let realSource: @Sendable (AudioInput) -> (any AudioSource)? = { input in
        switch input {
        // Read on its own thread: the worker may be held up in a connect (CaptureBuffer).
        case .microphone(let device): return CaptureBuffer(ALSACapture(device: device))
        case .file(let path): return WAVFileSource(path: path)
        case .push: return nil
        case .descriptor(let fd, let rate, let channels):
            return DescriptorSource(fd: fd, raw: rate == 0 ? nil : AudioFormat(sampleRate: rate, channels: channels))
        }
    }

    deinit {
        shutdownThreads(dropQueued: true)
        if eventFD >= 0 { Glibc.close(eventFD) }
    }

    // MARK: - API (any thread)

    public var currentState: ClientState { lock.withLock { state } }

    /// The open microphone of a push-to-talk client (manual activation), for stop and start to
    /// mark their audio at the call. (Lock order: this lock, then the pump's box, then the
    /// capture buffer's, which take nothing else.) Hands-free listening keeps its own.
    private var microphoneForCallsLocked: CaptureBuffer? {
        guard options.activation == .manual, case .microphone = options.audio else { return nil }
        return worker?.audio.microphoneForCalls.withLock { $0 }
    }

    /// The connection state last reported (issue 19 item 9: on demand, not only by callback);
    /// `.idle` before the first connection attempt.
    public var currentConnectionState: ConnectionState {
        ConnectionState(rawValue: connectionNow.load(ordering: .acquiring)) ?? .idle
    }
    private let connectionNow = Atomic<Int32>(ConnectionState.idle.rawValue)

    /// True when called from the thread running this client's callbacks (where blocking calls
    /// would deadlock).
    public var isOnCallbackThread: Bool {
        let me = UInt(pthread_self())
        return lock.withLock { deliveryOwner == me || dispatchingThread == me }
    }

    public func start() throws(SpeechClientError) {
        try lock.withLock { () throws(SpeechClientError) in
            try checkOpen()
            switch state {
            case .idle:
                state = .starting
                idleOwed = options.reportIdle
                stopCutAtCall = false
                resetPushPath()
                enqueueLocked(.start)
            case .stopping where !pendingStart:
                pendingStart = true
                resetPushPath()
                // The microphone keeps what it hears from now on for this start: from when the
                // worker took it, the first words were lost when it was held up (a connect).
                if stopCutAtCall { microphoneForCallsLocked?.collectAtCall() }
                stopCutAtCall = false
                enqueueLocked(.queuedStart(true))
            case .stopping:
                throw SpeechClientError(.invalidState, "a start is already queued behind the pending stop")
            case .starting, .listening:
                throw SpeechClientError(.invalidState, "a context is already \(state == .starting ? "starting" : "open"): stop it first")
            case .suspended:
                throw SpeechClientError(.invalidState, "the client is suspended: resume it first")
            }
        }
    }

    public func stop() throws(SpeechClientError) {
        try lock.withLock { () throws(SpeechClientError) in
            try checkOpen()
            switch state {
            case .starting, .listening:
                state = .stopping
                if case .push = options.audio {
                    // The pushed audio still in the converter and the chunk in progress (up to
                    // a chunk, 100 ms by default) ends the context, as with push_end: a stop
                    // dropped it, clipping the last word of a push-to-talk.
                    enqueueLocked(.pushEnd(takePushTailLocked()))
                } else {
                    // The microphone's audio for this context ends now, not when the worker
                    // takes the stop: what comes after is not the user's (nor a start's called
                    // meanwhile, which it took).
                    stopCutAtCall = microphoneForCallsLocked?.endAtCall() ?? false
                    enqueueLocked(.stop)
                }
            case .stopping where pendingStart:
                pendingStart = false
                queuedStartEnded = false
                microphoneForCallsLocked?.cancelCollectingAtCall()
                enqueueLocked(.queuedStart(false))
            default:
                throw SpeechClientError(.invalidState, "there is no context to stop (state \(state))")
            }
        }
    }

    public func suspend() throws(SpeechClientError) {
        try lock.withLock { () throws(SpeechClientError) in
            try checkOpen()
            guard state != .suspended else { throw SpeechClientError(.invalidState, "the client is already suspended") }
            if case .push = options.audio, options.activation == .manual, state == .starting || state == .listening {
                // The context is stopped first: with the audio still in the push path, as a
                // stop sends it (dropped, it clipped the last words before a suspend). Not while
                // listening hands-free: there the tail would go through the voice detector,
                // which could open a context during the suspend.
                let tail = takePushTailLocked()
                if !tail.isEmpty {
                    if options.pushWaitMilliseconds > 0 { pushedNotTaken.add(tail.sampleCount, ordering: .relaxed) }
                    enqueueLocked(.audio(tail))
                }
            }
            // Listening hands-free, that audio goes with the suspend, into the activation in
            // progress only: left in the push path, the next start dropped it (up to a chunk
            // and the resampler's tail: the last word before the suspend).
            var listeningTail = Chunker.Chunks()
            if case .push = options.audio, options.activation != .manual, state == .listening || state == .starting {
                listeningTail = takePushTailLocked()
            }
            state = .suspended
            if pendingStart { microphoneForCallsLocked?.cancelCollectingAtCall() }
            pendingStart = false
            queuedStartEnded = false
            idleOwed = options.reportIdle
            // A connect or login in progress gives up now instead of at its deadline. Before
            // the command is queued: the worker resets the cancellation when it takes the
            // suspend, and a cancel after that (a worker quicker than this thread) stayed set,
            // failing every later connect silently. (Lock order: this lock, then the
            // cancellation's and a waiting call's result lock, which take nothing else.)
            cancellation.cancel()
            enqueueLocked(.suspend(tail: listeningTail))
        }
    }

    public func resume() throws(SpeechClientError) {
        try lock.withLock { () throws(SpeechClientError) in
            try checkOpen()
            guard state == .suspended else { throw SpeechClientError(.invalidState, "the client is not suspended") }
            state = .idle
            enqueueLocked(.resume)
        }
    }

    public func pushAudio(_ frames: UnsafeBufferPointer<Int16>) throws(SpeechClientError) {
        let accepting = try lock.withLock { () throws(SpeechClientError) -> Bool in
            try checkOpen()
            guard case .push = options.audio else {
                throw SpeechClientError(.invalidState, "push_audio needs a client whose source is pushed audio")
            }
            return acceptsPushLocked
        }
        guard accepting, !frames.isEmpty else { return }
        guard options.pushWaitMilliseconds > 0, case .push(let rate, let inputChannels) = options.audio else {
            _ = takePushed(frames)
            return
        }
        // With backpressure, in slices of a quarter of the replay buffer, each waiting for room:
        // a push longer than the buffer (a whole recording in one call) could never fit at once,
        // and timed out on every retry. Only the first slice's wait fails the push (nothing is
        // taken then); once part is taken, a later slice that finds no room in time is taken
        // anyway, as when the worker is held up (audio that then outgrows the buffer is
        // reported lost), so that a push never half succeeds.
        let channels = max(inputChannels, 1)
        let sliceLength = max(1, options.replayBufferMilliseconds * max(rate, 1) / 4000) * channels
        var offset = 0
        while offset < frames.count {
            let end = frames.count - offset > sliceLength ? offset + sliceLength : frames.count
            let slice = UnsafeBufferPointer(rebasing: frames[offset..<end])
            if !waitForRoom(forPushed: slice, rate: rate, channels: channels) && offset == 0 {
                // Not taken (nothing was converted yet): the caller may push these frames again.
                throw SpeechClientError(.timeout, "the pushed audio did not fit within \(options.pushWaitMilliseconds) ms: the audio not yet final fills the replay buffer (\(options.replayBufferMilliseconds) ms); push it again")
            }
            guard takePushed(slice) else { return }  // a stop came meanwhile: the rest is not taken either
            offset = end
        }
    }

    /// Backpressure (issue 18): waits, up to the push wait, while the audio not yet final plus
    /// `frames` would outgrow the replay buffer (a reconnection, a server falling behind), so a
    /// loss at any moment loses nothing. Not from a callback: that would wait for itself. False
    /// when they did not fit in time.
    private func waitForRoom(forPushed frames: UnsafeBufferPointer<Int16>, rate: Int, channels: Int) -> Bool {
        guard !isOnCallbackThread, let w = lock.withLock({ worker }) else { return true }
        // The samples these frames become at 16 kHz, and the chunk in progress; at most the whole
        // buffer (then the wait is for everything sent to be final), so that a long chunk beside
        // a short buffer can still fit.
        let needed = min(frames.count / channels * SpeechAudio.sampleRate / max(rate, 1)
                            + SpeechAudio.samples(milliseconds: options.chunkMilliseconds),
                         SpeechAudio.samples(milliseconds: options.replayBufferMilliseconds))
        let deadline = Clock.monotonicNanos() + UInt64(options.pushWaitMilliseconds) * 1_000_000
        // The worker holds `audioLock` for a whole step, a connect or a login among them: it is
        // waited for until the deadline only. Not had by then, the room cannot be known and the
        // push is taken as it is (audio that then outgrows the replay buffer is reported lost
        // where it is dropped); it waited for the connect.
        guard w.audioLock.lock(untilMonotonicNanos: deadline) else { return true }
        defer { w.audioLock.unlock() }
        // Pushed audio queued for the worker and not taken yet counts too (not capped: the
        // worker takes it soon, and then it is counted as not final).
        while !w.hasRoom(forSamples: needed + pushedNotTaken.load(ordering: .relaxed)) {
            let now = Clock.monotonicNanos()
            if now >= deadline || lock.withLock({ closing }) { return false }
            // In slices: a free or a queued command is seen within 50 ms.
            _ = w.audioLock.wait(untilMonotonicNanos: min(deadline, now + 50_000_000))
        }
        return true
    }

    /// Converts `frames` and queues them for the worker (or sends them itself, when it is
    /// idle). False when the client no longer takes pushed audio (a stop came first).
    private func takePushed(_ frames: UnsafeBufferPointer<Int16>) -> Bool {
        // Converted and queued in one hold of `lock`, the lock a stop or push_end takes the
        // push path's tail under. Converted first and queued after, a stop in between sent its
        // tail (later audio) and this chunk was dropped behind it: a gap before the last words;
        // and two threads pushing at once could queue their chunks in the other order.
        // Converting is computation only (no I/O), as `lock` allows.
        let (accepted, chunks, idleWorker) = lock.withLock { () -> (Bool, Chunker.Chunks, ClientWorker?) in
            // A stop came while this push waited for room: the context has ended, and its tail
            // with it; these frames came after and are not taken (as a push after stop is not).
            guard !closing, acceptsPushLocked else { return (false, Chunker.Chunks(), nil) }
            let chunks = pushLock.withLock { () -> Chunker.Chunks in
                guard let converter = pushPath?.converter else { return Chunker.Chunks() }
                let samples = converter.process(int16: frames)
                return pushPath?.chunker.append(samples) ?? Chunker.Chunks()
            }
            guard !chunks.isEmpty else { return (true, chunks, nil) }
            // While the worker is idle (no command queued or in hand, its audio lock free), this
            // thread sends the chunks itself: one thread hand-off less per chunk. The worker's
            // lock is only tried, never waited for, so a push never blocks on a connect or a
            // login. Not while a turn runs, even between its steps: the turn's sends (a start,
            // replayed audio) are held until it ends (`EventLoop.corking`), and these would
            // overtake them. Taken directly after `lock` is let go: a command queued meanwhile
            // waits for the audio lock held until then.
            if commands.isEmpty, !workerBusy, !workerScheduled, let w = worker, w.takesDirect, w.audioLock.tryLock() {
                if w.takesDirectWithoutBlocking(chunks) { return (true, chunks, w) }
                w.audioLock.unlock()
            }
            if options.pushWaitMilliseconds > 0 {
                pushedNotTaken.add(chunks.sampleCount, ordering: .relaxed)
            }
            enqueueLocked(.audio(chunks))
            return (true, chunks, nil)
        }
        if let idleWorker {
            idleWorker.takeDirect(chunks)
            idleWorker.audioLock.unlock()
        }
        return accepted
    }

    /// Pushed audio is taken in a context (or while listening), and for a start queued behind
    /// the pending stop: a push-to-talk pressed again while the server still finishes the last
    /// utterance. Dropped there, the first words of the next one were lost.
    private var acceptsPushLocked: Bool {
        state == .starting || state == .listening || (state == .stopping && pendingStart && !queuedStartEnded)
    }

    /// The worker begins the start queued behind the pending stop (inside a `transition`,
    /// under `lock`): whether push_end already ended it (it then begins STOPPING).
    func takeQueuedStartEndedLocked() -> Bool {
        defer { queuedStartEnded = false }
        return queuedStartEnded
    }

    /// Whether a start is queued behind the pending stop and has not begun (the worker asks).
    var hasQueuedStart: Bool { lock.withLock { state == .stopping && pendingStart } }

    /// Pushed samples queued for the worker and not taken yet (counted by the push wait only).
    let pushedNotTaken = Atomic<Int>(0)

    public func pushEnd() throws(SpeechClientError) {
        try lock.withLock { () throws(SpeechClientError) in
            try checkOpen()
            guard case .push = options.audio else {
                throw SpeechClientError(.invalidState, "push_end needs a client whose source is pushed audio")
            }
            if state == .stopping && pendingStart && !queuedStartEnded {
                // The start queued behind the pending stop (push-to-talk pressed and released
                // while the server still finishes the last utterance): its context ends as soon
                // as it opens, with everything pushed for it. Refused, an application fell back
                // on stop(), which cancels the queued start, and the utterance was lost.
                queuedStartEnded = true
                enqueueLocked(.queuedStartEnds(takePushTailLocked()))
                return
            }
            guard state == .starting || state == .listening else {
                throw SpeechClientError(.invalidState, "there is no context to end (state \(state))")
            }
            state = .stopping
            enqueueLocked(.pushEnd(takePushTailLocked()))
        }
    }

    /// What the push path still holds: the converter's tail and the chunk in progress.
    private func takePushTailLocked() -> Chunker.Chunks {
        pushLock.withLock { () -> Chunker.Chunks in
            guard let converter = pushPath?.converter else { return Chunker.Chunks() }
            var tail = pushPath?.chunker.append(converter.flush()) ?? Chunker.Chunks()
            if let partial = pushPath?.chunker.flush() { tail.append(partial) }
            return tail
        }
    }

    /// Waits until idle (see spc_client_wait_idle). Returns false on timeout.
    public func waitIdle(timeoutMilliseconds: Int) throws(SpeechClientError) -> Bool {
        if isOnCallbackThread {
            throw SpeechClientError(.invalidState, "wait_idle called from the client's own callback would wait for itself")
        }
        let deadline = timeoutMilliseconds < 0 ? nil : Clock.monotonicNanos() + UInt64(timeoutMilliseconds) * 1_000_000
        // An idle client, or a zero timeout, returns without touching the loop; a wait starts
        // only after the application's set was handed over (not under the lock: a task run
        // inline there may need it).
        if lock.withLock({ isIdleLocked }) { return true }
        if timeoutMilliseconds == 0 { return false }
        // From another client's callback, on a pool thread: the pool counts it out meanwhile,
        // so this client's callbacks still get a thread.
        // Also ends when the client is freed meanwhile: free lets its contexts go without
        // making the client idle, and the wait went on for ever.
        let (idle, freed) = ThreadPool.callbacks.blocking {
            Client.blockingForTheNetwork(options) {
                lock.withLock { () -> (Bool, Bool) in
                    while !isIdleLocked && !closing {
                        if let deadline {
                            if !lock.wait(untilMonotonicNanos: deadline) { return (isIdleLocked, closing) }
                        } else {
                            lock.wait()
                        }
                    }
                    return (isIdleLocked, closing)
                }
            }
        }
        if freed && !idle { throw SpeechClientError(.invalidState, "the client was freed while wait_idle waited") }
        return idle
    }

    /// Stops the threads: queued callbacks are delivered, then no more run.
    public func close() throws(SpeechClientError) {
        if isOnCallbackThread {
            throw SpeechClientError(.invalidState, "spc_client_free called from the client's own callback: free it after the callback returns")
        }
        Client.blockingForTheNetwork(options) { shutdownThreads() }
    }

    /// Runs `body`, which blocks the calling thread until network work is done. With
    /// application-driven I/O that thread may be the one that serves the application's set:
    /// the loop thread serves it meanwhile.
    private static func blockingForTheNetwork<T, E: Error>(_ options: ClientOptions, _ body: () throws(E) -> T) throws(E) -> T {
        let loop = options.io == .application ? try? EventLoop.shared() : nil
        loop?.applicationWillBlock()
        defer { loop?.applicationDidUnblock() }
        return try body()
    }

    // MARK: - Internals shared with the worker

    /// wait_idle callers wait for `isIdleLocked`: woken only when it holds, not on every
    /// command and callback (each needless wake-up is two context switches per response).
    /// Also queues the idle event when the work just ended. True when it did: a caller outside
    /// a worker turn and the callback thread then wakes the callback thread.
    @discardableResult
    private func wakeIdleWaitersLocked() -> Bool {
        var announced = false
        if idleOwed && !closing && isWorkIdleLocked {
            idleOwed = false
            pushEventLocked(.idle)
            announced = true
        }
        if isIdleLocked { lock.broadcast() }
        return announced
    }

    /// Streams whose lane the worker removed once their context's end was handled
    /// (`retireStream`); what they send afterwards is dropped, up to their end (`.closed`,
    /// which comes once per stream, takes the entry out).
    private var retiredStreams: Set<Int> = []

    /// The worker is done with the stream of `generation`: its context ended (STOPPED) and its
    /// stop was sent, so only its end (the gRPC trailers) or a round-trip request may follow.
    func retireStream(generation: Int) { lock.withLock { _ = retiredStreams.insert(generation) } }

    /// Nothing to do and nothing asked: what wait_idle waits for, callbacks aside.
    private var isWorkIdleLocked: Bool {
        (state == .idle || state == .suspended) && !pendingStart && commands.isEmpty && !workerBusy && !contextOpen
    }

    private var isIdleLocked: Bool {
        isWorkIdleLocked && (options.delivery == .application || (events.isEmpty && !delivering))
    }

    /// Past this many undelivered events (an application that stopped consuming, a server that
    /// floods), tentative segment snapshots and log lines are not queued: a tentative snapshot
    /// takes the place of the one of the same segment still waiting (the application gets the
    /// newest), or is dropped when none waits (a later snapshot of the segment carries
    /// everything it had); a final one is never dropped.
    static let maxPendingEvents = 16_384
    /// The same in bytes (issue 23): segment snapshots waiting for the application hold at most
    /// about this much before tentative ones are held back as above.
    static let maxPendingBytes = 8 << 20
    /// Final snapshots and other events are queued past that, up to this: then the worker ends
    /// the context (`isOverwhelmed`), so an application that takes no callbacks while a server
    /// floods finals cannot make the queue grow without end.
    static let maxPendingFinalBytes = 32 << 20
    private var pendingBytes = 0

    private struct SegmentKey: Hashable {
        var context: String
        var segment: Int32
        init(_ s: Segment) { context = s.contextId; segment = s.segmentId }
    }
    /// The sequence number in `events` of each segment's tentative snapshot still waiting.
    private var queuedTentatives: [SegmentKey: Int] = [:]

    /// More is waiting for the application than `maxPendingFinalBytes`.
    var isOverwhelmed: Bool { lock.withLock { pendingBytes > Self.maxPendingFinalBytes } }
    var pendingMebibytes: Int { lock.withLock { pendingBytes >> 20 } }

    private static func heldBytes(_ event: ClientEvent) -> Int {
        switch event {
        case .segment(let s): return s.heldBytes
        case .log(_, let message): return 64 + message.utf8.count
        default: return 64
        }
    }

    private func popEventLocked() -> ClientEvent? {
        let sequence = events.nextPopSequence
        guard let e = events.pop() else { return nil }
        pendingBytes -= Self.heldBytes(e)
        if case .segment(let s) = e, !s.isFinal, queuedTentatives[SegmentKey(s)] == sequence {
            queuedTentatives[SegmentKey(s)] = nil
        }
        return e
    }

    /// Queues an event for the application. The callback thread is signalled by the caller
    /// once the lock is released (`deliveryDueLocked` decides under it; woken under it, the
    /// thread would run straight into the lock: on a shared core, two more switches). The
    /// event fd is made readable here, under the lock: spc_client_event_fd promises it is
    /// readable exactly while events are pending, and a write made after the lock could land
    /// after a dispatch drained the queue.
    private func pushEventLocked(_ event: ClientEvent) {
        let size = Self.heldBytes(event)
        if events.count >= Self.maxPendingEvents || pendingBytes + size > Self.maxPendingBytes {
            switch event {
            case .segment(let s) where !s.isFinal:
                // The newest snapshot in the place of the waiting one (their order with the
                // other events stays: a segment's snapshots come before its final and stop).
                if let sequence = queuedTentatives[SegmentKey(s)], let old = events.replace(sequence: sequence, with: event) {
                    pendingBytes += size - Self.heldBytes(old)
                }
                return
            case .log: return
            default: break
            }
        }
        let sequence = events.push(event)
        pendingBytes += size
        if case .segment(let s) = event {
            queuedTentatives[SegmentKey(s)] = s.isFinal ? nil : sequence
        }
        if eventFD >= 0 && !eventFDSignaled {
            // Queued by the network work of spc_io_dispatch: that thread delivers it shortly.
            // An event from any other thread (the worker's stop, an error) is announced on the
            // event fd as usual, even while a delivery is due.
            if let loop = applicationLoop, loop.deliverAfterServing(self, noted: deliveryDeferred) {
                deliveryDeferred = true
                return
            }
            signalEventFDLocked()
        }
    }

    /// Makes the event fd readable (once: dispatch clears it). With `lock` held.
    private func signalEventFDLocked() {
        eventFDSignaled = true
        var one: UInt64 = 1
        _ = write(eventFD, &one, 8)
    }

    /// On the thread that served the application's set (spc_io_dispatch), after it let go of
    /// the loop: runs the callbacks queued meanwhile. When another thread dispatches this client
    /// now, or this thread is inside one of its callbacks (its dispatch lock is taken either
    /// way), the events go through the event fd as usual. Once the client is closing, free
    /// delivers what is left (it takes the dispatch lock, so it waits for a delivery here).
    func deliverInline() -> Int {
        if dispatchLock.tryLock() {
            defer { dispatchLock.unlock() }
            let closed: Bool = lock.withLock {
                deliveryDeferred = false
                return callbacksClosing
            }
            return closed ? 0 : deliverPending(maxEvents: 0)
        }
        return lock.withLock {
            deliveryDeferred = false
            if !events.isEmpty && !eventFDSignaled { signalEventFDLocked() }
            return 0
        }
    }

    /// After queuing events, without the lock: thread delivery queues the client in the pool,
    /// unless it is there already or a thread is running its callbacks (which goes on to these).
    private func wakeCallbackThread() {
        guard eventFD < 0 else { return }
        if lock.withLock({ deliveryDueLocked() }) { deliveryPool?.schedule(self) }
    }

    /// With events just queued (`lock` held): whether the caller must queue the callbacks on
    /// the pool once it lets go of the lock. A worker turn or the loop's work defers that to its
    /// end (one wake for a burst of responses).
    private func deliveryDueLocked() -> Bool {
        guard eventFD < 0 else { return false }
        if turnThread != 0 && turnThread == UInt(pthread_self()) {
            wakeDeferred = true
            return false
        }
        if let loop = networkLoop, loop.deferWake(self, noted: loopWakeNoted) {
            wakeDeferred = true
            loopWakeNoted = true
            return false
        }
        return takeDeliveryLocked()
    }

    /// The worker's next step may block (a microphone or descriptor read, a connect, a login):
    /// the callback thread is woken for what the turn queued so far.
    func flushDeferredWake() {
        networkLoop?.uncorkNow()  // the turn's sends too
        guard eventFD < 0 else { return }
        if lock.withLock({ takeDeferredWakeLocked() }) { deliveryPool?.schedule(self) }
    }

    /// A wake the turn deferred is due: whether the caller must queue the callbacks on the pool.
    private func takeDeferredWakeLocked() -> Bool {
        loopWakeNoted = false
        guard wakeDeferred else { return false }
        wakeDeferred = false
        return takeDeliveryLocked()
    }

    /// Whether the caller must queue the client's callbacks on its pool (they are neither
    /// queued nor running, and some wait); marks them queued.
    private func takeDeliveryLocked() -> Bool {
        guard !deliveryScheduled, deliveryOwner == 0, !events.isEmpty else { return false }
        deliveryScheduled = true
        return true
    }

    private func checkOpen() throws(SpeechClientError) {
        if closing { throw SpeechClientError(.invalidState, "the client is being freed") }
    }

    private func resetPushPath() {
        pushLock.withLock {
            guard let p = pushPath else { return }
            pushPath = PushPath(converter: AudioConverter(input: p.converter.input), chunker: Chunker(samplesPerChunk: p.chunker.samplesPerChunk))
        }
    }

    private func enqueueLocked(_ command: Command) {
        switch command {
        case .start: untakenStarts += 1
        case .stop, .pushEnd: untakenStops += 1
        default: break
        }
        commands.push(command)
        requestWorkerTurnLocked()
    }

    /// Queues a turn of the worker on the worker pool unless one is queued or running (that
    /// one sees what was queued before it ends: `runWorkerTurn`).
    private func requestWorkerTurnLocked() {
        // Not once free has begun: it waits for the last turn, and a timer or a wake-word
        // detection from the event loop may still poke meanwhile.
        guard !workerScheduled, !closing, worker != nil else { return }
        workerScheduled = true
        ThreadPool.workers.schedule(WorkerTurn(client: self))
    }

    /// A turn of the worker, on a worker-pool thread. True: queue it again.
    func runWorkerTurn() -> Bool {
        let taken: (worker: ClientWorker, starting: (@Sendable () -> Void)?, ending: (@Sendable () -> Void)?)? = lock.withLock {
            guard let w = self.worker else {
                workerScheduled = false
                lock.broadcast()
                return nil
            }
            turnThread = UInt(pthread_self())
            return (w, turnStarting, turnEnding)
        }
        guard let (worker, starting, ending) = taken else { return false }
        starting?()
        // The turn's sends (a file's chunks) leave together at its end, or before it may block.
        let turn = networkLoop.map { loop in
            loop.corking { () -> ClientWorker.Turn in
                let turn = worker.runTurn()
                ending?()
                return turn
            }
        } ?? worker.runTurn()
        var timer: UInt64?
        var deliver = false
        let again: Bool = lock.withLock {
            turnThread = 0
            // The turn's callbacks (its idle event included) are woken for once, at its end.
            defer { deliver = eventFD < 0 && takeDeferredWakeLocked() }
            switch turn {
            case .more:
                return true
            case .closed:
                workerScheduled = false
                lock.broadcast()  // free waits for this
                return false
            case .wait(let deadline):
                // Queued meanwhile: another turn at once (the check and the end of this one
                // are atomic, so nothing queued is left without a turn).
                if !commands.isEmpty || workerPoked || closing { return true }
                workerScheduled = false
                workerBusy = false
                if wakeIdleWaitersLocked() { wakeDeferred = true }
                if let deadline, workerTimerAt.map({ deadline < $0 }) ?? true {
                    workerTimerAt = deadline
                    timer = deadline
                }
                return false
            }
        }
        if deliver { deliveryPool?.schedule(self) }
        if let deadline = timer { wakeWorker(at: deadline) }
        return again
    }

    /// A poke at `deadline` (a reconnection, a start timeout, an idle stream, a stall's bound):
    /// an event-loop timer, rounded up to the millisecond so that it never fires early.
    private func wakeWorker(at deadline: UInt64) {
        guard let loop = networkLoop else { return }
        let now = Clock.monotonicNanos()
        // Capped (a day): a deadline that stands for "no deadline" (a move at the next pause,
        // `ClientWorker.moveAfterEndpointNanos`) is centuries away, past a 32-bit Int of ms.
        let ms = deadline > now ? Int(min((deadline - now + 999_999) / 1_000_000, 86_400_000)) : 0
        loop.post { [weak self] in
            loop.addTimer(milliseconds: ms) { [weak self] in self?.pokeWorker(timerAt: deadline) }
        }
    }

    enum Taken {
        case command(Command)
        /// No command; `poked`: something the worker waited for happened.
        case nothing(poked: Bool)
        case closing
    }

    /// The worker's next command, without waiting.
    func takeCommand() -> Taken {
        lock.withLock {
            if workerBusy {
                workerBusy = false
                // On the turn's thread: its end wakes the callback thread.
                if wakeIdleWaitersLocked() { wakeDeferred = true }
            }
            if closing { return .closing }
            let poked = workerPoked
            workerPoked = false
            guard let command = commands.pop() else { return .nothing(poked: poked) }
            switch command {
            case .start: untakenStarts -= 1
            case .stop, .pushEnd: untakenStops -= 1
            case .stream(_, _, let heldBytes): queuedResponseBytes -= heldBytes
            case .wake(.detection, let gen):
                let left = (queuedDetections[gen] ?? 1) - 1
                queuedDetections[gen] = left > 0 ? left : nil
            default: break
            }
            if commands.isEmpty && !overflowedStreams.isEmpty { overflowedStreams = [] }
            if poked { workerPoked = true }  // for the step after this command
            workerBusy = true
            return .command(command)
        }
    }

    func enqueue(_ command: Command) {
        lock.withLock { enqueueLocked(command) }
    }

    /// Wakes the worker from a wait for the network (a stream's backlog fell, audio became
    /// final, a deadline came).
    func pokeWorker(timerAt: UInt64? = nil) {
        lock.withLock {
            if let t = timerAt, workerTimerAt == t { workerTimerAt = nil }
            workerPoked = true
            requestWorkerTurnLocked()
        }
    }

    /// An event of the client's stream, on the thread that received it (the event loop). A
    /// segment update is folded in right here while the worker is idle (nothing queued or in
    /// hand, its audio lock free: tried, never waited for); anything else, or a busy worker,
    /// queues it for the worker, in order.
    func streamEvent(_ event: StreamEvent, generation: Int) {
        let idleWorker: ClientWorker? = lock.withLock {
            // A stream the worker is done with: it would ignore this (its trailers, a round-trip
            // request), and queued for it, it made the client not idle for an instant after its
            // context had ended (wait_idle(0) False between two idle answers).
            if retiredStreams.contains(generation) {
                if case .closed = event { retiredStreams.remove(generation) }
                return nil
            }
            guard ClientWorker.isDirectUpdate(event), commands.isEmpty, !workerBusy, !closing, let w = worker,
                  w.audioLock.tryLock() else {
                // Every event a server can repeat is counted (an end of speech, a GOAWAY: a
                // server sending them without end while the worker was held up queued them
                // without limit); the end of a stream comes once.
                var bytes = 0
                switch event {
                case .response(let response): bytes = response.heldBytes
                case .closed: break
                case .goingAway, .endpointed, .ignoredAfterEndpoint: bytes = 64
                }
                if bytes > 0 {
                    if overflowedStreams.contains(generation) { return nil }
                    if queuedResponseBytes + bytes > Self.maxQueuedResponseBytes {
                        // Its stream is ended (a parse error, as for any bound a server passes)
                        // and what it sends meanwhile is dropped.
                        overflowedStreams.insert(generation)
                        enqueueLocked(.stream(.closed(SpeechClientError(.parse, "the server sent more than \(Self.maxQueuedResponseBytes >> 20) MiB of results while the client was held up (a connect, a login); the stream was ended",
                                                                        grpcStatus: GRPCStatus.internal)), generation: generation))
                        return nil
                    }
                    queuedResponseBytes += bytes
                }
                enqueueLocked(.stream(event, generation: generation, heldBytes: bytes))
                return nil
            }
            return w
        }
        if let idleWorker {
            idleWorker.takeDirect(event, generation: generation)
            idleWorker.audioLock.unlock()
        }
    }

    /// What the wake-word service said, for the worker (from the I/O thread).
    func wakeEvent(_ event: WakeEvent, generation: Int) {
        lock.withLock {
            if case .detection = event {
                guard queuedDetections[generation, default: 0] < Self.maxQueuedDetections else { return }
                queuedDetections[generation, default: 0] += 1
            }
            enqueueLocked(.wake(event, generation: generation))
        }
    }

    /// Queues an event for the callbacks. Once free has begun nothing more is queued, except
    /// with `whileClosing` (the worker's shutdown inside free: the last words of an unfinished
    /// context), which is queued until the callbacks are drained.
    func emit(_ event: ClientEvent, whileClosing: Bool = false) {
        if case .connection(let state, _, _, _) = event { connectionNow.store(state.rawValue, ordering: .releasing) }
        // Queued and the wake decided under one lock: it runs for every segment update.
        let schedule: Bool = lock.withLock {
            guard whileClosing ? !callbacksClosing : !closing else { return false }
            pushEventLocked(event)
            return deliveryDueLocked()
        }
        if schedule { deliveryPool?.schedule(self) }
    }

    func log(_ level: LogLevel, _ message: String) {
        guard level != .none, level <= options.logLevel else { return }
        emit(.log(level, message))
    }

    /// Worker-side state changes, with the events that announce them queued atomically.
    func transition(_ change: (inout ClientState, inout Bool) -> Void, contextOpen open: Bool? = nil, events newEvents: [ClientEvent] = []) {
        let queued: Bool = lock.withLock {
            change(&state, &pendingStart)
            if let open { contextOpen = open }
            if !closing { for e in newEvents { pushEventLocked(e) } }
            let announced = wakeIdleWaitersLocked()
            return !closing && (!newEvents.isEmpty || announced)
        }
        if queued { wakeCallbackThread() }
    }

    // MARK: - Application delivery

    /// Runs up to `maxEvents` pending callbacks (0: all) on the calling thread; returns how many.
    public func dispatch(maxEvents: Int) throws(SpeechClientError) -> Int {
        guard options.delivery == .application else {
            throw SpeechClientError(.invalidState, "dispatch needs SPC_DELIVERY_APPLICATION; this client delivers on its own thread")
        }
        if isOnCallbackThread {
            throw SpeechClientError(.invalidState, "dispatch called from inside one of the client's callbacks")
        }
        return dispatchLock.withLock { deliverPending(maxEvents: maxEvents) }
    }

    /// Called with `dispatchLock` held.
    private func deliverPending(maxEvents: Int) -> Int {
        var ran = 0
        while maxEvents == 0 || ran < maxEvents {
            let event: ClientEvent? = lock.withLock {
                guard let e = popEventLocked() else {
                    if eventFDSignaled {
                        var value: UInt64 = 0
                        _ = read(eventFD, &value, 8)
                        eventFDSignaled = false
                    }
                    return nil
                }
                delivering = true
                dispatchingThread = UInt(pthread_self())
                return e
            }
            guard let event else { break }
            handler?(self, event)
            ran += 1
            lock.withLock {
                delivering = false
                dispatchingThread = 0
                wakeIdleWaitersLocked()
            }
        }
        return ran
    }

    // MARK: - Thread delivery (the delivery pool)

    /// At most this many callbacks run per turn on a pool thread: a busy client does not keep
    /// the others waiting.
    static let deliveryBatch = 64

    func runOnPool() -> Bool {
        let me = UInt(pthread_self())
        let mine: Bool = lock.withLock {
            deliveryScheduled = false
            guard deliveryOwner == 0 else { return false }
            deliveryOwner = me
            return true
        }
        guard mine else { return false }
        // The end of one callback and the pop of the next share one lock section (the emitting
        // thread takes the same lock for each event it queues).
        var ran = 0
        var next: ClientEvent? = lock.withLock { popForDeliveryLocked() }
        while let event = next {
            handler?(self, event)
            ran += 1
            next = lock.withLock {
                delivering = false
                wakeIdleWaitersLocked()
                return ran < Self.deliveryBatch ? popForDeliveryLocked() : nil
            }
        }
        return lock.withLock {
            deliveryOwner = 0
            // free waits for the last callback to return.
            if callbacksClosing { lock.broadcast() }
            guard !events.isEmpty, !deliveryScheduled else { return false }
            deliveryScheduled = true
            return true
        }
    }

    /// The next event for a pool thread to deliver, marked as being delivered (`lock` held).
    private func popForDeliveryLocked() -> ClientEvent? {
        let e = popEventLocked()
        if case .idle = e {
            wakeIdleWaitersLocked()  // its callback runs with the client idle (see `.idle`)
        } else if e != nil {
            delivering = true
        }
        return e
    }

    /// `dropQueued`: from deinit (the last reference is gone without a free, so no pool thread
    /// holds it) or a failed init (no callback may run): what is still queued is dropped.
    private func shutdownThreads(dropQueued: Bool = false) {
        lock.withLock {
            closing = true
            lock.broadcast()
        }
        // A connect or login in progress gives up; the worker's turn in progress (or queued)
        // ends at its next step, which sees `closing`. From a shared callback thread, the pool
        // counts this one out meanwhile.
        cancellation.cancel()
        ThreadPool.callbacks.blocking {
            lock.withLock {
                while workerScheduled { lock.wait() }
            }
        }
        self.worker?.shutdown()
        lock.withLock {
            callbacksClosing = true
            lock.broadcast()
        }
        if eventFD < 0 && dropQueued {
            lock.withLock { while popEventLocked() != nil {} }
        } else if eventFD < 0 {
            // What was queued before free runs on the pool; then no callback runs any more.
            wakeCallbackThread()
            ThreadPool.callbacks.blocking {
                lock.withLock {
                    while !events.isEmpty || deliveryOwner != 0 { lock.wait() }
                }
            }
        }
        if let pool = deliveryPool, pool !== ThreadPool.callbacks { pool.shutdown() }
        lock.withLock { self.worker = nil }  // read under the lock by the event loop's pokes
        if eventFD >= 0 {
            // Application delivery: what was queued before free runs now, on this thread.
            dispatchLock.withLock { _ = deliverPending(maxEvents: 0) }
        }
    }
}

/// A turn of a client's worker, queued on the worker pool. It holds the client, so a client is
/// never released while its worker has a turn queued or running.
final class WorkerTurn: PoolWork {
    let client: Client
    init(client: Client) { self.client = client }
    func runOnPool() -> Bool { client.runWorkerTurn() }
}

/// Lets objects made before the client (the service) log through it. What they log before it
/// exists (a stream prepared in `Client.init`, with prepare-on-init) is kept, a few lines, and
/// logged once it does: the line saying that a server ends utterances by itself was lost.
final class LogRelay: Sendable {
    private struct State {
        weak var client: Client?
        var attached = false
        var early: [(LogLevel, String)] = []
    }
    private let state = Locked(State())
    static let maxEarlyLines = 32

    func log(_ level: LogLevel, _ message: String) {
        let client: Client? = state.withLock { s in
            if s.attached { return s.client }
            if s.early.count < Self.maxEarlyLines { s.early.append((level, message)) }
            return nil
        }
        client?.log(level, message)
    }

    /// The client exists and can deliver: what was logged before goes out first.
    func attach(_ client: Client) {
        let early = state.withLock { s in
            s.client = client
            s.attached = true
            defer { s.early = [] }
            return s.early
        }
        for (level, message) in early { client.log(level, message) }
    }
}
