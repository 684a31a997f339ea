import Foundation
import Synchronization
@testable import SpeechClient

/// An in-process stand-in for a server, for unit tests of the client only: it answers start
/// with started, each audio chunk with a tentative word, and stop with final words, segment_end
/// and finished. The real stack is tested against the real server.
final class FakeRecognitionService: RecognitionService, @unchecked Sendable {
    struct Behaviour: Sendable {
        var failConnect: SpeechClientError?
        /// Close the stream with this error after this many audio chunks.
        var failAfterChunks: (Int, SpeechClientError)?
        /// Delay before answering start and stop (ms): widens race windows.
        var answerDelayMilliseconds = 0
        /// The first N streams are closed with an auth error when a context starts.
        var rejectStreams = 0
        /// Only the first stream fails (`failAfterChunks`); later ones work.
        var failFirstStreamOnly = false
        /// Only this stream (1-based) fails (`failAfterChunks`); others work.
        var failStream: Int?
        /// Only these streams (1-based) fail (`failAfterChunks`), when not empty.
        var failStreams: Set<Int> = []
        /// Opening a stream hangs (like a login to a server that never answers) until the
        /// cancellation fires, or fails with a timeout after 10 s.
        var hangOpen = false
        /// Opening a stream takes this long (ms) before it succeeds or fails.
        var openDelayMilliseconds = 0
        /// Stop is never answered (no final words, no finished).
        var ignoreStop = false
        /// After a context's finished, the stream is closed by the server.
        var closeAfterFinished = false
        /// After a context's finished, the stream is closed this long after, from another
        /// thread (a server whose gRPC trailers follow its last message in a later write).
        var closeLaterAfterFinishedMilliseconds: Int?
        /// Opening more than this many streams fails with a network error.
        var maxStreams = Int.max
        /// Audio chunk N is answered with a word index outside the assembler's bounds; with
        /// `badWordLater`, 20 ms later and from another thread (as the network thread would,
        /// while the worker is idle), else at once on the sending thread.
        var badWordAtChunk: Int?
        var badWordLater = true
        /// Each chunk's word is named after its first sample ("a<sample>"), so a test can tell
        /// exactly which audio was recognised, once or twice, across streams.
        var wordsFromAudio = false
        /// Stop is answered with finished alone: the segment is never ended (no final words).
        var neverEndSegments = false
        /// This stream (1-based) never answers its stop: its lane never finishes.
        var ignoreStopOnStream: Int?
        /// This stream (1-based) answers its first `afterChunks` chunks, then nothing more, its
        /// stop included: a replica that froze in the middle of a stream (behind a proxy that
        /// still takes the audio).
        var freezeStream: (stream: Int, afterChunks: Int)?
        /// No tentative transcript for the audio: the words come only after the stop (a server
        /// that transcribes a stream once it ends, as Wyoming's do).
        var answersOnlyAfterStop = false
        /// Each chunk is answered with a tentative transcript of 60 words of 1000 bytes (60 KB,
        /// within a segment's bounds): a server that floods.
        var bulkyTentatives = false
        /// Each chunk is answered with a final segment of its own (60 words of 1000 bytes): a
        /// server that floods finals.
        var bulkyFinals = false
        /// Requests are taken inside the process's event loop (`EventLoop.execute`), as a gRPC
        /// call takes them: a worker turn's sends are then held until the turn ends, as they
        /// are on the wire, and `requests` is the order the server would see.
        var sendsThroughEventLoop = false
        /// A tentative transcript for another context ("ghost") comes before started.
        var resultBeforeStarted = false
        /// Started comes twice, naming two contexts.
        var startedTwice = false
        /// After started, this many responses with a payload this client does not know, each
        /// for a new segment id (what a newer server's message reads as).
        var unknownPayloadsAfterStarted = 0
        /// With `unknownPayloadsAfterStarted`: they name a context of this many bytes, not the
        /// stream's (a notice is no result: what it names is not checked).
        var unknownPayloadContextBytes: Int?
        /// Before started and after it, this many responses of a kind this client does not know
        /// that name no audio context (what a newer server's notice might be).
        var unknownPayloadsWithoutContext = 0
        /// The stream says `started` itself as the start goes out, before the server answers
        /// (Riva, Wyoming): a stream refused (`rejectStreams`) says it before the refusal.
        var ownStarted = false
        /// Stop is answered slowly, as by a server behind real time: the final words in batches
        /// of `words`, one batch every `intervalMilliseconds` (from another thread), then the
        /// segment end and finished.
        var finishInBatches: (words: Int, intervalMilliseconds: Int)?
        /// With `finishInBatches`: one stream's answer at a time, in the order of the stops (a
        /// server with one model working through the streams in turn).
        var answersInTurn = false
        /// This stream (1-based) answers its stop with nothing but, `afterMilliseconds` later and
        /// from another thread, the end of the stream with `error` (a server that fails a
        /// stream while finishing it: a Wyoming `error` event, a gRPC status).
        var failStopOnStream: (stream: Int, error: SpeechClientError, afterMilliseconds: Int)?
        /// Every stream's send backlog stays full (a server whose flow-control window never
        /// reopens): its notice of room never comes.
        var neverDrains = false
        /// Only this stream (1-based) never drains (as `neverDrains`).
        var neverDrainsStream: Int?
        /// Stop is answered with every word final, then `finished` with this error code.
        var finishedErrorCode: String?
        /// This stream (1-based) is refused with `error` when its context starts, before any
        /// `started` (a server's quota on streams, its `error` event).
        var refuseStream: (stream: Int, error: SpeechClientError)?
    }

