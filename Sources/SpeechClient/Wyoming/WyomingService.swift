#if canImport(Glibc)
import Glibc
#endif
import CShims
import Synchronization

/// Wyoming speech recognition (wyoming-faster-whisper, wyoming-vosk, ...) behind the client's
/// `RecognitionService` seam, so contexts, lanes, replay and rotation work as they do for the
/// Speechly protocol. Each stream is one connection carrying one transcription:
///
///     client: describe                      server: info          (before the stream is handed over)
///     client: transcribe, audio-start       (the worker's `start`: answered at once with `started`)
///     client: audio-chunk ...               server: transcript-start / -chunk / -stop (if it streams)
///     client: audio-stop                    server: transcript    (one final segment, then finished)
///
/// A server with its own voice activity detection (a Silero VAD in front of Parakeet, ...) sends
/// a `transcript` at each end of speech it hears, while the audio still comes, and at
/// `audio-stop` one for the speech since, or nothing when there was none. Each transcript is a
/// final segment of its own. One that comes before `audio-stop` went out asks the stream to
/// move to a new one at the next pause (`.endpointed`): what the server heard after its end of
/// speech is finished by this stream's `audio-stop`, and the next utterance starts a fresh one.
///
/// Which transcript is the last is told by a `describe` after `audio-stop`: servers handle a
/// connection's events one at a time, in order (wyoming's AsyncEventHandler), so the `info`
/// answering it comes after every transcript of the audio. It is sent with `audio-stop` once the
/// server was seen to end utterances by itself (it may then send nothing at all), else after the
/// first transcript that follows `audio-stop` (a file is sent far ahead of the server, so the
/// early transcripts of a whole file may all come after it). The stream finishes at that `info`,
/// or when the server closes the connection after a transcript (wyoming-faster-whisper does:
/// `describe` is not sent before, so that it is not unread data when the server closes).
///
/// What the protocol lacks is not invented: words carry no times (-1), there are no intents or
/// entities, and a transcription is one segment (a long context gets several through the
/// client's stream rotation at pauses).
/// Sendable: immutable after init; `sequence` is atomic.
public final class WyomingService: RecognitionService, @unchecked Sendable {
    private let server: ServerURL
    private let connectTimeoutMilliseconds: Int
    private let resultTimeoutMilliseconds: Int
    private let applicationDrivenIO: Bool
    private let model: String?
    private let log: @Sendable (LogLevel, String) -> Void
    private let sequence = Atomic<Int>(0)
    /// The server sent a transcript before `audio-stop` (its own endpointing): every later stream
    /// follows its `audio-stop` with `describe` (see above).
    private let endpoints = ServerEndpointing()

    /// `resultTimeoutMilliseconds`: how long after `audio-stop` the transcript may take (0: no
    /// limit of the stream's own; the client times it, see `Client.service`).
    public init(server: ServerURL, connectTimeoutMilliseconds: Int, resultTimeoutMilliseconds: Int = 60_000,
                applicationDrivenIO: Bool = false, model: String? = nil, log: @escaping @Sendable (LogLevel, String) -> Void) {
        self.model = model
        self.server = server
        self.connectTimeoutMilliseconds = connectTimeoutMilliseconds
        self.resultTimeoutMilliseconds = resultTimeoutMilliseconds
        self.applicationDrivenIO = applicationDrivenIO
        self.log = log
    }

