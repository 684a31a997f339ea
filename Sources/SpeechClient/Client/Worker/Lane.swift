/// One HTTP/2 stream carrying one server context of the user's context (issue 18).
///
/// Every stream is bounded: a proxy caps a request's bytes (nginx: 1 MB by default) and its
/// duration, and a draining server or proxy worker wants its streams gone. So the user's context
/// is carried by a sequence of lanes: the current lane takes the live audio; at a pause past the
/// budget it is stopped and half-closed (it drains: the server finishes its words, sends
/// `finished` and ends the stream) while the next lane goes on. A lane lost before it finished is
/// replaced by a lane that replays its unfinished audio [floor, end) from the replay buffer.
struct Lane {
    let stream: any RecognitionStream
    /// The user-context samples it carries: [start, end). `end` is nil while it takes live audio.
    let start: Int
    var end: Int?
    /// Its audio before this sample is in final segments: a replacement replays from here. From
    /// a server whose words have no times (Wyoming), a guess: where its ends of speech fell
    /// (`LaneSupervisor.serverEndpointed`).
    var floor: Int
    /// The next sample to send from the replay buffer; nil once caught up (live audio then goes
    /// straight out, and a lane with an end has sent its stop).
    var cursor: Int? {
        didSet { if cursor == nil { replayStall = nil } }  // caught up (or ended): no replay to wait for
    }
    /// While its replay waits for its stream to drain: the smallest send backlog seen, and
    /// since when it has not fallen below that (`noteReplayBacklog`). A server that stopped
    /// reading (a hung handler behind a live connection, which answers PINGs) is found by it:
    /// no other clock runs for a replaying lane (its stop, which starts the finish clock, goes
    /// out only once the replay is out).
    var replayStall: (backlog: Int, since: UInt64)?

    /// The replay is held back by a send backlog of `backlog` bytes at `now`: a backlog that fell
    /// is progress (the clock starts again); one that did not keeps the clock running.
    mutating func noteReplayBacklog(_ backlog: Int, now: UInt64) {
        if let stall = replayStall, backlog >= stall.backlog { return }
        replayStall = (backlog, now)
    }

    /// The server's audio_context, from its `started`.
    var serverContext: String?
    /// Audio its replay skipped (the buffer dropped it before it was sent: said lost), where in
    /// the stream's audio and how long: the server's times after each are early by it.
    struct Gap: Equatable {
        var streamMilliseconds: Int32
        var milliseconds: Int32
    }
    private(set) var gaps: [Gap] = []
    private var skippedSamples = 0

    /// Where `ms` of the stream's audio falls in the context, the gaps before it counted.
    func contextSample(streamMilliseconds ms: Int) -> Int {
        var sample = start + SpeechAudio.samples(milliseconds: ms)
        for gap in gaps where Int(gap.streamMilliseconds) <= ms { sample += SpeechAudio.samples(milliseconds: Int(gap.milliseconds)) }
        return sample
    }

    /// The replay skips from `cursor` to `resume` (the buffer no longer holds that audio).
    mutating func skip(from cursor: Int, to resume: Int) {
        guard resume > cursor else { return }
        let streamSample = cursor - start - skippedSamples
        skippedSamples += resume - cursor
        gaps.append(Gap(streamMilliseconds: Int32(clamping: SpeechAudio.milliseconds(samples: streamSample)),
                        milliseconds: Int32(clamping: SpeechAudio.milliseconds(samples: resume - cursor))))
    }
    /// Request bytes written to the stream (the budget that proxies count).
    var bytes = 0
    /// Since when the server serves it, monotonic ns (`wasServed`): its `started`; where the
    /// stream says `started` itself (Riva, Wyoming), once the server answered in this context
    /// (`LaneSupervisor.serverAnswered`). Nil before.
    var startedAt: UInt64?
    /// Until when the server may take to acknowledge it (the start timeout), monotonic ns;
    /// `.max` once it did (its `started` may still be held behind an earlier lane).
    var startDue: UInt64 = .max
    var stopSent = false
    /// Since when its `finished` is awaited (monotonic ns): it is due within the finish timeout
    /// of this. Set when its stop went out, and again each time the server's finals on it
    /// reach a second of audio further (`finalArrived`): a server slower than real time (a
    /// Whisper server on a small machine, behind by more than the timeout) is still working on
    /// the stream, and cutting it lost the words it had not finalised when the replay buffer no
    /// longer held their audio. Nil before the stop, and once its `finished` arrived (held
    /// behind an earlier lane, it is applied later).
    var awaitingFinishSince: UInt64?
    /// When the server last sent anything on it (a result of any kind, or a round-trip request;
    /// monotonic ns), nil before. With its stop (`awaitingFinishSince`), it says how long a
    /// stopped lane's server has been silent (`LaneSupervisor.hangDeadline`).
    var lastHeardAt: UInt64?
    /// The server sent results on it while it still took audio (before its stop): a server that
    /// answers as it hears (tentative results, Riva's interim ones), whose silence after a stop
    /// says it hung. Not one that answers only once a stream ends (Wyoming, Whisper), which may
    /// be silent for as long as it works through the audio.
    var heardBeforeStop = false
    /// It was stopped to see whether its quiet server is there (`LaneSupervisor.quietLiveDeadline`):
    /// judged as hung after its stop even if it heard nothing before, and sooner.
    var probedQuiet = false