    let behaviour: Behaviour
    let requests = Locked<[SLURequest]>([])
    /// Starts handed to a stream's `send` (with `sendsThroughEventLoop`, perhaps not taken yet).
    let startsHanded = Atomic<Int>(0)
    let streamsOpened = Atomic<Int>(0)
    /// Streams closed late after their finished (`closeLaterAfterFinishedMilliseconds`).
    let closedLate = Atomic<Int>(0)
    let streamsFinished = Atomic<Int>(0)
    /// The most audio chunks one stream was sent: what a proxy's request cap would see.
    let mostChunksOnAStream = Atomic<Int>(0)
    /// Streams opened and not yet half-closed, cancelled or failed, and the most there were at
    /// once: what a server's limit on concurrent calls would see.
    let streamsOpenNow = Atomic<Int>(0)
    /// The streams the client cancelled (reset), by name ("s1", ...).
    let cancelledStreams = Locked<[String]>([])
    /// The streams whose connection the client retired (it gave up waiting on them).
    let retiredStreams = Locked<[String]>([])
    let mostStreamsOpenAtOnce = Atomic<Int>(0)
    /// While set, opening a stream fails with a network error (the server is down, then back).
    let down = Atomic<Bool>(false)
    /// Opens refused while `down`.
    let opensRefused = Atomic<Int>(0)
    /// Context ids are numbered across streams, as a server numbers them (ctx-1, ctx-2, ...).
    let contextsStarted = Atomic<Int>(0)

    init(_ behaviour: Behaviour = Behaviour()) { self.behaviour = behaviour }

    /// How many of the audio samples sent, on every stream, equal `value` (a test marks the
    /// audio it follows with a value no other audio has).
    func samplesSent(equalTo value: Int16) -> Int {
        requests.withLock { requests in
            requests.reduce(0) { n, r in
                guard case .audio(let samples) = r else { return n }
                return n + samples.filter { $0 == value }.count
            }
        }
    }

    /// `answersInTurn`: the turns handed out (at the stops) and the answers done.
    let turnsTaken = Atomic<Int>(0)
    let turnsDone = Atomic<Int>(0)