    /// Connects, asks `describe` and waits for `info` on the calling (worker) thread, all within
    /// the connect timeout, so a stream exists only once the server has answered as a Wyoming
    /// speech recognizer that speaks the requested language.
    public func openStream(config: SLUConfig, cancellation: Cancellation?, handler: @escaping @Sendable (StreamEvent) -> Void)
        throws(SpeechClientError) -> any RecognitionStream {
        let (socket, info, reader) = try WyomingHandshake.describe(server, connectTimeoutMilliseconds: connectTimeoutMilliseconds,
                                                                   cancellation: cancellation)
        let peer = server.description
        let language = try Self.language(config.languageCode, info: info, peer: peer)
        if Self.endsUtterancesItself(info), !endpoints.isSeen {
            endpoints.noteDeclared()
            log(.info, "\(peer) ends utterances by itself (its info says requires_external_vad: false): a file is read at real time, and each utterance moves to a new connection")
        }
        if let model { try Self.checkModel(model, info: info, peer: peer) }
        if language != config.languageCode {
            log(.debug, "\(peer) lists language '\(language)' for '\(config.languageCode)': asking for '\(language)'")
        }
        let id = "wyoming-\(sequence.add(1, ordering: .relaxed).newValue)-\(SystemRandom.uuid().prefix(8))"
        let stream = try WyomingStream(io: PlainStream(socket: socket, peer: peer), reader: reader, peer: peer,
                                   contextId: id, language: language, model: model, sampleRate: Int(config.sampleRateHertz),
                                   resultTimeoutMilliseconds: resultTimeoutMilliseconds, endpoints: endpoints, handler: handler)
        try stream.start(applicationDriven: applicationDrivenIO)
        return stream
    }

    /// The language to ask for: the one requested when a model lists it (case aside), else its
    /// primary subtag ("en-US" -> "en", as wyoming-faster-whisper's models are listed); a server
    /// whose models list no languages takes what it is given. Otherwise an error naming them.
    static func language(_ wanted: String, info: WyomingEvent, peer: String) throws(SpeechClientError) -> String {
        guard case .array(let programs)? = info.data["asr"], !programs.isEmpty else {
            let offers = ["wake", "tts", "handle", "intent", "mic", "snd"].filter { info.data[$0].map(Self.isNonEmptyArray) ?? false }
            throw SpeechClientError(.invalidArgument, "\(peer) is a Wyoming service without speech recognition (its info lists no asr program"
                                    + (offers.isEmpty ? ")" : "; it offers \(offers.joined(separator: ", ")))"))
        }
        var languages: [String] = []
        for program in programs {
            guard case .array(let models)? = program["models"] else { continue }
            for model in models {
                guard case .array(let list)? = model["languages"] else { continue }
                languages += list.compactMap { $0.stringValue }
            }
        }
        if languages.isEmpty { return wanted }
        if let exact = languages.first(where: { $0.lowercased() == wanted.lowercased() }) { return exact }
        let primary = String(wanted.split(separator: "-").first ?? Substring(wanted)).lowercased()
        if let base = languages.first(where: { $0.lowercased() == primary }) { return base }
        let shown = languages.prefix(12).map { $0.shownFromServer(limit: 64) }.joined(separator: ", ") + (languages.count > 12 ? ", ..." : "")
        throw SpeechClientError(.invalidArgument, "\(peer) does not recognise language '\(wanted)': its models list \(shown)")
    }

    /// A model asked for by name must be one the info lists (when it lists any by name).
    static func checkModel(_ name: String, info: WyomingEvent, peer: String) throws(SpeechClientError) {
        var names: [String] = []
        if case .array(let programs)? = info.data["asr"] {
            for program in programs {
                guard case .array(let models)? = program["models"] else { continue }
                names += models.compactMap { $0["name"]?.stringValue }
            }
        }
        guard !names.isEmpty, !names.contains(name) else { return }
        let shown = names.prefix(12).map { $0.shownFromServer(limit: 64) }.joined(separator: ", ") + (names.count > 12 ? ", ..." : "")
        throw SpeechClientError(.invalidArgument, "\(peer) has no model '\(name)': its info lists \(shown)")
    }

    /// An asr program of the info says it needs no voice activity detection from the client.
    static func endsUtterancesItself(_ info: WyomingEvent) -> Bool {
        guard case .array(let programs)? = info.data["asr"] else { return false }
        return programs.contains { program in
            if case .bool(false)? = program["requires_external_vad"] { return true }
            return false
        }
    }

    private static func isNonEmptyArray(_ value: JSONValue) -> Bool {
        if case .array(let a) = value { return !a.isEmpty }
        return false
    }
}

