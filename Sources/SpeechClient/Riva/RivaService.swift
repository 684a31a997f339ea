import Synchronization

/// NVIDIA Riva speech recognition (`nvidia.riva.asr.RivaSpeechRecognition/StreamingRecognize`)
/// behind the client's `RecognitionService` seam. Each stream is one call carrying one context:
///
///     client: streaming_config {config {LINEAR_PCM, 16 kHz, language, word offsets}, interim_results}
///     client: audio_content ...                 server: results: interim (is_final false) ...
///     client: (half-close at the end)           server: results: final (is_final true), status OK
///
/// An interim result is a tentative update of the current segment, a final one ends it (words
/// with their offsets, as Riva gives them from the start of the stream); the next result starts
/// the next segment. Before the first stream, `GetRivaSpeechRecognitionConfig` is asked once: a
/// server that does not answer it as Riva fails before READY. Riva has no intents or entities.
/// Its confidences are carried: each word's, and the whole transcript's on a final result.
/// Sendable: immutable after init; `checked` and `sequence` are atomic.
public final class RivaService: RecognitionService, @unchecked Sendable {
    public static let streamPath = "/nvidia.riva.asr.RivaSpeechRecognition/StreamingRecognize"
    public static let configPath = "/nvidia.riva.asr.RivaSpeechRecognition/GetRivaSpeechRecognitionConfig"

    private let channel: any GRPCCalling
    private let peer: String
    private let model: String?
    private let metadata: [(String, String)]
    private let timeoutMilliseconds: Int
    private let log: @Sendable (LogLevel, String) -> Void
    private let checked = Atomic<Bool>(false)
    private let sequence = Atomic<Int>(0)

    public init(channel: any GRPCCalling, peer: String, model: String?, metadata: [(String, String)] = [],
                timeoutMilliseconds: Int, log: @escaping @Sendable (LogLevel, String) -> Void) {
        self.channel = channel
        self.peer = peer
        self.model = model
        self.metadata = metadata
        self.timeoutMilliseconds = timeoutMilliseconds
        self.log = log
    }

    public func openStream(config: SLUConfig, cancellation: Cancellation?, handler: @escaping @Sendable (StreamEvent) -> Void)
        throws(SpeechClientError) -> any RecognitionStream {
        if !checked.load(ordering: .acquiring) {
            try checkServer(language: config.languageCode, cancellation: cancellation)
            checked.store(true, ordering: .releasing)
        }
        let id = "riva-\(sequence.add(1, ordering: .relaxed).newValue)-\(SystemRandom.uuid().prefix(8))"
        let relay = RivaRelay(contextId: id, handler: handler)
        let call = try channel.openStreamingCall(path: Self.streamPath, metadata: metadata, cancellation: cancellation) {
            relay.deliver($0)
        }
        relay.attach(call)
        return RivaStream(call: call, relay: relay, language: config.languageCode, model: model,
                          sampleRate: config.sampleRateHertz)
    }

    /// The server answers `GetRivaSpeechRecognitionConfig` (any answer that decodes): it is a
    /// Riva speech recognizer. UNIMPLEMENTED means something else speaks gRPC there. When it
    /// lists its models, a model or language it does not have fails here, before READY, naming
    /// what it offers (as for Wyoming); found at each context's start, it was an API error there.
    private func checkServer(language: String, cancellation: Cancellation?) throws(SpeechClientError) {
        let models: [RivaModel]
        do throws(SpeechClientError) {
            let answer = try channel.unary(path: Self.configPath, metadata: metadata, request: [],
                                           timeoutMilliseconds: timeoutMilliseconds, cancellation: cancellation)
            models = try RivaModel.decodeConfigResponse(answer[...])
            log(.debug, "\(peer) answered GetRivaSpeechRecognitionConfig (\(answer.count) bytes, \(models.count) model(s))")
        } catch {
            guard error.grpcStatus == GRPCStatus.unimplemented else { throw RivaRelay.named(error) }
            throw SpeechClientError(.invalidArgument, "\(peer) is not a Riva speech recognizer: \(error.message)",
                                    grpcStatus: error.grpcStatus)
        }
        if let refusal = RivaModel.refusal(of: models, model: model, language: language, peer: peer) { throw refusal }
    }
}

/// One model a Riva server lists in `RivaSpeechRecognitionConfigResponse.model_config`: its
/// name and its parameters (`language_code` among them).
struct RivaModel: Equatable {
    var name = ""
    var parameters: [String: String] = [:]

    /// At most this many models are read (a hostile answer stays bounded; Riva lists a few).
    static let maxModels = 256