    /// The server sent something on it at `now`.
    mutating func heard(at now: UInt64) {
        lastHeardAt = now
        if !stopSent { heardBeforeStop = true }
    }
    /// When the finish clock started (the stop, or the lane becoming the first in audio order,
    /// `startFinishClock`): the finals restart it at most `maxFinishWaitPerAudio` times the
    /// lane's audio after this, so a server trickling finals cannot hold the stream for ever.
    var finishClockStarted: UInt64 = 0
    /// The end (ms from the stream's start) of the latest final word that restarted the finish
    /// clock, or that arrived before the stop: only a second of audio beyond it restarts it.
    var finalsReachMilliseconds = 0
    /// Move to a new lane at the next pause, by this time, because `moveWhy`: the connection is
    /// going away (GOAWAY), or the server ended an utterance by itself (`StreamEvent.endpointed`).
    var moveBy: UInt64?
    var moveWhy = Lane.goingAway
    static let goingAway = "the connection is closing (GOAWAY)"
    static let serverEndpointed = "the server ended an utterance (its own endpointing)"
    static let serverQuiet = "the server has said nothing on the stream for the start timeout while it took audio"
    /// Where the server ended utterances on it by itself (`StreamEvent.endpointed`; the pause
    /// `RotationPolicy.resumePoint` finds), each with the final results that had arrived on it by
    /// then: once those are applied, its floor rises there. Wyoming words have no times, so no
    /// final raises it, and a lane lost after a transcript replayed (and repeated) its utterance.
    var endpoints: [(finalsBefore: Int, at: Int)] = []
    var lastEndpoint: Int?
    /// Final results that arrived on it (held or not), and those applied.
    var finalsArrived = 0
    var finalsApplied = 0
    /// Its end was brought back to the pause where the server ended an utterance, after it had
    /// been sent audio past it (which a new lane sends again): what it sends later is of that
    /// audio, and dropped (a server that says it endpoints but transcribes all it is sent).
    var dropsLaterResults = false
    /// User segment ids it updated that are not final yet (dropped if it is lost: its replacement
    /// recognises that audio again).
    var openSegments: Set<Int32> = []
    /// User segment ids it ended: the assembler refuses late updates to them while this lane
    /// could still send one, and forgets them when it ends (`SegmentAssembler.forgetEnded`).
    var endedSegments: Set<Int32> = []
    /// Responses that arrived while an earlier lane was still open: held, then applied in order
    /// once every earlier lane has finished, so segments reach the application in audio order.
    /// A reference, so that the copies of a lane the worker makes share it (no copy per push).
    let held = HeldResponses()
    /// A context's later lanes' results wait only while an earlier one drains (seconds, a few
    /// segments of a few hundred bytes); this much across them is a server misbehaving (issue 23).
    static let maxHeldBytes = 4 << 20
    /// The server ended the stream cleanly while its responses were held: once they are
    /// applied, a lane still open without `finished` was lost after all.
    var endedWhileHeld = false
    /// The stream failed, with an error that fails the context (not retried), while an earlier
    /// lane still finished: the failure waits for it (`ClientWorker.releaseHeld`). Taken at once,
    /// the context ended with the earlier lane, whose transcript still to come was dropped, and
    /// the error named only this lane's audio.
    var failedWhileHeld: SpeechClientError?
    /// Its `finished` came before its stop was sent, while its responses were held: the
    /// server ended its context before the lane's audio did (`LaneSupervisor.laneFinishedHeld`).
    var finishedBeforeStop = false
    /// It ended (cleanly or not) while its responses were held.
    var endsWhileHeld: Bool { endedWhileHeld || failedWhileHeld != nil }