/// The blocking `describe` / `info` exchange on a fresh non-blocking socket, before the event
/// loop owns it. Reads only what it needs; bytes after `info` stay in `reader`.
struct WyomingHandshake {
    let fd: Int32
    let peer: String
    let deadline: UInt64
    let cancellation: Cancellation?
    var reader = WyomingEventReader(keepsPayloads: false)  // no event this client reads carries one

    init(fd: Int32, peer: String, deadline: UInt64, cancellation: Cancellation?) {
        self.fd = fd
        self.peer = peer
        self.deadline = deadline
        self.cancellation = cancellation
    }

    /// Connects (TCP or Unix socket), asks `describe` and waits for `info`, all within the
    /// connect timeout, on the calling thread. Returns the socket, the info and the reader
    /// holding any bytes read past it.
    static func describe(_ server: ServerURL, connectTimeoutMilliseconds: Int, cancellation: Cancellation?)
        throws(SpeechClientError) -> (TCPSocket, WyomingEvent, WyomingEventReader) {
        let deadline = Clock.monotonicNanos() + UInt64(max(connectTimeoutMilliseconds, 1)) * 1_000_000
        let socket: TCPSocket
        if let path = server.unixPath {
            socket = try TCPSocket.connectUnix(path: path, deadline: deadline, cancellation: cancellation)
        } else {
            socket = try TCPSocket.connect(host: server.host, port: server.port,
                                           timeoutMilliseconds: connectTimeoutMilliseconds, cancellation: cancellation)
        }
        var handshake = WyomingHandshake(fd: socket.fd, peer: server.description, deadline: deadline, cancellation: cancellation)
        try handshake.write(WyomingEvent(type: "describe").encoded())
        let info = try handshake.readInfo()
        return (socket, info, handshake.reader)
    }

    /// Waits up to 50 ms at a time for `events`, so a cancellation ends the wait soon.
    private func wait(_ events: Int16, doing what: String) throws(SpeechClientError) {
        while true {
            try cancellation?.check()
            let now = Clock.monotonicNanos()
            guard now < deadline else {
                throw SpeechClientError(.timeout, "\(peer) did not \(what) within the connect timeout: is it a Wyoming service?")
            }
            var pfd = pollfd(fd: fd, events: events, revents: 0)
            let n = poll(&pfd, 1, Int32(min((deadline - now) / 1_000_000 + 1, 50)))
            if n > 0 { return }
            if n < 0 && errno != EINTR { throw SpeechClientError.errno(.network, "poll", errno, context: peer) }
        }
    }

    func write(_ bytes: [UInt8]) throws(SpeechClientError) {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { raw -> Int in
                guard let base = raw.baseAddress else { return 0 }
                return Glibc.send(fd, base + sent, raw.count - sent, Int32(MSG_NOSIGNAL))
            }
            if n > 0 { sent += n; continue }
            let e = errno
            if e == EINTR { continue }
            guard e == EAGAIN || e == EWOULDBLOCK else { throw SpeechClientError.errno(.network, "send", e, context: peer) }
            try wait(Int16(POLLOUT), doing: "take the describe event")
        }
    }

    /// Reads events until `info`; anything else first is skipped, an `error` event thrown.
    mutating func readInfo() throws(SpeechClientError) -> WyomingEvent {
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            try wait(Int16(POLLIN), doing: "answer describe with info")
            let n = chunk.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 {
                throw SpeechClientError(.network, "\(peer) closed the connection before answering describe")
            }
            if n < 0 {
                let e = errno
                if e == EINTR || e == EAGAIN || e == EWOULDBLOCK { continue }
                throw SpeechClientError.errno(.network, "recv", e, context: peer)
            }
            let events = try reader.feed(chunk[0..<n])
            for (i, event) in events.enumerated() {
                if event.type == "error" { throw WyomingStream.serverError(event, peer: peer) }
                if event.type == "info" {
                    guard i == events.count - 1 else {
                        throw SpeechClientError(.parse, "\(peer) sent events after info before being asked anything")
                    }
                    return event
                }
            }
        }
    }
}

