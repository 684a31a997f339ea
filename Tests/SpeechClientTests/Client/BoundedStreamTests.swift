import Synchronization
#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import SpeechClient

/// Issue 18: every context on its own stream, long contexts moved to fresh streams within a byte
/// budget, lost streams replayed, and no word lost or repeated at any seam.
@Suite struct BoundedStreamTests {
    /// Chunk k (0-based) of 100 ms: its first sample is k+1 (the fake names the word "a<k+1>");
    /// loud, except two quiet chunks (a 200 ms pause) every `pauseEvery`.
    static func chunk(_ k: Int, pauseEvery: Int = 8) -> [Int16] {
        let quiet = pauseEvery > 0 && (k % pauseEvery == pauseEvery - 2 || k % pauseEvery == pauseEvery - 1)
        var c = [Int16](repeating: quiet ? 0 : 3000, count: 1600)
        c[0] = Int16(k + 1)
        return c
    }

    /// Final words in delivery order, with their start times.
    final class Finals: @unchecked Sendable {
        let words = Locked<[(String, Int32, Bool)]>([])
        let log = EventLog()
        func handler(_ client: Client, _ event: ClientEvent) {
            log.handler(client, event)
            if case .segment(let s) = event, s.isFinal {
                words.withLock { $0.append(contentsOf: s.words.map { ($0.text, $0.startMilliseconds, $0.isFinal) }) }
            }
        }
    }

