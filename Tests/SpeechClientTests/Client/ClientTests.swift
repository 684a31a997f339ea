import Synchronization
#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import SpeechClient

/// Records events in delivery order, with the thread they ran on.
final class EventLog: @unchecked Sendable {
    private let lock = ConditionLock()
    private var recorded: [String] = []
    let onCallbackThread = Atomic<Bool>(true)
    let recordStates: Bool
    init(recordStates: Bool = false) { self.recordStates = recordStates }

    func handler(_ client: Client, _ event: ClientEvent) {
        if !client.isOnCallbackThread { onCallbackThread.store(false, ordering: .relaxed) }
        let line: String
        switch event {
        case .start(let id): line = "start \(id)"
        case .stop(let id): line = "stop \(id)"
        case .error(let e): line = "error \(e.code)"
        case .segment(let s): line = "segment \(s.isFinal ? "final" : "tentative") \(s.transcript)"
        case .log, .level: return
        case .idle: line = "idle"
        case .listen(let e, _, _): line = "listen \(e)"
        case .connection(let state, let attempt, _, _):
            guard recordStates else { return }
            line = "state \(state)" + (attempt > 0 ? " \(attempt)" : "")
        }
        lock.withLock {
            recorded.append(line)
            lock.broadcast()
        }
    }

    var lines: [String] { lock.withLock { recorded } }

    /// Waits until the lines recorded so far satisfy `done` (woken by each new line, not by
    /// polling), at most `timeoutMs`; returns whether they do.
    @discardableResult
    func waitFor(timeoutMs: Int = 2_000, _ done: ([String]) -> Bool) -> Bool {
        let deadline = Clock.monotonicNanos() + UInt64(timeoutMs) * 1_000_000
        lock.lock()
        defer { lock.unlock() }
        while !done(recorded) {
            if !lock.wait(untilMonotonicNanos: deadline) { return done(recorded) }
        }
        return true
    }
}

func pushOptions(chunkMs: Int = 100) throws -> ClientOptions {
    var o = ClientOptions()
    try o.setServer("grpc://127.0.0.1:1")
    try o.setAppId("test")
    try o.setAudio(.push(sampleRate: 16_000, channels: 1))
    try o.setChunkMilliseconds(chunkMs)
    o.deviceId = "00000000-0000-4000-8000-000000000000"
    return o
}

/// 300 ms (3 chunks) pushed, then the end of the audio; returns once the client is idle.
/// Pushes `samples` samples of the one value `value` (the fake service's words name them).
func push(_ client: Client, value: Int16, samples: Int = 1_600) {
    [Int16](repeating: value, count: samples).withUnsafeBufferPointer { try? client.pushAudio($0) }
}

func pushThreeChunksAndEnd(_ client: Client) throws {
    let samples = [Int16](repeating: 1000, count: 16_000 * 3 / 10)
    samples.withUnsafeBufferPointer { try? client.pushAudio($0) }
    try client.pushEnd()
    #expect(try client.waitIdle(timeoutMilliseconds: 5000))
}

/// Once ctx-1 started: suspend (its stop goes out and it finishes), resume, and start again
/// while it may still be finishing.
func startAgainWhileTheSuspendedContextFinishes(_ client: Client, _ log: EventLog) throws {
    #expect(log.waitFor { $0.contains("start ctx-1") })
    try client.suspend()
    try client.resume()
    try client.start()
}

/// A microphone at a device's pace (320 samples every 20 ms) that always hears the same sound.
final class SteadyMicrophone: AudioSource, @unchecked Sendable {
    let closed = Locked(false)
    var format: AudioFormat { .speech }
    func open() throws(SpeechClientError) { closed.withLock { $0 = false } }
    func read(maxFrames: Int) throws(SpeechClientError) -> [Float]? {
        usleep(20_000)
        if closed.withLock({ $0 }) { return nil }
        return [Float](repeating: 0.25, count: min(maxFrames, 320))
    }
    func close() { closed.withLock { $0 = true } }
}

/// Loud 100 ms chunks with no pause, each chunk's first sample its number `k`: with
/// `wordsFromAudio`, the fake's words are "a<k>".
func pushNumberedLoudChunks(_ client: Client, _ numbers: ClosedRange<Int>) {
    for k in numbers {
        let chunk = (0..<1600).map { Int16($0 == 0 ? k : ($0 % 2 == 0 ? 12_000 : -12_000)) }
        chunk.withUnsafeBufferPointer { try? client.pushAudio($0) }
    }
}

/// The words of the final segments in `lines` (EventLog's "segment final w1 w2 ..."), in order.
func finalWords(_ lines: [String]) -> [String] {
    lines.filter { $0.hasPrefix("segment final") }.flatMap { $0.split(separator: " ").dropFirst(2).map(String.init) }
}

extension FakeRecognitionService {
    /// The samples sent in each context, in order (between start requests).
    var samplesSentPerContext: [Int] {
        var out: [Int] = []
        for r in requests.withLock({ $0 }) {
            switch r {
            case .start: out.append(0)
            case .audio(let a): if !out.isEmpty { out[out.count - 1] += a.count }
            default: break
            }
        }
        return out
    }

    /// The samples sent after the last start request: the audio of the last context.
    var samplesSentInTheLastContext: Int {
        let requests = self.requests.withLock { $0 }
        let lastStart = requests.lastIndex { if case .start = $0 { return true } else { return false } } ?? 0
        return requests[lastStart...].reduce(0) { n, r in if case .audio(let a) = r { return n + a.count } else { return n } }
    }
}

@Suite struct ClientTests {
    @Test func pushedAudioIsTranscribedAndEventsComeInOrder() throws {
        let log = EventLog()
        let service = FakeRecognitionService()
        let client = try Client(options: try pushOptions(), service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        try pushThreeChunksAndEnd(client)
        let lines = log.lines
        #expect(lines.first == "start ctx-1")
        #expect(lines.last == "stop ctx-1")
        #expect(lines.contains("segment final w1 w2 w3"))
        let log_onCallbackThreadValue = log.onCallbackThread.load(ordering: .relaxed)
        #expect(log_onCallbackThreadValue)
        #expect(client.currentState == .idle)
    }

    /// A push made while a worker turn still holds its sends (`EventLoop.corking`: here the
    /// config and the start) must not send its audio itself: it would reach the server before
    /// the start. The push is made from another thread at the end of the start's turn, the
    /// moment the turn's locks are free but its sends not yet handed over.
    @Test func audioPushedWhileATurnHoldsTheStartReachesTheServerAfterIt() throws {
        var behaviour = FakeRecognitionService.Behaviour()
        behaviour.sendsThroughEventLoop = true
        let service = FakeRecognitionService(behaviour)
        let log = EventLog()
        let client = try Client(options: try pushOptions(), service: service, handler: log.handler)
        defer {
            client.turnEndingForTests = nil  // the hook holds the client: no cycle left behind
            try? client.close()
        }
        let pushed = ConditionLock()
        let state = Locked((armed: true, done: false))
        client.turnEndingForTests = {
            // Once: at the end of the turn that handed over the start.
            guard service.startsHanded.load(ordering: .relaxed) > 0,
                  state.withLock({ s in defer { s.armed = false }; return s.armed }) else { return }
            let pusher = try? NativeThread(name: "test-push") {
                let samples = [Int16](repeating: 1000, count: 1_600)
                samples.withUnsafeBufferPointer { try? client.pushAudio($0) }
                pushed.withLock { state.withLock { $0.done = true }; pushed.broadcast() }
            }
            pusher?.detach()
            // The push does not wait for the worker, so it is done long before this gives up.
            let deadline = Clock.monotonicNanos() + 2_000_000_000
            pushed.withLock {
                while !state.withLock({ $0.done }) { if !pushed.wait(untilMonotonicNanos: deadline) { break } }
            }
        }
        try client.start()
        #expect(log.waitFor { $0.contains("segment tentative w1") })
        #expect(state.withLock { $0.done })
        let order = service.requests.withLock { $0 }.map { r -> String in
            switch r {
            case .config: return "config"
            case .start: return "start"
            case .audio: return "audio"
            case .stop: return "stop"
            case .rttResponse: return "rtt"
            }
        }
        #expect(Array(order.prefix(3)) == ["config", "start", "audio"], "\(order)")
        try client.stop()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
    }

    @Test func wrongStatesAreRejected() throws {
        let client = try Client(options: try pushOptions(), service: FakeRecognitionService(), handler: nil)
        defer { try? client.close() }
        #expect(throws: SpeechClientError.self) { try client.stop() }
        #expect(throws: SpeechClientError.self) { try client.resume() }
        #expect(throws: SpeechClientError.self) { try client.pushEnd() }
        try client.start()
        #expect(throws: SpeechClientError.self) { try client.start() }
        try client.stop()
        // A start during the pending stop is queued; a second one is refused.
        try client.start()
        #expect(throws: SpeechClientError.self) { try client.start() }
        try client.stop()   // cancels the queued start
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        try client.suspend()
        #expect(throws: SpeechClientError.self) { try client.suspend() }
        #expect(throws: SpeechClientError.self) { try client.start() }
        try client.resume()
        #expect(client.currentState == .idle)
    }

    @Test func startQueuedBehindStopRunsAfterIt() throws {
        let log = EventLog()
        let client = try Client(options: try pushOptions(), service: FakeRecognitionService(.init(answerDelayMilliseconds: 20)), handler: log.handler)
        defer { try? client.close() }
        try client.start()
        try client.stop()
        try client.start()
        #expect(client.currentState == .stopping)
        // Wait for the second context to open, then end it.
        for _ in 0..<200 where client.currentState != .listening { usleepMs(5) }
        try client.stop()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        #expect(log.lines.filter { $0.hasPrefix("start") } == ["start ctx-1", "start ctx-2"])
        #expect(log.lines.filter { $0.hasPrefix("stop") } == ["stop ctx-1", "stop ctx-2"])
    }

    /// A push client whose first context ("a1000") was stopped and a start queued behind that
    /// stop while the server still finishes it (its stop's answer comes 300 ms after it is sent).
    func startQueuedBehindAStop(_ log: EventLog) throws -> (Client, FakeRecognitionService) {
        let service = FakeRecognitionService(.init(answerDelayMilliseconds: 300, wordsFromAudio: true))
        let client = try Client(options: try pushOptions(), service: service, handler: log.handler)
        try client.start()
        push(client, value: 1000)
        try client.stop()
        try client.start()  // queued: the first context is still finishing
        return (client, service)
    }

    /// Push-to-talk pressed again while the server still finishes the last utterance: the start
    /// is queued behind the stop (STOPPING), and what is pushed from then on is for its
    /// context, held until it opens. It was dropped (the client was not in a context): the
    /// first words of the second utterance were lost. A stop cancels the queued start and
    /// its audio with it.
    @Test func audioPushedForAStartQueuedBehindAStopGoesIntoItsContext() throws {
        let log = EventLog()
        let (client, _) = try startQueuedBehindAStop(log)
        defer { try? client.close() }
        #expect(client.currentState == .stopping)
        push(client, value: 2000, samples: 1600 * 2)
        #expect(log.waitFor(timeoutMs: 5000) { $0.contains("start ctx-2") }, "\(log.lines)")
        push(client, value: 3000)
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        let lines = log.lines.filter { $0.hasPrefix("start") || $0.hasPrefix("stop") || $0.hasPrefix("segment final") }
        #expect(lines == ["start ctx-1", "segment final a1000", "stop ctx-1",
                          "start ctx-2", "segment final a2000 a2000 a3000", "stop ctx-2"], "\(log.lines)")