    static func decodeConfigResponse(_ bytes: ArraySlice<UInt8>) throws(SpeechClientError) -> [RivaModel] {
        var r = ProtobufReader(bytes)
        var models: [RivaModel] = []
        while let (field, value) = try r.next() {
            guard field == 1, models.count < maxModels else { continue }  // model_config
            var m = try value.message("model_config")
            var model = RivaModel()
            while let (f, v) = try m.next() {
                if f == 1 { model.name = try v.string("model_name") }
                if f == 2, model.parameters.count < 64 {  // parameters: map<string, string> entries
                    var entry = try v.message("parameters")
                    var key = "", text = ""
                    while let (ef, ev) = try entry.next() {
                        if ef == 1 { key = try ev.string("key") }
                        if ef == 2 { text = try ev.string("value") }
                    }
                    model.parameters[key] = text
                }
            }
            models.append(model)
        }
        return models
    }

    /// Why the server cannot serve `model` (nil: its default) in `language`, or nil when it can
    /// or cannot tell. Judged only on what the server lists: no models listed, or a model
    /// without a `language_code`, is no judgement on the language.
    static func refusal(of models: [RivaModel], model: String?, language: String, peer: String) -> SpeechClientError? {
        guard !models.isEmpty else { return nil }
        func listed() -> String {
            let shown = models.prefix(16).map { m in m.parameters["language_code"].map { "\(m.name) (\($0))" } ?? m.name }
            return shown.joined(separator: ", ") + (models.count > 16 ? ", ..." : "")
        }
        var candidates = models
        if let model {
            candidates = models.filter { $0.name == model }
            if candidates.isEmpty {
                return SpeechClientError(.invalidArgument, "the Riva server \(peer) has no model '\(model)'; it offers: \(listed())")
            }
        }
        // Lenient on purpose: the same primary language ("en" for "en-US") is left to the server,
        // and so is every listing with a code that is not one plain language: NVIDIA's
        // multilingual models say "multi", "es-en-US", "ja-en-JP", which serve en-US too.
        func primary(_ tag: String) -> String { String(tag.split(separator: "-").first ?? Substring(tag)).lowercased() }
        func plain(_ tag: String) -> Bool {
            let parts = tag.split(separator: "-", omittingEmptySubsequences: false)
            guard (1...2).contains(parts.count), (2...3).contains(parts[0].count),
                  parts[0].allSatisfy({ $0.isASCII && $0.isLetter }), primary(tag) != "multi" else { return false }
            // A region (2 letters or 3 digits), not a second language ("es-en").
            return parts.count == 1 || parts[1].count == 3 && parts[1].allSatisfy({ $0.isASCII && $0.isNumber })
                || parts[1].count == 2 && parts[1].allSatisfy({ $0.isASCII && $0.isLetter }) && parts[1].uppercased() == String(parts[1])
        }
        let languages = candidates.compactMap { $0.parameters["language_code"] }
        guard languages.count == candidates.count, languages.allSatisfy(plain),
              !languages.contains(where: { primary($0) == primary(language) }) else { return nil }
        return SpeechClientError(.invalidArgument, "the Riva server \(peer) has no \(model.map { "model '\($0)' for " } ?? "model for ")language '\(language)'; it offers: \(listed())")
    }
}

/// Turns the call's Riva responses into the SLU responses the worker understands, delivers
/// exactly one `.closed`, and numbers the segments (one per final result).
/// Sendable: its mutable state is in `state`, a `Locked`, and `halfClosed`, an atomic;
/// `contextId` and `handler` are immutable.
final class RivaRelay: @unchecked Sendable {
    let contextId: String
    private let handler: @Sendable (StreamEvent) -> Void
    /// `open`: the current segment has had words (an interim result): an empty final ends it;
    /// `openEmpty`: its last interim took them all back. `started`: the call carries a context.
    private let state = Locked<(closed: Bool, segment: Int32, open: Bool, openEmpty: Bool, started: Bool)>((false, 0, false, false, false))
    /// The client half-closed the call (the end of its audio): only then is an OK end the
    /// server's finish. Before it, the call ended under the audio still coming.
    let halfClosed = Atomic<Bool>(false)
    /// The call, to ask at its end whether all of the audio reached the server (weak: the call
    /// holds this relay through its handler until it ends).
    private let call = Locked<WeakCall>(WeakCall())
    final class WeakCall: @unchecked Sendable { weak var call: (any GRPCStreamingCall)? }

    func attach(_ call: any GRPCStreamingCall) {
        let box = WeakCall()
        box.call = call
        self.call.withLock { $0 = box }
    }

