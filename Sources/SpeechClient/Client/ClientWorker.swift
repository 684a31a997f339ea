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

    init(options: ClientOptions, service: any RecognitionService,
         makeSource: @escaping @Sendable (AudioInput) -> (any AudioSource)?, samplesPerChunk: Int) {
        self.options = options
        self.service = service
        self.makeSource = makeSource
        self.samplesPerChunk = samplesPerChunk
        chunker = Chunker(samplesPerChunk: samplesPerChunk)
    }

    deinit { shutdown() }

    static let fileBacklogLimit = 64 * 1024

    // MARK: - Loop

    func run() {
        while let client {
            // While pumping, take commands without waiting and read audio between them. An open
            // stream with no context is closed after `idleStreamNanos` (protocol.md: the official
            // clients did the same) and reopened by the next start.
            let idleDeadline = (stream != nil && !contextOpen) ? lastActivity + UInt64(options.idleStreamMilliseconds) * 1_000_000 : nil
            guard let next = client.nextCommand(wait: !pumping, deadline: idleDeadline) else {
                if pumping {
                    pumpOnce()
                } else if let idleDeadline, Clock.monotonicNanos() >= idleDeadline {
                    client.log(.debug, "closing the idle SLU stream")
                    stream?.finish()
                    stream = nil
                }
                continue
            }
            lastActivity = Clock.monotonicNanos()
            guard let command = next else { return }
            handle(command)
        }
    }

    /// Called after the thread was joined: releases the stream and the source.
    func shutdown() {
        stream?.cancel()
        stream = nil
        source?.close()
        source = nil
    }

    private func handle(_ command: Client.Command) {
        switch command {
        case .start: handleStart()
        case .stop: sendStop()
        case .audio(let chunks):
            if contextOpen && !stopSent { for c in chunks { stream?.send(.audio(c)) } }
        case .pushEnd(let rest):
            if contextOpen && !stopSent { for c in rest { stream?.send(.audio(c)) } }
            sendStop()
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
        stream = try service.openStream(config: config) { [weak self] event in
            self?.client?.enqueue(.stream(event, generation: gen))
        }
        stream?.send(.config(config))
    }

    // MARK: - Contexts

    private func handleStart() {
        guard let client else { return }
        if contextOpen {
            deferredStart = true
            return
        }
        do throws(SpeechClientError) {
            try openAudioForContext()
            try ensureStream()
        } catch {
            closeFileSource()
            failContext(error)
            return
        }
        contextOpen = true
        stopSent = false
        contextId = ""
        client.transition({ _, _ in }, contextOpen: true)
        stream?.send(.start(appId: options.appId ?? "", options: options.contextOptions))
        pumping = source != nil
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
        if case .file = options.audio, let stream, stream.backlogBytes > Self.fileBacklogLimit {
            var ts = timespec(tv_sec: 0, tv_nsec: 2_000_000)
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
            if contextOpen && !stopSent { sendStop(auto: true) }
            return
        }
        guard let block else {
            // End of stream: send what is left and stop the context, as if the user had.
            for c in chunker.append(converter.flush()) { stream?.send(.audio(c)) }
            if let partial = chunker.flush() { stream?.send(.audio(partial)) }
            pumping = false
            closeFileSource()
            sendStop(auto: true)
            return
        }
        for c in chunker.append(converter.process(block)) where contextOpen && !stopSent {
            stream?.send(.audio(c))
        }
    }

    private func sendStop(auto: Bool = false) {
        guard contextOpen, !stopSent else { return }
        if pumping, case .file = options.audio { closeFileSource() }
        pumping = false
        if let partial = chunker.flush() { stream?.send(.audio(partial)) }
        stopSent = true
        stream?.send(.stop)
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

    /// A context could not run: report the error, then the stop, and return to idle.
    private func failContext(_ error: SpeechClientError) {
        let id = contextId
        authRetried = false
        contextOpen = false
        stopSent = false
        pumping = false
        deferredStart = false
        client?.transition({ state, pending in
            if state != .suspended { state = .idle }
            pending = false
        }, contextOpen: false, events: [.error(error), .stop(contextId: id)])
        contextId = ""
    }

    // MARK: - Responses

    private func handleStream(_ event: StreamEvent) {
        switch event {
        case .closed(let error):
            stream = nil
            // A rejected token before the context started: log in afresh (the relay dropped the
            // cached token) and open the context again, once.
            // A file is read again from its start; otherwise a stop already sent is sent again.
            if contextOpen, contextId.isEmpty, !authRetried, let error, error.code == .auth {
                authRetried = true
                client?.log(.info, "the server rejected the token; logging in again")
                let wasStopped = stopSent
                contextOpen = false
                var isFile = false
                if case .file = options.audio { isFile = true; closeFileSource() }
                handleStart()
                if wasStopped && !isFile { sendStop() }
                return
            }
            if contextOpen {
                failContext(error ?? SpeechClientError(.network, "the server closed the stream during a context"))
            } else if let error {
                client?.log(.warning, "stream closed: \(error.message)")
            }
        case .response(let response):
            handleResponse(response)
        }
    }

    private func handleResponse(_ response: SLUResponse) {
        switch response.payload {
        case .started:
            authRetried = false
            contextId = response.audioContext
            client?.transition({ state, _ in
                if state == .starting { state = .listening }
            }, events: [.start(contextId: response.audioContext)])
        case .finished(let code, let message):
            _ = assembler.apply(response)
            let id = response.audioContext
            contextOpen = false
            stopSent = false
            contextId = ""
            var events: [ClientEvent] = []
            if let code {
                events.append(.error(SpeechClientError(.api, "context \(id) finished with error \(code): \(message ?? "")")))
            }
            events.append(.stop(contextId: id))
            var restart = false
            client?.transition({ state, pending in
                if state == .suspended { return }
                if pending {
                    pending = false
                    state = .starting
                    restart = true
                } else {
                    state = .idle
                }
            }, contextOpen: false, events: events)
            if suspended {
                stream?.finish()
                stream = nil
            } else if restart || deferredStart {
                deferredStart = false
                handleStart()
            }
        case .rttRequest(let id):
            stream?.send(.rttResponse(id: id))
        default:
            if let segment = assembler.apply(response) {
                client?.emit(.segment(segment))
            }
        }
    }

    // MARK: - Suspend / resume

    private func handleSuspend() {
        suspended = true
        deferredStart = false
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
            client?.emit(.error(error))
        }
    }
}
