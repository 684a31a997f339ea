import Testing
@testable import SpeechClient

/// The hands-free pipeline inside a client, against the in-process fake server (the real server
/// and synthesized speech: Tests/e2e/test_hands_free_e2e.py).
@Suite struct HandsFreeClientTests {
    static func options(_ mode: ActivationMode, wakeword: String? = nil) throws -> ClientOptions {
        var o = try pushOptions()
        o.activation = mode
        try o.setWakeword(wakeword)
        try o.setEndpointing(preRoll: 300, trailingSilence: 600, minActivation: 500, maxActivation: 15_000)
        return o
    }

    static func push(_ client: Client, _ samples: [Int16]) {
        samples.withUnsafeBufferPointer { try? client.pushAudio($0) }
    }

    /// One utterance in noise: `leadingNoise` ms of noise, 800 ms of speech, 2 s of noise.
    static func utterance(_ g: inout Signals.Noise, leadingNoise: Int = 1_000) -> [Int16] {
        (leadingNoise > 0 ? Signals.noise(ms: leadingNoise, dbfs: -50, &g) : [])
            + Signals.speech(ms: 800, dbfs: -25, &g) + Signals.noise(ms: 2_000, dbfs: -50, &g)
    }

    /// Two utterances in noise, pushed faster than real time.
    static func twoUtterances() -> [Int16] {
        var g = Signals.Noise()
        return utterance(&g) + utterance(&g, leadingNoise: 0)
    }

    @Test func voiceActivationOpensAContextPerUtterance() throws {
        let log = EventLog()
        let client = try Client(options: try Self.options(.voice), service: FakeRecognitionService(), handler: log.handler)
        defer { try? client.close() }
        try client.start()
        Self.push(client, Self.twoUtterances())
        try client.stop()
        #expect(try client.waitIdle(timeoutMilliseconds: 5_000))
        let lines = log.lines.filter { !$0.hasPrefix("listen speech") && !$0.hasPrefix("listen silence") }
        let starts = lines.filter { $0.hasPrefix("start ") }
        #expect(starts == ["start ctx-1", "start ctx-2"], "\(lines)")
        // Activate and deactivate come as the audio is heard: with all of it pushed at once,
        // before the server's answers. In order: activate, deactivate, activate, deactivate, and
        // each context's start, final segment and stop, the second after the first.
        #expect(lines.filter { $0.hasPrefix("listen") } == ["listen activate", "listen deactivate", "listen activate", "listen deactivate"])
        #expect(lines.first == "listen activate")
        for ctx in ["ctx-1", "ctx-2"] {
            guard let s = lines.firstIndex(of: "start \(ctx)"), let e = lines.firstIndex(of: "stop \(ctx)") else { continue }
            #expect(lines[s..<e].contains { $0.hasPrefix("segment final w1") })
        }
        #expect((lines.firstIndex(of: "stop ctx-1") ?? 99) < (lines.firstIndex(of: "start ctx-2") ?? 0))
        #expect(log.lines.contains("listen speech") && log.lines.contains("listen silence"))
        #expect(client.currentState == .idle)
    }