        // Start queued, audio pushed, then a stop: the queued start is cancelled, and the audio
        // pushed for it is not carried into a later context.
        try client.start()
        push(client, value: 4000)
        try client.stop()
        try client.start()
        push(client, value: 5000)
        try client.stop()  // cancels it
        try client.start()  // queued again
        push(client, value: 6000)
        #expect(log.waitFor(timeoutMs: 5000) { $0.contains("start ctx-4") }, "\(log.lines)")
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        let later = log.lines.filter { $0.hasPrefix("segment final") }.suffix(2)
        #expect(Array(later) == ["segment final a4000", "segment final a6000"], "\(log.lines)")
    }

    /// push_end for the start queued behind the pending stop (push-to-talk pressed and released
    /// while the server still finishes the last utterance): that context opens with what was
    /// pushed for it and ends at once. It was refused (no context), and an application's
    /// fallback, stop(), cancelled the queued start: the whole utterance was lost.
    @Test func aPushEndForAQueuedStartEndsItsContextOnceItOpens() throws {
        let log = EventLog()
        let (client, service) = try startQueuedBehindAStop(log)
        defer { try? client.close() }
        push(client, value: 2000, samples: 1600 + 800)  // a chunk and a half: the half is the tail
        try client.pushEnd()
        #expect(client.currentState == .stopping)
        push(client, value: 2500)  // after its end: not taken
        #expect(throws: SpeechClientError.self) { try client.pushEnd() }  // ended already
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        let lines = log.lines.filter { $0.hasPrefix("start") || $0.hasPrefix("stop") || $0.hasPrefix("segment final") }
        #expect(lines == ["start ctx-1", "segment final a1000", "stop ctx-1",
                          "start ctx-2", "segment final a2000 a2000", "stop ctx-2"], "\(log.lines)")
        #expect(service.samplesSent(equalTo: 2000) == 2400)
        #expect(service.samplesSent(equalTo: 2500) == 0)
    }

    /// A suspend stops the open context with the pushed audio still in the push path (the chunk
    /// in progress), as a stop does: it was dropped, the last words before the suspend with it.
    @Test func aSuspendSendsThePushedAudioStillBuffered() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(wordsFromAudio: true))
        let client = try Client(options: try pushOptions(), service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        #expect(log.waitFor { $0.contains("start ctx-1") }, "\(log.lines)")
        push(client, value: 1000, samples: 1600 + 800)
        try client.suspend()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        #expect(service.samplesSent(equalTo: 1000) == 2400, "\(log.lines)")
    }

    /// With a push wait, one push longer than the replay buffer (a whole recording in one call)
    /// could never fit: it timed out on every retry, taking nothing. It goes in slices now.
    @Test func aPushLongerThanTheReplayBufferIsTakenWithAPushWait() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(wordsFromAudio: true))
        var o = try pushOptions()
        o.pushWaitMilliseconds = 300
        o.replayBufferMilliseconds = 1000
        let client = try Client(options: o, service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        #expect(log.waitFor { $0.contains("start ctx-1") }, "\(log.lines)")
        let recording = [Int16](repeating: 700, count: 16_000 * 3)  // 3 s, three times the buffer
        let code: SpeechClientError.Code? = recording.withUnsafeBufferPointer { b in
            do throws(SpeechClientError) { try client.pushAudio(b); return nil } catch { return error.code }
        }
        #expect(code == nil)
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000))
        #expect(service.samplesSent(equalTo: 700) == 16_000 * 3, "\(log.lines)")
    }

    /// A start made after a resume while the suspended context still finishes (the server
    /// answers its stop 800 ms later) waits for it: a microphone keeps what it hears from the
    /// start on, for that start's context. The suspend had closed it, and it was opened only when
    /// the context began: everything said meanwhile was lost (here ~800 ms of 1.6 s).
    @Test func aMicrophoneKeepsWhatItHearsForAStartWaitingForTheSuspendedContext() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(finishInBatches: (100, 800)))  // the stop answered 800 ms later
        var o = try pushOptions()
        try o.setAudio(.microphone(device: "fake"))
        let client = try Client(options: o, service: service, makeSource: { _ in CaptureBuffer(SteadyMicrophone()) }, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        try startAgainWhileTheSuspendedContextFinishes(client, log)
        let began = Clock.monotonicNanos()
        #expect(log.waitFor(timeoutMs: 5_000) { $0.contains("start ctx-2") }, "\(log.lines)")
        // 1.6 s after the start call, whenever its context opened.
        let wanted = began + 1_600_000_000
        let now = Clock.monotonicNanos()
        if wanted > now { usleep(UInt32((wanted - now) / 1_000)) }
        try client.stop()
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000))
        let samples = service.samplesSentInTheLastContext
        #expect(samples >= 16_000 * 13 / 10, "\(samples) samples: \(samples / 16) ms of the 1.6 s since the start call")
    }

    /// The same start, stopped 300 ms later while the old context still finishes (1.5 s): the
    /// microphone's audio for it ends at the stop. It ran on until the old context ended (and
    /// past 30 s pushed out the words said before the stop).
    @Test func aMicrophoneKeepsNothingPastAStopMadeForAStartStillWaiting() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(finishInBatches: (100, 1_500)))
        var o = try pushOptions()
        try o.setAudio(.microphone(device: "fake"))
        let client = try Client(options: o, service: service, makeSource: { _ in CaptureBuffer(SteadyMicrophone()) }, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        try startAgainWhileTheSuspendedContextFinishes(client, log)
        usleep(300_000)
        try client.stop()
        #expect(log.waitFor(timeoutMs: 5_000) { $0.contains("stop ctx-2") }, "\(log.lines)")
        let samples = service.samplesSentInTheLastContext
        #expect(samples > 0 && samples < 16_000 * 8 / 10, "\(samples) samples: \(samples / 16) ms for a start stopped after 300 ms")
    }

    /// Stop and a start queued behind it, called while the worker is held up in a connect (1 s
    /// here; up to 15 s with a login): each context's microphone audio is cut at the calls. Cut
    /// when the worker took them, the first context got everything heard until then (the first
    /// words of the next among it), and the next began only then: 1 s of its 1.6 s.
    @Test func aMicrophoneCutsItsContextsAtTheCallsWhileTheWorkerIsHeldUp() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(openDelayMilliseconds: 1_000))
        var o = try pushOptions()
        try o.setAudio(.microphone(device: "fake"))
        let client = try Client(options: o, service: service, makeSource: { _ in CaptureBuffer(SteadyMicrophone()) }, handler: log.handler)
        defer { try? client.close() }
        let began = Clock.monotonicNanos()
        func at(_ ms: UInt64) {
            let now = Clock.monotonicNanos()
            if began + ms * 1_000_000 > now { usleep(UInt32((began + ms * 1_000_000 - now) / 1_000)) }
        }
        try client.start()
        at(200)
        try client.stop()
        at(400)
        try client.start()
        at(2_000)
        try client.stop()
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000))
        let perContext = service.samplesSentPerContext
        #expect(perContext.count == 2, "\(log.lines)")
        guard perContext.count == 2 else { return }
        // The first: 200 ms and the block the device was reading (20 ms); cut when the worker
        // took the stop, about 1 s.
        #expect(perContext[0] < 16_000 * 6 / 10, "\(perContext[0] / 16) ms for a context stopped after 200 ms")
        // The second: 1.6 s from its start call to its stop (the fake device paced by sleeps,
        // late under load); begun when the worker took it, about 1 s.
        #expect(perContext[1] > 16_000 * 13 / 10, "\(perContext[1] / 16) ms for a context of 1.6 s")
    }

    /// A push waiting for room (the server takes none of the audio) ends when another thread
    /// stops the context, the frames not taken (as a push after the stop is not): the Python
    /// binding's close() relies on it to end a push that would hold it for the whole wait.
    @Test func aStopEndsAPushWaitingForRoom() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(neverDrains: true))
        var o = try pushOptions()
        o.pushWaitMilliseconds = 20_000
        o.replayBufferMilliseconds = 1000
        o.finishTimeoutMilliseconds = 500
        o.reconnectAttempts = 0
        let client = try Client(options: o, service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        #expect(log.waitFor { $0.contains("start ctx-1") }, "\(log.lines)")
        push(client, value: 300, samples: 12_000)  // 0.75 s of the 1 s buffer, never taken by the server
        let returned = OneShot<(SpeechClientError.Code?, UInt64)>()
        runDetached {
            let began = Clock.monotonicNanos()
            let chunk = [Int16](repeating: 300, count: 4000)  // does not fit beside them
            let code: SpeechClientError.Code? = chunk.withUnsafeBufferPointer { b in
                do throws(SpeechClientError) { try client.pushAudio(b); return nil } catch { return error.code }
            }
            returned.set((code, Clock.monotonicNanos() - began))
        }
        usleepMs(300)  // the push waits for room
        try client.stop()
        let outcome = returned.wait(untilMonotonicNanos: Clock.monotonicNanos() + 10_000_000_000)
        #expect(outcome != nil, "the push still waited 10 s after the stop")
        if let (code, nanos) = outcome {
            #expect(code == nil)
            #expect(nanos < 5_000_000_000, "\(nanos / 1_000_000) ms")
        }
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000))
    }

    /// A file sent to a server that never takes the audio (its flow-control window stays shut,
    /// while the connection answers PINGs): the stream counts as lost after the finish timeout
    /// and is retried, and the context fails once the attempts run out. The file waited for
    /// its stream to drain for ever (no stop yet, so no finish timeout either).
    @Test func aFileWhoseServerNeverTakesTheAudioFailsInsteadOfWaitingForEver() throws {
        let samples = (0..<16_000 * 3).flatMap { AudioFixtures.le16(UInt16(truncatingIfNeeded: ($0 % 100) * 200)) }
        let path = AudioFixtures.writeTemp(AudioFixtures.wav(data: samples), name: "never-drains.wav")
        let log = EventLog()
        let service = FakeRecognitionService(.init(neverDrains: true))
        var o = try pushOptions()
        o.audio = .file(path: path)
        o.finishTimeoutMilliseconds = 300
        o.reconnectAttempts = 1
        o.reconnectInitialDelayMilliseconds = 10
        let errors = Locked<[String]>([])
        let client = try Client(options: o, service: service, handler: { c, e in
            if case .error(let error) = e { errors.withLock { $0.append(error.message) } }
            log.handler(c, e)
        })
        defer { try? client.close() }
        try client.start()
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000))
        let said = errors.withLock { $0 }
        #expect(said.count == 1 && said[0].contains("reconnection failed after 1 attempt(s) (the server took none of the audio sent on its stream for 0.3 s"), "\(said)")
        #expect(service.streamsOpened.load(ordering: .relaxed) == 2)
    }

    /// A lost stream's audio replayed on a stream whose server takes none of it (a hung handler
    /// behind a connection that answers PINGs; its flow-control window stays shut): no clock
    /// ran for a lane while it replayed (its stop, which starts the finish clock, waits for the
    /// replay), so a file waited for ever. The replay is given up after the finish timeout, and
    /// the next stream carries it: every chunk once.
    @Test func aReplayWhoseServerTakesNoneOfItIsRetriedOnAnotherStream() throws {
        // 10 s; chunk k (100 ms) is the constant 1001 + k, its word "a<1001+k>".
        let samples = (0..<100).flatMap { k in [UInt8]((0..<1600).flatMap { _ in AudioFixtures.le16(UInt16(1001 + k)) }) }
        let path = AudioFixtures.writeTemp(AudioFixtures.wav(data: samples), name: "replay-stall.wav")
        let log = EventLog()
        let service = FakeRecognitionService(.init(failAfterChunks: (80, SpeechClientError(.network, "reset")),
                                                   failFirstStreamOnly: true, wordsFromAudio: true, neverDrainsStream: 2))
        var o = try pushOptions()
        o.audio = .file(path: path)
        o.finishTimeoutMilliseconds = 300
        o.reconnectInitialDelayMilliseconds = 10
        let client = try Client(options: o, service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000), "\(log.lines)")
        let words = finalWords(log.lines)
        #expect(words == (1001...1100).map { "a\($0)" }, "\(log.lines)")
        #expect(!log.lines.contains { $0.hasPrefix("error") }, "\(log.lines)")
        #expect(service.streamsOpened.load(ordering: .relaxed) >= 3)
    }

    @Test func connectFailureGivesErrorThenStop() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(failConnect: SpeechClientError(.network, "refused")))
        let client = try Client(options: try pushOptions(), service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        #expect(log.lines == ["error network", "stop "])
        #expect(client.currentState == .idle)
    }

    @Test func queuedStartRunsAfterAContextThatFailed() throws {
        // start, stop, start: the first context fails (connect refused after 200 ms); the start
        // queued behind its stop still happens, and fails the same way.
        let log = EventLog()
        let service = FakeRecognitionService(.init(failConnect: SpeechClientError(.network, "refused"),
                                                   openDelayMilliseconds: 200))
        let client = try Client(options: try pushOptions(), service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        try client.stop()
        try client.start()
        #expect(client.currentState == .stopping)
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        #expect(log.lines == ["error network", "stop ", "error network", "stop "])
        #expect(client.currentState == .idle)
    }

    @Test func suspendInterruptsAHangingLoginAtOnce() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(hangOpen: true))
        let client = try Client(options: try pushOptions(), service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        usleepMs(50)
        let t0 = Clock.monotonicNanos()
        try client.suspend()
        #expect(try client.waitIdle(timeoutMilliseconds: 2000))
        #expect(Clock.monotonicNanos() - t0 < 1_000_000_000)
        // No error: the application asked for it. The context ends with its stop.
        #expect(log.lines == ["stop "])
        #expect(client.currentState == .suspended)
        // The cancellation does not outlive the suspend: after resume a start blocks again
        // (and a free interrupts that one).
        try client.resume()
        try client.start()
        usleepMs(50)
        #expect(client.currentState == .starting)
    }

    @Test func freeInterruptsAHangingLoginAtOnce() throws {
        let log = EventLog()
        let client = try Client(options: try pushOptions(), service: FakeRecognitionService(.init(hangOpen: true)),
                                handler: log.handler)
        try client.start()
        usleepMs(50)
        let t0 = Clock.monotonicNanos()
        try client.close()
        #expect(Clock.monotonicNanos() - t0 < 1_000_000_000)
        #expect(!log.lines.contains { $0.hasPrefix("error") })
    }

    /// One thread pushes while another stops (push-to-talk: the audio thread pushing, the UI
    /// thread stopping at the button's release): what is sent is always the audio from the
    /// start up to some point, with no gap. A push converted before the stop took the tail and
    /// queued after it was dropped behind the tail: a gap of up to a chunk before the last audio.
    /// Blocks of 1,000 frames, so the chunker always holds part of a chunk for the tail.
    @Test func aStopWhileAnotherThreadPushesSendsTheAudioWithoutAGap() throws {
        let ramp = (0..<48_000).map { Int16(truncatingIfNeeded: $0 % 30_000 + 1) }
        var gaps: [String] = []
        for trial in 0..<300 {
            let service = FakeRecognitionService(.init())
            let client = try Client(options: try pushOptions(), service: service, handler: { _, _ in })
            defer { try? client.close() }
            try client.start()
            let pushed = Atomic<Int>(0)
            let pusher = try NativeThread(name: "test-push") {
                var at = 0
                while at < ramp.count, client.currentState == .starting || client.currentState == .listening {
                    ramp[at..<at + 1_000].withUnsafeBufferPointer { try? client.pushAudio($0) }
                    at += 1_000
                    pushed.add(1, ordering: .relaxed)
                }
            }
            // Stop while the pushes go on, after a different number of them each trial.
            while pushed.load(ordering: .relaxed) < 2 + trial % 7 { sched_yield() }
            try client.stop()
            pusher.join()
            #expect(try client.waitIdle(timeoutMilliseconds: 5000))
            let sent = service.requests.withLock { $0.flatMap { r -> [Int16] in if case .audio(let a) = r { a } else { [] } } }
            if sent.count > ramp.count || sent[...] != ramp[..<sent.count] {
                let first = sent.indices.first { $0 >= ramp.count || sent[$0] != ramp[$0] } ?? sent.count
                gaps.append("trial \(trial): \(sent.count) samples sent, not the first ones from sample \(first)")
            }
        }
        #expect(gaps.isEmpty, "\(gaps.prefix(5))")
    }

    @Test func streamLossMidContextEndsTheContextWithAnError() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(failAfterChunks: (2, SpeechClientError(.network, "reset"))))
        var o = try pushOptions()
        o.reconnectAttempts = 0
        let client = try Client(options: o, service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        let samples = [Int16](repeating: 0, count: 16_000)
        samples.withUnsafeBufferPointer { try? client.pushAudio($0) }
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        #expect(log.lines.suffix(2) == ["error network", "stop ctx-1"])
    }

    @Test func lostStreamIsReconnectedAndTheContextsAudioReplayed() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(failAfterChunks: (2, SpeechClientError(.network, "reset")), failFirstStreamOnly: true))
        var o = try pushOptions()
        o.reconnectInitialDelayMilliseconds = 10
        let client = try Client(options: o, service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        let samples = [Int16](repeating: 7, count: 1600)
        for _ in 0..<5 { samples.withUnsafeBufferPointer { try? client.pushAudio($0) }; usleepMs(20) }
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        let lines = log.lines
        // One context for the user: its start and stop, no error, every chunk's word once.
        #expect(lines.filter { $0.hasPrefix("start") || $0.hasPrefix("stop") || $0.hasPrefix("error") } == ["start ctx-1", "stop ctx-1"])
        #expect(lines.filter { $0.hasPrefix("segment final") } == ["segment final w1 w2 w3 w4 w5"])
        let opened = service.streamsOpened.load(ordering: .relaxed)
        #expect(opened == 2)
    }

    @Test func reconnectionGivesUpWithAnErrorSayingWhatWasLost() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(failAfterChunks: (1, SpeechClientError(.network, "reset"))))
        var o = try pushOptions()
        o.reconnectInitialDelayMilliseconds = 5
        o.reconnectAttempts = 3
        let client = try Client(options: o, service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        let samples = [Int16](repeating: 7, count: 3200)
        for _ in 0..<3 { samples.withUnsafeBufferPointer { try? client.pushAudio($0) }; usleepMs(30) }
        try? client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        #expect(log.lines.suffix(2) == ["error network", "stop ctx-1"])
    }

    @Test func connectionStatesAreReportedInOrderWithTheOtherEvents() throws {
        let log = EventLog(recordStates: true)
        let service = FakeRecognitionService(.init(failAfterChunks: (2, SpeechClientError(.network, "reset")), failFirstStreamOnly: true))
        var o = try pushOptions()
        o.reconnectInitialDelayMilliseconds = 10
        let client = try Client(options: o, service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        let samples = [Int16](repeating: 7, count: 1600)
        for _ in 0..<4 { samples.withUnsafeBufferPointer { try? client.pushAudio($0) }; usleepMs(20) }
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        try client.suspend()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        let states = log.lines.filter { $0.hasPrefix("state") || $0.hasPrefix("start") || $0.hasPrefix("stop") }
        #expect(states == ["state connecting", "state ready", "start ctx-1", "state reconnecting 1", "state ready", "stop ctx-1", "state suspended"])
    }

    /// Issue 19 item 5: a suspend during a context reports SUSPENDED after that context's last
    /// results and its stop; resume is IDLE and opens nothing without prepare-on-init (the next
    /// start connects), and reconnects at once with it.
    @Test(arguments: [false, true]) func suspendAndResumeReportInOrder(prepareOnInit: Bool) throws {
        let log = EventLog(recordStates: true)
        let service = FakeRecognitionService()
        var o = try pushOptions()
        o.prepareOnInit = prepareOnInit
        let client = try Client(options: o, service: service, handler: log.handler)
        defer { try? client.close() }
        // The connection state on demand (0.8): nothing opened yet without prepare-on-init.
        #expect(client.currentConnectionState == (prepareOnInit ? .ready : .idle))
        try client.start()
        let samples = [Int16](repeating: 1000, count: 16_000 * 3 / 10)
        samples.withUnsafeBufferPointer { try? client.pushAudio($0) }
        usleepMs(100)
        #expect(client.currentConnectionState == .ready)
        try client.suspend()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        #expect(client.currentState == .suspended)
        #expect(client.currentConnectionState == .suspended)
        let suspended = log.lines
        let stop = try #require(suspended.firstIndex(of: "stop ctx-1"))
        #expect(suspended.last == "state suspended", "\(suspended)")
        #expect(suspended.firstIndex(of: "state suspended") ?? -1 > stop, "\(suspended)")
        #expect(suspended.contains { $0.hasPrefix("segment final") }, "\(suspended)")
        try client.resume()
        #expect(client.currentState == .idle)
        usleepMs(200)
        let afterResume = Array(log.lines.dropFirst(suspended.count))
        #expect(afterResume == (prepareOnInit ? ["state connecting", "state ready"] : []), "\(afterResume)")
        // And the next context runs as the first did.
        try client.start()
        try pushThreeChunksAndEnd(client)
        #expect(log.lines.last == "stop ctx-2", "\(log.lines)")
    }

    /// A start made right after a resume, while the suspended context still finishes, waits for
    /// it and then opens its own context: STARTING, not IDLE (which left a context open that
    /// could not be stopped, and dropped every push), with the audio pushed and the end made
    /// meanwhile applied to it in order.
    @Test func aStartRightAfterAResumeWaitsForTheSuspendedContextThenRunsItsOwn() throws {
        let log = EventLog()
        // The stop's answer (the suspended context's end) comes 300 ms after it is sent.
        let service = FakeRecognitionService(.init(answerDelayMilliseconds: 300, wordsFromAudio: true))
        let client = try Client(options: try pushOptions(), service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        let first = [Int16](repeating: 1000, count: 1600 * 2)
        first.withUnsafeBufferPointer { try? client.pushAudio($0) }
        try startAgainWhileTheSuspendedContextFinishes(client, log)
        #expect(client.currentState == .starting)
        let second = [Int16](repeating: 2000, count: 1600 * 3)
        second.withUnsafeBufferPointer { try? client.pushAudio($0) }
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        #expect(client.currentState == .idle)
        let lines = log.lines
        let start2 = try #require(lines.firstIndex(of: "start ctx-2"), "\(lines)")
        #expect(lines.last == "stop ctx-2", "\(lines)")
        #expect(lines.firstIndex(of: "stop ctx-1") ?? Int.max < start2, "\(lines)")
        #expect(lines.contains("segment final a2000 a2000 a2000"), "\(lines)")
    }

    /// After a resume, while the suspended context still finishes: start, stop, start. The
    /// first start waits and then runs with its stop; the second runs after it, as a start
    /// queued behind a stop does. The second start was run in place of the first (one context
    /// for two starts), or the first was never stopped.
    @Test func startStopStartAfterAResumeRunsTwoContextsInOrder() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(answerDelayMilliseconds: 300, wordsFromAudio: true))
        let client = try Client(options: try pushOptions(), service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        [Int16](repeating: 1000, count: 1600).withUnsafeBufferPointer { try? client.pushAudio($0) }
        try startAgainWhileTheSuspendedContextFinishes(client, log)
        [Int16](repeating: 2000, count: 1600).withUnsafeBufferPointer { try? client.pushAudio($0) }
        try client.stop()
        try client.start()  // queued behind that stop
        #expect(log.waitFor(timeoutMs: 5000) { $0.contains("start ctx-3") }, "\(log.lines)")
        [Int16](repeating: 3000, count: 1600).withUnsafeBufferPointer { try? client.pushAudio($0) }
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        let lines = log.lines.filter { $0.hasPrefix("start") || $0.hasPrefix("stop") || $0.hasPrefix("segment final") }
        #expect(lines == ["start ctx-1", "segment final a1000", "stop ctx-1", "start ctx-2", "segment final a2000", "stop ctx-2",
                          "start ctx-3", "segment final a3000", "stop ctx-3"], "\(log.lines)")
    }

    /// With a push wait, audio pushed for a start that waits for the previous context counts
    /// against the replay buffer: a push that does not fit times out (nothing taken) instead
    /// of being taken and then dropped.
    @Test func aPushWaitCountsTheAudioHeldForAWaitingStart() throws {
        let log = EventLog()
        // The suspended context never finishes (its stop is not answered): the start waits.
        let service = FakeRecognitionService(.init(ignoreStopOnStream: 1))
        var o = try pushOptions()
        o.pushWaitMilliseconds = 100
        o.replayBufferMilliseconds = 1000
        let client = try Client(options: o, service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        try startAgainWhileTheSuspendedContextFinishes(client, log)
        usleepMs(100)  // the start has been taken, and waits for ctx-1's end
        let chunk = [Int16](repeating: 100, count: 1600)
        var timedOut = 0
        for _ in 0..<15 {
            let code: SpeechClientError.Code? = chunk.withUnsafeBufferPointer { b in
                do throws(SpeechClientError) { try client.pushAudio(b); return nil } catch { return error.code }
            }
            if code == .timeout { timedOut += 1 }
        }
        #expect(timedOut >= 4, "\(timedOut)")  // 1 s of the 1.5 s fits
        usleepMs(100)
        #expect(!log.lines.contains { $0.hasPrefix("error") }, "\(log.lines)")
    }

    /// Without a push wait, audio pushed for a start that waits for the previous context is
    /// held up to the replay buffer; past it the rest is dropped, and that is said once.
    @Test func audioHeldForAWaitingStartPastTheBufferIsDroppedAndSaidOnce() throws {
        let log = EventLog()
        let messages = Locked<[String]>([])
        let service = FakeRecognitionService(.init(ignoreStopOnStream: 1))  // ctx-1 never finishes
        var o = try pushOptions()
        o.replayBufferMilliseconds = 1000
        let client = try Client(options: o, service: service, handler: { c, e in
            if case .error(let error) = e { messages.withLock { $0.append(error.message) } }
            log.handler(c, e)
        })
        defer { try? client.close() }
        try client.start()
        try startAgainWhileTheSuspendedContextFinishes(client, log)
        let chunk = [Int16](repeating: 100, count: 1600)
        for _ in 0..<15 { chunk.withUnsafeBufferPointer { try? client.pushAudio($0) } }  // 1.5 s
        #expect(log.waitFor { $0.contains("error network") }, "\(log.lines)")
        usleepMs(100)  // a second report would come with the later chunks
        #expect(log.lines.filter { $0.hasPrefix("error") } == ["error network"], "\(log.lines)")
        #expect(messages.withLock { $0 }.first?.contains("beyond the replay buffer (1000 ms) is being dropped") == true)
    }

    /// A stop on a pushed-audio client sends what the push path still holds (the chunk in
    /// progress), as push_end does: it was dropped, clipping the end of a push-to-talk.
    @Test func aStopSendsThePartialChunkPushedBeforeIt() throws {
        let service = FakeRecognitionService()
        let client = try Client(options: try pushOptions(), service: service, handler: { _, _ in })
        defer { try? client.close() }
        try client.start()
        let samples = [Int16](repeating: 500, count: 16_800)  // 1.05 s: ten chunks and a half
        samples.withUnsafeBufferPointer { try? client.pushAudio($0) }
        try client.stop()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        let sent = service.requests.withLock { $0.reduce(0) { n, r in if case .audio(let a) = r { n + a.count } else { n } } }
        #expect(sent == 16_800)
    }

    /// A stop queued before the stream failed, then a start queued behind it: the stop was for
    /// the context that failed. Taken after the next context began, it stopped that one at once
    /// (its audio dropped); the next context now runs until its own end.
    @Test func aStopMadeBeforeAFailureDoesNotStopTheContextStartedBehindIt() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(failAfterChunks: (1, SpeechClientError(.api, "refused")), failFirstStreamOnly: true))
        let client = try Client(options: try pushOptions(), service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        #expect(log.waitFor { $0.contains("start ctx-1") })
        usleepMs(50)  // the worker idle: the push below sends its chunk itself
        // The worker's turn for the failure is held at its start until the stop and the start
        // are queued behind the failure.
        let atStart = OneShot<Bool>()
        let release = OneShot<Bool>()
        client.turnStartingForTests = { atStart.set(true); _ = release.wait() }
        let chunk = [Int16](repeating: 1000, count: 1600)
        chunk.withUnsafeBufferPointer { try? client.pushAudio($0) }  // fails the stream
        #expect(atStart.wait(untilMonotonicNanos: Clock.monotonicNanos() + 5_000_000_000) == true)
        client.turnStartingForTests = nil
        try client.stop()
        try client.start()
        release.set(true)
        #expect(log.waitFor { $0.contains("start ctx-2") }, "\(log.lines)")
        for _ in 0..<3 { chunk.withUnsafeBufferPointer { try? client.pushAudio($0) } }
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        let lines = log.lines
        #expect(lines.last == "stop ctx-2", "\(lines)")
        #expect(lines.contains("segment final w1 w2 w3"), "\(lines)")
    }

    /// A result before the stream's started, or a second started: protocol errors that end the
    /// stream (the context fails with a parse error naming them). A result before started was
    /// filed under the server's own context string, outside every clean-up, and 256 of them
    /// failed every later context; each second started kept another server context's mapping.
    @Test(arguments: [(true, "a result before"), (false, "started twice")])
    func aResultBeforeStartedOrASecondStartedEndsTheStream(before: Bool, named: String) throws {
        let log = EventLog()
        var messages: [String] = []
        let lock = Locked<[String]>([])
        let service = FakeRecognitionService(.init(resultBeforeStarted: before, startedTwice: !before))
        let client = try Client(options: try pushOptions(), service: service, handler: { c, e in
            if case .error(let error) = e { lock.withLock { $0.append(error.message) } }
            log.handler(c, e)
        })
        defer { try? client.close() }
        try client.start()
        #expect(log.waitFor { $0.contains { $0.hasPrefix("stop") } }, "\(log.lines)")
        messages = lock.withLock { $0 }
        #expect(log.lines.contains("error parse"), "\(log.lines)")
        #expect(messages.contains { $0.contains(named) }, "\(messages)")
        #expect(!log.lines.contains { $0.contains("ghost") }, "\(log.lines)")
    }

    /// Responses with a payload this client does not know are ignored, and take no segment id:
    /// each took the next one (the first real segment was numbered 50 here), and a server
    /// sending them for ever new ids grew the id map without bound.
    @Test func aResponseWithAnUnknownPayloadTakesNoSegmentId() throws {
        let ids = Locked<[Int32]>([])
        let log = EventLog()
        let client = try Client(options: try pushOptions(), service: FakeRecognitionService(.init(unknownPayloadsAfterStarted: 50)),
                                handler: { c, e in
            if case .segment(let s) = e { ids.withLock { $0.append(s.segmentId) } }
            log.handler(c, e)
        })
        defer { try? client.close() }
        try client.start()
        try pushThreeChunksAndEnd(client)
        #expect(log.lines.contains { $0.hasPrefix("segment final") }, "\(log.lines)")
        #expect(Set(ids.withLock { $0 }) == [0], "\(ids.withLock { $0 })")
        #expect(!log.lines.contains { $0.hasPrefix("error") }, "\(log.lines)")
    }

    /// A response of an unknown kind naming no context, before `started` and after it, is
    /// ignored: it ended the stream ("a result before the stream's context started"), and with
    /// it the words the context had to come.
    @Test func aResponseOfAnUnknownKindWithoutAContextEndsNothing() throws {
        let log = EventLog()
        let client = try Client(options: try pushOptions(), service: FakeRecognitionService(.init(unknownPayloadsWithoutContext: 3)),
                                handler: log.handler)
        defer { try? client.close() }
        try client.start()
        try pushThreeChunksAndEnd(client)
        #expect(log.lines.contains { $0.hasPrefix("segment final") }, "\(log.lines)")
        #expect(!log.lines.contains { $0.hasPrefix("error") }, "\(log.lines)")
    }

    /// A wait for idle in one thread while another frees the client: it ends, refused (free
    /// lets the open context go without making the client idle, and it waited for ever).
    @Test func aWaitForIdleEndsWhenAnotherThreadFreesTheClient() throws {
        let client = try Client(options: try pushOptions(), service: FakeRecognitionService(.init(ignoreStop: true)), handler: { _, _ in })
        try client.start()
        try client.stop()  // never answered: STOPPING for good
        let result = OneShot<SpeechClientError.Code?>()
        runDetached {
            do throws(SpeechClientError) { _ = try client.waitIdle(timeoutMilliseconds: -1); result.set(nil) } catch { result.set(error.code) }
        }
        usleepMs(100)  // the wait has begun (a free before it is refused at its start as well)
        try client.close()
        let code = result.wait(untilMonotonicNanos: Clock.monotonicNanos() + 3_000_000_000)
        #expect(code == .some(.invalidState))
    }

    /// A push never waits for a connect or a login (the header's promise). A stream move the
    /// pushed audio makes due (its byte budget) opens a new stream, which may connect: taken on
    /// the pushing thread, the push waited for it (here 1 s); the worker takes such audio now.
    @Test func aPushThatMovesTheStreamDoesNotWaitForTheNewOne() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(openDelayMilliseconds: 1_000))
        var o = try pushOptions()
        o.streamBudgetBytes = 65_536  // due after 1 s of audio, forced at 2 s
        let client = try Client(options: o, service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        #expect(log.waitFor { $0.contains("start ctx-1") })
        let loud = (0..<1600).map { Int16($0 % 2 == 0 ? 12_000 : -12_000) }  // no pause
        var longest: UInt64 = 0
        for _ in 0..<40 {
            usleepMs(20)  // the worker is idle between pushes: each push may take its own chunks
            let t0 = Clock.monotonicNanos()
            loud.withUnsafeBufferPointer { try? client.pushAudio($0) }
            longest = max(longest, Clock.monotonicNanos() - t0)
        }
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000))
        #expect(service.streamsOpened.load(ordering: .relaxed) >= 2)  // the stream did move
        #expect(longest < 400_000_000, "a push took \(longest / 1_000_000) ms")
    }

    /// With a push wait, a push waits for room at most that long, also while the worker is in
    /// a connect (it holds the lock the room is read under): it waited for the whole connect.
    @Test func aPushWaitIsBoundedWhileTheWorkerConnects() throws {
        let service = FakeRecognitionService(.init(openDelayMilliseconds: 2_000))
        var o = try pushOptions()
        o.pushWaitMilliseconds = 100
        let client = try Client(options: o, service: service, handler: { _, _ in })
        defer { try? client.close() }
        try client.start()
        usleepMs(100)  // the worker is in the 2 s open now
        let chunk = [Int16](repeating: 100, count: 1600)
        let t0 = Clock.monotonicNanos()
        chunk.withUnsafeBufferPointer { try? client.pushAudio($0) }
        let took = (Clock.monotonicNanos() - t0) / 1_000_000
        #expect(took < 600, "\(took) ms")
    }

    /// Starts a context whose worker turn is held at its start (as by a connect or a login)
    /// until the returned shot is set.
    func startWithTheWorkerHeld(_ client: Client) throws -> OneShot<Bool> {
        let atStart = OneShot<Bool>()
        let release = OneShot<Bool>()
        client.turnStartingForTests = { atStart.set(true); _ = release.wait() }
        try client.start()
        #expect(atStart.wait(untilMonotonicNanos: Clock.monotonicNanos() + 5_000_000_000) == true)
        client.turnStartingForTests = nil
        return release
    }

    /// Responses that arrive while the worker is held up (a connect, a login) are queued for
    /// it, bounded in bytes: a server sending without end is ended (its stream closed with a
    /// parse error) and what it sends meanwhile dropped. The queue grew without limit.
    @Test func responsesQueuedWhileTheWorkerIsHeldUpAreBounded() throws {
        let log = EventLog()
        let client = try Client(options: try pushOptions(), service: FakeRecognitionService(), handler: log.handler)
        defer { try? client.close() }
        let release = try startWithTheWorkerHeld(client)
        let words = (0..<Int32(60)).map { SLUWord(text: String(repeating: "x", count: 1000), index: $0, startMilliseconds: 0, endMilliseconds: 0) }
        let bulky = SLUResponse(audioContext: "ctx", segmentId: 0, payload: .tentativeTranscript(text: "", words: words))
        for _ in 0..<600 { client.streamEvent(.response(bulky), generation: 99) }  // ~36 MB
        let queued = client.queuedResponseBytesForTests
        #expect(queued > 0 && queued <= Client.maxQueuedResponseBytes, "\(queued)")
        release.set(true)
        #expect(log.waitFor { $0.contains("start ctx-1") })
        try client.stop()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))  // every command taken
        #expect(client.queuedResponseBytesForTests == 0)
    }

    /// The same for what a server can send without end that is not a result: ends of speech
    /// (a Wyoming `transcript` with no words) and wake-word detections. Each was queued
    /// uncounted: 400,000 of each here made 800,000 commands.
    @Test func endsOfSpeechAndDetectionsQueuedWhileTheWorkerIsHeldUpAreBounded() throws {
        let log = EventLog()
        let messages = Locked<[String]>([])
        let client = try Client(options: try pushOptions(), service: FakeRecognitionService(), handler: { c, e in
            if case .error(let error) = e { messages.withLock { $0.append(error.message) } }
            log.handler(c, e)
        })
        defer { try? client.close() }
        let release = try startWithTheWorkerHeld(client)
        for _ in 0..<400_000 {
            client.streamEvent(.endpointed(ignoresTheRest: false), generation: 99)
            client.wakeEvent(.detection(name: "hey_jarvis", sample: nil), generation: 98)
        }
        let queued = client.queuedResponseBytesForTests
        #expect(queued > 0 && queued <= Client.maxQueuedResponseBytes, "\(queued)")
        let commands = client.queuedCommandsForTests
        #expect(commands <= Client.maxQueuedResponseBytes / 64 + Client.maxQueuedDetections + 2, "\(commands)")
        release.set(true)
        // The queue is full: the context's own stream, its answers refused too, ends with it
        // (the server is past the bound), and every command is taken.
        // 262,000 commands to take: seconds under ThreadSanitizer (it missed 2 s there).
        #expect(log.waitFor(timeoutMs: 30_000) { $0.contains { $0.hasPrefix("stop") } }, "\(log.lines)")
        #expect(messages.withLock { $0 }.allSatisfy { $0.contains("more than 16 MiB") }, "\(messages.withLock { $0 })")
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        #expect(client.queuedResponseBytesForTests == 0 && client.queuedCommandsForTests == 0)
    }

    /// A stream whose stop the server never answers (a hung replica) counts as lost after the
    /// finish timeout: its audio is replayed on a new stream, which finishes the context. The
    /// client stayed STOPPING for good.
    @Test func aStopNeverAnsweredIsRetriedOnANewStream() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(wordsFromAudio: true, ignoreStopOnStream: 1))
        var o = try pushOptions()
        o.finishTimeoutMilliseconds = 300
        o.reconnectInitialDelayMilliseconds = 10
        let client = try Client(options: o, service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        for k in 1...3 { [Int16](repeating: Int16(k), count: 1600).withUnsafeBufferPointer { try? client.pushAudio($0) } }
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        let lines = log.lines
        #expect(lines.last == "stop ctx-1", "\(lines)")
        #expect(lines.contains("segment final a1 a2 a3"), "\(lines)")
        #expect(!lines.contains { $0.hasPrefix("error") }, "\(lines)")
        #expect(service.streamsOpened.load(ordering: .relaxed) == 2)
    }

    /// A lane held behind a stream whose finish timed out, and whose replacement opened at the
    /// held lane's own start (the replay buffer no longer held the lost audio): the wait ended
    /// with no lane ending, and what the lane held (its `started` first) stayed held while its
    /// next results, taken on the receiving thread, went ahead: "the server sent a result
    /// before the stream's context started", and the context failed (a Whisper server more than
    /// 60 s behind real time, reproduced with the reference server at stop 42).
    @Test func aLaneWhoseWaitEndsWithoutAnEndAppliesWhatItHeldFirst() throws {
        let log = EventLog()
        let messages = Locked<[String]>([])
        let service = FakeRecognitionService(.init(wordsFromAudio: true, ignoreStopOnStream: 1))
        var o = try pushOptions()
        o.streamBudgetBytes = 65_536  // the first stream moves at 2 s (no pause in this audio)
        o.replayBufferMilliseconds = 1000
        o.finishTimeoutMilliseconds = 600
        o.reconnectInitialDelayMilliseconds = 10
        let client = try Client(options: o, service: service, handler: { c, e in
            if case .error(let error) = e { messages.withLock { $0.append(error.message) } }
            log.handler(c, e)
        })
        defer { try? client.close() }
        try client.start()
        #expect(log.waitFor { $0.contains("start ctx-1") })
        let loud = (0..<1600).map { Int16($0 % 2 == 0 ? 12_000 : -12_000) }
        for _ in 0..<35 { loud.withUnsafeBufferPointer { try? client.pushAudio($0) }; usleepMs(5) }
        // The first stream's finish times out; its audio left the 1 s buffer: the replacement
        // starts where the second stream does, and is after it in audio order.
        usleepMs(1_000)
        #expect(service.streamsOpened.load(ordering: .relaxed) == 3)
        for _ in 0..<5 { usleepMs(20); loud.withUnsafeBufferPointer { try? client.pushAudio($0) } }
        try? client.pushEnd()  // before the fix, the context had failed by now
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        let lines = log.lines
        #expect(!lines.contains("error parse"), "\(messages.withLock { $0 })")
        #expect(lines.filter { $0.hasPrefix("error") } == ["error network"], "\(lines)")
        #expect(messages.withLock { $0 }.first?.contains("the replay buffer overflowed while reconnecting") == true, "\(messages.withLock { $0 })")
        // The first stream's 2 s (the buffer kept from 2.5 s on; the half second after the
        // first stream's end went out on the second, and its words came).
        #expect(messages.withLock { $0 }.first?.contains(": 2.0 s of audio from 0.0 s into context") == true, "\(messages.withLock { $0 })")
        // The second stream's words, all 20 of them, final (the replacement, with no audio to
        // replay, ends its segment with none).
        let finals = lines.filter { $0.hasPrefix("segment final a") }
        #expect(finals == ["segment final " + Array(repeating: "a12000", count: 20).joined(separator: " ")], "\(lines)")
        #expect(lines.last == "stop ctx-1", "\(lines)")
    }

    /// 3 s of speech pushed at once with a 64 KiB budget (the first stream moves at 2 s: no
    /// pause in this audio), until `error` is logged and the client is idle.
    func runTwoStreamsUntil(_ error: String, service: FakeRecognitionService, log: EventLog,
                            configure: (inout ClientOptions) -> Void = { _ in }, timeoutMs: Int = 2_000,
                            handler: @escaping Client.EventHandler) throws {
        var o = try pushOptions()
        o.streamBudgetBytes = 65_536
        configure(&o)
        let client = try Client(options: o, service: service, handler: handler)
        defer { try? client.close() }
        try client.start()
        #expect(log.waitFor { $0.contains("start ctx-1") })
        let loud = (0..<1600).map { Int16($0 % 2 == 0 ? 12_000 : -12_000) }
        for _ in 0..<30 { loud.withUnsafeBufferPointer { try? client.pushAudio($0) } }
        #expect(log.waitFor(timeoutMs: timeoutMs) { $0.contains(error) }, "\(log.lines)")
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
    }

    /// A context that fails while an earlier stream of it still finishes (its stop sent, its
    /// server not answering): that stream is let go (reset) with the context. It was left open,
    /// read by nobody, holding its connection (a Wyoming or Riva socket) for as long as the
    /// server kept it, past spc_client_free.
    @Test func aFailedContextLetsGoOfTheStreamsStillFinishing() throws {
        let log = EventLog()
        // Stream 2 breaks the protocol (a failure that ends the context at once, not one that
        // waits for the stream before it, as a server's refusal does).
        let service = FakeRecognitionService(.init(failAfterChunks: (5, SpeechClientError(.parse, "malformed", grpcStatus: 13)),
                                                   failStream: 2, ignoreStopOnStream: 1))
        try runTwoStreamsUntil("error parse", service: service, log: log, handler: log.handler)
        #expect(service.streamsOpened.load(ordering: .relaxed) >= 2)
        // The first stream (stopped, its stop never answered) is let go with the context.
        #expect(service.cancelledStreams.withLock { $0 }.contains("s1"), "\(service.cancelledStreams.withLock { $0 })")
    }

    /// A later stream of a context refused by the server (an error that is not retried: a
    /// Wyoming `error` event, a gRPC refusal) while the stream before it still finishes: the
    /// context fails once that one has finished, its words confirmed. The failure ended the
    /// context at once: the earlier stream's final words, still to come, were dropped (its
    /// tentative ones delivered unconfirmed; a Wyoming server, which sends none, lost them all).
    @Test func aLaterStreamRefusedWaitsForTheWordsOfTheOneBeforeIt() throws {
        let log = EventLog()
        let confirmed = Locked<[Bool]>([])
        // The first stream answers its stop slowly (its words in 4 batches 200 ms apart); the
        // second is refused at its fifth chunk, at once.
        let service = FakeRecognitionService(.init(failAfterChunks: (5, SpeechClientError(.api, "refused", grpcStatus: 3)),
                                                   failStream: 2, finishInBatches: (5, 200)))
        try runTwoStreamsUntil("error api", service: service, log: log) { c, e in
            if case .segment(let s) = e, s.isFinal { confirmed.withLock { $0.append(s.words.allSatisfy { $0.isFinal }) } }
            log.handler(c, e)
        }
        let lines = log.lines
        // The first stream's words, final and confirmed (from its stop's answer), before the error.
        let first = lines.firstIndex { $0.hasPrefix("segment final w1 ") }
        let error = lines.firstIndex(of: "error api")
        #expect(first != nil && error != nil && first! < error!, "\(lines)")
        #expect(confirmed.withLock { $0.first } == true, "\(confirmed.withLock { $0 }) \(lines)")
    }

    /// A later stream of a context lost, its reconnection attempts running out, while the stream
    /// before it still finishes: the context fails once that one has finished, its words
    /// confirmed. It failed at once: the earlier stream's final words were dropped (a Wyoming
    /// server's whole utterance). The error names the audio from the lost stream's on.
    @Test func aLaterStreamsReconnectionRunningOutWaitsForTheWordsOfTheOneBeforeIt() throws {
        let log = EventLog()
        let confirmed = Locked<[Bool]>([])
        let messages = Locked<[String]>([])
        // Stream 2 is lost at its fifth chunk and no third stream opens; the first answers its
        // stop slowly (its words in batches 200 ms apart).
        let service = FakeRecognitionService(.init(failAfterChunks: (5, SpeechClientError(.network, "reset", grpcStatus: 14)),
                                                   failStream: 2, maxStreams: 2, finishInBatches: (5, 200)))
        try runTwoStreamsUntil("error network", service: service, log: log, configure: { o in
            o.reconnectAttempts = 1
            o.reconnectInitialDelayMilliseconds = 10
            o.reconnectMaxDelayMilliseconds = 10
        }) { c, e in
            if case .segment(let s) = e, s.isFinal { confirmed.withLock { $0.append(s.words.allSatisfy { $0.isFinal }) } }
            if case .error(let error) = e { messages.withLock { $0.append(error.message) } }
            log.handler(c, e)
        }
        let lines = log.lines
        let first = lines.firstIndex { $0.hasPrefix("segment final w1 ") }
        let error = lines.firstIndex(of: "error network")
        #expect(first != nil && error != nil && first! < error!, "\(lines)")
        #expect(confirmed.withLock { $0.first } == true, "\(confirmed.withLock { $0 }) \(lines)")
        let said = messages.withLock { $0 }
        #expect(said.count == 1 && said[0].contains("reconnection failed after 1 attempt(s)") && said[0].contains("from 2.0 s into the context"), "\(said)")
    }

    /// A later stream refused before its `started` (a quota on streams) while the stream before
    /// it still finishes: the refusal waits for that stream, which never answers its stop here,
    /// so its finish timeout ends the wait. The refused stream's start deadline stayed due: the
    /// worker expired it at every step, found it failed already, and spun, the finish timeout
    /// behind it never reached: the context hung, a core busy, until the client was freed.
    @Test func aLaterStreamRefusedBeforeItsStartedDoesNotHoldTheContext() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(ignoreStopOnStream: 1,
                                                   refuseStream: (2, SpeechClientError(.api, "too many streams", grpcStatus: 8))))
        try runTwoStreamsUntil("error api", service: service, log: log, configure: { o in
            o.startTimeoutMilliseconds = 300
            o.finishTimeoutMilliseconds = 1500
            o.reconnectInitialDelayMilliseconds = 10
        }, timeoutMs: 5_000, handler: log.handler)
    }

    /// The same, the attempt itself (a third stream, replaying the lost one's audio) heard
    /// words before it was lost too: they are delivered, unconfirmed, after the earlier
    /// stream's and before the error. The lost stream was let go with what it held (its words
    /// waited behind the earlier stream's), and they never came.
    @Test func aReconnectionRunningOutWhileAnEarlierStreamFinishesKeepsTheLastAttemptsWords() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(failAfterChunks: (5, SpeechClientError(.network, "reset", grpcStatus: 14)),
                                                   failStreams: [2, 3], wordsFromAudio: true, finishInBatches: (5, 200)))
        var o = try pushOptions()
        o.streamBudgetBytes = 65_536  // the first stream moves at 2 s (no pause in this audio)
        o.reconnectAttempts = 1
        o.reconnectInitialDelayMilliseconds = 10
        o.reconnectMaxDelayMilliseconds = 10
        let client = try Client(options: o, service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        // Loud (no pause), each chunk's first sample its number: words a1...a30.
        pushNumberedLoudChunks(client, 1...30)
        #expect(log.waitFor(timeoutMs: 5_000) { $0.contains("error network") }, "\(log.lines)")
        #expect(try client.waitIdle(timeoutMilliseconds: 5_000))
        let lines = log.lines
        let words = finalWords(lines)
        // The first stream's a1...a20, then what the third heard of the replay from 2 s (a21 on).
        #expect(words.starts(with: (1...20).map { "a\($0)" }), "\(lines)")
        #expect(words.contains("a21"), "\(lines)")
        let lastFinal = lines.lastIndex { $0.hasPrefix("segment final") }
        let error = lines.firstIndex(of: "error network")
        #expect(lastFinal != nil && error != nil && lastFinal! < error!, "\(lines)")
    }

    /// A server that answers the stop with its words final and then `finished` with an error
    /// code: the words, then the error, then the stop. Since a `finished` with an error is taken
    /// as a loss (the server may have stopped early: the audio after its last word goes on on a
    /// new stream), the server's error was in the log alone.
    @Test func aFinishedErrorAfterTheLastWordIsSaid() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(finishedErrorCode: "quota"))
        let client = try Client(options: try pushOptions(), service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        try pushThreeChunksAndEnd(client)
        #expect(try client.waitIdle(timeoutMilliseconds: 5_000))
        let lines = log.lines
        let final = lines.firstIndex { $0.hasPrefix("segment final") }
        let error = lines.firstIndex(of: "error api")
        #expect(final != nil && error != nil && final! < error!, "\(lines)")
        #expect(lines.last?.hasPrefix("stop ") == true, "\(lines)")
    }

    /// A server slower than real time answers a stop over longer than the finish timeout, its
    /// finals going further into the audio all along: it is waited for. Before, the stream was
    /// cut at the timeout and replayed (a second stream, the server loaded more); with the
    /// audio out of the replay buffer, the words not final yet were lost.
    @Test func aServerStillFinishingTheAudioIsWaitedFor() throws {
        // 36 words of 100 ms in 3 batches 300 ms apart: each reaches 1.2 s further.
        let (lines, service) = try thirtySixWordsFinishedSlowly(batches: (12, 300), idleWithinMilliseconds: 5000)
        #expect(!lines.contains { $0.hasPrefix("error") }, "\(lines)")
        #expect(lines.filter { $0.hasPrefix("segment final") } == ["segment final " + (1...36).map { "a\($0)" }.joined(separator: " ")], "\(lines)")
        #expect(service.streamsOpened.load(ordering: .relaxed) == 1)
    }

    /// A server answering a context's streams in turn (one model working through them): the
    /// second stream's answer starts only once the first one's is done, later than the finish
    /// timeout after the second's stop. Its clock starts when it becomes the first stream
    /// open: before, it was cut while the server was still busy with the first.
    @Test func aStreamAnsweredAfterTheOneBeforeItIsWaitedFor() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(wordsFromAudio: true, finishInBatches: (12, 300), answersInTurn: true))
        var o = try pushOptions()
        o.streamBudgetBytes = 65_536  // the first stream moves at 2 s (no pause in this audio)
        o.finishTimeoutMilliseconds = 500
        o.reconnectInitialDelayMilliseconds = 10
        let client = try Client(options: o, service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        // Loud (no pause), each chunk's first sample its number: 36 words of 100 ms.
        pushNumberedLoudChunks(client, 1...36)
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000))
        let lines = log.lines
        #expect(!lines.contains { $0.hasPrefix("error") }, "\(lines)")
        #expect(service.streamsOpened.load(ordering: .relaxed) == 2)
        let words = finalWords(lines)
        #expect(words == (1...36).map { "a\($0)" }, "\(lines)")
    }

    /// A server slower than real time keeps four streams of a context open (none finishes
    /// here); the microphone's next stream waits for room. Before its audio fills half the
    /// replay buffer, it opens past the window: before, it waited until the buffer dropped its
    /// audio (52.8 s lost with the Whisper reference server at 0.5 s decodes, stop 42).
    @Test func aStreamWaitingForRoomOpensBeforeTheBufferDropsItsAudio() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(ignoreStop: true))
        var o = try pushOptions()
        o.streamBudgetBytes = 65_536  // a new stream every 2 s (no pause in this audio)
        o.replayBufferMilliseconds = 4000
        let client = try Client(options: o, service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        #expect(log.waitFor { $0.contains("start ctx-1") })
        let loud = (0..<1600).map { Int16($0 % 2 == 0 ? 12_000 : -12_000) }
        for _ in 0..<160 { loud.withUnsafeBufferPointer { try? client.pushAudio($0) }; usleepMs(2) }  // 16 s
        let sent: () -> Int = { service.requests.withLock { $0.reduce(0) { n, r in if case .audio(let a) = r { n + a.count } else { n } } } }
        let deadline = Clock.monotonicNanos() + 5_000_000_000
        while sent() < 160 * 1600 && Clock.monotonicNanos() < deadline { usleepMs(10) }
        #expect(sent() == 160 * 1600, "\(sent()) of \(160 * 1600) samples reached the server")
        #expect(service.streamsOpened.load(ordering: .relaxed) >= 6)
        #expect(!log.lines.contains { $0.hasPrefix("error") }, "\(log.lines)")
    }

    /// The same server sending its finals a word at a time (less than a second of audio each)
    /// does not hold the stream: the finish timeout still ends it (a server trickling finals
    /// cannot keep a stream for ever).
    @Test func finalsTricklingInLessThanASecondAtATimeDoNotHoldTheStream() throws {
        let (_, service) = try thirtySixWordsFinishedSlowly(batches: (1, 150), reconnectAttempts: 1, idleWithinMilliseconds: 10_000)
        // Cut after 500 ms (the words then a second further each 1.5 s), replayed once.
        #expect(service.streamsOpened.load(ordering: .relaxed) >= 2)
        // Its connection is retired: the replay goes on a new one (`HTTP2Connection.retire`).
        #expect(service.retiredStreams.withLock { $0 }.first == "s1", "\(service.retiredStreams.withLock { $0 })")
    }

    /// 36 chunks of 100 ms pushed to a server answering the stop in `batches` (500 ms finish
    /// timeout); the event lines once the client is idle (expected within `idleWithinMilliseconds`), and the server.
    func thirtySixWordsFinishedSlowly(batches: (words: Int, intervalMilliseconds: Int), reconnectAttempts: Int = 6,
                                      idleWithinMilliseconds: Int) throws
        -> (lines: [String], service: FakeRecognitionService) {
        let log = EventLog()
        let service = FakeRecognitionService(.init(wordsFromAudio: true, finishInBatches: batches))
        var o = try pushOptions()
        o.finishTimeoutMilliseconds = 500
        o.reconnectAttempts = reconnectAttempts
        o.reconnectInitialDelayMilliseconds = 10
        let client = try Client(options: o, service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        for k in 1...36 { [Int16](repeating: Int16(k), count: 1600).withUnsafeBufferPointer { try? client.pushAudio($0) } }
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: idleWithinMilliseconds))
        return (log.lines, service)
    }

    /// When no stream finishes it, the context fails with a timeout naming the audio, then its
    /// stop: no longer STOPPING for ever.
    @Test func aContextNoStreamFinishesFailsWithATimeout() throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(ignoreStop: true))
        var o = try pushOptions()
        o.finishTimeoutMilliseconds = 200
        o.reconnectAttempts = 1
        o.reconnectInitialDelayMilliseconds = 10
        let client = try Client(options: o, service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        [Int16](repeating: 5, count: 1600).withUnsafeBufferPointer { try? client.pushAudio($0) }
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        #expect(log.lines.suffix(2).first == "error timeout", "\(log.lines)")
        #expect(log.lines.last == "stop ctx-1", "\(log.lines)")
    }

    @Test func applicationDeliveryRunsCallbacksInsideDispatch() throws {
        let log = EventLog()
        var o = try pushOptions()
        o.delivery = .application
        let client = try Client(options: o, service: FakeRecognitionService(), handler: log.handler)
        #expect(client.eventFD >= 0)
        try client.start()
        let samples = [Int16](repeating: 7, count: 1600)
        for _ in 0..<3 { samples.withUnsafeBufferPointer { try? client.pushAudio($0) } }
        try client.pushEnd()
        // Idle does not wait for callbacks in this mode: nothing has run yet.
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        #expect(log.lines.isEmpty)
        var pfd = pollfd(fd: client.eventFD, events: Int16(POLLIN), revents: 0)
        #expect(poll(&pfd, 1, 1000) == 1)
        // One at a time: connection states (not logged here) come first, then the start.
        var ran = 0
        while log.lines.isEmpty && ran < 10 { ran += try client.dispatch(maxEvents: 1) }
        #expect(log.lines == ["start ctx-1"])
        let rest = try client.dispatch(maxEvents: 0)
        #expect(rest >= 2)
        #expect(log.lines.last == "stop ctx-1")
        #expect(log.lines.contains("segment final w1 w2 w3"))
        // Nothing pending: the fd is no longer readable.
        pfd.revents = 0
        #expect(poll(&pfd, 1, 0) == 0)
        try client.close()
    }

    /// A response past the assembler's bounds ends the stream and the context: one parse error,
    /// then the stop, and the client is idle. Taken on the receiving thread while the worker is
    /// idle (`later`: the stream is then ended through the worker), or by the worker.
    @Test(arguments: [true, false]) func aMalformedResponseEndsTheContext(later: Bool) throws {
        let log = EventLog()
        let service = FakeRecognitionService(.init(badWordAtChunk: 2, badWordLater: later))
        let client = try Client(options: try pushOptions(), service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        let chunk = [Int16](repeating: 1000, count: 1600)
        for _ in 0..<2 { chunk.withUnsafeBufferPointer { try? client.pushAudio($0) } }
        log.waitFor { $0.contains("stop ctx-1") }
        #expect(log.lines.filter { !$0.hasPrefix("segment") } == ["start ctx-1", "error parse", "stop ctx-1"], "\(log.lines)")
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
    }

    /// The event fd is readable exactly while events are pending (spc_client_event_fd's
    /// promise): a dispatcher racing a busy producer never finds it readable with nothing to
    /// run, and it is quiet once everything ran.
    @Test func applicationDeliveryFdIsReadableOnlyWhileEventsArePending() throws {
        var o = try pushOptions(chunkMs: 20)
        o.delivery = .application
        let stopped = Atomic<Bool>(false)
        let client = try Client(options: o, service: FakeRecognitionService()) { _, event in
            if case .stop = event { stopped.store(true, ordering: .relaxed) }
        }
        try client.start()
        let pusher = try NativeThread(name: "test-pusher") {
            let samples = [Int16](repeating: 7, count: 320)
            for _ in 0..<1000 { samples.withUnsafeBufferPointer { try? client.pushAudio($0) } }
            try? client.pushEnd()
        }
        defer { pusher.join() }
        var emptyWakes = 0
        var ran = 0
        var pfd = pollfd(fd: client.eventFD, events: Int16(POLLIN), revents: 0)
        let deadline = Clock.monotonicNanos() + 30_000_000_000
        while !stopped.load(ordering: .relaxed) && Clock.monotonicNanos() < deadline {
            pfd.revents = 0
            guard poll(&pfd, 1, 100) == 1 else { continue }
            let n = try client.dispatch(maxEvents: 0)
            if n == 0 { emptyWakes += 1 }
            ran += n
        }
        let stoppedNow = stopped.load(ordering: .relaxed)
        #expect(stoppedNow)
        #expect(emptyWakes == 0, "readable with nothing pending \(emptyWakes) time(s), \(ran) events run")
        pfd.revents = 0
        #expect(poll(&pfd, 1, 0) == 0)
        try client.close()
    }

    @Test func applicationDeliveryFreeRunsPendingCallbacksAndRefusesFromInside() throws {
        let refused = Atomic<Bool>(false)
        let log = EventLog()
        var o = try pushOptions()
        o.delivery = .application
        let client = try Client(options: o, service: FakeRecognitionService(), handler: { c, e in
            if case .start = e {
                do throws(SpeechClientError) { try c.close() } catch { refused.store(error.code == .invalidState, ordering: .relaxed) }
            }
            log.handler(c, e)
        })
        try client.start()
        try client.stop()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        var ran = 0
        while log.lines.isEmpty && ran < 10 { ran += try client.dispatch(maxEvents: 1) }
        let wasRefused = refused.load(ordering: .relaxed)
        #expect(wasRefused)
        try client.close()   // the stop still pending runs here, on this thread
        #expect(log.lines.first == "start ctx-1")
        #expect(log.lines.last == "stop ctx-1")
        let threadMode = try Client(options: try pushOptions(), service: FakeRecognitionService(), handler: nil)
        #expect(throws: SpeechClientError.self) { _ = try threadMode.dispatch(maxEvents: 0) }
        #expect(threadMode.eventFD == -1)
        try threadMode.close()
    }

    @Test func realNetworkServiceReportsUnreachableServer() throws {
        let log = EventLog()
        let client = try Client(options: try pushOptions(), handler: log.handler)
        defer { try? client.close() }
        try client.start()
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000))
        #expect(log.lines == ["error network", "stop "])
    }

    @Test func aRefusedConnectionCarriesGRPCStatusUnavailable() throws {
        let errors = Locked<[SpeechClientError]>([])
        let client = try Client(options: try pushOptions()) { _, event in
            if case .error(let e) = event { errors.withLock { $0.append(e) } }
        }
        defer { try? client.close() }
        try client.start()
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000))
        #expect(errors.withLock { $0 }.map(\.grpcStatus) == [14])
    }

    @Test func rejectedTokenIsRetriedOnceThenAnAuthError() throws {
        let log = EventLog()
        let once = FakeRecognitionService(.init(rejectStreams: 1))
        let a = try Client(options: try pushOptions(), service: once, handler: log.handler)
        try a.start()
        for _ in 0..<400 where a.currentState != .listening { usleepMs(5) }
        try a.stop()
        #expect(try a.waitIdle(timeoutMilliseconds: 5000))
        try a.close()
        #expect(log.lines.filter { !$0.hasPrefix("segment") } == ["start ctx-1", "stop ctx-1"])
        let opened = once.streamsOpened.load(ordering: .relaxed)
        #expect(opened == 2)

        let log2 = EventLog()
        let always = FakeRecognitionService(.init(rejectStreams: 100))
        let b = try Client(options: try pushOptions(), service: always, handler: log2.handler)
        try b.start()
        #expect(try b.waitIdle(timeoutMilliseconds: 5000))
        try b.close()
        #expect(log2.lines == ["error auth", "stop "])
        let opened2 = always.streamsOpened.load(ordering: .relaxed)
        #expect(opened2 == 2)
    }

    /// A stream whose `started` is its own (Riva's, made before the server answers) and a
    /// server refusing the credentials every time (a key revoked mid-session): one fresh
    /// attempt, then the auth error and the stop. Before, its own `started` cleared the retry
    /// flag before each refusal: retried forever, each time as attempt 1, the context never
    /// ending.
    @Test func credentialsRefusedAfterAStreamsOwnStartedAreRetriedOnce() throws {
        let log = EventLog()
        let always = FakeRecognitionService(.init(rejectStreams: 100, ownStarted: true))
        let client = try Client(options: try pushOptions(), service: always, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        #expect(log.lines.filter { $0.hasPrefix("error") } == ["error auth"], "\(log.lines.prefix(8))")
        #expect(always.streamsOpened.load(ordering: .relaxed) == 2)
    }

    @Test func audioSentBeforeATokenRejectionIsReplayed() throws {
        // The fake refuses the first stream at its start; the chunks pushed meanwhile went to
        // the refused stream. After the fresh login they must reach the server all the same.
        let log = EventLog()
        let service = FakeRecognitionService(.init(rejectStreams: 1))
        let client = try Client(options: try pushOptions(), service: service, handler: log.handler)
        defer { try? client.close() }
        try client.start()
        try pushThreeChunksAndEnd(client)
        #expect(log.lines.filter { $0.hasPrefix("segment final") } == ["segment final w1 w2 w3"], "\(log.lines)")
        #expect(log.lines.first == "start ctx-1" && log.lines.last == "stop ctx-1")
        #expect(service.streamsOpened.load(ordering: .relaxed) == 2)
    }

    @Test func idleStreamIsClosedAndReopenedOnDemand() throws {
        var o = try pushOptions()
        o.idleStreamMilliseconds = 50
        let service = FakeRecognitionService()
        let log = EventLog()
        let client = try Client(options: o, service: service, handler: log.handler)
        defer { try? client.close() }
        for round in 1...2 {
            try client.start()
            for _ in 0..<400 where client.currentState != .listening { usleepMs(5) }
            try client.stop()
            #expect(try client.waitIdle(timeoutMilliseconds: 5000))
            for _ in 0..<100 where service.streamsFinished.load(ordering: .relaxed) < round { usleepMs(5) }
            let finished = service.streamsFinished.load(ordering: .relaxed)
            #expect(finished == round)
        }
        let opened = service.streamsOpened.load(ordering: .relaxed)
        #expect(opened == 2)
    }

    @Test func anAudioInputSetWithoutItsSetterIsCheckedByTheConstructor() throws {
        let bad: [(AudioInput, String)] = [
            (.descriptor(fd: 0, sampleRate: 16_000, channels: 0), "channel count 0"),
            (.push(sampleRate: 0, channels: 1), "push sample rate 0"),
            (.push(sampleRate: 16_000, channels: 0), "push channel count 0"),
            (.file(path: ""), "path must not be empty"),
        ]
        for (input, message) in bad {
            var o = try pushOptions()
            o.audio = input
            #expect { try Client(options: o, service: FakeRecognitionService(), handler: nil) } throws: {
                ($0 as? SpeechClientError)?.code == .invalidArgument && "\($0)".contains(message)
            }
        }
        var o = try pushOptions()
        o.chunkMilliseconds = 0
        #expect { try Client(options: o, service: FakeRecognitionService(), handler: nil) } throws: {
            ($0 as? SpeechClientError)?.code == .invalidArgument && "\($0)".contains("chunk duration 0 ms")
        }
    }

    @Test func prepareOnInitFailsInTheConstructor() throws {
        var o = try pushOptions()
        o.prepareOnInit = true
        #expect { try Client(options: o, handler: nil) } throws: { ($0 as? SpeechClientError)?.code == .network }
    }

    @Test func callbacksMayCallTheAPIAndFreeFromCallbackIsRefused() throws {
        let refused = Atomic<Bool>(false)
        let restarted = Atomic<Int>(0)
        let client = try Client(options: try pushOptions(), service: FakeRecognitionService(), handler: { client, event in
            if case .stop = event {
                do throws(SpeechClientError) { try client.close() } catch { refused.store(error.code == .invalidState, ordering: .relaxed) }
                if restarted.add(1, ordering: .relaxed).newValue == 1 { try? client.start(); try? client.stop() }
            }
        })
        try client.start()
        try client.stop()
        for _ in 0..<400 where restarted.load(ordering: .relaxed) < 2 { usleepMs(5) }
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        let refusedValue = refused.load(ordering: .relaxed)
        #expect(refusedValue)
        let restartedCount = restarted.load(ordering: .relaxed)
        #expect(restartedCount == 2)
        try client.close()
    }

    @Test func closeWhileStreamingDeliversQueuedEventsAndReturns() throws {
        let log = EventLog()
        let client = try Client(options: try pushOptions(), service: FakeRecognitionService(), handler: log.handler)
        try client.start()
        let samples = [Int16](repeating: 0, count: 1600)
        for _ in 0..<50 { samples.withUnsafeBufferPointer { try? client.pushAudio($0) } }
        try client.close()
        let count = log.lines.count
        usleepMs(50)
        #expect(log.lines.count == count)
        #expect(throws: SpeechClientError.self) { try client.start() }
    }
}

