/// What to do about a context's lost lanes (issues 5 and 18): which audio each replacement
/// replays, when the next attempt is, how many remain, and which audio the replay buffer no
/// longer held. It decides; `LaneSupervisor` opens the streams, reports and logs. Positions are
/// samples of the user's context.
struct ReconnectionPlan {
    /// Audio a lost lane had not finished: [from, end), end nil for the lane taking live audio.
    typealias Repair = (from: Int, end: Int?)

    /// `ClientOptions.reconnectAttempts` (`unlimitedReconnects`: no limit) and its delays.
    let attempts: Int
    let initialDelayMilliseconds: Int
    let maxDelayMilliseconds: Int
    /// The factor each delay is multiplied by (0.75...1.25), so that clients that lost the same
    /// server do not come back at the same instant. Fixed in tests.
    var jitter: () -> Double = { Double.random(in: 0.75...1.25) }

    /// Lanes lost and waiting to be replaced; all are reopened together at `due`.
    private(set) var repairs: [Repair] = []
    /// Lanes not opened yet, in audio order (the pieces of a split replay, a move of the live
    /// lane): at most `LaneSupervisor.maxOpenLanes` are open at once, and each of these opens as
    /// an earlier lane finishes, without an attempt. An attempt due reopens them with its repairs.
    private(set) var waiting: [Repair] = []
    /// The next attempt: its number and when (monotonic ns).
    private(set) var due: (attempt: Int, at: UInt64)?
    /// Losses since the context last made progress (a final segment, or a lane the server served
    /// for a while): a server that accepts the reconnection but fails again still runs out of
    /// attempts.
    private(set) var lossesWithoutProgress = 0
    /// Audio the replay buffer no longer held at a reconnection, reported once the server has
    /// taken the replay, so that an outage with several attempts gives one error naming it all.
    private(set) var pendingLoss: (from: Int, to: Int)?

    init(attempts: Int, initialDelayMilliseconds: Int, maxDelayMilliseconds: Int) {
        self.attempts = attempts
        self.initialDelayMilliseconds = initialDelayMilliseconds
        self.maxDelayMilliseconds = maxDelayMilliseconds
    }

    private var unlimited: Bool { attempts == ClientOptions.unlimitedReconnects }

    /// Nothing lost and nothing scheduled: the context may end.
    var isSettled: Bool { repairs.isEmpty && waiting.isEmpty && due == nil }

    /// A lost lane (or a piece waiting to open) that starts before `sample` holds back the
    /// responses of lanes after it.
    func holdsAudio(before sample: Int) -> Bool { repairs.contains { $0.from < sample } || waiting.contains { $0.from < sample } }

    /// The earliest audio a replacement will replay (the replay buffer keeps it).
    var earliestRepair: Int? { (repairs.map(\.from) + waiting.map(\.from)).min() }

    /// A new context, or the end of one.
    mutating func reset() {
        repairs = []
        waiting = []
        due = nil
        lossesWithoutProgress = 0
        pendingLoss = nil
    }

    /// The context made progress: its attempts count afresh.
    mutating func progressed() { lossesWithoutProgress = 0 }

    /// The user's context ended: a lost live lane replays up to `end`, no further.
    mutating func endLiveAudio(at end: Int) {
        for i in repairs.indices where repairs[i].end == nil { repairs[i].end = end }
        for i in waiting.indices where waiting[i].end == nil { waiting[i].end = end }
    }

    enum Decision: Equatable {
        /// Replace the lane at the attempt scheduled: this one, after `delayMilliseconds` (report
        /// it), or one already scheduled (nil: nothing to report).
        case retry(attempt: Int, delayMilliseconds: UInt64)
        case joinsScheduledAttempt
        /// Give up: the attempts ran out after `attemptsMade` (name the lost audio), or the
        /// error is not one a reconnection mends (nil: report it as it is).
        case fail(attemptsMade: Int?)
    }

    /// A lane was lost with `cause`. `servedLongEnough`: the server had served it a while, which
    /// counts as progress.
    /// Lanes lost while an attempt is scheduled join it and count no further: one outage takes
    /// every lane of a connection, and a replay split across streams loses them all at once, so
    /// counting each lane would spend the attempts several at a time.
    /// (Not with no attempts allowed: an attempt scheduled then is a fresh login's, for a lane
    /// whose token was rejected, and a lost connection still fails the context.)
    mutating func laneLost(_ repair: Repair, cause: SpeechClientError, servedLongEnough: Bool, now: UInt64) -> Decision {
        let retryable = Self.isRetryable(cause)
        if servedLongEnough {  // progress: the attempts count afresh (the one scheduled is the first)
            lossesWithoutProgress = due != nil ? 1 : 0
        }
        if retryable && due != nil && attempts != 0 {
            repairs.append(repair)
            return .joinsScheduledAttempt
        }
        lossesWithoutProgress += 1
        if retryable && (unlimited || lossesWithoutProgress <= attempts) {
            repairs.append(repair)
            return .retry(attempt: lossesWithoutProgress, delayMilliseconds: schedule(attempt: lossesWithoutProgress, now: now))
        }
        return .fail(attemptsMade: retryable && attempts > 0 ? lossesWithoutProgress - 1 : nil)
    }