/// Whether a Wyoming server ends utterances by itself (it sent a `transcript` before
/// `audio-stop`): learnt on one stream, used by the next ones of the same service.
final class ServerEndpointing: Sendable {
    private let seen = Atomic<Bool>(false)
    private let continuous = Atomic<Bool>(false)
    var isSeen: Bool { seen.load(ordering: .relaxed) }
    func noteSeen() { seen.store(true, ordering: .relaxed) }
    /// It sent two transcripts on one connection: it transcribes all it is sent, after its
    /// ends of speech too (not one utterance per connection, as wyoming-faster-whisper does).
    var isContinuous: Bool { continuous.load(ordering: .relaxed) }
    func noteContinuous() { continuous.store(true, ordering: .relaxed) }
    /// It closed a connection at `audio-stop` with nothing more after a transcript before it:
    /// one utterance per connection, so a transcript after `audio-stop` too covers only the
    /// audio up to its end of speech.
    private let onePerConnection = Atomic<Bool>(false)
    var isOnePerConnection: Bool { onePerConnection.load(ordering: .relaxed) && !isContinuous }
    func noteOnePerConnection() { onePerConnection.store(true, ordering: .relaxed) }
    /// Its info says `requires_external_vad: false` (wyoming-faster-whisper with
    /// `--vad-endpointing` says so, and takes one utterance per connection).
    private let declared = Atomic<Bool>(false)
    func noteDeclared() { declared.store(true, ordering: .relaxed); noteSeen() }
    /// A transcript before `audio-stop` may mean that the server ignores what follows: it was
    /// seen to (one utterance per connection), or it says it endpoints and was not seen to
    /// transcribe more. A server that says nothing is taken to transcribe all it is sent until
    /// it shows otherwise (replaying from its pause would repeat what it transcribes after it).
    var mayIgnoreTheRest: Bool { !isContinuous && (onePerConnection.load(ordering: .relaxed) || declared.load(ordering: .relaxed)) }
}

/// One transcription on one connection, driven by the event loop once started. `send`,
/// `finish` and `cancel` come from the client's worker and are posted to the loop; everything
/// else runs on the loop. The handler hears `.response`s then exactly one `.closed`, unless
/// cancelled.
/// Sendable: `samplesSent` is used only in `send` (by the worker, under its `audioLock`); the rest
/// only inside the loop's work.
final class WyomingStream: RecognitionStream, @unchecked Sendable {
    /// Its `started` is its own (the protocol acknowledges no start).
    var serverAcknowledgesStart: Bool { false }
    var endsUtterancesItself: Bool { endpoints.isSeen }
    private let connection: WyomingConnection
    private let peer: String
    private let contextId: String
    private let language: String
    private let model: String?
    private let sampleRate: Int
    private let resultTimeoutMilliseconds: Int
    private let handler: @Sendable (StreamEvent) -> Void
    private let endpoints: ServerEndpointing
    private let cancelled = Atomic<Bool>(false)
    private var loop: EventLoop { connection.loop }

    // Loop-thread state, except `samplesSent` and `startSent` (the worker's, in `send` and `finish`).
    private var samplesSent = 0
    private var startSent = false
    private var partial = StreamedTranscript()
    /// Chunks changed the words since they were last delivered.
    private var tentativeDue = false
    private var resultTimer: UInt64?
    private var describeProbe: UInt64?
    /// The segment the next transcript is (one per end of speech the server sends).
    private var segment: Int32 = 0
    /// `audio-stop` is out; `describe` after it (its `info` is the end); transcripts since and
    /// before it; a transcript ended an utterance (before `audio-stop`, or after it from a server
    /// that may ignore what follows its end of speech).
    private var stopWritten = false
    /// Where `audio-stop` fell (ms of audio sent), once it is written.
    private var stopMilliseconds = 0
    private var describeSent = false
    private var transcriptsSinceStop = 0
    private var transcriptsBeforeStop = 0
    private var endpointed = false
    /// The worker was told that the server may have ignored what followed its end of speech.
    private var toldIgnoresTheRest = false