    func openStream(config: SLUConfig, cancellation: Cancellation?, handler: @escaping @Sendable (StreamEvent) -> Void) throws(SpeechClientError) -> any RecognitionStream {
        if behaviour.openDelayMilliseconds > 0 { usleep(UInt32(behaviour.openDelayMilliseconds) * 1000) }
        if let error = behaviour.failConnect { throw error }
        if down.load(ordering: .relaxed) {
            opensRefused.add(1, ordering: .relaxed)
            throw SpeechClientError(.network, "the fake server is down")
        }
        if streamsOpened.load(ordering: .relaxed) >= behaviour.maxStreams {
            throw SpeechClientError(.network, "the fake server accepts no more streams")
        }
        if behaviour.hangOpen {
            let end = Clock.monotonicNanos() + 10_000_000_000
            while Clock.monotonicNanos() < end {
                try cancellation?.check()
                var ts = timespec(tv_sec: 0, tv_nsec: 5_000_000)
                nanosleep(&ts, nil)
            }
            throw SpeechClientError(.timeout, "the fake login did not finish within its 10 s deadline")
        }
        let n = streamsOpened.add(1, ordering: .relaxed).newValue
        mostStreamsOpenAtOnce.max(streamsOpenNow.add(1, ordering: .relaxed).newValue, ordering: .relaxed)
        return FakeStream(service: self, handler: handler, reject: n <= behaviour.rejectStreams ? SpeechClientError(.auth, "token rejected", grpcStatus: 16)
                                                                       : behaviour.refuseStream.flatMap { $0.stream == n ? $0.error : nil },
                          mayFail: !behaviour.failStreams.isEmpty ? behaviour.failStreams.contains(n)
                              : behaviour.failStream.map { $0 == n } ?? (n == 1 || !behaviour.failFirstStreamOnly), name: "s\(n)",
                          ignoreStop: behaviour.ignoreStop || behaviour.ignoreStopOnStream == n,
                          failStop: behaviour.failStopOnStream.flatMap { $0.stream == n ? ($0.error, $0.afterMilliseconds) : nil },
                          neverDrains: behaviour.neverDrains || behaviour.neverDrainsStream == n,
                          freezeAfterChunks: behaviour.freezeStream.flatMap { $0.stream == n ? $0.afterChunks : nil })
    }
}

final class FakeStream: RecognitionStream, @unchecked Sendable {
    private let service: FakeRecognitionService
    private let handler: @Sendable (StreamEvent) -> Void
    /// `labels`: the words so far on the stream, each with its start (ms into the stream).
    private let state = Locked<(context: String?, chunks: Int, contexts: Int, closed: Bool, labels: [(text: String, ms: Int32)], samples: Int)>((nil, 0, 0, false, [], 0))
    /// Counted out of `streamsOpenNow` (once).
    private let ended = Atomic<Bool>(false)
    private func countEnded() {
        if !ended.exchange(true, ordering: .relaxed) { service.streamsOpenNow.subtract(1, ordering: .relaxed) }
    }

    /// The error the stream is refused with when its context starts (nil: it is not).
    private let reject: SpeechClientError?
    private let mayFail: Bool
    private let name: String
    private let ignoreStop: Bool
    private let failStop: (SpeechClientError, Int)?
    private let neverDrains: Bool
    private let freezeAfterChunks: Int?

    init(service: FakeRecognitionService, handler: @escaping @Sendable (StreamEvent) -> Void, reject: SpeechClientError?,
         mayFail: Bool = true, name: String = "s1", ignoreStop: Bool = false, failStop: (SpeechClientError, Int)? = nil,
         neverDrains: Bool = false, freezeAfterChunks: Int? = nil) {
        self.freezeAfterChunks = freezeAfterChunks
        self.failStop = failStop
        self.neverDrains = neverDrains
        self.service = service
        self.handler = handler
        self.reject = reject
        self.mayFail = mayFail
        self.name = name
        self.ignoreStop = ignoreStop
    }

    func retireConnection() { service.retiredStreams.withLock { $0.append(name) } }

    func send(_ request: SLURequest) {
        if case .start = request { service.startsHanded.add(1, ordering: .relaxed) }
        if let loop {
            loop.execute { self.take(request) }
        } else {
            take(request)
        }
    }