    func run(chunks: Int, budget: Int, behaviour: FakeRecognitionService.Behaviour, pauseEvery: Int = 8,
             reconnectDelayMilliseconds: Int = 10, finishTimeoutMilliseconds: Int? = nil) throws -> (Finals, FakeRecognitionService) {
        let finals = Finals()
        let service = FakeRecognitionService(behaviour)
        var o = try pushOptions()
        o.streamBudgetBytes = budget
        o.reconnectInitialDelayMilliseconds = reconnectDelayMilliseconds
        if let ms = finishTimeoutMilliseconds { o.finishTimeoutMilliseconds = ms }
        let client = try Client(options: o, service: service, handler: finals.handler)
        defer { try? client.close() }
        try client.start()
        for k in 0..<chunks {
            Self.chunk(k, pauseEvery: pauseEvery).withUnsafeBufferPointer { try? client.pushAudio($0) }
            if k % 10 == 9 { usleepMs(5) }
        }
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000))
        return (finals, service)
    }

    @Test func eachContextHasItsOwnStreamEndedCleanly() throws {
        let log = EventLog()
        let service = FakeRecognitionService()
        let client = try Client(options: try pushOptions(), service: service, handler: log.handler)
        defer { try? client.close() }
        for _ in 0..<2 {
            try client.start()
            try pushThreeChunksAndEnd(client)
        }
        #expect(log.lines.filter { $0.hasPrefix("start") || $0.hasPrefix("stop") } == ["start ctx-1", "stop ctx-1", "start ctx-2", "stop ctx-2"])
        #expect(service.streamsOpened.load(ordering: .relaxed) == 2)
        // Each ended with a half-close after its stop (END_STREAM), not abandoned.
        #expect(service.streamsFinished.load(ordering: .relaxed) == 2)
    }

    @Test func aLongContextMovesToNewStreamsWithEveryWordOnceAndInOrder() throws {
        // 64 KiB budget: ~20 chunks per stream at most, moved at a pause from ~10.
        let (finals, service) = try run(chunks: 80, budget: 65_536, behaviour: .init(wordsFromAudio: true))
        let words = finals.words.withLock { $0 }
        #expect(words.map(\.0) == (1...80).map { "a\($0)" })
        // Word times continue across streams: the fake times word i of a stream at i*100 ms.
        #expect(words.map(\.1) == (0..<80).map { Int32($0 * 100) })
        let opened = service.streamsOpened.load(ordering: .relaxed)
        #expect(opened >= 4)
        #expect(finals.log.lines.filter { $0.hasPrefix("start") || $0.hasPrefix("stop") || $0.hasPrefix("error") } == ["start ctx-1", "stop ctx-1"])
    }

    @Test func withoutAPauseTheStreamMovesAtTheBudget() throws {
        let (finals, service) = try run(chunks: 50, budget: 65_536, behaviour: .init(wordsFromAudio: true), pauseEvery: 0)
        #expect(finals.words.withLock { $0 }.map(\.0) == (1...50).map { "a\($0)" })
        let opened = service.streamsOpened.load(ordering: .relaxed)
        #expect(opened >= 3)
    }

    @Test(arguments: [1, 2, 3]) func aLaneLostAnywhereIsReplayedWithoutRepeats(stream: Int) throws {
        let reset = SpeechClientError(.network, "reset")
        let (finals, service) = try run(chunks: 60, budget: 65_536,
                                        behaviour: .init(failAfterChunks: (5, reset), failStream: stream, wordsFromAudio: true))
        #expect(finals.words.withLock { $0 }.map(\.0) == (1...60).map { "a\($0)" })
        #expect(!finals.log.lines.contains { $0.hasPrefix("error") })
        // At least one rotation and the replacement of the lost lane.
        let opened = service.streamsOpened.load(ordering: .relaxed)
        #expect(opened >= 3)
    }

    /// An outage longer than a stream carries: the audio pushed meanwhile (6 s, nothing of it
    /// final) is replayed on as many streams as the budget needs, each within it, every word once
    /// and in order. On one stream it was 60 chunks against a budget of about 20: behind nginx, a
    /// 413 and the context lost.
    @Test func aReplayLongerThanTheBudgetGoesOutOnSeveralStreams() throws {
        let reset = SpeechClientError(.network, "reset")
        let (finals, service) = try run(chunks: 60, budget: 65_536, behaviour: .init(failAfterChunks: (3, reset), failStream: 1, wordsFromAudio: true),
                                        reconnectDelayMilliseconds: 500)
        #expect(finals.words.withLock { $0 }.map(\.0) == (1...60).map { "a\($0)" })
        #expect(!finals.log.lines.contains { $0.hasPrefix("error") })
        let most = service.mostChunksOnAStream.load(ordering: .relaxed)
        #expect(most * Lane.audioBytes(samples: 1_600) <= 65_536, "\(most) chunks on one stream")
        #expect(service.streamsOpened.load(ordering: .relaxed) >= 4)
    }

    /// An outage of 20 s against a budget of about 2 s: ten pieces and more to replay. At most
    /// `LaneSupervisor.maxOpenLanes` streams are open at once, the rest opening as earlier ones
    /// finish, every word once and in order. All at once, they were as many streams as pieces.
    @Test func aLongReplayKeepsAtMostFourStreamsOpenAtOnce() throws {
        let reset = SpeechClientError(.network, "reset")
        let (finals, service) = try run(chunks: 200, budget: 65_536, behaviour: .init(failAfterChunks: (3, reset), failStream: 1, wordsFromAudio: true),
                                        reconnectDelayMilliseconds: 500)
        #expect(finals.words.withLock { $0 }.map(\.0) == (1...200).map { "a\($0)" })
        #expect(!finals.log.lines.contains { $0.hasPrefix("error") })
        #expect(service.streamsOpened.load(ordering: .relaxed) >= 11)
        let most = service.mostStreamsOpenAtOnce.load(ordering: .relaxed)
        #expect(most <= LaneSupervisor.maxOpenLanes, "\(most) streams open at once")
    }

    /// Issue 23: a later lane's results are held while an earlier lane drains; a server that
    /// never finishes the earlier one and floods the later one ends the context with a named
    /// error instead of growing the held results without bound. (A 256 KiB budget: the three
    /// later lanes that may open meanwhile carry more than the bound's worth of 60 KB tentatives.)
    @Test func resultsHeldBehindAnEarlierStreamAreBoundedInBytes() throws {
        let (finals, service) = try run(chunks: 150, budget: 262_144,
                                        behaviour: .init(ignoreStopOnStream: 1, bulkyTentatives: true))
        let errors = finals.log.lines.filter { $0.hasPrefix("error") }
        #expect(errors == ["error parse"], "\(finals.log.lines.suffix(5)) \(service.streamsOpened.load(ordering: .relaxed)) streams")
        #expect(service.streamsOpened.load(ordering: .relaxed) >= 2)
    }

    /// Responses of a kind the client does not know (a newer server's notices), 5,000 on each
    /// stream naming a context of 1 KiB, while later streams wait behind an earlier one that
    /// finishes slowly: they are ignored, not held. Held, they counted against the 4 MiB of held
    /// results (64 bytes and the context's name each) and ended the context with a parse error.
    @Test func responsesOfAnUnknownKindAreNotHeldBehindAnEarlierStream() throws {
        let (finals, service) = try run(chunks: 40, budget: 65_536,
                                        behaviour: .init(wordsFromAudio: true, unknownPayloadsAfterStarted: 5_000, unknownPayloadContextBytes: 1_024,
                                                         finishInBatches: (words: 1, intervalMilliseconds: 30), answersInTurn: true))
        #expect(service.streamsOpened.load(ordering: .relaxed) >= 2)
        #expect(!finals.log.lines.contains { $0.hasPrefix("error") }, "\(finals.log.lines.suffix(5))")
        #expect(finals.words.withLock { $0 }.map(\.0) == (1...40).map { "a\($0)" })
    }

    /// The first stream of a long context fails while it finishes (an error that is not
    /// retried: a Wyoming `error` event, a gRPC status the server chose), after the later streams
    /// finished and their results wait behind it. Those results are the server's words for the
    /// rest of the context: they are delivered, then the error and the stop. The failed stream's
    /// own words, tentative so far and never replaced, are delivered final and unconfirmed.
    @Test func aFailedStreamDropsNeitherItsWordsNorThoseOfLaterStreams() throws {
        let refused = SpeechClientError(.api, "the server reported an error")
        let (finals, service) = try run(chunks: 40, budget: 65_536,
                                        behaviour: .init(wordsFromAudio: true, failStopOnStream: (1, refused, 1000)))
        let words = finals.words.withLock { $0 }
        #expect(words.map(\.0) == (1...40).map { "a\($0)" })
        #expect(service.streamsOpened.load(ordering: .relaxed) >= 2)
        // The first stream's words are unconfirmed, the later streams' confirmed.
        let unconfirmed = words.filter { !$0.2 }.map(\.0)
        #expect(!unconfirmed.isEmpty && unconfirmed.count < 40)
        #expect(unconfirmed == (0..<unconfirmed.count).map { "a\($0 + 1)" })
        let ends = finals.log.lines.filter { $0.hasPrefix("start") || $0.hasPrefix("stop") || $0.hasPrefix("error") }
        #expect(ends == ["start ctx-1", "error api", "stop ctx-1"])
    }

    /// A later stream fails (an error not retried) while an earlier one is still open: the
    /// results it had sent wait behind the earlier stream. They are the server's words for its
    /// audio: delivered (unconfirmed) with the earlier stream's, then the error and the stop.
    /// Before, the failed stream's waiting results went with it. The failure waits for the
    /// earlier stream's words (since 0.11); that one never answers its stop here, so it is given
    /// up at the finish timeout (600 ms) and its audio replayed first.
    @Test func aFailedStreamWaitingBehindAnEarlierOneKeepsItsWords() throws {
        let refused = SpeechClientError(.api, "the server reported an error")
        let (finals, service) = try run(chunks: 40, budget: 65_536,
                                        behaviour: .init(wordsFromAudio: true, ignoreStopOnStream: 1, failStopOnStream: (2, refused, 300)),
                                        finishTimeoutMilliseconds: 600)
        let words = finals.words.withLock { $0 }
        #expect(service.streamsOpened.load(ordering: .relaxed) >= 2)
        #expect(words.map(\.0) == (1...40).map { "a\($0)" }, "\(words.map(\.0))")
        let ends = finals.log.lines.filter { $0.hasPrefix("start") || $0.hasPrefix("stop") || $0.hasPrefix("error") }
        #expect(ends == ["start ctx-1", "error api", "stop ctx-1"])
    }

    /// Pushed (live) audio: the first stream's server, which answered each chunk, says nothing
    /// after its stop (a replica hung behind a proxy), while the audio from its floor on fills
    /// half of the replay buffer. It is taken as hung once it has been silent for the start
    /// timeout (300 ms here) with audio still coming, and its
    /// audio replayed on a new stream while the buffer holds it: every word once, in order,
    /// long before the finish timeout (60 s). Before, the stream was waited for until then,
    /// and a microphone's audio had aged out of the buffer by that time.
    @Test func aStoppedStreamWhoseServerHungIsReplayedWhileItsLiveAudioIsHeld() throws {
        let finals = Finals()
        let service = FakeRecognitionService(.init(wordsFromAudio: true, ignoreStopOnStream: 1))
        var o = try pushOptions()
        o.streamBudgetBytes = 65_536
        o.reconnectInitialDelayMilliseconds = 10
        o.replayBufferMilliseconds = 4_000
        o.startTimeoutMilliseconds = 300
        let logs = Locked<[String]>([])
        o.logLevel = .info
        let client = try Client(options: o, service: service) { c, event in
            if case .log(_, let message) = event { logs.withLock { $0.append(message) } }
            finals.handler(c, event)
        }
        defer { try? client.close() }
        try client.start()
        let t0 = Clock.monotonicNanos()
        // 2.5 s at once (the first stream moves at a pause from about 1 s), then live audio
        // goes on coming, 100 ms every 40 ms: the rule holds while audio can still age out.
        for k in 0..<25 {
            try Self.chunk(k).withUnsafeBufferPointer { try client.pushAudio($0) }
            if k % 10 == 9 { usleepMs(5) }
        }
        for k in 25..<40 {
            usleepMs(40)
            try Self.chunk(k).withUnsafeBufferPointer { try client.pushAudio($0) }
        }
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000))
        let took = (Clock.monotonicNanos() - t0) / 1_000_000
        #expect(took < 10_000)
        let words = finals.words.withLock { $0 }
        #expect(words.map(\.0) == (1...40).map { "a\($0)" }, "\(words.map(\.0))")
        #expect(service.streamsOpened.load(ordering: .relaxed) >= 3)
        #expect(logs.withLock { $0 }.contains { $0.contains("taken as hung") }, "\(logs.withLock { $0 })")
        #expect(!finals.log.lines.contains { $0.hasPrefix("error") }, "\(finals.log.lines)")
    }

    /// A server that answered as it heard freezes early in a live stream whose audio has no
    /// pause (so no rotation comes before the stream budget, far off here): the stream is
    /// stopped once its audio since the last words fills half the replay buffer, its server
    /// says nothing to the stop either, and it is taken as hung and replayed while the buffer
    /// still holds that audio: every word once, in order. Before, the stream went on to its
    /// budget (31 s), the context's stop came first (the push ended) and it was waited for
    /// until the finish timeout, by when the start of its audio had left the 4 s buffer.
    /// Real time: audio pushed faster outruns the worker's deadline, which assumes real time.
    @Test func aLiveStreamWhoseServerFrozeIsStoppedAndReplayedWhileItsAudioIsHeld() throws {
        let finals = Finals()
        let service = FakeRecognitionService(.init(wordsFromAudio: true, freezeStream: (stream: 1, afterChunks: 5)))
        var o = try pushOptions()
        o.streamBudgetBytes = 1_000_000
        o.reconnectInitialDelayMilliseconds = 10
        o.replayBufferMilliseconds = 4_000
        o.startTimeoutMilliseconds = 300
        o.finishTimeoutMilliseconds = 20_000
        let logs = Locked<[String]>([])
        o.logLevel = .info
        let client = try Client(options: o, service: service) { c, event in
            if case .log(_, let message) = event { logs.withLock { $0.append(message) } }
            finals.handler(c, event)
        }
        defer { try? client.close() }
        try client.start()
        let t0 = Clock.monotonicNanos()
        // 6 s of audio without a pause, at real time.
        for k in 0..<60 {
            try Self.chunk(k, pauseEvery: 0).withUnsafeBufferPointer { try client.pushAudio($0) }
            usleepMs(100)
        }
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000))
        let took = (Clock.monotonicNanos() - t0) / 1_000_000
        #expect(took < 12_000)
        let words = finals.words.withLock { $0 }
        let said = logs.withLock { $0 }
        #expect(words.map(\.0) == (1...60).map { "a\($0)" }, "\(words.map(\.0)) \(said) \(finals.log.lines)")
        #expect(said.contains { $0.contains(Lane.serverQuiet) }, "\(said)")
        #expect(said.contains { $0.contains("taken as hung") }, "\(said)")
        #expect(!finals.log.lines.contains { $0.hasPrefix("error") }, "\(finals.log.lines)")
    }

    /// As above, but the replica freezes before it said anything on the stream (a new context's
    /// stream, after one it answered as it heard): stopped to find out, it is judged after its
    /// stop all the same, after a quarter of the start timeout. Before, a stream that had heard
    /// nothing before its stop was never taken as hung, and was waited for until the finish
    /// timeout (20 s here).
    @Test func aLiveStreamWhoseServerFrozeBeforeAnyResultIsStoppedAndReplayed() throws {
        let finals = Finals()
        let service = FakeRecognitionService(.init(wordsFromAudio: true, freezeStream: (stream: 2, afterChunks: 0)))
        var o = try pushOptions()
        o.streamBudgetBytes = 1_000_000
        o.reconnectInitialDelayMilliseconds = 10
        o.replayBufferMilliseconds = 4_000
        o.startTimeoutMilliseconds = 300
        o.finishTimeoutMilliseconds = 20_000
        let logs = Locked<[String]>([])
        o.logLevel = .info
        let client = try Client(options: o, service: service) { c, event in
            if case .log(_, let message) = event { logs.withLock { $0.append(message) } }
            finals.handler(c, event)
        }
        defer { try? client.close() }
        // A first context, answered as heard (its results come before its stop: real time).
        try client.start()
        for k in 0..<5 {
            try Self.chunk(k, pauseEvery: 0).withUnsafeBufferPointer { try client.pushAudio($0) }
            usleepMs(100)
        }
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 5_000))
        // The second, on a stream whose server says nothing at all: 6 s, no pause, real time.
        try client.start()
        let t0 = Clock.monotonicNanos()
        for k in 5..<65 {
            try Self.chunk(k, pauseEvery: 0).withUnsafeBufferPointer { try client.pushAudio($0) }
            usleepMs(100)
        }
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000))
        #expect((Clock.monotonicNanos() - t0) / 1_000_000 < 12_000)
        let said = logs.withLock { $0 }
        let words = finals.words.withLock { $0 }
        #expect(words.map(\.0) == (1...65).map { "a\($0)" }, "\(words.map(\.0)) \(said)")
        #expect(said.contains { $0.contains(Lane.serverQuiet) }, "\(said)")
        #expect(said.contains { $0.contains("taken as hung") && $0.contains("to find out") }, "\(said)")
        #expect(!finals.log.lines.contains { $0.hasPrefix("error") }, "\(finals.log.lines)")
    }

    /// A stream's end (its gRPC trailers) that comes after the context ended on its `finished`
    /// leaves the client idle: it was queued for the worker, and wait_idle(0) said "not idle"
    /// for an instant between two idle answers (a Python test saw it once in CI).
    @Test func theEndOfAFinishedStreamComingLateLeavesTheClientIdle() throws {
        let service = FakeRecognitionService(.init(closeLaterAfterFinishedMilliseconds: 50))
        let client = try Client(options: try pushOptions(), service: service) { _, _ in }
        defer { try? client.close() }
        var notIdle = 0
        for round in 0..<5 {
            try client.start()
            for k in 0..<3 { try Self.chunk(round * 3 + k).withUnsafeBufferPointer { try client.pushAudio($0) } }
            try client.pushEnd()
            #expect(try client.waitIdle(timeoutMilliseconds: 5_000))
            // Asked without a pause until the late end has come and a little after.
            let until = Clock.monotonicNanos() + 150_000_000
            while Clock.monotonicNanos() < until {
                if try !client.waitIdle(timeoutMilliseconds: 0) { notIdle += 1 }
            }
        }
        #expect(service.closedLate.load(ordering: .acquiring) == 5)
        #expect(notIdle == 0)
    }

    /// The same stream's server silent after its stop, where silence says nothing of a hang:
    /// a server that answers only once a stream ends (Wyoming, Whisper: it may be transcribing
    /// for as long), or a context whose stop was sent at once (no live audio comes, so nothing
    /// ages out of the buffer). Neither is cut as hung; the stream is given up at the finish
    /// timeout (1.5 s here) and replayed, every word once, in order.
    @Test(arguments: [(answersOnlyAfterStop: true, liveChunks: 10), (answersOnlyAfterStop: false, liveChunks: 0)])
    func aSilentStoppedStreamIsNotTakenAsHungWhereSilenceIsNoSign(answersOnlyAfterStop: Bool, liveChunks: Int) throws {
        let finals = Finals()
        let service = FakeRecognitionService(.init(wordsFromAudio: true, ignoreStopOnStream: 1, answersOnlyAfterStop: answersOnlyAfterStop))
        var o = try pushOptions()
        o.streamBudgetBytes = 65_536
        o.reconnectInitialDelayMilliseconds = 10
        o.replayBufferMilliseconds = 4_000
        o.startTimeoutMilliseconds = 300
        o.finishTimeoutMilliseconds = 1_500
        o.logLevel = .info
        let logs = Locked<[String]>([])
        let client = try Client(options: o, service: service) { c, event in
            if case .log(_, let message) = event { logs.withLock { $0.append(message) } }
            finals.handler(c, event)
        }
        defer { try? client.close() }
        try client.start()
        for k in 0..<25 {
            try Self.chunk(k).withUnsafeBufferPointer { try client.pushAudio($0) }
            if k % 10 == 9 { usleepMs(5) }
        }
        // Live audio for 1 s more (well past the 300 ms quiet), or none.
        for k in 25..<25 + liveChunks {
            usleepMs(100)
            try Self.chunk(k).withUnsafeBufferPointer { try client.pushAudio($0) }
        }
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 10_000))
        let words = finals.words.withLock { $0 }
        #expect(words.map(\.0) == (1...25 + liveChunks).map { "a\($0)" }, "\(words.map(\.0))")
        let lines = logs.withLock { $0 }
        #expect(!lines.contains { $0.contains("taken as hung") }, "\(lines)")
        #expect(lines.contains { $0.contains("did not finish the context within") }, "\(lines)")
    }

    @Test func aSegmentTheServerNeverEndedIsDeliveredFinalWithUnconfirmedWords() throws {
        let (finals, _) = try run(chunks: 3, budget: 900_000, behaviour: .init(wordsFromAudio: true, neverEndSegments: true))
        let words = finals.words.withLock { $0 }
        #expect(words.map { $0.0 } == ["a1", "a2", "a3"])
        #expect(words.allSatisfy { !$0.2 })
        #expect(finals.log.lines.last == "stop ctx-1")
    }

    /// A server that never ends its segments, on a context moved across 300 streams: each
    /// stream's segment is delivered final when its server context finishes. Held open until the
    /// user's stop instead, they grew the client's memory with every stream, reached the user
    /// only at the end, and past 256 of them the assembler's bound ended the context.
    @Test func segmentsAFinishedStreamLeftOpenAreDeliveredThenNotAtTheStop() throws {
        // 65,536 bytes: about 20 chunks per stream.
        let chunks = 6_000
        let (finals, service) = try run(chunks: chunks, budget: 65_536,
                                        behaviour: .init(wordsFromAudio: true, neverEndSegments: true), pauseEvery: 0)
        let words = finals.words.withLock { $0 }
        #expect(words.map(\.0) == (1...chunks).map { "a\($0)" })
        #expect(words.allSatisfy { !$0.2 })
        let lines = finals.log.lines
        #expect(!lines.contains { $0.hasPrefix("error") }, "\(lines.filter { $0.hasPrefix("error") })")
        #expect(service.streamsOpened.load(ordering: .relaxed) > 256)
        // Delivered along the way: the first final comes long before the last tentative.
        let firstFinal = lines.firstIndex { $0.hasPrefix("segment final") } ?? lines.count
        let lastTentative = lines.lastIndex { $0.hasPrefix("segment tentative") } ?? 0
        #expect(firstFinal < lastTentative)
    }

    @Test func freeingAClientThatGaveUpWaitingDeliversTheWordsHeard() throws {
        // The server never answers the stop: a wait for the results times out, then the free
        // delivers the segment's words as a final update (unconfirmed) instead of dropping them.
        let finals = Finals()
        let service = FakeRecognitionService(.init(ignoreStop: true, wordsFromAudio: true))
        let client = try Client(options: try pushOptions(), service: service, handler: finals.handler)
        try client.start()
        for k in 0..<3 { Self.chunk(k, pauseEvery: 0).withUnsafeBufferPointer { try? client.pushAudio($0) } }
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 300) == false)
        try client.close()
        let words = finals.words.withLock { $0 }
        #expect(words.map { $0.0 } == ["a1", "a2", "a3"])
        #expect(words.allSatisfy { !$0.2 })
    }

    @Test func aPushThatWouldOutgrowTheReplayBufferWaitsThenTimesOut() throws {
        // The server finishes nothing until the stop: with a 1 s buffer, pushes fit until the
        // audio not yet final would pass it; then a push waits its 200 ms and takes nothing.
        var o = try pushOptions()
        o.replayBufferMilliseconds = 1_000
        o.pushWaitMilliseconds = 200
        let service = FakeRecognitionService(.init(wordsFromAudio: true))
        let finals = Finals()
        let client = try Client(options: o, service: service, handler: finals.handler)
        defer { try? client.close() }
        try client.start()
        var taken = 0
        var failure: SpeechClientError?
        let t0 = Clock.monotonicNanos()
        for k in 0..<20 {
            do {
                try Self.chunk(k, pauseEvery: 0).withUnsafeBufferPointer { try client.pushAudio($0) }
                taken += 1
            } catch {
                failure = error as? SpeechClientError
                break
            }
        }
        #expect(failure?.code == .timeout)
        #expect(Clock.monotonicNanos() - t0 >= 200_000_000)
        #expect((6...9).contains(taken), "\(taken) chunks taken")
        // What was taken is all transcribed, nothing lost.
        try client.pushEnd()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        #expect(finals.words.withLock { $0 }.map { $0.0 } == (1...taken).map { "a\($0)" })
    }
}