    init(contextId: String, handler: @escaping @Sendable (StreamEvent) -> Void) {
        self.contextId = contextId
        self.handler = handler
    }

    /// PERMISSION_DENIED and UNAUTHENTICATED are what a key or header was wrong: auth errors
    /// (not retried), as for Speechly.
    static func named(_ error: SpeechClientError) -> SpeechClientError {
        guard GRPCStatus.isAuthFailure(error) else { return error }
        var e = error
        e.code = .auth
        e.message = "the Riva server refused the request's credentials (see spc_options_add_header): \(error.message)"
        return e
    }

    /// The start went out on the call. Nothing is said for a call already closed: its
    /// `.closed` went first, and the lane that took it is lost (replayed), not started.
    func started() {
        let closed = state.withLock { s -> Bool in
            if !s.closed { s.started = true }
            return s.closed
        }
        if !closed { handler(.response(SLUResponse(audioContext: contextId, segmentId: 0, payload: .started))) }
    }

    func deliver(_ event: GRPCCallEvent) {
        if state.withLock({ $0.closed }) { return }
        switch event {
        case .goingAway:
            handler(.goingAway)
        case .message(let bytes):
            let results: [RivaResult]
            do throws(SpeechClientError) {
                results = try RivaResult.decodeResponse(bytes[...])
            } catch {
                state.withLock { $0.closed = true }
                // What the header promises for a malformed response: INTERNAL, as gRPC's clients
                // assign it; and which message it was (the decoder names only the field).
                var e = error
                e.message = "the Riva server sent a malformed StreamingRecognizeResponse: \(error.message)"
                if e.grpcStatus == nil { e.grpcStatus = GRPCStatus.internal }
                handler(.closed(e))
                return
            }
            for result in RivaResult.joiningInterims(results) {
                // A result without words is passed on only for a segment that had some: an
                // empty interim clears its tentative words, an empty final ends it with none.
                // Skipped, the words Riva took back stayed open, and came back as a final
                // segment when the stream finished; an empty final skipped also took an id.
                let segment = state.withLock { s -> Int32? in
                    let id = s.segment
                    guard !result.words.isEmpty || s.open else { return nil }
                    s.open = !result.isFinal
                    s.openEmpty = s.open && result.words.isEmpty
                    if result.isFinal { s.segment &+= 1 }
                    return id
                }
                guard let segment else { continue }
                let payload: SLUResponse.Payload = result.isFinal
                    ? .finalTranscript(result.words, confidence: result.confidence)
                    : .tentativeTranscript(text: result.transcript, words: result.words)
                var response = SLUResponse(audioContext: contextId, segmentId: segment, payload: payload)
                if result.isFinal && !result.words.isEmpty && result.words.allSatisfy({ $0.endMilliseconds < 0 }) {
                    // A server that gives no word offsets: where the utterance ended is found in
                    // the audio, before what the server had heard.
                    response.heardMilliseconds = result.audioProcessedMilliseconds ?? .max
                }
                handler(.response(response))
            }
        case .closed(let error):
            let (started, emptied) = state.withLock { s -> (Bool, Int32?) in
                s.closed = true
                return (s.started, s.openEmpty ? s.segment : nil)
            }
            if let error {
                handler(.closed(Self.named(error)))
            } else if !started {
                // A call that carried no context yet (a prepared stream a server or proxy let
                // go): no `finished`, which the worker, had it just taken the stream for a
                // context, took as the server ending that context (no error, no more audio
                // sent). Only the end: unused, it is dropped; just taken, it is a loss, replayed.
                handler(.closed(nil))
            } else if !halfClosed.load(ordering: .acquiring) {
                // Status OK before the end of the audio (a server or proxy ending the call):
                // the audio after its last final was never recognised. Lost, as a Speechly
                // stream ended without `finished` is, so it is replayed; taken as the finish,
                // it ended the user's context with no error and every later word unsent.
                handler(.closed(SpeechClientError(.network, "the Riva server ended the call (status OK) before the end of its audio",
                                                  grpcStatus: GRPCStatus.unavailable)))
            } else if call.withLock({ $0.call?.endedWithRequestQueued }) == true {
                // Status OK after the half-close, with audio still queued behind flow control (a
                // replica, or a proxy, ending the call early): the server never read it. Taken
                // as the finish, the context ended with no error and those words unheard.
                handler(.closed(SpeechClientError(.network, "the Riva server ended the call (status OK) before taking all of its audio",
                                                  grpcStatus: GRPCStatus.unavailable)))
            } else {
                // A segment whose words were all taken back, never finalised: it ends empty (the
                // application saw it; left open, it would end with no final at all).
                if let emptied {
                    handler(.response(SLUResponse(audioContext: contextId, segmentId: emptied, payload: .finalTranscript([], confidence: -1))))
                }
                handler(.response(SLUResponse(audioContext: contextId, segmentId: 0, payload: .finished(errorCode: nil, errorMessage: nil))))
                handler(.closed(nil))
            }
        }
    }
}