@Suite struct EventQueueBoundTests {
    @Test func tentativeSnapshotsAreDroppedWhenTheApplicationFallsFarBehind() throws {
        var o = try pushOptions()
        o.delivery = .application
        let log = EventLog()
        let client = try Client(options: o, service: FakeRecognitionService(), handler: log.handler)
        defer { try? client.close() }
        func segment(_ final: Bool, _ n: Int) -> Segment {
            Segment(contextId: "c", segmentId: 0, isFinal: final,
                    words: [Segment.Word(text: "w\(n)", index: 0, startMilliseconds: 0, endMilliseconds: 1, isFinal: final)],
                    intent: nil, intentIsFinal: false, entities: [])
        }
        // Nobody dispatches: a flood of tentatives, then the final and a stop.
        let flood = Client.maxPendingEvents + 5_000
        for n in 0..<flood { client.emit(.segment(segment(false, n))) }
        client.emit(.segment(segment(true, flood)))
        client.emit(.stop(contextId: "c"))
        var ran = 0
        while true {
            let n = try client.dispatch(maxEvents: 0)
            if n == 0 { break }
            ran += n
        }
        let lines = log.lines
        #expect(ran == Client.maxPendingEvents + 2)
        #expect(lines.suffix(2) == ["segment final w\(flood)", "stop c"])
        #expect(lines.first == "segment tentative w0")
        // Past the bound, the newest tentative took the place of the one still waiting.
        #expect(lines[Client.maxPendingEvents - 1] == "segment tentative w\(flood - 1)")
    }