    private func take(_ request: SLURequest) {
        service.requests.withLock { $0.append(request) }
        let delay = service.behaviour.answerDelayMilliseconds
        var out: [StreamEvent] = []
        var later: [StreamEvent] = []
        state.withLock { s in
            if s.closed { return }
            switch request {
            case .config, .rttResponse: break
            case .start where reject != nil:
                s.closed = true
                if service.behaviour.ownStarted {
                    let id = "ctx-\(service.contextsStarted.add(1, ordering: .relaxed).newValue)"
                    out.append(.response(SLUResponse(audioContext: id, segmentId: 0, payload: .started)))
                }
                out.append(.closed(reject))
            case .start:
                s.contexts += 1
                s.chunks = 0
                s.labels = []
                s.samples = 0
                let id = "ctx-\(service.contextsStarted.add(1, ordering: .relaxed).newValue)"
                s.context = id
                if service.behaviour.resultBeforeStarted {
                    let w = SLUWord(text: "ghost", index: 0, startMilliseconds: 0, endMilliseconds: 90)
                    out.append(.response(SLUResponse(audioContext: "ghost", segmentId: 0, payload: .tentativeTranscript(text: "ghost", words: [w]))))
                }
                for _ in 0..<service.behaviour.unknownPayloadsWithoutContext {
                    out.append(.response(SLUResponse(audioContext: "", segmentId: 0, payload: .none)))
                }
                out.append(.response(SLUResponse(audioContext: id, segmentId: 0, payload: .started)))
                for _ in 0..<service.behaviour.unknownPayloadsWithoutContext {
                    out.append(.response(SLUResponse(audioContext: "", segmentId: 0, payload: .none)))
                }
                if service.behaviour.startedTwice {
                    out.append(.response(SLUResponse(audioContext: id + "-again", segmentId: 0, payload: .started)))
                }
                let named = service.behaviour.unknownPayloadContextBytes.map { String(repeating: "n", count: $0) } ?? id
                for k in 0..<service.behaviour.unknownPayloadsAfterStarted {
                    out.append(.response(SLUResponse(audioContext: named, segmentId: Int32(1_000 + k), payload: .none)))
                }
            case .audio(let samples):
                s.chunks += 1
                service.mostChunksOnAStream.max(s.chunks, ordering: .relaxed)
                // wordsFromAudio: a word per message that starts with a sample other than 0 (a
                // quiet piece of a chunk cut in two is none), timed by its audio on the stream.
                if !service.behaviour.wordsFromAudio {
                    s.labels.append(("w\(s.chunks)", Int32((s.chunks - 1) * 100)))
                } else if let first = samples.first, first != 0 {
                    s.labels.append(("a\(first)", Int32(SpeechAudio.milliseconds(samples: s.samples))))
                }
                s.samples += samples.count
                if mayFail, let (n, error) = service.behaviour.failAfterChunks, s.chunks >= n {
                    s.closed = true
                    countEnded()
                    out.append(.closed(error))
                    return
                }
                if let id = s.context, s.chunks == service.behaviour.badWordAtChunk {
                    let w = SLUWord(text: "bad", index: -1, startMilliseconds: 0, endMilliseconds: 0)
                    let bad = StreamEvent.response(SLUResponse(audioContext: id, segmentId: 0, payload: .tentativeTranscript(text: w.text, words: [w])))
                    if service.behaviour.badWordLater { later.append(bad) } else { out.append(bad) }
                } else if let id = s.context, service.behaviour.bulkyFinals {
                    let words = (0..<Int32(60)).map { SLUWord(text: String(repeating: "y", count: 1000), index: $0, startMilliseconds: 0, endMilliseconds: 0) }
                    out.append(.response(SLUResponse(audioContext: id, segmentId: Int32(s.chunks), payload: .finalTranscript(words, confidence: -1))))
                } else if let id = s.context, service.behaviour.bulkyTentatives {
                    let words = (0..<Int32(60)).map { SLUWord(text: String(repeating: "x", count: 1000), index: $0, startMilliseconds: 0, endMilliseconds: 0) }
                    out.append(.response(SLUResponse(audioContext: id, segmentId: 0, payload: .tentativeTranscript(text: "", words: words))))
                } else if let after = freezeAfterChunks, s.chunks > after {
                    // Frozen: nothing more.
                } else if service.behaviour.answersOnlyAfterStop {
                    // Nothing now: its words go out with the stop's answer.
                } else if let id = s.context {
                    // With wordsFromAudio cumulative, as a server's tentative transcript is;
                    // else the newest word alone (what the older tests count on).
                    let labels = service.behaviour.wordsFromAudio ? s.labels : Array(s.labels.suffix(1))
                    let first = s.labels.count - labels.count
                    let words = labels.enumerated().map { k, label in
                        SLUWord(text: label.text, index: Int32(first + k), startMilliseconds: label.ms, endMilliseconds: label.ms + 90)
                    }
                    out.append(.response(SLUResponse(audioContext: id, segmentId: 0, payload: .tentativeTranscript(text: labels.map(\.text).joined(separator: " "), words: words))))
                }
            case .stop where ignoreStop || freezeAfterChunks.map({ s.chunks > $0 }) == true:
                break
            case .stop where failStop != nil:
                guard let (error, after) = failStop else { break }
                let handler = self.handler
                Thread.detachNewThread {
                    usleepMs(after)
                    handler(.closed(error))
                }
            case .stop:
                if let id = s.context, service.behaviour.neverEndSegments {
                    out.append(.response(SLUResponse(audioContext: id, segmentId: 0, payload: .finished(errorCode: nil, errorMessage: nil))))
                } else if let id = s.context {
                    // Slowly (`finishInBatches`): everything goes out later, batch by batch.
                    var answer: [StreamEvent] = []
                    for (i, label) in s.labels.enumerated() {
                        let w = SLUWord(text: label.text, index: Int32(i), startMilliseconds: label.ms, endMilliseconds: label.ms + 90)
                        answer.append(.response(SLUResponse(audioContext: id, segmentId: 0, payload: .transcript(w))))
                    }
                    answer.append(.response(SLUResponse(audioContext: id, segmentId: 0, payload: .segmentEnd)))
                    answer.append(.response(SLUResponse(audioContext: id, segmentId: 0,
                                                        payload: .finished(errorCode: service.behaviour.finishedErrorCode, errorMessage: service.behaviour.finishedErrorCode.map { _ in "after the last word" }))))
                    if let (size, interval) = service.behaviour.finishInBatches {
                        let handler = self.handler
                        let batches = stride(from: 0, to: answer.count, by: max(1, size)).map { Array(answer[$0..<min($0 + max(1, size), answer.count)]) }
                        let service = self.service
                        let inTurn = service.behaviour.answersInTurn
                        // A turn taken here, in the order of the stops.
                        let turn = service.turnsTaken.add(1, ordering: .relaxed).oldValue
                        Thread.detachNewThread {
                            while inTurn && service.turnsDone.load(ordering: .acquiring) < turn { usleepMs(5) }
                            defer { service.turnsDone.add(1, ordering: .releasing) }
                            for batch in batches {
                                usleepMs(interval)
                                for e in batch { handler(e) }
                            }
                        }
                    } else {
                        out += answer
                    }
                    if service.behaviour.closeAfterFinished {
                        s.closed = true
                        out.append(.closed(nil))
                    } else if let later = service.behaviour.closeLaterAfterFinishedMilliseconds {
                        s.closed = true
                        let handler = self.handler
                        let service = self.service
                        Thread.detachNewThread {
                            usleepMs(later)
                            handler(.closed(nil))
                            service.closedLate.add(1, ordering: .releasing)
                        }
                    }
                }
                s.context = nil
            }
        }
        if delay > 0, case .audio = request {} else if delay > 0 { usleepMs(delay) }
        for e in out { handler(e) }
        if !later.isEmpty {
            let handler = self.handler
            let events = later
            Thread.detachNewThread {
                usleepMs(20)
                for e in events { handler(e) }
            }
        }
    }