/// One `StreamingRecognitionResult`, its first alternative as words.
public struct RivaResult: Equatable {
    public var isFinal = false
    public var transcript = ""
    public var words: [SLUWord] = []
    /// The alternative's confidence, 0...1; -1 when absent or out of range.
    public var confidence: Float = -1
    /// The audio the server had processed (`audio_processed`), ms from the stream's start; nil
    /// when absent, negative or not a number.
    public var audioProcessedMilliseconds: Int32?
    /// It had an alternative (a transcript, perhaps empty); without one it says nothing of words.
    public var hasAlternative = false

    /// The results of one response with each run of interim ones joined into one: Riva sends
    /// the stable start of a hypothesis and its unstable rest as two interim results of one
    /// response ("turn on the", " kitchen lights"), which NVIDIA's clients join. Taken one by
    /// one, each replaced the segment's tentative words, and only the rest was kept (delivered
    /// as final too, where a failure or a free ends a segment with its tentative words).
    static func joiningInterims(_ results: [RivaResult]) -> [RivaResult] {
        guard results.count > 1 else { return results }
        var joined: [RivaResult] = []
        var run = 0  // interim results at the end of `results[..<k]` not joined yet
        for (k, result) in results.enumerated() {
            if result.isFinal {
                if run > 0 { joined.append(join(results[(k - run)..<k])) }
                run = 0
                joined.append(result)
            } else {
                run += 1
            }
        }
        if run > 0 { joined.append(join(results[(results.count - run)...])) }
        return joined
    }

    /// One run of interim results as one. Joined and split once: re-split at each piece, a
    /// response of many pieces (whitespace costs no word bound) cost time quadratic in its size,
    /// on the event loop every client shares.
    private static func join(_ run: ArraySlice<RivaResult>) -> RivaResult {
        guard run.count > 1, var out = run.first else { return run.first ?? RivaResult() }
        out.transcript = run.map(\.transcript).joined()
        out.confidence = -1  // a confidence of one piece is not the joined one's
        let timed = run.contains { $0.words.contains { $0.startMilliseconds >= 0 } }
        // Words without times are the transcript's own: split once, so a word cut between two
        // pieces is one word. Timed ones keep their times, numbered on.
        if !timed, let words = SLUWord.words(out.transcript) {
            out.words = words
            return out
        }
        out.words = []
        for piece in run {
            for w in piece.words {
                var w = w
                w.index = Int32(clamping: out.words.count)
                out.words.append(w)
            }
        }
        return out
    }

    /// The results of one `StreamingRecognizeResponse` (public for the fuzz target).
    public static func decodeResponse(_ bytes: ArraySlice<UInt8>) throws(SpeechClientError) -> [RivaResult] {
        var r = ProtobufReader(bytes)
        var results: [RivaResult] = []
        // One word bound for the whole response: per result, 128 results of 16,384 words each
        // (one 4 MiB message) still made two million words before the segments refused them.
        var wordsLeft = SegmentAssembler.maxWordsPerSegment
        var seen = 0
        while let (field, value) = try r.next() {
            guard field == 1 else { continue }  // results; id (100) and the rest are not used
            // Bounded as decoded (see SLUResponse.decode): each result becomes a segment. Those
            // skipped below count too.
            guard seen < SegmentAssembler.maxOpenSegments else {
                throw SpeechClientError(.parse, "the server sent more than \(SegmentAssembler.maxOpenSegments) results in one response")
            }
            seen += 1
            let result = try decodeResult(try value.message("results"), wordsLeft: &wordsLeft)
            // A result without an alternative (Riva's voice-activity `pipeline_states` alone)
            // carries no transcript: skipped, as NVIDIA's clients skip it. Taken as one, it
            // cleared the open segment's tentative words, which then ended empty.
            if result.hasAlternative { results.append(result) }
        }
        return results
    }

    private static let tooManyWords = SpeechClientError(.parse, "the server sent a response of more than \(SegmentAssembler.maxWordsPerSegment) words")