    /// Two utterances heard while the server still finishes the first one's context: each
    /// waits, and each gets a context of its own, in order. The second joined the first waiting
    /// one: one context for both, no stop between them, the silence between cut out (its
    /// words' times early by it).
    @Test func utterancesThatWaitForThePreviousContextGetAContextEach() throws {
        let log = EventLog()
        // Each context's final words and end come 1 s after its stop.
        let service = FakeRecognitionService(.init(finishInBatches: (100, 1_000)))
        let client = try Client(options: try Self.options(.voice), service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        var g = Signals.Noise()
        Self.push(client, Self.utterance(&g) + Self.utterance(&g, leadingNoise: 0) + Self.utterance(&g, leadingNoise: 0))
        try client.stop()
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000))
        let lines = log.lines.filter { $0.hasPrefix("start") || $0.hasPrefix("stop") || $0.hasPrefix("listen a") || $0.hasPrefix("listen d") }
        #expect(lines.filter { $0.hasPrefix("listen") }.count == 6, "\(lines)")
        #expect(lines.filter { !$0.hasPrefix("listen") } == ["start ctx-1", "stop ctx-1", "start ctx-2", "stop ctx-2", "start ctx-3", "stop ctx-3"],
                "\(lines)")
        #expect(client.currentState == .idle)
    }

    @Test func listeningStaysOnBetweenContextsAndAudioOutsideContextsIsHeard() throws {
        let log = EventLog()
        let client = try Client(options: try Self.options(.voice), service: FakeRecognitionService(), handler: log.handler)
        defer { try? client.close() }
        try client.start()
        var g = Signals.Noise()
        Self.push(client, Signals.noise(ms: 3_000, dbfs: -50, &g))
        // Noise alone: no context, and the client is listening.
        usleepMs(200)
        #expect(client.currentState == .listening)
        #expect(!log.lines.contains { $0.hasPrefix("start") })
        Self.push(client, Signals.speech(ms: 600, dbfs: -25, &g))
        try client.stop()   // mid-utterance: the activation ends, its context delivers
        #expect(try client.waitIdle(timeoutMilliseconds: 5_000))
        #expect(log.lines.contains("start ctx-1") && log.lines.last == "stop ctx-1", "\(log.lines)")
        #expect(log.lines.contains { $0.hasPrefix("segment final") })
    }

    @Test func wakewordWithholdsSegmentsUntilThePhrase() throws {
        let log = EventLog()
        // The fake server says w1, w2, ... one word per 100 ms chunk: "w3" comes with the third.
        let client = try Client(options: try Self.options(.wakeword, wakeword: "W3"), service: FakeRecognitionService(), handler: log.handler)
        defer { try? client.close() }
        try client.start()
        Self.push(client, Self.twoUtterances())
        try client.stop()
        #expect(try client.waitIdle(timeoutMilliseconds: 5_000))
        let lines = log.lines.filter { !$0.hasPrefix("listen speech") && !$0.hasPrefix("listen silence") }
        // In each context the first update delivered is the one that holds the phrase; w1 and
        // w2 before it are withheld.
        for ctx in ["ctx-1", "ctx-2"] {
            guard let s = lines.firstIndex(of: "start \(ctx)") else { Issue.record("no \(ctx): \(lines)"); continue }
            let first = lines[s...].first { $0.hasPrefix("segment") }
            #expect(first == "segment tentative w3", "\(lines)")
        }
        #expect(!lines.contains("segment tentative w1") && !lines.contains("segment tentative w2"))
        // Each context: activate before its first segment, deactivate before its stop.
        #expect(lines.filter { $0 == "listen activate" }.count == 2, "\(lines)")
        #expect(lines.filter { $0 == "listen deactivate" }.count == 2)
        if let a = lines.firstIndex(of: "listen activate"), let s = lines.firstIndex(where: { $0.hasPrefix("segment") }) {
            #expect(a < s)
        }
        if let d = lines.firstIndex(of: "listen deactivate") { #expect(lines[d + 1] == "stop ctx-1") }
    }

    /// A stream failing (an error not retried) before the phrase was heard: the words it had
    /// said stay withheld. Since failures deliver a failed stream's words, they reached the
    /// application here (w1 w2 final, without an activation).
    @Test func wakewordKeepsWordsWithheldWhenTheStreamFails() throws {
        let log = EventLog()
        let refused = SpeechClientError(.api, "refused")
        let service = FakeRecognitionService(.init(failAfterChunks: (2, refused), failFirstStreamOnly: true))
        let client = try Client(options: try Self.options(.wakeword, wakeword: "W3"), service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        Self.push(client, Self.twoUtterances())
        try client.stop()
        #expect(try client.waitIdle(timeoutMilliseconds: 5_000))
        let lines = log.lines
        #expect(lines.contains("error api"), "\(lines)")
        // The failed context (ctx-1) delivered nothing, and no activation.
        let failed = lines.prefix { $0 != "start ctx-2" }
        #expect(failed.contains("stop ctx-1") && !failed.contains { $0.hasPrefix("segment") || $0 == "listen activate" }, "\(lines)")
    }

    @Test func aContextThatCannotOpenIsAnErrorAndListeningGoesOn() throws {
        // The server closes the stream after the first context and accepts no new one: the
        // second utterance is tried again for the reconnect attempts (2 here), each said as
        // RECONNECTING, then an error names it and the speech not transcribed; the client is
        // still listening.
        let log = EventLog(recordStates: true)
        let service = FakeRecognitionService(.init(closeAfterFinished: true, maxStreams: 1))
        var options = try Self.options(.voice)
        try options.setReconnect(attempts: 2, initialMilliseconds: 20, maxMilliseconds: 40)
        let client = try Client(options: options, service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        var g = Signals.Noise()
        Self.push(client, Self.utterance(&g))
        log.waitFor { $0.contains("stop ctx-1") }
        usleepMs(50)  // the server's close after finished
        Self.push(client, Self.utterance(&g, leadingNoise: 0))
        #expect(log.waitFor(timeoutMs: 5_000) { $0.contains("error network") })
        #expect(client.currentState == .listening)
        try client.stop()
        #expect(try client.waitIdle(timeoutMilliseconds: 5_000))
        let lines = log.lines.filter { !$0.hasPrefix("listen speech") && !$0.hasPrefix("listen silence") && !$0.hasPrefix("segment") }
        let second = Array(lines.drop { $0 != "stop ctx-1" }.dropFirst())
        #expect(second == ["listen activate", "state connecting", "state reconnecting 1", "listen deactivate", "state reconnecting 2",
                           "state unavailable", "error network"] || second == ["listen activate", "state connecting", "state reconnecting 1",
                           "state reconnecting 2", "listen deactivate", "state unavailable", "error network"], "\(lines)")
    }

    /// Speech heard while the server is down (a recognizer restarting) waits for it, tried
    /// again with the reconnect delays, and is transcribed once it is back. It was dropped at
    /// the first failure to connect, with an error: the command was lost.
    @Test func speechHeardWhileTheServerIsDownIsTranscribedOnceItIsBack() throws {
        let log = EventLog(recordStates: true)
        // The first context's stream is closed after it (the server going down).
        let service = FakeRecognitionService(.init(closeAfterFinished: true))
        var options = try Self.options(.voice)
        try options.setReconnect(attempts: 10, initialMilliseconds: 50, maxMilliseconds: 200)
        let client = try Client(options: options, service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        var g = Signals.Noise()
        Self.push(client, Self.utterance(&g))
        log.waitFor { $0.contains("stop ctx-1") }
        service.down.store(true, ordering: .relaxed)
        usleepMs(50)  // the server's close after finished
        let sentBefore = service.requests.withLock { $0.count }
        Self.push(client, Self.utterance(&g, leadingNoise: 0))
        #expect(log.waitFor(timeoutMs: 5_000) { $0.contains("state reconnecting 2") }, "\(log.lines)")
        service.down.store(false, ordering: .relaxed)
        #expect(log.waitFor(timeoutMs: 5_000) { $0.contains("stop ctx-2") }, "\(log.lines)")
        try client.stop()
        #expect(try client.waitIdle(timeoutMilliseconds: 5_000))
        let lines = Array(log.lines.drop { $0 != "stop ctx-1" })
        #expect(!lines.contains { $0.hasPrefix("error") }, "\(lines)")
        #expect(lines.contains { $0.hasPrefix("segment final w1") }, "\(lines)")
        #expect(lines.contains("state ready") && service.opensRefused.load(ordering: .relaxed) >= 2)
        // The whole activation reached the server: its pre-roll, the speech and the trailing
        // silence to the endpoint (300 + 800 + 600 ms, in 100 ms chunks).
        let chunks = service.requests.withLock { $0.dropFirst(sentBefore).filter { if case .audio = $0 { true } else { false } }.count }
        #expect(chunks >= 16, "\(chunks) chunks")
    }

    /// The speech after the wake word or speech opened the activation, the context failing in
    /// the middle of it (reconnection off, here): the rest of the activation goes on in a new
    /// context. It was dropped up to the activation's endpoint, without a word.
    @Test func anActivationWhoseContextFailsGoesOnInANewContext() throws {
        for failing: Set<Int> in [[1], [1, 2]] {
            let log = EventLog()
            let service = FakeRecognitionService(.init(failAfterChunks: (3, SpeechClientError(.network, "cut")), failStreams: failing))
            var options = try Self.options(.voice)
            try options.setReconnect(attempts: 0, initialMilliseconds: 20, maxMilliseconds: 40)
            let client = try Client(options: options, service: service, handler: log.handler)
            defer { try? client.close() }
            try client.start()
            var g = Signals.Noise()
            Self.push(client, Signals.noise(ms: 1_000, dbfs: -50, &g) + Signals.speech(ms: 400, dbfs: -25, &g))
            #expect(log.waitFor(timeoutMs: 5_000) { $0.contains("stop ctx-1") }, "\(log.lines)")
            let sentBefore = service.requests.withLock { $0.count }
            Self.push(client, Signals.speech(ms: 400, dbfs: -25, &g) + Signals.noise(ms: 2_000, dbfs: -50, &g))
            try client.stop()
            #expect(try client.waitIdle(timeoutMilliseconds: 5_000))
            let lines = log.lines.filter { !$0.hasPrefix("listen speech") && !$0.hasPrefix("listen silence") && !$0.hasPrefix("segment") }
            if failing.count == 1 {
                #expect(lines == ["listen activate", "start ctx-1", "error network", "stop ctx-1", "start ctx-2", "listen deactivate", "stop ctx-2"], "\(lines)")
                // The activation's speech after the failure went to the new context, to its endpoint.
                let later = service.requests.withLock { $0.dropFirst(sentBefore).filter { if case .audio = $0 { true } else { false } }.count }
                #expect(later >= 10, "\(later) chunks")
                #expect(log.lines.contains { $0.hasPrefix("segment final") })
            } else {
                // Failing again, the activation ends there, said: no third context.
                #expect(lines.filter { $0.hasPrefix("start") } == ["start ctx-1", "start ctx-2"], "\(lines)")
                #expect(lines.filter { $0 == "listen deactivate" }.count == 1 && lines.filter { $0 == "error network" }.count == 2, "\(lines)")
            }
        }
    }

    /// Wake phrase in the transcript: the woken activation's context fails and no new one can
    /// be opened (the server down): the activation's end is said all the same, once.
    @Test func aWokenActivationThatCannotCarryOnSaysItsEnd() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(failAfterChunks: (3, SpeechClientError(.network, "cut")), failStreams: [1]))
        var options = try Self.options(.wakeword, wakeword: "W1")
        try options.setReconnect(attempts: 1, initialMilliseconds: 20, maxMilliseconds: 40)
        let client = try Client(options: options, service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        let until = Clock.monotonicNanos() + 5_000_000_000
        while client.currentState != .listening && Clock.monotonicNanos() < until { usleepMs(5) }
        service.down.store(true, ordering: .relaxed)  // the stream open now works; no other will
        var g = Signals.Noise()
        Self.push(client, Signals.noise(ms: 1_000, dbfs: -50, &g) + Signals.speech(ms: 400, dbfs: -25, &g))
        #expect(log.waitFor(timeoutMs: 5_000) { $0.filter { $0 == "error network" }.count == 2 }, "\(log.lines)")
        Self.push(client, Signals.speech(ms: 400, dbfs: -25, &g) + Signals.noise(ms: 2_000, dbfs: -50, &g))
        try client.stop()
        #expect(try client.waitIdle(timeoutMilliseconds: 5_000))
        let lines = log.lines.filter { $0.hasPrefix("listen a") || $0.hasPrefix("listen d") || $0.hasPrefix("start") || $0.hasPrefix("stop") || $0.hasPrefix("error") }
        #expect(lines == ["start ctx-1", "listen activate", "error network", "stop ctx-1", "error network", "listen deactivate"], "\(lines)")
    }

    @Test func speechWaitingForAContextThatNeverFinishesIsBounded() throws {
        // The server never answers a stop, so the second utterance waits for the first context
        // for ever; past the backlog's bound (60 s) one error says speech is being dropped.
        let log = EventLog()
        let service = FakeRecognitionService(.init(ignoreStop: true))
        let client = try Client(options: try Self.options(.voice), service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        var g = Signals.Noise()
        Self.push(client, Self.utterance(&g))
        for _ in 0..<70 { Self.push(client, Signals.speech(ms: 1_000, dbfs: -25, &g)) }
        log.waitFor { $0.contains("error network") }
        #expect(log.lines.filter { $0 == "error network" }.count == 1, "\(log.lines.suffix(10))")
        #expect(log.lines.filter { $0.hasPrefix("start") } == ["start ctx-1"])
        #expect(client.currentState == .listening)
    }

    /// A microphone that gives `samples` up to where `play(upTo:)` allows, as fast as they are
    /// read, then nothing (it waits, as a device does until its next period).
    final class ScriptedMicrophone: AudioSource, @unchecked Sendable {
        let samples: [Int16]
        private let lock = ConditionLock()
        private var position = 0
        private var closed = false
        private var allowed = 0
        /// The capture thread asked for more once all allowed was read: it has buffered that.
        private var askedPastAllowed = false
        let format: AudioFormat
        init(_ samples: [Int16], format: AudioFormat = .speech) {
            self.samples = samples
            self.format = format
        }

        func play(upTo count: Int) {
            lock.withLock {
                allowed = min(count, samples.count)
                askedPastAllowed = false
            }
        }

        func open() throws(SpeechClientError) { lock.withLock { closed = false } }
        func read(maxFrames: Int) throws(SpeechClientError) -> [Float]? {
            let out: [Float]? = lock.withLock {
                if closed { return nil }
                let n = min(maxFrames, allowed - position)
                if n == 0 && !askedPastAllowed {
                    askedPastAllowed = true
                    lock.broadcast()
                }
                defer { position += n }
                return samples[position..<position + n].map { Float($0) / 32_768 }  // a device's floats: -1...1
            }
            if out?.isEmpty == true { usleepMs(5) }
            return out
        }
        func close() { lock.withLock { closed = true } }

        /// Waits until the samples allowed were read from the device and buffered (the capture
        /// thread asked for more after them).
        func waitUntilAllowedRead(timeoutMs: Int = 5_000) -> Bool {
            let deadline = Clock.monotonicNanos() + UInt64(timeoutMs) * 1_000_000
            lock.lock()
            defer { lock.unlock() }
            while !askedPastAllowed {
                if !lock.wait(untilMonotonicNanos: deadline) { return askedPastAllowed }
            }
            return true
        }
    }

    /// A 48 kHz microphone stopped by the user: its resampler's last output (the filter's
    /// lookahead, about 1.7 ms) is sent with the context. It was dropped (flushed for a
    /// descriptor only), and the next start makes a new converter: lost for good.
    @Test func aMicrophoneStoppedSendsItsResamplersTail() throws {
        let frames = 48_000 / 2 + 7  // half a second, and not a whole number of 16 kHz samples
        let mic = ScriptedMicrophone((0..<frames).map { Int16(truncatingIfNeeded: ($0 % 200) * 100) },
                                     format: AudioFormat(sampleRate: 48_000, channels: 1))
        let service = FakeRecognitionService(.init())
        var o = try pushOptions()
        o.audio = .microphone(device: "scripted")
        let client = try Client(options: o, service: service, makeSource: { _ in CaptureBuffer(mic) }, handler: { _, _ in })
        defer { try? client.close() }
        try client.start()
        mic.play(upTo: frames)
        #expect(mic.waitUntilAllowedRead())
        try client.stop()
        #expect(try client.waitIdle(timeoutMilliseconds: 5_000))
        let sent = service.requests.withLock { $0.reduce(0) { n, r in if case .audio(let a) = r { n + a.count } else { n } } }
        #expect(sent == (frames + 2) / 3)  // every input sample's output: ceil(frames / 3)
    }

    /// A microphone's push-to-talk pressed again while the server still finishes the last
    /// utterance: the start is queued behind the stop, and the microphone keeps what it hears
    /// from then on for that start's context. It kept nothing until the previous context had
    /// ended (then dropped what it had): the first words were lost.
    @Test func aMicrophoneKeepsWhatItHearsForAStartQueuedBehindAStop() throws {
        let first = [Int16](repeating: 1_000, count: 1_600), second = [Int16](repeating: 2_000, count: 3_200)
        let mic = ScriptedMicrophone(first + second)
        let buffer = CaptureBuffer(mic)
        // The first context's words and end come 3 s after its stop.
        let service = FakeRecognitionService(.init(wordsFromAudio: true, finishInBatches: (100, 3_000)))
        let log = EventLog()
        var o = try pushOptions()
        o.audio = .microphone(device: "scripted")
        let client = try Client(options: o, service: service, makeSource: { _ in buffer }, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        mic.play(upTo: first.count)
        #expect(mic.waitUntilAllowedRead())
        try client.stop()
        try client.start()  // queued: the first context is still finishing
        #expect(client.currentState == .stopping)
        // The worker took the stop (it sent it: the microphone kept nothing more for the first
        // context), then the queued start (the microphone keeps what it hears again).
        let sent = { service.requests.withLock { $0.contains { if case .stop = $0 { true } else { false } } } }
        for _ in 0..<1_000 where !sent() { usleepMs(5) }
        #expect(sent())
        // Before the first context ends (3 s): the start was queued behind its stop.
        #expect(buffer.waitUntilCollecting(timeoutMilliseconds: 2_500))
        #expect(!log.lines.contains("stop ctx-1"))
        mic.play(upTo: first.count + second.count)
        #expect(mic.waitUntilAllowedRead())
        #expect(log.waitFor(timeoutMs: 5_000) { $0.contains("start ctx-2") }, "\(log.lines)")
        #expect(client.currentState == .listening)
        try client.stop()
        #expect(try client.waitIdle(timeoutMilliseconds: 5_000))
        let lines = log.lines.filter { $0.hasPrefix("start") || $0.hasPrefix("stop") || $0.hasPrefix("segment final") }
        #expect(lines == ["start ctx-1", "segment final a1000", "stop ctx-1", "start ctx-2", "segment final a2000 a2000", "stop ctx-2"],
                "\(log.lines)")
    }

    /// A client listening (voice activation) to `mic`, started: `mic` is to be played only
    /// from then on (a microphone keeps nothing outside a context).
    static func listening(to mic: ScriptedMicrophone, service: FakeRecognitionService, log: EventLog) throws -> Client {
        var o = try options(.voice)
        o.audio = .microphone(device: "scripted")
        let client = try Client(options: o, service: service, makeSource: { _ in CaptureBuffer(mic) }, handler: log.handler)
        do {
            try client.start()
        } catch {
            try? client.close()
            throw error
        }
        let until = Clock.monotonicNanos() + 5_000_000_000
        while client.currentState != .listening && Clock.monotonicNanos() < until { usleepMs(5) }
        #expect(client.currentState == .listening)
        return client
    }

    /// A stop while listening, in the middle of what is said, while that activation waits for the
    /// previous context (the server still finishing it): the audio the microphone captured and
    /// the worker had not taken yet (it takes a microphone's audio a chunk at a time) ends the
    /// waiting activation. Before, the end of the previous context cleared it: here the last
    /// 50 ms, captured just before the stop, were never sent.
    @Test func aStopWhileAnActivationWaitsKeepsWhatTheMicrophoneCapturedLast() throws {
        var g = Signals.Noise()
        let last = [Int16](repeating: 7_777, count: 800)  // under a chunk: it waits for more audio
        let said = Self.utterance(&g) + Signals.speech(ms: 1_000, dbfs: -25, &g)
        let mic = ScriptedMicrophone(said + last)
        // The first context's words come 3 s after its stop: the second activation waits.
        let service = FakeRecognitionService(.init(finishInBatches: (100, 3_000)))
        let log = EventLog()
        let client = try Self.listening(to: mic, service: service, log: log)
        defer { try? client.close() }
        mic.play(upTo: said.count)
        #expect(mic.waitUntilAllowedRead())
        #expect(log.waitFor(timeoutMs: 5_000) { $0.filter { $0 == "listen activate" }.count == 2 }, "\(log.lines)")
        #expect(!log.lines.contains("stop ctx-1"))  // the second activation is waiting
        // The last 50 ms, then the stop at once: less than a chunk, it is still in the capture
        // buffer (the worker looks at it when a chunk is there, or after 500 ms).
        mic.play(upTo: said.count + last.count)
        #expect(mic.waitUntilAllowedRead())
        try client.stop()
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000))
        let sent = service.samplesSent(equalTo: 7_777)
        #expect(sent == 800, "\(log.lines.filter { !$0.hasPrefix("listen s") })")
        #expect(log.lines.contains("start ctx-2") && log.lines.last == "stop ctx-2", "\(log.lines)")
    }

    /// A suspend in the middle of an activation: it ends with what the microphone captured and
    /// the worker had not taken yet. Closing the source first dropped it (here the last 50 ms).
    @Test func aSuspendInTheMiddleOfAnActivationKeepsWhatTheMicrophoneCapturedLast() throws {
        var g = Signals.Noise()
        let last = [Int16](repeating: 7_777, count: 800)  // under a chunk: it waits for more audio
        let said = Signals.noise(ms: 1_000, dbfs: -50, &g) + Signals.speech(ms: 1_000, dbfs: -25, &g)
        let mic = ScriptedMicrophone(said + last)
        let service = FakeRecognitionService()
        let log = EventLog()
        let client = try Self.listening(to: mic, service: service, log: log)
        defer { try? client.close() }
        mic.play(upTo: said.count)
        #expect(mic.waitUntilAllowedRead())
        #expect(log.waitFor(timeoutMs: 5_000) { $0.contains("start ctx-1") }, "\(log.lines)")
        mic.play(upTo: said.count + last.count)
        #expect(mic.waitUntilAllowedRead())
        try client.suspend()
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000))
        let sent = service.samplesSent(equalTo: 7_777)
        #expect(sent == 800, "\(log.lines.filter { !$0.hasPrefix("listen s") })")
        #expect(log.lines.last == "stop ctx-1", "\(log.lines)")
        // The activation's end is said (voice mode said none: ACTIVATE stood unpaired).
        #expect(log.lines.filter { $0.hasPrefix("listen a") || $0.hasPrefix("listen d") } == ["listen activate", "listen deactivate"], "\(log.lines)")
    }

    /// Pushed audio, listening: a suspend in the middle of an activation ends it with what was
    /// still in the push path (here 50 ms, less than a chunk). It stayed there, and the next
    /// start dropped it.
    @Test func aSuspendInTheMiddleOfAnActivationKeepsThePushedTail() throws {
        let log = EventLog()
        let service = FakeRecognitionService()
        let client = try Client(options: try Self.options(.voice), service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        var g = Signals.Noise()
        Self.push(client, Signals.noise(ms: 1_000, dbfs: -50, &g) + Signals.speech(ms: 1_000, dbfs: -25, &g))
        #expect(log.waitFor(timeoutMs: 5_000) { $0.contains("start ctx-1") }, "\(log.lines)")
        Self.push(client, [Int16](repeating: 7_777, count: 800))
        try client.suspend()
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000))
        #expect(service.samplesSent(equalTo: 7_777) == 800, "\(log.lines.filter { !$0.hasPrefix("listen s") })")
        #expect(log.lines.last == "stop ctx-1", "\(log.lines)")
    }

    /// A suspend while an activation waits for the previous context: its speech cannot be
    /// transcribed (the connection goes), and an error says so. It was dropped silently.
    @Test func aSuspendWhileAnActivationWaitsSaysItsSpeechWasNotTranscribed() throws {
        let errors = Locked<[String]>([])
        let log = EventLog()
        // The first context's end comes 3 s after its stop: the second activation waits.
        let service = FakeRecognitionService(.init(finishInBatches: (100, 3_000)))
        let client = try Client(options: try Self.options(.voice), service: service, handler: { client, event in
            if case .error(let e) = event { errors.withLock { $0.append(e.message) } }
            log.handler(client, event)
        })
        defer { try? client.close() }
        try client.start()
        var g = Signals.Noise()
        Self.push(client, Self.utterance(&g) + Self.utterance(&g, leadingNoise: 0))
        #expect(log.waitFor(timeoutMs: 5_000) { $0.filter { $0 == "listen activate" }.count == 2 }, "\(log.lines)")
        #expect(!log.lines.contains("stop ctx-1"))
        try client.suspend()
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000))
        let said = errors.withLock { $0 }
        #expect(said.count == 1 && said[0].hasPrefix("the client was suspended while 1 activation(s) ("), "\(said)")
        #expect(log.lines.filter { $0.hasPrefix("start") } == ["start ctx-1"], "\(log.lines)")
    }

    /// A stop while listening with no activation open: the microphone's last audio, the start
    /// of a sound, opens no context during the stop (it is dropped, as it always was).
    @Test func aStopWhileNothingIsActiveOpensNoContext() throws {
        var g = Signals.Noise()
        let room = Signals.noise(ms: 2_000, dbfs: -50, &g)
        let onset = Array(Signals.speech(ms: 100, dbfs: -20, &g).prefix(1_500))  // under a chunk
        let mic = ScriptedMicrophone(room + onset)
        let service = FakeRecognitionService()
        let log = EventLog()
        let client = try Self.listening(to: mic, service: service, log: log)
        defer { try? client.close() }
        mic.play(upTo: room.count)
        #expect(mic.waitUntilAllowedRead())
        mic.play(upTo: room.count + onset.count)
        #expect(mic.waitUntilAllowedRead())
        try client.stop()
        #expect(try client.waitIdle(timeoutMilliseconds: 5_000))
        #expect(!log.lines.contains { $0.hasPrefix("start") || $0 == "listen activate" }, "\(log.lines)")
        #expect(service.streamsOpened.load(ordering: .relaxed) <= 1)  // the listening's own, prepared
    }

    @Test func wakewordModeNeedsAPhrase() throws {
        #expect(throws: SpeechClientError.self) {
            _ = try Client(options: try Self.options(.wakeword), service: FakeRecognitionService(), handler: nil)
        }
    }

    @Test func levelsComeWithPositions() throws {
        let levels = Locked<[(Float, Int64)]>([])
        var o = try Self.options(.manual)
        o.reportLevels = true
        let client = try Client(options: o, service: FakeRecognitionService()) { _, e in
            if case .level(let db, let at) = e { levels.withLock { $0.append((db, at)) } }
        }
        defer { try? client.close() }
        try client.start()
        var g = Signals.Noise()
        Self.push(client, Signals.noise(ms: 300, dbfs: -30, &g) + [Int16](repeating: 0, count: 1_600))
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 5_000))
        let got = levels.withLock { $0 }
        #expect(got.map(\.1) == [0, 100, 200, 300])
        #expect(got.prefix(3).allSatisfy { abs($0.0 + 30) < 1 } && got.last?.0 == -100, "\(got)")
    }

    @Test func optionRangesAreChecked() throws {
        var o = ClientOptions()
        #expect(throws: SpeechClientError.self) { try o.setActivation(3) }
        #expect(throws: SpeechClientError.self) { try o.setWakeword("  ,, ") }
        #expect(throws: SpeechClientError.self) { try o.setWakeword("a b c d e f g h i") }
        #expect(throws: SpeechClientError.self) { try o.setVAD(parameter: 7, value: 1) }
        #expect(throws: SpeechClientError.self) { try o.setVAD(parameter: 0, value: .nan) }
        #expect(throws: SpeechClientError.self) { try o.setVAD(parameter: 5, value: 0.9) }  // release >= activation
        #expect(throws: SpeechClientError.self) { try o.setEndpointing(preRoll: 0, trailingSilence: 50, minActivation: 0, maxActivation: 1_000) }
        #expect(throws: SpeechClientError.self) { try o.setEndpointing(preRoll: 0, trailingSilence: 500, minActivation: 5_000, maxActivation: 1_000) }
        try o.setVAD(parameter: 4, value: 0.5)
        #expect(o.vad.activationRatio == 0.5)
        try o.setWakeword("Hey, Robot")
        #expect(o.wakeword == ["hey", "robot"])
    }
}