    init(io: any ByteStream, reader: WyomingEventReader, peer: String, contextId: String, language: String,
         model: String?, sampleRate: Int, resultTimeoutMilliseconds: Int, endpoints: ServerEndpointing = ServerEndpointing(),
         handler: @escaping @Sendable (StreamEvent) -> Void) throws(SpeechClientError) {
        connection = try WyomingConnection(io: io, reader: reader, peer: peer, closedMeans: "before its transcript")
        self.peer = peer
        self.contextId = contextId
        self.language = language
        self.model = model
        self.sampleRate = sampleRate
        self.resultTimeoutMilliseconds = resultTimeoutMilliseconds
        self.handler = handler
        self.endpoints = endpoints
        connection.onEvent = { [self] event in handle(event) }
        connection.onEventsRead = { [self] in deliverTentative() }
        connection.onFailure = { [self] error in
            cancelResultTimer()
            deliver(.closed(error))
        }
        // Closed (or reset: a `describe` it did not read) after a transcript answering the
        // stop: the server's end of the transcription (wyoming-faster-whisper closes then).
        // After a transcript before it, too: wyoming-faster-whisper with `--vad-endpointing`
        // answers once per connection, at its end of speech, and closes at `audio-stop` (a loss
        // replayed would repeat the utterance it transcribed; what it ignored after its end of
        // speech the next stream replays, `.endpointed`).
        // Taken to transcribe all it was sent, it ignored what followed its end of speech: that
        // audio is sent again on a new stream (`.ignoredAfterEndpoint`).
        connection.onPeerGone = { [self] in
            guard transcriptsSinceStop > 0 || (stopWritten && endpointed) else { return false }
            // More than one transcript on this connection: a server that transcribes all it is
            // sent, whose end is the `info` answering `describe`. Gone before it, it was lost
            // (a crash, a restart) with the audio after its last end of speech untranscribed:
            // taken as the end, those words were lost without an error. A loss replays them.
            if transcriptsSinceStop + transcriptsBeforeStop > 1 { return false }
            if transcriptsSinceStop == 0 {
                endpoints.noteOnePerConnection()
                if !toldIgnoresTheRest && !endpoints.isContinuous { deliver(.ignoredAfterEndpoint) }
            }
            finishStream()
            return true
        }
    }

    func start(applicationDriven: Bool) throws(SpeechClientError) {
        try connection.start(applicationDriven: applicationDriven)
    }

    // MARK: the worker's side

    func send(_ request: SLURequest) {
        switch request {
        case .config, .rttResponse:
            return
        case .start:
            startSent = true
            var ask: [String: JSONValue] = ["language": .string(language)]
            if let model { ask["name"] = .string(model) }
            // The info proved the server there; a transcription starts when it is asked for.
            connection.send([WyomingEvent(type: "transcribe", data: ask),
                             WyomingEvent(type: "audio-start", data: WyomingAudio.format(rate: sampleRate, timestamp: 0))]) { [self] in
                deliver(.response(SLUResponse(audioContext: contextId, segmentId: 0, payload: .started)))
            }
        case .audio(let samples):
            let at = samplesSent
            samplesSent += samples.count
            connection.send([WyomingAudio.chunk(samples, rate: sampleRate, atSample: at)])
        case .stop:
            // Whether the server endpoints is read on the loop, once the stop is out: a
            // transcript handled between this call and that would otherwise go without `describe`.
            let at = WyomingAudio.milliseconds(samplesSent, rate: sampleRate)
            connection.send([WyomingEvent(type: "audio-stop", data: ["timestamp": .number(Double(at))])]) { [self] in
                stopWritten = true
                stopMilliseconds = at
                if endpoints.isSeen { sendDescribe() } else { armDescribeProbe() }
                armResultTimer()
            }
        }
    }

    /// Wyoming has no half-close: `audio-stop` ends the input and the server answers it. A
    /// stream that never started a transcription (prepared, then let go: idle, suspended) is
    /// closed: nothing would ever end it, and it held its socket and itself until the server
    /// hung up.
    func finish() {
        if !startSent { cancel() }
    }

    func cancel() {
        cancelled.store(true, ordering: .releasing)
        loop.execute { [self] in close() }
    }