    /// Issue 23: finals are never dropped, so an application that takes no callbacks while a
    /// server floods finals would let the queue grow without end: past 32 MiB the context ends
    /// with an error naming the limit, and everything queued is still delivered.
    @Test func finalsPastTheBoundEndTheContextWithAnError() throws {
        var o = try pushOptions()
        o.delivery = .application  // nobody dispatches until the end
        let log = EventLog()
        let client = try Client(options: o, service: FakeRecognitionService(.init(bulkyFinals: true)), handler: log.handler)
        defer { try? client.close() }
        try client.start()
        let chunk = [Int16](repeating: 100, count: 1600)
        for _ in 0..<250 { chunk.withUnsafeBufferPointer { try? client.pushAudio($0) } }
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 20_000))
        while try client.dispatch(maxEvents: 0) > 0 {}
        let lines = log.lines
        let finals = lines.filter { $0.hasPrefix("segment final") }.count
        #expect(finals > 100 && finals < 250, "\(finals) finals")
        #expect(lines.filter { $0.hasPrefix("error") } == ["error noMemory"])
        #expect(lines.last?.hasPrefix("stop") == true)
    }
}

/// Issue 10: ordering and completeness under load, in both delivery modes. 600 audio chunks
/// pushed at once make the fake server answer 600 tentatives, then 600 final words, the
/// segment end and finished: 1,203 events as fast as the worker makes them.
@Suite struct DeliveryUnderLoadTests {
    static let chunks = 600