    private static func decodeResult(_ reader: ProtobufReader, wordsLeft: inout Int) throws(SpeechClientError) -> RivaResult {
        var m = reader
        var result = RivaResult()
        var first = true
        while let (field, value) = try m.next() {
            switch field {
            case 1 where first:
                first = false
                result.hasAlternative = true
                var alt = try value.message("alternatives")
                var timed: [(String, Int32, Int32, Float)] = []
                // proto3 leaves a 0 off the wire: a confidence not there is reported as none (-1),
                // a true 0 included (Riva servers that compute none send nothing).
                while let (f, v) = try alt.next() {
                    if f == 1 { result.transcript = try v.string("transcript") }
                    if f == 2 { result.confidence = SLUWord.confidence(try v.float("confidence")) }
                    if f == 3 {
                        var w = try v.message("words")
                        var word = ("", Int32(0), Int32(0), Float(-1))  // proto3: 0 is not on the wire
                        while let (wf, wv) = try w.next() {
                            switch wf {
                            case 1: word.1 = try wv.int32("start_time")
                            case 2: word.2 = try wv.int32("end_time")
                            case 3: word.0 = try wv.string("word")
                            case 4: word.3 = SLUWord.confidence(try wv.float("confidence"))
                            default: break
                            }
                        }
                        guard timed.count < wordsLeft else { throw tooManyWords }
                        timed.append(word)
                    }
                }
                // Words with their offsets when the server gives them (final results); else
                // the transcript's words, times unknown (interim results carry none). A word
                // of Riva's may hold several (a phrase): each gets its times.
                if timed.isEmpty {
                    guard let words = SLUWord.words(result.transcript, atMost: wordsLeft) else { throw tooManyWords }
                    result.words = words
                } else {
                    for t in timed {
                        guard let words = SLUWord.words(t.0, atMost: wordsLeft - result.words.count,
                                                        firstIndex: result.words.count) else { throw tooManyWords }
                        result.words += words.map {
                            SLUWord(text: $0.text, index: $0.index, startMilliseconds: t.1, endMilliseconds: t.2, confidence: t.3)
                        }
                    }
                }
                wordsLeft -= result.words.count
            case 2:
                result.isFinal = try value.uint64("is_final") != 0
            case 6:
                let ms = Double(try value.float("audio_processed")) * 1_000
                result.audioProcessedMilliseconds = ms.isFinite && ms >= 0 ? Int32(min(ms, Double(Int32.max - 1))) : nil
            default:
                break
            }
        }
        return result
    }
}

/// A `RecognitionStream` over one StreamingRecognize call.
/// Sendable: immutable after init; `relay.halfClosed` is atomic and `call` is a Sendable `GRPCStreamingCall`.
final class RivaStream: RecognitionStream, @unchecked Sendable {
    /// Its `started` is its own (the protocol acknowledges no start).
    var serverAcknowledgesStart: Bool { false }
    private let call: any GRPCStreamingCall
    private let relay: RivaRelay
    private let language: String
    private let model: String?
    private let sampleRate: Int32

    init(call: any GRPCStreamingCall, relay: RivaRelay, language: String, model: String?, sampleRate: Int32) {
        self.call = call
        self.relay = relay
        self.language = language
        self.model = model
        self.sampleRate = sampleRate
    }

    func send(_ request: SLURequest) {
        switch request {
        case .start:
            var w = ProtobufWriter()
            w.message(1) { streaming in          // streaming_config
                streaming.message(1) { c in      // config
                    c.int32(1, 1)                // encoding LINEAR_PCM
                    c.int32(2, sampleRate)       // sample_rate_hertz
                    c.string(3, language)        // language_code
                    c.int32(4, 1)                // max_alternatives
                    c.int32(7, 1)                // audio_channel_count
                    c.int32(8, 1)                // enable_word_time_offsets
                    c.int32(11, 1)               // enable_automatic_punctuation
                    if let model { c.string(13, model) }
                }
                streaming.int32(2, 1)            // interim_results
            }
            call.send(w.bytes)
            // Riva acknowledges nothing before results: the call being open is the start.
            relay.started()
        case .audio(let samples):
            var w = ProtobufWriter()
            w.int16LittleEndian(2, samples)      // audio_content
            call.send(w.bytes)
        case .config, .stop, .rttResponse:
            break                                // the end of the audio is the half-close
        }
    }

    func finish() {
        if !relay.halfClosed.exchange(true, ordering: .acquiringAndReleasing) { call.halfClose() }
    }

    func cancel() { call.cancel() }
    func retireConnection() { call.retireConnection() }
    var backlogBytes: Int { call.queuedSendBytes }
    func notifyWhenBacklog(atMost bytes: Int, _ body: @escaping @Sendable () -> Void) -> Bool {
        call.notifyWhenQueued(atMost: bytes, body)
    }
}