    var backlogBytes: Int { connection.backlogBytes }
    func notifyWhenBacklog(atMost bytes: Int, _ body: @escaping @Sendable () -> Void) -> Bool {
        connection.notifyWhenBacklog(atMost: bytes, body)
    }

    // MARK: the loop's side

    /// The streamed transcript's words, once for all the chunks of a read: each chunk's update
    /// copies every word so far, so one per chunk cost a server's tiny chunks that many copies.
    private func deliverTentative() {
        guard tentativeDue else { return }
        tentativeDue = false
        if let (text, words) = partial.words() {
            deliver(.response(SLUResponse(audioContext: contextId, segmentId: segment,
                                          payload: .tentativeTranscript(text: text, words: words))))
        }
    }

    private func handle(_ event: WyomingEvent) {
        // The transcript so far goes before anything that follows it.
        if event.type != "transcript-chunk" { deliverTentative() }
        switch event.type {
        case "transcript-start":
            partial = StreamedTranscript()
        case "transcript-chunk":
            // Bounded as a segment is: a server that streams chunks without end, or chunks of
            // blanks that make no words and so never reach the segment's bounds, grew the text
            // for as long as the stream lasted. Delivered once per read (`deliverTentative`).
            do throws(SpeechClientError) {
                if try partial.append(event.data["text"]?.stringValue ?? "") { tentativeDue = true }
            } catch {
                connection.fail(SpeechClientError(.parse, "\(peer) \(error.message); the stream was ended"))
            }
        case "transcript":
            guard let words = SLUWord.words(event.data["text"]?.stringValue ?? "") else {
                connection.fail(SpeechClientError(.parse, "\(peer) sent a transcript of more than \(SegmentAssembler.maxWordsPerSegment) words; the stream was ended"))
                return
            }
            if !words.isEmpty {
                var final = SLUResponse(audioContext: contextId, segmentId: segment, payload: .finalTranscript(words, confidence: -1))
                // After audio-stop the server had heard all the audio: the worker finds the pause
                // that ended this utterance in it (before audio-stop, `.endpointed` does), so a
                // loss replays only what follows. Not the first from a server that may ignore what
                // follows its end of speech: `.endpointed` below places that one.
                if stopWritten && !(transcriptsSinceStop == 0 && !endpointed && endpoints.mayIgnoreTheRest) {
                    final.heardMilliseconds = Int32(clamping: stopMilliseconds)
                }
                deliver(.response(final))
            }
            segment &+= 1  // a server sending transcripts without end must not trap the client
            partial = StreamedTranscript()
            guard stopWritten else {
                // The server ended an utterance by itself, and takes the audio that follows.
                endpointed = true
                transcriptsBeforeStop += 1
                if transcriptsBeforeStop > 1 { endpoints.noteContinuous() }
                endpoints.noteSeen()
                toldIgnoresTheRest = toldIgnoresTheRest || endpoints.mayIgnoreTheRest
                deliver(.endpointed(ignoresTheRest: endpoints.mayIgnoreTheRest))
                return
            }
            // From a server that may ignore what follows its end of speech (as before
            // `audio-stop`), the first ended where its speech did: the rest is for a new stream.
            if transcriptsSinceStop == 0 && !endpointed && endpoints.mayIgnoreTheRest {
                endpointed = true
                toldIgnoresTheRest = true
                deliver(.endpointed(ignoresTheRest: true))
            }
            transcriptsSinceStop += 1
            if transcriptsSinceStop > 1 { endpoints.noteSeen() }
            if transcriptsSinceStop + transcriptsBeforeStop > 1 { endpoints.noteContinuous() }
            // More may come (ends of speech the server reached after the audio went out): the
            // `info` answering a `describe` says when not. The result timeout restarts.
            sendDescribe()
            cancelResultTimer()
            armResultTimer()
        case "info" where describeSent:
            // Everything the server had to say of the audio came before this.
            finishStream()
        case "error":
            connection.fail(Self.serverError(event, peer: peer))
        case "ping":
            connection.reply(WyomingEvent(type: "pong", data: event.data["text"].map { ["text": $0] } ?? [:]))
        default:
            break  // transcript-stop, and events of newer versions: nothing to do
        }
    }