    /// A lane lost to a rejected token: replaced once, after a fresh login, as attempt 1.
    mutating func retryAfterLogin(_ repair: Repair, now: UInt64) -> UInt64 {
        repairs.append(repair)
        return schedule(attempt: 1, now: now)
    }

    /// At `now`: the attempt that is due, and the lanes to reopen in audio order, the pieces
    /// waiting to open with them (taken out of the plan; `attemptFailed` and `wait` put back
    /// those not reopened).
    mutating func takeDue(now: UInt64) -> (attempt: Int, repairs: [Repair])? {
        guard let d = due, now >= d.at else { return nil }
        due = nil
        let taken = (repairs + waiting).sorted { $0.from < $1.from }
        repairs = []
        waiting = []
        return (d.attempt, taken)
    }

    /// Pieces of a replay that open later, as earlier lanes finish (`takeWaiting`).
    mutating func wait(_ pieces: ArraySlice<Repair>) { waiting.append(contentsOf: pieces) }

    /// The next lane waiting to open, in audio order, unless an attempt is scheduled (it will
    /// reopen them all).
    var nextWaiting: Repair? { due == nil ? waiting.first : nil }

    /// Takes `nextWaiting` out of the plan.
    mutating func takeWaiting() -> Repair? {
        guard due == nil, !waiting.isEmpty else { return nil }
        return waiting.removeFirst()
    }

    /// Where a replacement's replay starts: at `repair.from`, or, when the replay buffer no
    /// longer reaches back there (it keeps from `oldestSample` on), where it does, the audio in
    /// between noted as lost.
    mutating func replayStart(of repair: Repair, oldestSample: Int) -> Int {
        guard oldestSample > repair.from else { return repair.from }
        // Lost up to its end at most: a lane's audio past it went out on the next lane (the
        // error named that too, as lost, though its words came).
        let to = min(oldestSample, repair.end ?? oldestSample)
        pendingLoss = (pendingLoss?.from ?? repair.from, max(pendingLoss?.to ?? to, to))
        return to
    }

    /// The loss noted by `replayStart`, once (when the server took the replay).
    mutating func takePendingLoss() -> (from: Int, to: Int)? {
        defer { pendingLoss = nil }
        return pendingLoss
    }

    enum AttemptOutcome: Equatable {
        case retry(attempt: Int, delayMilliseconds: UInt64)
        /// No attempt is left, or the error is not one a reconnection mends: the context fails.
        /// The repairs stay until `dropRepairs` (the error names the audio they held).
        case giveUp
    }

    /// Opening the replacement for `remaining.first` failed with `error`: `remaining` waits for
    /// the next attempt, if one is left.
    mutating func attemptFailed(remaining: ArraySlice<Repair>, error: SpeechClientError, now: UInt64) -> AttemptOutcome {
        repairs.append(contentsOf: remaining)
        lossesWithoutProgress += 1
        if (!unlimited && lossesWithoutProgress > attempts) || !Self.isRetryable(error) { return .giveUp }
        return .retry(attempt: lossesWithoutProgress, delayMilliseconds: schedule(attempt: lossesWithoutProgress, now: now))
    }

    mutating func dropRepairs() {
        repairs = []
        waiting = []
    }

    /// Exponential from the initial delay, capped, with jitter.
    private mutating func schedule(attempt: Int, now: UInt64) -> UInt64 {
        let delayMs = delayMilliseconds(attempt: attempt)
        due = (attempt, now + delayMs * 1_000_000)
        return delayMs
    }

    /// The delay before attempt `attempt` (1-based): also what hands-free listening waits
    /// between its tries to open a context for speech it heard (`ClientWorker`).
    func delayMilliseconds(attempt: Int) -> UInt64 {
        let base = min(Double(initialDelayMilliseconds) * Double(1 << min(max(attempt, 1) - 1, 20)), Double(maxDelayMilliseconds))
        return UInt64(max(0, base * jitter()))
    }

    /// Whether attempt `attempt` (1-based) is within the attempts allowed.
    func allows(attempt: Int) -> Bool { unlimited || attempt <= attempts }

    /// Connection losses are retried; what the server or the login said no to is not.
    static func isRetryable(_ error: SpeechClientError) -> Bool {
        error.code == .network || error.code == .timeout
    }
}
