#if canImport(Glibc)
import Glibc
#endif

/// The client's worker thread: opens audio and streams, sends audio and start/stop, and folds
/// the server's responses into segments. Only this thread touches the fields below (after
/// `prepare` in the constructor, which runs before the thread starts).
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
    private let makeSource: @Sendable (AudioInput) -> (any AudioSource)?
    private let samplesPerChunk: Int

    private var stream: (any RecognitionStream)?
    private var generation = 0
    private var assembler = SegmentAssembler()

    private var source: (any AudioSource)?
    private var converter: AudioConverter?
    private var chunker: Chunker
    /// Reading the source into the open context (file or microphone).
    private var pumping = false
    /// A context was requested and its `finished` has not arrived.
    private var contextOpen = false
    private var stopSent = false
    private var contextId = ""
    /// A start that arrived while the previous context was still finishing (after resume).
    private var deferredStart = false
    private var suspended = false
    private var lastActivity = Clock.monotonicNanos()
    /// The current context was already retried once after the server rejected the token.
    private var authRetried = false

    // Reconnection with replay (issue 5). The user sees one context: the id of the first
    // `started`, segment ids and word times continuous across the server contexts that carry it.
    private var replay: ReplayBuffer
    /// Samples of the user's context recorded so far (sent, or held while disconnected).
    private var contextSamples = 0
    /// Everything before this sample is in final segments: a reconnection replays from here.
    private var finalizedUpTo = 0
    /// Added to a server context's word times to put them in the user's context. A start sent
    /// queues its offset; the matching `started` names the server context.
    private var pendingOffsets: [Int32] = []
    private var timeOffsets: [String: Int32] = [:]
    /// User segment ids, given in order of first appearance across server contexts.
    private var segmentMap: [String: [Int32: Int32]] = [:]
    private var nextUserSegment: Int32 = 0
    /// The user segment ids below this are final (a reconnection reuses the ids from here).
    private var nextSegment: Int32 = 0
    /// `finished` answers to rollover stops still to come: they are not the user's stop.
    private var rolloverFinishes = 0
    /// Where the current server context began, in user-context samples, and how long the
    /// audio sent since has been silent (the rollover waits for a pause).
    private var serverContextStart = 0
    private var silentRun = 0
    private var reconnect: (attempt: Int, at: UInt64, cause: SpeechClientError)?
    /// Connection losses since the context last made progress (a final segment): a server that
    /// accepts the reconnection but fails again still runs out of attempts.
    private var lossesWithoutProgress = 0
    /// Audio (user-context samples) the replay buffer no longer held at a reconnection, reported
    /// once the server has taken the replay (its `started`), so an outage with several attempts
    /// gives one error naming the whole loss.
    private var pendingLoss: (from: Int, to: Int)?
    /// After a reconnection: the user-context sample from which the replay buffer still has to
    /// be sent on the new stream. The replay goes out as the stream drains (like a file), not
    /// all at once: more than the call's send queue (256 KiB, ~8 s) would fail the new stream.
    /// Live audio meanwhile is appended to the buffer and follows in order.
    private var replayCursor: Int?
    /// The last connection state reported, so that only changes are.
    private var connectionState: ConnectionState?

    // Hands-free listening (issue 8): between a start and a stop the audio goes through the
    // endpointer, which opens and closes contexts. An activation that begins while the previous
    // context is still finishing waits in `backlog` (bounded by the maximum activation).
    private var endpointer: Endpointer?
    /// Samples taken since the start (positions of listen and level events).
    private var audioSamples = 0
    private var backlog: [[Int16]] = []
    private var backlogWaiting = false
    private var backlogClosed = false
    private var backlogOverflowed = false
    /// 60 s of 100 ms chunks.
    static let maxBacklogChunks = 600
    /// Wakeword mode: the current context's phrase was heard; its segments are delivered.
    private var woken = false

    init(options: ClientOptions, service: any RecognitionService,
         makeSource: @escaping @Sendable (AudioInput) -> (any AudioSource)?, samplesPerChunk: Int) {
        self.options = options
        self.service = service
        self.makeSource = makeSource
        self.samplesPerChunk = samplesPerChunk
        chunker = Chunker(samplesPerChunk: samplesPerChunk)
        replay = ReplayBuffer(capacitySamples: 16 * options.replayBufferMilliseconds)
    }

    deinit { shutdown() }

    /// Below the 256 KiB at which a call fails (GRPCChannel.Configuration.maxQueuedSendBytes)
    /// by far more than one block; 64 KiB with 2 ms naps capped files at ~1,000x real time.
    static let fileBacklogLimit = 160 * 1024

    // MARK: - Loop

    func run() {
        while let client {
            // While pumping, take commands without waiting and read audio between them. An open
            // stream with no context is closed after `idleStreamMilliseconds` (protocol.md: the
            // official clients did the same) and reopened by the next start.
            let idleDeadline = (stream != nil && !contextOpen && endpointer == nil) ? lastActivity + UInt64(options.idleStreamMilliseconds) * 1_000_000 : nil
            let deadline = reconnect?.at ?? idleDeadline
            // A file waits out a reconnection's delay (nothing would take its audio but the
            // replay buffer, which would overflow); a microphone is read all the same.
            let busy = (pumping && !(isFile && reconnect != nil)) || replayCursor != nil
            guard let next = client.nextCommand(wait: !busy || stream == nil && isFile && replayCursor == nil, deadline: deadline) else {
                audioLock.withLock { idleStep(idleDeadline: idleDeadline) }
                continue
            }
            lastActivity = Clock.monotonicNanos()
            guard let command = next else { return }
            audioLock.withLock { handle(command) }
        }
    }

    /// What the worker does between commands: reconnect, replay, pump the source, close an
    /// idle stream.
    private func idleStep(idleDeadline: UInt64?) {
        guard let client else { return }
        if let r = reconnect, Clock.monotonicNanos() >= r.at {
            attemptReconnect()
        } else if replayCursor != nil || pumping {
            if replayCursor != nil && !pumpReplay() && !pumping {
                var ts = timespec(tv_sec: 0, tv_nsec: 300_000)
                nanosleep(&ts, nil)
            }
            if pumping { pumpOnce() }
        } else if let idleDeadline, Clock.monotonicNanos() >= idleDeadline {
            client.log(.debug, "closing the idle SLU stream")
            stream?.finish()
            stream = nil
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
    /// less per response. They change none of the state the worker's loop decides on (stream,
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
        guard gen == generation, case .response(let response) = event else { return }
        if let error = applySegmentUpdate(response) {
            stream?.cancel()
            client?.enqueue(.stream(.closed(error), generation: gen))
        }
    }

    private var isFile: Bool {
        if case .file = options.audio { return true }
        return false
    }

    /// Called after the thread was joined: releases the stream and the source.
    func shutdown() {
        audioLock.withLock { releaseAll() }
    }

    private func releaseAll() {
        stream?.cancel()
        stream = nil
        source?.close()
        source = nil
    }

    private func handle(_ command: Client.Command) {
        switch command {
        case .start: handleStart()
        case .stop: endpointer != nil ? stopListening(auto: false) : sendStop()
        case .audio(let chunks):
            for c in chunks { take(c) }
        case .pushEnd(let rest):
            for c in rest { take(c) }
            endpointer != nil ? stopListening(auto: false) : sendStop()
        case .suspend: handleSuspend()
        case .resume: handleResume()
        case .stream(let event, let gen):
            if gen == generation { handleStream(event) }
        }
    }

    // MARK: - Preparing

    /// Opens the microphone (for a microphone source) and the stream. Called with `client` nil
    /// from the constructor (errors are thrown to spc_client_new) or from the worker.
    func prepare(client: Client?) throws(SpeechClientError) {
        if case .microphone = options.audio, source == nil {
            guard let mic = makeSource(options.audio) else { return }
            try mic.open()
            source = mic
            converter = AudioConverter(input: mic.format)
        }
        try ensureStream()
    }

    private func ensureStream() throws(SpeechClientError) {
        if stream != nil { return }
        generation += 1
        let gen = generation
        let config = SLUConfig(languageCode: options.language)
        if reconnect == nil { report(.connecting) }
        client?.log(.debug, "opening an SLU stream (language \(options.language))")
        do throws(SpeechClientError) {
            stream = try service.openStream(config: config, cancellation: cancellation) { [weak self] event in
                self?.client?.streamEvent(event, generation: gen)
            }
        } catch {
            if reconnect == nil && !cancellation.isCancelled { report(.unavailable, reason: error) }
            throw error
        }
        stream?.send(.config(config))
        client?.log(.debug, "SLU stream open")
        report(.ready)
    }

    /// After a successful prepare-on-init (which ran before the client existed, so its reports
    /// went nowhere): the application still sees connecting, then ready, as its first events.
    func announcePrepared() {
        guard connectionState == .ready else { return }
        client?.emit(.connection(.connecting, attempt: 0, delayMilliseconds: 0, reason: nil))
        client?.emit(.connection(.ready, attempt: 0, delayMilliseconds: 0, reason: nil))
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
        pumping = source != nil
    }

    /// Opens a context on the open stream: the bookkeeping, then the start message.
    private func beginContext() {
        contextOpen = true
        stopSent = false
        woken = false
        contextId = ""
        lossesWithoutProgress = 0
        pendingLoss = nil
        replay.reset()
        contextSamples = 0
        finalizedUpTo = 0
        pendingOffsets = [0]
        timeOffsets = [:]
        segmentMap = [:]
        nextUserSegment = 0
        rolloverFinishes = 0
        serverContextStart = 0
        silentRun = 0
        nextSegment = 0
        client?.transition({ _, _ in }, contextOpen: true)
        stream?.send(.start(appId: options.appId ?? "", options: options.contextOptions))
    }

    private func openAudioForContext() throws(SpeechClientError) {
        chunker = Chunker(samplesPerChunk: samplesPerChunk)
        switch options.audio {
        case .push:
            return
        case .file:
            guard let file = makeSource(options.audio) else { return }
            try file.open()
            source = file
            converter = AudioConverter(input: file.format)
        case .microphone:
            if source == nil { try prepare(client: client) }
            if let source { converter = AudioConverter(input: source.format) }
        }
    }

    /// Reads one block from the source into the context; at the end of a file, stops it.
    /// A file is read as fast as the server takes it: while the stream's backlog is above
    /// `fileBacklogLimit` the worker waits (checking commands between waits) instead of queueing
    /// more. The microphone is never held back: its audio cannot wait.
    private func pumpOnce() {
        guard pumping, let source, let converter else { pumping = false; return }
        // A file also waits while an activation waits for the previous context to finish, and
        // while a reconnection is pending or its replay still going out.
        if case .file = options.audio,
           backlogWaiting || reconnect != nil || replayCursor != nil || (stream?.backlogBytes ?? 0) > Self.fileBacklogLimit {
            var ts = timespec(tv_sec: 0, tv_nsec: 300_000)
            nanosleep(&ts, nil)
            return
        }
        let frames = max(1, source.format.sampleRate * options.chunkMilliseconds / 1000)
        let block: [Float]?
        do throws(SpeechClientError) {
            block = try source.read(maxFrames: frames)
        } catch {
            pumping = false
            closeFileSource()
            client?.emit(.error(error))
            if endpointer != nil {
                stopListening(auto: true)
            } else if contextOpen && !stopSent {
                sendStop(auto: true)
            }
            return
        }
        guard let block else {
            // End of stream: send what is left and stop the context, as if the user had.
            for c in chunker.append(converter.flush()) { take(c) }
            if let partial = chunker.flush() { take(partial) }
            pumping = false
            closeFileSource()
            endpointer != nil ? stopListening(auto: true) : sendStop(auto: true)
            return
        }
        for c in chunker.append(converter.process(block)) { take(c) }
    }

    private func sendStop(auto: Bool = false) {
        guard contextOpen, !stopSent else { return }
        // While listening, the audio goes on after a context: only the context ends.
        if endpointer == nil {
            if pumping, case .file = options.audio { closeFileSource() }
            pumping = false
            if let partial = chunker.flush() { sendAudio(partial) }
        }
        stopSent = true
        client?.log(.debug, "stop sent for context \(contextId.isEmpty ? "(not started yet)" : contextId)\(auto ? " (end of the audio)" : "")\(replayCursor != nil ? " (after the replay)" : "")")
        if replayCursor == nil { stream?.send(.stop) }
        if auto {
            client?.transition { state, _ in
                if state == .starting || state == .listening { state = .stopping }
            }
        }
    }

    private func closeFileSource() {
        if case .file = options.audio {
            source?.close()
            source = nil
        }
        pumping = false
    }

    /// A context could not run: report the error, then the stop. A start queued behind it still
    /// happens (the header promises it after the pending stop completes; an error completes it).
    /// `pendingLoss` is not reported: the error names everything from the last final segment on.
    private func failContext(_ error: SpeechClientError) {
        endContext(events: [.error(error), .stop(contextId: contextId)], startQueued: true)
    }

    /// A context whose start a suspend (or free) interrupted before the server opened it: it
    /// ends with the stop callback alone. It had no start callback and no results; the audio
    /// pushed into it is dropped, as audio pushed while suspended is.
    private func abandonContext() {
        client?.log(.info, "a context that had not started yet was abandoned (suspend or free)")
        endContext(events: [.stop(contextId: "")], startQueued: false)
    }

    /// Every way a context ends (finished, failed, abandoned): the per-context state is reset,
    /// `events` are queued with the state change, and then, with `startQueued`, a start the
    /// application queued behind this context (or made during a resume) begins.
    private func endContext(events: [ClientEvent], startQueued: Bool) {
        pendingLoss = nil
        authRetried = false
        reconnect = nil
        replayCursor = nil
        replay.reset()
        contextOpen = false
        stopSent = false
        // While listening the source keeps being read between contexts.
        if endpointer == nil { pumping = false }
        contextId = ""
        var events = events
        if woken {
            woken = false
            events.insert(.listen(.deactivate, positionMilliseconds: Int64(audioSamples / 16)), at: max(0, events.count - 1))
        }
        if (endpointer != nil || backlogWaiting) && !suspended {
            client?.transition({ _, _ in }, contextOpen: false, events: events)
            if backlogWaiting { openWaitingActivation() }
            if endpointer == nil && !backlogWaiting && !contextOpen { finishListening() }
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
            stream?.finish()
            stream = nil
        } else if restart || deferred {
            handleStart()
        }
    }

    // MARK: - Responses

    private func handleStream(_ event: StreamEvent) {
        switch event {
        case .closed(let error):
            stream = nil
            // A rejected token (expired, or a server restarted with a new secret), before the
            // context started or during it: the relay has dropped the cached token. Once, log in
            // afresh and replay the context's audio, as after a connection loss: what was sent
            // to the refused stream is in the replay buffer, and the source goes on where it is.
            if contextOpen, !authRetried, let error, error.code == .auth {
                authRetried = true
                client?.log(.info, "the server rejected the token\(contextId.isEmpty ? "" : " during context \(contextId)"); logging in again")
                scheduleReconnect(attempt: 1, cause: error)
                return
            }
            guard contextOpen else {
                if let error {
                    client?.log(.warning, "stream closed: \(error.message)")
                    report(.unavailable, reason: error)
                }
                return
            }
            let cause = error ?? SpeechClientError(.network, "the server closed the stream during a context")
            lossesWithoutProgress += 1
            if Self.isRetryable(cause) && lossesWithoutProgress <= options.reconnectAttempts {
                scheduleReconnect(attempt: lossesWithoutProgress, cause: cause)
            } else if Self.isRetryable(cause) && options.reconnectAttempts > 0 {
                failContext(lostAudioError(cause, attempts: lossesWithoutProgress - 1))
            } else {
                failContext(cause)
            }
        case .response(let response):
            handleResponse(response)
        }
    }

    /// Connection losses are retried; what the server or the login said no to is not.
    static func isRetryable(_ error: SpeechClientError) -> Bool {
        error.code == .network || error.code == .timeout
    }

    private func handleResponse(_ response: SLUResponse) {
        switch response.payload {
        case .started:
            authRetried = false
            timeOffsets[response.audioContext] = pendingOffsets.isEmpty ? 0 : pendingOffsets.removeFirst()
            if let loss = pendingLoss {
                // The replay was taken: now the loss is final, and reported once.
                pendingLoss = nil
                let lost = Double(loss.to - loss.from) / 16_000
                client?.emit(.error(SpeechClientError(.network,
                    "the replay buffer overflowed while reconnecting: \(Self.seconds(lost)) s of audio from \(Self.seconds(Double(loss.from) / 16_000)) s into context \(contextId) were not transcribed")))
            }
            if contextId.isEmpty {
                contextId = response.audioContext
                client?.log(.debug, "context \(contextId) started")
                client?.transition({ state, _ in
                    if state == .starting { state = .listening }
                }, events: [.start(contextId: response.audioContext)])
            } else {
                client?.log(.info, "context \(contextId) continues on the server as \(response.audioContext)")
            }
        case .finished(let code, let message):
            if rolloverFinishes > 0 {
                rolloverFinishes -= 1
                timeOffsets[response.audioContext] = nil
                segmentMap[response.audioContext] = nil
                if let code {
                    client?.emit(.error(SpeechClientError(.api, "context \(contextId) (server context \(response.audioContext)) ended with error \(code): \(message ?? "")")))
                }
                return
            }
            if assembler.hasUnfinished(context: contextId) {
                client?.log(.warning, "context \(contextId) finished with a segment the server never ended: its words are dropped")
            }
            _ = assembler.apply(SLUResponse(audioContext: contextId, segmentId: 0, payload: response.payload))
            let id = contextId.isEmpty ? response.audioContext : contextId
            client?.log(.debug, "context \(id) finished" + (code.map { " with error \($0)" } ?? ""))
            var events: [ClientEvent] = []
            if let code {
                events.append(.error(SpeechClientError(.api, "context \(id) finished with error \(code): \(message ?? "")")))
            }
            events.append(.stop(contextId: id))
            endContext(events: events, startQueued: true)
        case .rttRequest(let id):
            stream?.send(.rttResponse(id: id))
        default:
            if let error = applySegmentUpdate(response) {
                // A server past the assembler's bounds: end the stream as for a malformed message.
                stream?.cancel()
                handleStream(.closed(error))
            }
        }
    }

    /// Folds a segment update into the user's context (its id, continuous segment ids and word
    /// times) and emits the segment. Returns the error when the assembler refuses it.
    private func applySegmentUpdate(_ response: SLUResponse) -> SpeechClientError? {
        var mapped = response
        mapped.audioContext = contextId.isEmpty ? response.audioContext : contextId
        mapped.segmentId = userSegment(context: response.audioContext, segment: response.segmentId)
        mapped.payload = Self.shift(response.payload, by: timeOffsets[response.audioContext] ?? 0)
        let applied: Segment?
        do throws(SpeechClientError) {
            applied = try assembler.applyChecked(mapped)
        } catch {
            return error
        }
        guard let segment = applied else { return nil }
        if segment.isFinal {
            lossesWithoutProgress = 0
            nextSegment = max(nextSegment, segment.segmentId &+ 1)
            if let end = segment.words.map(\.endMilliseconds).max() {
                finalizedUpTo = max(finalizedUpTo, Int(end) * 16)
                replay.release(upTo: finalizedUpTo)
            }
        }
        if options.activation == .wakeword && !woken {
            // Withheld until the phrase is heard; from that snapshot on, the context's
            // segments are delivered.
            guard Self.contains(segment.words.map(\.text), phrase: options.wakeword) else { return nil }
            woken = true
            client?.emit(.listen(.activate, positionMilliseconds: Int64(audioSamples / 16)))
        }
        client?.emit(.segment(segment))
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

    private func userSegment(context: String, segment: Int32) -> Int32 {
        if let id = segmentMap[context]?[segment] { return id }
        let id = nextUserSegment
        nextUserSegment &+= 1
        segmentMap[context, default: [:]][segment] = id
        return id
    }

    /// A server context may hold 5 minutes of audio (protocol.md). Past the limit, at a pause in
    /// the audio being sent (200 ms of near silence), or at the latest 20 s later, the context
    /// continues in a new server context on the same stream: stop, start, and the audio goes on.
    /// The application sees one context. Decided on the audio sent, not on the server's answers,
    /// because a file is sent far ahead of them.
    private func rollOverIfDue(before chunk: [Int16]) {
        let limit = 16 * options.contextRolloverMilliseconds
        let sent = contextSamples - serverContextStart
        guard sent >= limit, reconnect == nil, replayCursor == nil, !stopSent, let stream else { return }
        guard silentRun >= 3_200 || sent >= limit + 16 * 20_000 else { return }
        rolloverFinishes += 1
        serverContextStart = contextSamples
        silentRun = 0
        pendingOffsets.append(Int32(clamping: contextSamples / 16))
        stream.send(.stop)
        stream.send(.start(appId: options.appId ?? "", options: options.contextOptions))
        client?.log(.info, "context \(contextId) continues in a new server context at \(Self.seconds(Double(contextSamples) / 16_000)) s")
    }

    /// Near silence: RMS under about -44 dBFS.
    static func isQuiet(_ chunk: [Int16]) -> Bool {
        var sum: Int64 = 0
        for s in chunk { sum &+= Int64(s) * Int64(s) }
        return sum <= Int64(chunk.count) * 200 * 200
    }

    static func shift(_ payload: SLUResponse.Payload, by ms: Int32) -> SLUResponse.Payload {
        guard ms != 0 else { return payload }
        func move(_ w: SLUWord) -> SLUWord {
            SLUWord(text: w.text, index: w.index, startMilliseconds: w.startMilliseconds &+ ms, endMilliseconds: w.endMilliseconds &+ ms)
        }
        switch payload {
        case .transcript(let w): return .transcript(move(w))
        case .tentativeTranscript(let text, let words): return .tentativeTranscript(text: text, words: words.map(move))
        default: return payload
        }
    }

    // MARK: - Audio out, reconnection

    /// Every chunk of the context is kept for replay, then sent when connected.
    private func sendAudio(_ chunk: [Int16]) {
        rollOverIfDue(before: chunk)
        // Only the pause before the rollover point matters (200 ms of it): the chunks are only
        // measured from shortly before it.
        let nearLimit = contextSamples - serverContextStart + chunk.count + 3_200 >= 16 * options.contextRolloverMilliseconds
        silentRun = nearLimit && Self.isQuiet(chunk) ? silentRun + chunk.count : 0
        replay.append(chunk)
        contextSamples += chunk.count
        if reconnect == nil && replayCursor == nil { stream?.send(.audio(chunk)) }
    }

    private func scheduleReconnect(attempt: Int, cause: SpeechClientError) {
        let base = min(Double(options.reconnectInitialDelayMilliseconds) * Double(1 << min(attempt - 1, 20)),
                       Double(options.reconnectMaxDelayMilliseconds))
        let jitter = Double.random(in: 0.75...1.25)
        let delayMs = UInt64(max(0, base * jitter))
        reconnect = (attempt, Clock.monotonicNanos() + delayMs * 1_000_000, cause)
        replayCursor = nil
        report(.reconnecting, attempt: attempt, delayMilliseconds: Int(delayMs))
        client?.log(.warning, "connection lost during context \(contextId) (\(cause.message)); reconnecting in \(delayMs) ms, attempt \(attempt) of \(options.reconnectAttempts)")
    }

    /// Opens a new stream and a new server context, and replays the audio the server had not
    /// finished with. When the buffer no longer holds all of it, an error says what was lost.
    private func attemptReconnect() {
        guard let r = reconnect else { return }
        do throws(SpeechClientError) {
            try ensureStream()
        } catch {
            if cancellation.isCancelled {
                // Suspended (or freed) during an outage: the context cannot finish.
                reconnect = nil
                failContext(lostAudioError(SpeechClientError(.network, "the client was suspended while reconnecting"),
                                           attempts: r.attempt))
                return
            }
            lossesWithoutProgress += 1
            if lossesWithoutProgress > options.reconnectAttempts || !Self.isRetryable(error) {
                reconnect = nil
                report(.unavailable, reason: error)
                failContext(lostAudioError(error, attempts: r.attempt))
            } else {
                scheduleReconnect(attempt: lossesWithoutProgress, cause: error)
            }
            return
        }
        reconnect = nil
        var from = finalizedUpTo
        if replay.oldestSample > from {
            pendingLoss = (pendingLoss?.from ?? from, replay.oldestSample)
            from = replay.oldestSample
        }
        // The new server context starts at `from`; its segment 0 is the user's next segment.
        timeOffsets = [:]
        segmentMap = [:]
        nextUserSegment = nextSegment
        rolloverFinishes = 0
        pendingOffsets = [Int32(clamping: from / 16)]
        serverContextStart = from
        silentRun = 0
        assembler.dropUnfinished(context: contextId)
        stream?.send(.start(appId: options.appId ?? "", options: options.contextOptions))
        replayCursor = from
        client?.log(.info, "reconnected; replaying \(Self.seconds(Double(contextSamples - from) / 16_000)) s of audio")
        _ = pumpReplay()
    }

    /// Sends replay audio while the stream's send backlog is under the file limit; once all of
    /// it (and the live audio appended meanwhile) is out, a stop already made follows. Returns
    /// whether it made progress.
    @discardableResult
    private func pumpReplay() -> Bool {
        guard let cursor = replayCursor, let stream, reconnect == nil else { return false }
        // Checked first: this runs every 0.3 ms while the stream drains.
        if stream.backlogBytes > Self.fileBacklogLimit { return false }
        var at = max(cursor, replay.oldestSample)
        var sent = false
        for chunk in replay.chunks(from: at) {
            if stream.backlogBytes > Self.fileBacklogLimit { break }
            stream.send(.audio(chunk))
            at += chunk.count
            sent = true
        }
        if at >= replay.endSample {
            replayCursor = nil
            if stopSent { stream.send(.stop) }
            client?.log(.debug, "replay done")
        } else {
            replayCursor = at
        }
        return sent
    }

    /// The error that ends a context whose connection could not be restored: what failed and
    /// exactly which audio was not transcribed.
    private func lostAudioError(_ error: SpeechClientError, attempts: Int) -> SpeechClientError {
        let lost = Double(contextSamples - finalizedUpTo) / 16_000
        return SpeechClientError(error.code, "reconnection failed after \(attempts) attempt(s) (\(error.message)); "
            + "the last \(Self.seconds(lost)) s of audio, from \(Self.seconds(Double(finalizedUpTo) / 16_000)) s into the context, were not transcribed",
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
            client?.emit(.level(Float(VoiceActivityDetector.decibels(chunk)), positionMilliseconds: Int64(at / 16)))
        }
        guard var ep = endpointer else {
            sendAudio(chunk)
            return
        }
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
                client?.emit(.listen(e, positionMilliseconds: Int64(sample / 16)))
            case .open:
                if contextOpen {
                    // The previous context is still finishing: this one waits for it.
                    backlogWaiting = true
                    backlogClosed = false
                } else {
                    openListeningContext()
                }
            case .audio(let chunk):
                if backlogWaiting {
                    // Bounded: a server that never finishes the previous context cannot make
                    // the microphone's audio pile up here.
                    if backlog.count >= Self.maxBacklogChunks {
                        backlog.removeFirst()
                        if !backlogOverflowed {
                            backlogOverflowed = true
                            client?.emit(.error(SpeechClientError(.network, "the server has not finished the previous context; speech heard meanwhile is being dropped")))
                        }
                    }
                    backlog.append(chunk)
                } else if contextOpen && !stopSent {
                    sendAudio(chunk)
                }
            case .close:
                if backlogWaiting {
                    backlogClosed = true
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
        endpointer = Endpointer(settings: Endpointer.Settings(options: options))
        audioSamples = 0
        backlog = []
        backlogWaiting = false
        client?.log(.debug, "listening (\(options.activation == .voice ? "voice" : "wakeword") activation)")
        client?.transition { state, _ in if state == .starting { state = .listening } }
        pumping = source != nil
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
            backlog = []
            backlogWaiting = false
            return
        }
        beginContext()
    }

    /// The previous context has ended: the activation that waited for it opens its own.
    private func openWaitingActivation() {
        let chunks = backlog
        let closed = backlogClosed
        backlogOverflowed = false
        backlog = []
        backlogWaiting = false
        backlogClosed = false
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
        perform(actions)
        pumping = false
        closeFileSource()
        if auto {
            client?.transition { state, _ in
                if state == .starting || state == .listening { state = .stopping }
            }
        }
        if !contextOpen && !backlogWaiting { finishListening() }
    }

    /// Listening is over and no context is open: idle (or a start queued meanwhile runs).
    private func finishListening() {
        endContext(events: [], startQueued: true)
    }

    // MARK: - Suspend / resume

    private func handleSuspend() {
        // Whatever the suspend interrupted has given up by now; later work may block again.
        cancellation.reset()
        suspended = true
        report(.suspended)
        deferredStart = false
        if endpointer != nil { closeFileSource() }  // listening ends; a file is not read on
        endpointer = nil
        backlog = []
        backlogWaiting = false
        if contextOpen && !stopSent { sendStop() }
        if case .microphone = options.audio {
            source?.close()
            source = nil
        }
        if !contextOpen {
            stream?.finish()
            stream = nil
        }
    }

    private func handleResume() {
        suspended = false
        guard options.prepareOnInit else { return }
        do throws(SpeechClientError) {
            try prepare(client: client)
        } catch {
            // A suspend right after the resume interrupted it: nothing to report.
            if !cancellation.isCancelled { client?.emit(.error(error)) }
        }
    }
}