    /// Once, after `audio-stop` (loop thread).
    private func sendDescribe() {
        guard !describeSent else { return }
        describeSent = true
        connection.send([WyomingEvent(type: "describe")])
    }

    private func finishStream() {
        deliver(.response(SLUResponse(audioContext: contextId, segmentId: 0, payload: .finished(errorCode: nil, errorMessage: nil))))
        close()
        deliver(.closed(nil))
    }

    static func serverError(_ event: WyomingEvent, peer: String) -> SpeechClientError {
        let text = event.data["text"]?.stringValue ?? "(no text)"
        let code = event.data["code"]?.stringValue.map { " (\($0))" } ?? ""
        return SpeechClientError(.api, "\(peer) reported an error: \(text.shownFromServer(limit: 500))\(code.shownFromServer(limit: 100))")
    }

    private func armResultTimer() {
        guard resultTimer == nil, resultTimeoutMilliseconds > 0 else { return }
        resultTimer = loop.addTimer(milliseconds: resultTimeoutMilliseconds) { [self] in
            resultTimer = nil
            // Transcripts came after the stop and then nothing (not even the `info`): what came is the answer.
            if transcriptsSinceStop > 0 { return finishStream() }
            connection.fail(SpeechClientError(.timeout, "\(peer) sent no transcript within \(resultTimeoutMilliseconds / 1000) s of the end of the audio"))
        }
    }

    private func cancelResultTimer() {
        if let t = resultTimer { loop.cancelTimer(t) }
        resultTimer = nil
        if let t = describeProbe { loop.cancelTimer(t) }
        describeProbe = nil
    }

    /// A server not yet seen to end utterances by itself gets `describe` only after its first
    /// transcript (one that transcribes once and closes may reset a connection with a
    /// `describe` unread). But a server with its own voice detection says nothing at all at
    /// `audio-stop` when it heard no speech: with no transcript for a while, `describe` is sent
    /// anyway, and its `info` ends the stream. Without it, such a context (a cough that opened
    /// it, silence only) waited for the finish timeout, then was replayed, and failed minutes
    /// later as not transcribed. Harmless to a server still transcribing: events are answered
    /// in order, so the `info` comes after its transcript, or the close after the transcript
    /// ends the stream as usual.
    private func armDescribeProbe() {
        guard describeProbe == nil else { return }
        describeProbe = loop.addTimer(milliseconds: Self.describeProbeMilliseconds) { [self] in
            describeProbe = nil
            guard !connection.isClosed, transcriptsSinceStop == 0 else { return }
            sendDescribe()
        }
    }

    /// How long after `audio-stop` without a transcript `describe` is sent anyway.
    static let describeProbeMilliseconds = 3_000

    private func deliver(_ event: StreamEvent) {
        if cancelled.load(ordering: .acquiring) { return }
        handler(event)
    }

    private func close() {
        cancelResultTimer()
        connection.close()
    }
}

/// Audio as Wyoming events carry it: 16-bit little-endian mono PCM, stamped in milliseconds.
enum WyomingAudio {
    static func milliseconds(_ samples: Int, rate: Int) -> Int { samples * 1000 / max(rate, 1) }

    static func format(rate: Int, timestamp samples: Int) -> [String: JSONValue] {
        ["rate": .number(Double(rate)), "width": .number(2), "channels": .number(1),
         "timestamp": .number(Double(milliseconds(samples, rate: rate)))]
    }

    static func chunk(_ samples: [Int16], rate: Int, atSample at: Int) -> WyomingEvent {
        var payload = [UInt8](repeating: 0, count: samples.count * 2)
        for (i, s) in samples.enumerated() {
            let v = UInt16(bitPattern: s)
            payload[2 * i] = UInt8(truncatingIfNeeded: v)
            payload[2 * i + 1] = UInt8(truncatingIfNeeded: v >> 8)
        }
        return WyomingEvent(type: "audio-chunk", data: format(rate: rate, timestamp: at), payload: payload)
    }
}