    init(stream: any RecognitionStream, start: Int, end: Int?, replayFrom: Int?) {
        self.stream = stream
        self.start = start
        self.end = end
        self.floor = start
        self.cursor = replayFrom
    }

    /// Whether its loss, at `now` and by `cause`, comes after the server served it long enough
    /// to count as progress (the reconnection attempts count afresh): it took its audio for at
    /// least `servedFor` ns since its start (a proxy's idle timeout cutting a stream in a long
    /// pause must not use up the attempts). Not once its stop went out, nor by a timeout: the
    /// server's answer to the stop is progress of its own (a final segment, `finished`), and a
    /// server that fails or hangs on the same audio each time (no transcript, no `finished`;
    /// a Wyoming stream's `started` is its own, so its server is silent until then) was
    /// retried forever, the attempts counting afresh at each loss.
    func wasServed(until now: UInt64, servedFor: UInt64, lostTo cause: SpeechClientError) -> Bool {
        guard cause.code != .timeout, !stopSent, let at = startedAt else { return false }
        return now &- at >= servedFor
    }

    /// Bytes a request of `samples` audio samples takes on the wire: the samples, the protobuf
    /// field and message tags, the gRPC prefix (an upper bound: what a proxy counts).
    static func audioBytes(samples: Int) -> Int { samples * SpeechAudio.bytesPerSample + 16 }

    /// Stop, then the end of the request side: the server finishes the words and ends the stream.
    mutating func stop() {
        guard !stopSent else { return }
        stream.send(.stop)
        stream.finish()
        stopSent = true
        startFinishClock(at: Clock.monotonicNanos())
    }

    /// Its `finished` is awaited from `now` (its stop, or it became the first lane in audio order).
    mutating func startFinishClock(at now: UInt64) {
        awaitingFinishSince = now
        finishClockStarted = now
    }

    /// A final word ending `endMilliseconds` into the stream arrived (applied now, or held). A
    /// word's time is the server's say: only one within the audio the lane carried counts, and
    /// the clock restarts at most `maxFinishWaitPerAudio` times that audio after it started.
    mutating func finalArrived(endMilliseconds end: Int, now: UInt64) {
        let carried = SpeechAudio.milliseconds(samples: bytes / SpeechAudio.bytesPerSample)
        guard end >= finalsReachMilliseconds + Lane.finalsRestartingTheFinishClockMilliseconds,
              end <= carried + Lane.finalsRestartingTheFinishClockMilliseconds else { return }
        finalsReachMilliseconds = end
        guard awaitingFinishSince != nil else { return }
        awaitingFinishSince = min(now, finishClockStarted &+ UInt64(carried) * Lane.maxFinishWaitPerAudio * 1_000_000)
    }

    /// A final whose words have no times: where it ends is not known, but the server finished an
    /// utterance, so it is still working through the lane's audio (a Wyoming server slower than
    /// real time, sent a stream ahead, answers its utterances one by one after the stop). The
    /// clock restarts, within the same bound as for timed finals: before, the lane was cut at
    /// the finish timeout while transcripts still came, and replayed.
    mutating func untimedFinalArrived(now: UInt64) {
        guard awaitingFinishSince != nil else { return }
        let carried = SpeechAudio.milliseconds(samples: bytes / SpeechAudio.bytesPerSample)
        awaitingFinishSince = min(now, finishClockStarted &+ UInt64(carried) * Lane.maxFinishWaitPerAudio * 1_000_000)
    }

    static let finalsRestartingTheFinishClockMilliseconds = 1000
    /// A server recognising a tenth of real time is still waited for; a stream of 28 s (the
    /// default budget) is ended at most 280 s plus the finish timeout after its clock started.
    static let maxFinishWaitPerAudio: UInt64 = 10

    /// Sends a chunk of live audio on the stream, unless the lane is still replaying.
    mutating func sendLive(_ chunk: [Int16]) {
        guard cursor == nil else { return }
        stream.send(.audio(chunk))
        bytes += Lane.audioBytes(samples: chunk.count)
    }
}

/// The responses a lane holds, and about how many bytes they keep (`SLUResponse.heldBytes`).
final class HeldResponses {
    private var queue = FIFO<SLUResponse>()
    private(set) var bytes = 0
    var isEmpty: Bool { queue.isEmpty }

    func push(_ response: SLUResponse) {
        queue.push(response)
        bytes += response.heldBytes
    }

    func pop() -> SLUResponse? {
        guard let response = queue.pop() else { return nil }
        bytes -= response.heldBytes
        return response
    }
}