    private func run(_ delivery: Delivery) throws -> [String] {
        var o = try pushOptions(chunkMs: 20)
        o.delivery = delivery
        let log = EventLog()
        let client = try Client(options: o, service: FakeRecognitionService(), handler: log.handler)
        defer { try? client.close() }
        let done = Atomic<Bool>(false)
        var dispatcher: NativeThread?
        if delivery == .application {
            let fd = client.eventFD
            dispatcher = try NativeThread(name: "test-dispatch") {
                while !done.load(ordering: .relaxed) {
                    var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                    _ = poll(&p, 1, 20)
                    _ = try? client.dispatch(maxEvents: 0)
                }
            }
        }
        try client.start()
        let samples = [Int16](repeating: 500, count: 320 * Self.chunks)
        samples.withUnsafeBufferPointer { try? client.pushAudio($0) }
        try client.pushEnd()
        for _ in 0..<2_000 where !(log.lines.last ?? "").hasPrefix("stop") { usleepMs(10) }
        done.store(true, ordering: .relaxed)
        dispatcher?.join()
        return log.lines
    }

    @Test func bothModesDeliverEveryEventInOrder() throws {
        let thread = try run(.thread)
        let application = try run(.application)
        #expect(thread == application)
        #expect(thread.first == "start ctx-1")
        #expect(thread.last == "stop ctx-1")
        // Each chunk's tentative, in order (w1 ... w2000), then the final words one by one.
        let perChunk = Array(thread.dropFirst().prefix(Self.chunks))
        #expect(perChunk == (1...Self.chunks).map { "segment tentative w\($0)" })
        #expect(thread.count == 1 + Self.chunks + Self.chunks + 1 + 1, "\(thread.count) events")
        #expect(thread[thread.count - 2] == "segment final " + (1...Self.chunks).map { "w\($0)" }.joined(separator: " "))
    }
}