    /// Through the loop too (as a gRPC call's half-close and reset go), so that the end comes
    /// after the requests handed over before it.
    private var loop: EventLoop? { service.behaviour.sendsThroughEventLoop ? try? EventLoop.shared() : nil }

    func finish() {
        countEnded()
        guard let loop else { return finished() }
        loop.execute { self.finished() }
    }

    private func finished() {
        state.withLock { $0.closed = true }
        service.streamsFinished.add(1, ordering: .relaxed)
    }

    func cancel() {
        service.cancelledStreams.withLock { $0.append(name) }
        countEnded()
        guard let loop else { return state.withLock { $0.closed = true } }
        loop.executeAndWait { self.state.withLock { $0.closed = true } }
    }
    var backlogBytes: Int { neverDrains ? 1 << 30 : 0 }
    func notifyWhenBacklog(atMost bytes: Int, _ body: @escaping @Sendable () -> Void) -> Bool { neverDrains }
    var serverAcknowledgesStart: Bool { !service.behaviour.ownStarted }
}

func usleepMs(_ ms: Int) {
    var ts = timespec(tv_sec: ms / 1000, tv_nsec: (ms % 1000) * 1_000_000)
    nanosleep(&ts, nil)
}

#if canImport(Glibc)
import Glibc
#endif

/// Runs `body` on a new thread of its own (for tests whose files do not import Foundation).
func runDetached(_ body: @escaping @Sendable () -> Void) {
    Thread.detachNewThread(body)
}
