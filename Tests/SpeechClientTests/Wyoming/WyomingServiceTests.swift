import Foundation
import Testing
@testable import SpeechClient

/// The Wyoming backend through the whole client against a scripted Wyoming server
/// (Tests/peers/wyoming_fault_server.py, an independent implementation of the framing). Its
/// transcript is "<N> bytes": the audio bytes it received for the transcription, so every test
/// checks that each pushed sample arrived exactly once, replays included.
@Suite(.serialized) struct WyomingServiceTests {
    static let oneSecond = [Int16](repeating: 300, count: 16_000)

    func options(_ url: String, connectTimeoutMs: Int = 5000) throws -> ClientOptions {
        var o = ClientOptions()
        try o.setServer(url)
        try o.setAudio(.push(sampleRate: 16_000, channels: 1))
        o.connectTimeoutMilliseconds = connectTimeoutMs
        o.reconnectInitialDelayMilliseconds = 20
        o.deviceId = "00000000-0000-4000-8000-000000000000"
        return o
    }

    /// Starts a context, pushes `seconds` of audio at up to 10x real time, ends it, waits.
    func transcribe(_ o: ClientOptions, seconds: Int = 3, log: EventLog, errors: Locked<[SpeechClientError]>? = nil) throws {
        let client = try Client(options: o) { client, event in
            if case .error(let e) = event { errors?.withLock { $0.append(e) } }
            log.handler(client, event)
        }
        defer { try? client.close() }
        try client.start()
        for _ in 0..<(seconds * 10) {
            Self.oneSecond[0..<1600].withUnsafeBufferPointer { try? client.pushAudio($0) }
            usleep(10_000)
        }
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 20_000))
    }

    func peer(_ scenario: String, _ more: [String] = []) throws -> PeerProcess {
        try PeerProcess(script: "wyoming_fault_server.py", arguments: ["--scenario", scenario] + more)
    }

    @Test func everySampleArrivesOnceAndTheTranscriptIsOneFinalSegment() throws {
        let server = try peer("Normal")
        defer { server.stop() }
        let log = EventLog(recordStates: true)
        try transcribe(try options("wyoming://127.0.0.1:\(server.port)"), log: log)
        let lines = log.lines.filter { !$0.hasPrefix("state") }
        #expect(lines.count == 3, "\(log.lines)")
        #expect(lines.first?.hasPrefix("start wyoming-") == true)
        #expect(lines.dropFirst().first == "segment final 96000 bytes")
        #expect(lines.last?.hasPrefix("stop wyoming-") == true)
        #expect(log.lines.prefix(2) == ["state connecting", "state ready"])
    }

    @Test func aUnixSocketServesTheSame() throws {
        let path = NSTemporaryDirectory() + "spc-wyoming-\(getpid()).sock"
        let server = try peer("Normal", ["--unix", path])
        defer { server.stop(); unlink(path) }
        let log = EventLog()
        try transcribe(try options("wyoming+unix://" + path), seconds: 1, log: log)
        #expect(log.lines.contains("segment final 32000 bytes"), "\(log.lines)")
    }

    @Test func streamedPartialsAreTentativeUpdatesThenOneFinal() throws {
        let server = try peer("Streaming")
        defer { server.stop() }
        let log = EventLog()
        try transcribe(try options("wyoming://127.0.0.1:\(server.port)"), log: log)
        let segments = log.lines.filter { $0.hasPrefix("segment") }
        #expect(segments.count >= 3, "\(log.lines)")
        #expect(segments.dropLast().allSatisfy { $0.hasPrefix("segment tentative part1") })
        #expect(segments.last?.hasPrefix("segment final part1") == true)
        #expect(segments.last?.hasSuffix(" 96000 bytes") == true)
    }

    /// A server that takes the audio and never answers audio-stop: the stream ends with a
    /// timeout error naming the server once the result timeout passes, not never.
    @Test func aTranscriptThatNeverComesIsATimeout() throws {
        let server = try peer("NoTranscript")
        defer { server.stop() }
        let service = WyomingService(server: try ServerURL(parsing: "wyoming://127.0.0.1:\(server.port)"),
                                     connectTimeoutMilliseconds: 3000, resultTimeoutMilliseconds: 700, log: { _, _ in })
        let closed = Locked<[SpeechClientError?]>([])
        let stream = try service.openStream(config: SLUConfig(languageCode: "en-US"), cancellation: nil) { event in
            if case .closed(let error) = event { closed.withLock { $0.append(error) } }
        }
        stream.send(.start(appId: "", options: []))
        stream.send(.audio(Self.oneSecond))
        let stopped = Clock.monotonicNanos()
        stream.send(.stop)
        while closed.withLock({ $0.isEmpty }) && Clock.monotonicNanos() - stopped < 5_000_000_000 { usleep(10_000) }
        let tookMs = (Clock.monotonicNanos() - stopped) / 1_000_000
        let error = closed.withLock { $0.first } ?? nil
        #expect(error?.code == .timeout, "\(String(describing: error))")
        #expect(error?.message.contains("sent no transcript") == true && error?.message.contains("127.0.0.1") == true)
        #expect(tookMs >= 600 && tookMs < 3000, "\(tookMs) ms")
        stream.cancel()
    }

    /// A stream to the peer, and the error it ends with (nil: a clean end).
    func streamRecordingItsEnd(_ server: PeerProcess, resultTimeoutMilliseconds: Int) throws
        -> (stream: any RecognitionStream, closed: OneShot<SpeechClientError?>) {
        let service = WyomingService(server: try ServerURL(parsing: "wyoming://127.0.0.1:\(server.port)"),
                                     connectTimeoutMilliseconds: 3000, resultTimeoutMilliseconds: resultTimeoutMilliseconds, log: { _, _ in })
        let closed = OneShot<SpeechClientError?>()
        let stream = try service.openStream(config: SLUConfig(languageCode: "en-US"), cancellation: nil) { event in
            if case .closed(let error) = event { closed.set(error) }
        }
        return (stream, closed)
    }

    /// How a stream of one second of audio to the fault server's `scenario` ends (nil: cleanly).
    func endOfOneSecondStream(to scenario: String) throws -> SpeechClientError? {
        let server = try peer(scenario)
        defer { server.stop() }
        let (stream, closed) = try streamRecordingItsEnd(server, resultTimeoutMilliseconds: 3000)
        defer { stream.cancel() }
        stream.send(.start(appId: "", options: []))
        stream.send(.audio(Self.oneSecond))
        stream.send(.stop)
        return closed.wait(untilMonotonicNanos: Clock.monotonicNanos() + 5_000_000_000) ?? nil
    }

    /// A server streaming transcript chunks that make no words (blanks) without end: the text
    /// is bounded as a segment is, and the stream ends with a parse error naming the bound. The
    /// text grew for as long as the stream lasted (the segment's bounds never saw it).
    @Test func aStreamedTranscriptPastASegmentsBoundEndsTheStream() throws {
        let error = try endOfOneSecondStream(to: "ChunkFlood")
        #expect(error?.code == .parse, "\(String(describing: error))")
        #expect(error?.message.contains("over 64 KiB") == true, "\(String(describing: error))")
    }

    /// A final transcript of more words than a segment holds (20,000 one-letter words: 40 KB, so
    /// within the bound on its text) ends the stream with a parse error naming the bound; the
    /// words are counted before they are made, not after.
    @Test func aTranscriptOfMoreWordsThanASegmentHoldsEndsTheStream() throws {
        let error = try endOfOneSecondStream(to: "ManyWords")
        #expect(error?.code == .parse, "\(String(describing: error))")
        #expect(error?.message.contains("more than \(SegmentAssembler.maxWordsPerSegment) words") == true, "\(String(describing: error))")
    }

    /// A wake word's name as the service gives it goes into the client's events and logs: a
    /// service's 100 KB name arrives cut to 256 bytes ("..." said so).
    @Test func aWakeWordsNameFromTheServiceIsCut() throws {
        let server = try peer("WakeLongName")
        defer { server.stop() }
        let detected = OneShot<String>()
        let wake = try WyomingWakeStream(server: try ServerURL(parsing: "wyoming://127.0.0.1:\(server.port)"), name: "hey_fault",
                                         origin: 0, connectTimeoutMilliseconds: 3000, cancellation: nil, applicationDriven: false) { event in
            if case .detection(let name, _) = event { detected.set(name) }
        }
        defer { wake.close() }
        #expect(wake.model == "hey_fault")
        wake.send(Array(Self.oneSecond[0..<1600]))
        let name = detected.wait(untilMonotonicNanos: Clock.monotonicNanos() + 5_000_000_000)
        #expect(name?.hasPrefix("hey_faultxxx") == true && name?.hasSuffix("x...") == true, "\(String(describing: name?.prefix(40)))")
        #expect(name?.utf8.count == 256 + 3)
    }

    /// The answers to a server's pings count in the send backlog like any bytes sent: once the
    /// server has read them all, nothing is waiting. Uncounted, each reply written took its
    /// size off the backlog (here 8 x 64 KiB below zero), and a stall check then waited for
    /// that much more audio.
    @Test func answersToPingsKeepTheBacklogTrue() throws {
        let server = try peer("Pings")
        defer { server.stop() }
        let service = WyomingService(server: try ServerURL(parsing: "wyoming://127.0.0.1:\(server.port)"),
                                     connectTimeoutMilliseconds: 3000, resultTimeoutMilliseconds: 3000, log: { _, _ in })
        let answered = OneShot<Bool>()
        let stream = try service.openStream(config: SLUConfig(languageCode: "en-US"), cancellation: nil) { event in
            if case .response(let r) = event, case .tentativeTranscript(let text, _) = r.payload, text == "pongs8" { answered.set(true) }
        }
        defer { stream.cancel() }
        stream.send(.start(appId: "", options: []))
        // The server says "pongs8" once it has read the 8 answers.
        #expect(answered.wait(untilMonotonicNanos: Clock.monotonicNanos() + 5_000_000_000) == true)
        #expect(stream.backlogBytes == 0)
    }

    /// A server that asks (pings) and never reads the answers: past 8 MiB unsent the connection
    /// fails, naming that, instead of holding the answers without limit.
    @Test func answersAServerNeverReadsFailTheConnectionPastTheBound() throws {
        let server = try peer("PingsUnread")
        defer { server.stop() }
        let (stream, closed) = try streamRecordingItsEnd(server, resultTimeoutMilliseconds: 30_000)
        defer { stream.cancel() }
        stream.send(.start(appId: "", options: []))
        let error = closed.wait(untilMonotonicNanos: Clock.monotonicNanos() + 20_000_000_000) ?? nil
        #expect(error?.code == .network, "\(String(describing: error))")
        #expect(error?.message.contains("does not read what is sent to it") == true, "\(String(describing: error))")
    }

    /// A stream opened ahead (prepared) and let go without a transcription (idle, suspend) is
    /// closed by `finish`: nothing else would end it, and its connection held it.
    @Test func aStreamFinishedBeforeItStartedIsClosedAndFreed() throws {
        let server = try peer("Normal")
        defer { server.stop() }
        let service = WyomingService(server: try ServerURL(parsing: "wyoming://127.0.0.1:\(server.port)"),
                                     connectTimeoutMilliseconds: 3000, resultTimeoutMilliseconds: 700, log: { _, _ in })
        weak var weakStream: AnyObject?
        do {
            let stream = try service.openStream(config: SLUConfig(languageCode: "en-US"), cancellation: nil) { _ in }
            weakStream = stream
            stream.finish()
        }
        _ = try EventLoop.shared().executeAndWait { 0 }
        #expect(weakStream == nil)
    }

    @Test func aConnectionLostMidContextIsReplayedOnANewOne() throws {
        let server = try peer("CloseMidStream")
        defer { server.stop() }
        let log = EventLog()
        try transcribe(try options("wyoming://127.0.0.1:\(server.port)"), log: log)
        // The first connection closed after 1 s; the second got the whole context again.
        #expect(log.lines.filter { $0.hasPrefix("segment") } == ["segment final 96000 bytes"], "\(log.lines)")
        #expect(!log.lines.contains { $0.hasPrefix("error") })
        #expect(server.log.contains("closing after"), "the scripted loss never happened: \(server.log)")
    }

    /// A server whose transcription fails each time, 6 s after the audio's end, with no word
    /// (wyoming-faster-whisper's handler closes the connection on an exception and sends no
    /// error event). The stream's `started` is the client's own, so 6 s of it are no sign of
    /// the server serving it: the losses count, and after the one attempt allowed the context
    /// fails naming its audio. Before, each loss counted as the first attempt: retried forever,
    /// the context never ended. A streaming server's partial words while the audio came are no
    /// answer after the end of the audio either.
    @Test(arguments: ["FailAfterStop", "StreamingFailAfterStop"])
    func aTranscriptionFailingEachTimeUsesUpTheAttempts(scenario: String) throws {
        let server = try peer(scenario, ["--close-delay", "6"])
        defer { server.stop() }
        var o = try options("wyoming://127.0.0.1:\(server.port)")
        o.reconnectAttempts = 1
        let errors = Locked<[SpeechClientError]>([])
        let client = try Client(options: o) { _, event in
            if case .error(let e) = event { errors.withLock { $0.append(e) } }
        }
        defer { try? client.close() }
        try client.start()
        Self.oneSecond.withUnsafeBufferPointer { try? client.pushAudio($0) }
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 30_000), "still retrying: \(server.log.components(separatedBy: "closing").count - 1) failed transcriptions")
        let seen = errors.withLock { $0 }
        #expect(seen.count == 1, "\(seen.map(\.message))")
        #expect(seen.first?.message.contains("reconnection failed after 1 attempt(s)") == true, "\(seen.map(\.message))")
        #expect(seen.first?.message.contains("the last 1.0 s of audio, from 0.0 s into the context, were not transcribed") == true, "\(seen.map(\.message))")
    }

    @Test func unknownEventsAreIgnored() throws {
        let server = try peer("UnknownEvents")
        defer { server.stop() }
        let log = EventLog()
        try transcribe(try options("wyoming://127.0.0.1:\(server.port)"), seconds: 1, log: log)
        #expect(log.lines.contains("segment final 32000 bytes"), "\(log.lines)")
    }

    @Test func textThatIsNotUTF8IsReplacedNotFatal() throws {
        let server = try peer("NotUTF8")
        defer { server.stop() }
        let log = EventLog()
        try transcribe(try options("wyoming://127.0.0.1:\(server.port)"), seconds: 1, log: log)
        let final = log.lines.first { $0.hasPrefix("segment final") }
        #expect(final?.contains("\u{FFFD}") == true && final?.hasSuffix("32000 bytes") == true, "\(log.lines)")
    }

    @Test func anErrorEventFailsTheContextNamingIt() throws {
        let server = try peer("Error")
        defer { server.stop() }
        let errors = Locked<[SpeechClientError]>([])
        let client = try Client(options: try options("wyoming://127.0.0.1:\(server.port)")) { _, event in
            if case .error(let e) = event { errors.withLock { $0.append(e) } }
        }
        defer { try? client.close() }
        try client.start()
        Self.oneSecond.withUnsafeBufferPointer { try? client.pushAudio($0) }
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000))
        let seen = errors.withLock { $0 }
        #expect(seen.count == 1)
        #expect(seen.first?.code == .api)
        #expect(seen.first?.message.contains("scripted failure: recognizer unavailable") == true)
        #expect(seen.first?.message.contains("scripted-error") == true)
    }

    /// A long context on several streams (a 2 s budget): the first stream's transcription
    /// fails with an error event 3 s after its audio-stop, when the later streams have already
    /// been transcribed and their transcripts wait behind it. Those transcripts are delivered,
    /// then the error and the stop. Before, the error dropped them with the context: 0 of the
    /// 6 s of audio came back.
    @Test func anErrorEventOnOneStreamKeepsTheTranscriptsOfTheLaterOnes() throws {
        let server = try peer("Error", ["--error-count", "1", "--error-delay", "3"])
        defer { server.stop() }
        var o = try options("wyoming://127.0.0.1:\(server.port)")
        o.streamBudgetBytes = 64_000
        let log = EventLog()
        let errors = Locked<[SpeechClientError]>([])
        try transcribe(o, seconds: 6, log: log, errors: errors)
        let lines = log.lines
        let finals = lines.filter { $0.hasPrefix("segment final") }
        let bytes = finals.compactMap { Int($0.split(separator: " ")[2]) }
        #expect(finals.count >= 2 && bytes.count == finals.count, "\(lines)")
        // Each stream's audio once; the failed first stream's (about 2 s) is all that is missing.
        let missing = 6 * 32_000 - bytes.reduce(0, +)
        #expect(missing > 0 && missing <= 64_000, "\(lines)")
        let ends = lines.filter { !$0.hasPrefix("segment") }.map { $0.split(separator: " ")[0] }
        #expect(ends == ["start", "error", "stop"], "\(lines)")
        // The error names the server's words and the audio they cost.
        let error = errors.withLock { $0 }.first?.message ?? ""
        #expect(error.contains("scripted failure: recognizer unavailable") && error.contains("the audio from 0.0 s to \(SpeechAudio.secondsText(samples: missing / 2)) s into the context was not transcribed"), "\(error)")
        #expect((lines.firstIndex { $0.hasPrefix("error") } ?? -1) > (lines.lastIndex { $0.hasPrefix("segment final") } ?? Int.max))
    }

    /// A server with its own endpointing sends a transcript at each end of speech while the
    /// audio goes on, and nothing at audio-stop when no speech came since. Eight utterances of
    /// 1 s (utterance k: the constant value 1000 + k), 1 s apart, pushed at about 10x real time:
    /// each comes back once, in order, each as a final segment of its own, and the context ends
    /// at once, not after the result timeout. Before, the first transcript ended the context:
    /// one utterance of eight.
    @Test func aServerThatEndsUtterancesByItselfLosesNoneAndRepeatsNone() throws {
        let run = try runUtterances("Endpointing", count: 8, silenceChunks: 10, waitMilliseconds: 20_000)
        expectEachUtteranceOnce(run, count: 8)
        let (lines, seconds) = (run.lines, run.seconds)
        let finals = lines.filter { $0.hasPrefix("segment final") }
        // A segment per utterance; the audio each carried, once (this server says nothing of its
        // endpointing, so no move replays; the silence after the last utterance on a stream is
        // no transcript's).
        #expect(finals.count == 8, "\(lines)")
        let bytes = finals.compactMap { Int($0.split(separator: " ")[2]) }.reduce(0, +)
        #expect(bytes <= 16 * 32_000 && bytes >= 8 * 32_000, "\(bytes) bytes in \(lines)")
        #expect(seconds < 10, "\(seconds) s: the end waited for a transcript that was never coming")
    }

    /// A server with its own voice detection says nothing at audio-stop when it heard no speech.
    /// A client that had not yet seen it end an utterance sent no describe then: the context
    /// (silence only: a cough opened it) waited for the finish timeout (60 s), was replayed, and
    /// failed minutes later as not transcribed. It ends within the describe probe now.
    @Test func aContextWithoutSpeechEndsAgainstAServerWithItsOwnVoiceDetection() throws {
        let server = try peer("Endpointing")
        defer { server.stop() }
        let log = EventLog()
        let client = try Client(options: try options("wyoming://127.0.0.1:\(server.port)"), handler: log.handler)
        defer { try? client.close() }
        let t0 = Clock.monotonicNanos()
        try client.start()
        let silence = [Int16](repeating: 0, count: 1600)
        for _ in 0..<20 { silence.withUnsafeBufferPointer { try? client.pushAudio($0) } }  // 2 s
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 20_000), "\(log.lines)\n\(server.log)")
        let seconds = Double(Clock.monotonicNanos() - t0) / 1e9
        #expect(log.lines.map { $0.split(separator: " ")[0] } == ["start", "stop"], "\(log.lines)")
        #expect(seconds < Double(WyomingStream.describeProbeMilliseconds) / 1000 + 3, "\(seconds) s")
    }

    /// A server that takes one utterance per connection (as wyoming-faster-whisper with
    /// --vad-endpointing): its transcript comes 0.4 s after its end of speech, by when the
    /// client has pushed about 4 s more (10x real time), which it ignores, and audio-stop closes
    /// the connection. The next stream starts from the pause where the server ended the
    /// utterance, replayed: six utterances of 1 s, 0.6 s apart, each once and in order. Moved
    /// at the next pause instead, the utterances sent meanwhile were lost.
    @Test func aServerTakingOneUtterancePerConnectionLosesNoneSentAfterIt() throws {
        let run = try runUtterances("EndpointOnce", ["--endpoint-delay", "0.4"], count: 6, silenceChunks: 6)
        expectEachUtteranceOnce(run, count: 6)
    }

    /// The same server, its transcript 1 s after its end of speech, and four utterances pushed at
    /// once and ended: every transcript comes after the stream's audio-stop. The server says it
    /// endpoints, so the first covers only its first utterance, and the rest of the stream's
    /// audio goes to a new stream from the pause, and so on. Before, a transcript after
    /// audio-stop counted as the answer to all of it: one utterance of four, and no error.
    @Test func aServerTakingOneUtterancePerConnectionLosesNoneOfAudioSentAhead() throws {
        let run = try runUtterances("EndpointOnce", ["--endpoint-delay", "1"], count: 4, silenceChunks: 6, paced: false)
        expectEachUtteranceOnce(run, count: 4)
    }

    /// A server taking one utterance per connection that does not say so (its info says
    /// `requires_external_vad: true`): its first stream's transcript moved the context at the
    /// next pause, and what the client sent between the server's end of speech and that pause
    /// went nowhere. Learnt when the connection closes at audio-stop with nothing more, that
    /// audio is sent again on a new stream, from the pause where the server ended the utterance.
    @Test func aServerTakingOneUtterancePerConnectionWithoutSayingSoLosesNone() throws {
        let run = try runUtterances("EndpointOnce", ["--endpoint-delay", "0.4", "--requires-external-vad", "true"], count: 6, silenceChunks: 6)
        expectEachUtteranceOnce(run, count: 6)
    }

    /// A server with its own endpointing, its connection lost right after its first
    /// transcript: the new stream replays the audio from the pause that ended that utterance,
    /// not from the stream's start (Wyoming words have no times, so the lane's floor never
    /// rose, and the utterance already delivered came twice).
    @Test func aStreamLostAfterATranscriptReplaysOnlyWhatFollowsIt() throws {
        let run = try runUtterances("Endpointing", ["--reset-after-transcripts", "1"], count: 4, silenceChunks: 10)
        #expect(run.serverLog.contains("reset after 1 transcript"), "\(run.serverLog)")
        expectEachUtteranceOnce(run, count: 4)
    }

    /// The same with the audio sent ahead (a file, or pushed faster than the server works): the
    /// transcripts come after the client's audio-stop, and the connection is lost after the
    /// fourth. Those transcripts said nothing of where their utterances ended (Wyoming words
    /// have no times, and only an end of speech before audio-stop was located), so the new
    /// stream replayed the whole stream and utterances 1-4 came twice.
    @Test func aStreamLostAfterTranscriptsThatFollowedItsStopReplaysOnlyWhatFollowsThem() throws {
        let run = try runUtterances("Endpointing", ["--endpoint-delay", "0.2", "--reset-after-transcripts", "4"],
                                    count: 6, silenceChunks: 10, paced: false)
        #expect(run.serverLog.contains("reset after 4 transcript"), "\(run.serverLog)")
        expectEachUtteranceOnce(run, count: 6)
    }

    /// A server taking one utterance per connection, its connection reset right after its
    /// transcript: the stream carried nothing more than that utterance (it ended at the pause),
    /// so its loss is no loss. With no reconnection allowed, the context goes on; before, it
    /// failed, a stream opened to replay nothing.
    @Test func aStreamLostAfterItsOnlyUtteranceCostsNoReconnection() throws {
        let run = try runUtterances("EndpointOnce", ["--reset-after-transcripts", "1"], count: 4, silenceChunks: 6) { $0.reconnectAttempts = 0 }
        #expect(run.serverLog.contains("reset after 1 transcript"), "\(run.serverLog)")
        expectEachUtteranceOnce(run, count: 4)
    }

    /// A server that says it endpoints (`requires_external_vad: false`) but transcribes all it
    /// is sent: at its first transcript (0.4 s after its end of speech, the client pushing at
    /// 10x) the context moves to a new stream replaying from the pause, and the old stream's
    /// later transcripts are of that same audio: dropped, not delivered twice.
    @Test func aServerSayingItEndpointsThatTranscribesAllRepeatsNone() throws {
        let run = try runUtterances("Endpointing", ["--endpoint-delay", "0.4", "--requires-external-vad", "false"], count: 6, silenceChunks: 6)
        expectEachUtteranceOnce(run, count: 6)
    }

    /// What a service logs while the client is being made (a stream prepared on init) reaches
    /// the application once it can: the line saying the server ends utterances by itself was lost.
    @Test func whatTheServiceLogsWhilePreparingOnInitIsDelivered() throws {
        let server = try peer("EndpointOnce")
        defer { server.stop() }
        var o = try options("wyoming://127.0.0.1:\(server.port)")
        o.prepareOnInit = true
        o.logLevel = .info
        let line = "ends utterances by itself (its info says requires_external_vad: false)"
        let lock = ConditionLock()
        nonisolated(unsafe) var logs: [String] = []  // under `lock`
        let client = try Client(options: o) { _, event in
            guard case .log(_, let message) = event else { return }
            lock.withLock {
                logs.append(message)
                lock.broadcast()
            }
        }
        defer { try? client.close() }
        // Woken by each line, until the one looked for or 5 s.
        let deadline = Clock.monotonicNanos() + 5_000_000_000
        let found = lock.withLock { () -> Bool in
            while !logs.contains(where: { $0.contains(line) }) {
                if !lock.wait(untilMonotonicNanos: deadline) { return logs.contains { $0.contains(line) } }
            }
            return true
        }
        #expect(found, "\(lock.withLock { logs })")
    }

    /// A context of `count` utterances (`pushUtterances`) against the scripted server in
    /// `scenario`, ended and waited for (up to `waitMilliseconds`): the event lines, the
    /// server's log, and the seconds from the start to idle.
    func runUtterances(_ scenario: String, _ more: [String] = [], count: Int, silenceChunks: Int, paced: Bool = true,
                       waitMilliseconds: Int = 30_000,
                       configure: (inout ClientOptions) -> Void = { _ in }) throws -> (lines: [String], serverLog: String, seconds: Double) {
        let server = try peer(scenario, more)
        defer { server.stop() }
        let log = EventLog()
        var o = try options("wyoming://127.0.0.1:\(server.port)")
        configure(&o)
        let client = try Client(options: o, handler: log.handler)
        defer { try? client.close() }
        let t0 = Clock.monotonicNanos()
        try client.start()
        Self.pushUtterances(client, count, silenceChunks: silenceChunks, paced: paced)
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: waitMilliseconds))
        return (log.lines, server.log, Double(Clock.monotonicNanos() - t0) / 1e9)
    }

    /// Each of the `count` utterances heard once, in order, and the context's start and stop
    /// with nothing else (no error) between.
    func expectEachUtteranceOnce(_ run: (lines: [String], serverLog: String, seconds: Double), count: Int) {
        #expect(Self.heard(run.lines) == (1...count).map { "v\(1000 + $0)" }, "\(run.lines)\n\(run.serverLog)")
        #expect(run.lines.filter { !$0.hasPrefix("segment") }.map { $0.split(separator: " ")[0] } == ["start", "stop"], "\(run.lines)")
    }

    /// Utterance k (1-based): 1 s of the constant value 1000 + k, then `silenceChunks` of 100 ms
    /// of silence; pushed at about 10x real time, or at once.
    static func pushUtterances(_ client: Client, _ count: Int, silenceChunks: Int, paced: Bool = true) {
        let silence = [Int16](repeating: 0, count: 1600)
        for k in 1...count {
            let speech = [Int16](repeating: Int16(1000 + k), count: 1600)
            for chunk in Array(repeating: speech, count: 10) + Array(repeating: silence, count: silenceChunks) {
                chunk.withUnsafeBufferPointer { try? client.pushAudio($0) }
                if paced { usleep(10_000) }
            }
        }
    }

    /// The utterances the scripted server named in the final segments ("v1001", ...), in order.
    static func heard(_ lines: [String]) -> [String] {
        lines.filter { $0.hasPrefix("segment final") }.flatMap { $0.split(separator: " ").filter { $0.hasPrefix("v") }.map(String.init) }
    }

    /// Servers that are not Wyoming ASR, or hostile ones: `prepareOnInit` makes the failure the
    /// client's creation error, within the connect timeout, named, with memory untouched by
    /// what the server claims.
    @Test(arguments: [
        ("NoInfo", SpeechClientError.Code.timeout, "did not answer describe with info"),
        ("HTTP", .parse, "answered in HTTP"),
        ("HugePayload", .parse, "payload"),
        ("HugeData", .parse, "data_length"),
        ("HugeLine", .parse, "without its end"),
        ("TruncatedJSON", .parse, "not valid JSON"),
        ("TruncatedData", .parse, "not valid JSON"),
    ])
    func aServerThatIsNotWyomingASRIsANamedErrorBeforeReady(scenario: String, code: SpeechClientError.Code, named: String) throws {
        let server = try peer(scenario)
        defer { server.stop() }
        var o = try options("wyoming://127.0.0.1:\(server.port)", connectTimeoutMs: 1500)
        o.prepareOnInit = true
        let began = Clock.monotonicNanos()
        var thrown: SpeechClientError?
        do throws(SpeechClientError) { _ = try Client(options: o, handler: nil) } catch { thrown = error }
        let tookMs = (Clock.monotonicNanos() - began) / 1_000_000
        #expect(thrown?.code == code, "\(thrown?.description ?? "no error")")
        #expect(thrown?.message.contains(named) == true, "\(thrown?.description ?? "no error")")
        #expect(tookMs < 3000)
    }
}
