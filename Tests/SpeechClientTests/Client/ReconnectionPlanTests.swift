import Testing
@testable import SpeechClient

/// The reconnection decisions alone (their use: LaneSupervisorTests, and through a whole client
/// ClientTests, BoundedStreamTests, and the fault and proxy suites against real servers and proxies).
@Suite struct ReconnectionPlanTests {
    static let lost = SpeechClientError(.network, "connection reset")
    static let ms: UInt64 = 1_000_000

    static func plan(attempts: Int = 3, initial: Int = 100, max: Int = 1_000) -> ReconnectionPlan {
        var p = ReconnectionPlan(attempts: attempts, initialDelayMilliseconds: initial, maxDelayMilliseconds: max)
        p.jitter = { 1.0 }
        return p
    }

    @Test func delaysDoubleUpToTheCapAndTheAttemptsRunOut() {
        var p = Self.plan(attempts: 5, initial: 100, max: 300)
        #expect(p.laneLost((0, nil), cause: Self.lost, servedLongEnough: false, now: 0) == .retry(attempt: 1, delayMilliseconds: 100))
        #expect(p.due?.at == 100 * Self.ms)
        #expect(p.takeDue(now: 99 * Self.ms) == nil)  // not yet
        guard let (attempt, repairs) = p.takeDue(now: 100 * Self.ms) else {
            Issue.record("the attempt is due")
            return
        }
        #expect(attempt == 1 && repairs.map(\.from) == [0])
        // Each failed attempt: the next one, later, until none is left.
        var delays: [UInt64] = []
        var outcome = p.attemptFailed(remaining: repairs[...], error: Self.lost, now: 0)
        while case .retry(_, let delay) = outcome {
            delays.append(delay)
            guard let (_, again) = p.takeDue(now: .max) else { break }
            outcome = p.attemptFailed(remaining: again[...], error: Self.lost, now: 0)
        }
        #expect(delays == [200, 300, 300, 300])
        #expect(outcome == .giveUp)
        #expect(p.earliestRepair == 0)  // kept for the error's wording until dropped
        p.dropRepairs()
        #expect(p.isSettled)
    }

    @Test func lanesLostTogetherShareOneAttemptAndReopenInAudioOrder() {
        var p = Self.plan()
        #expect(p.laneLost((48_000, nil), cause: Self.lost, servedLongEnough: false, now: 0) == .retry(attempt: 1, delayMilliseconds: 100))
        #expect(p.laneLost((16_000, 48_000), cause: Self.lost, servedLongEnough: false, now: 0) == .joinsScheduledAttempt)
        #expect(p.holdsAudio(before: 20_000) && !p.holdsAudio(before: 16_000))
        #expect(p.earliestRepair == 16_000)
        p.endLiveAudio(at: 64_000)
        let taken = p.takeDue(now: .max)
        #expect(taken?.repairs.map(\.from) == [16_000, 48_000])
        #expect(taken?.repairs.map(\.end) == [48_000, 64_000])
        #expect(p.isSettled)
    }

    /// The lanes an attempt opened (a replay split across three streams) are lost together
    /// when the server is still down: that is one failed attempt, not three. Counted per lane,
    /// the second lane of the second round already failed the context with two attempts allowed.
    @Test func lanesOfOneAttemptLostTogetherCountOnce() {
        var p = Self.plan(attempts: 2)
        #expect(p.laneLost((0, nil), cause: Self.lost, servedLongEnough: false, now: 0) == .retry(attempt: 1, delayMilliseconds: 100))
        _ = p.takeDue(now: .max)
        let pieces: [ReconnectionPlan.Repair] = [(0, 16_000), (16_000, 32_000), (32_000, nil)]
        #expect(p.laneLost(pieces[0], cause: Self.lost, servedLongEnough: false, now: 0) == .retry(attempt: 2, delayMilliseconds: 200))
        for piece in pieces.dropFirst() {
            #expect(p.laneLost(piece, cause: Self.lost, servedLongEnough: false, now: 0) == .joinsScheduledAttempt)
        }
        #expect(p.takeDue(now: .max)?.repairs.count == 3)
        #expect(p.laneLost(pieces[0], cause: Self.lost, servedLongEnough: false, now: 0) == .fail(attemptsMade: 2))
    }

    /// Joining a scheduled attempt is for losses a reconnection mends, and only when attempts
    /// are allowed at all (with none, an attempt can still be scheduled for a fresh login).
    @Test func whatCannotJoinAScheduledAttempt() {
        var p = Self.plan()
        _ = p.laneLost((0, nil), cause: Self.lost, servedLongEnough: false, now: 0)
        #expect(p.laneLost((0, 16_000), cause: SpeechClientError(.api, "bad app id"), servedLongEnough: false, now: 0) == .fail(attemptsMade: nil))
        var none = Self.plan(attempts: 0)
        _ = none.retryAfterLogin((0, nil), now: 0)  // a rejected token: one fresh login
        #expect(none.laneLost((0, 16_000), cause: Self.lost, servedLongEnough: false, now: 0) == .fail(attemptsMade: nil))
    }

    @Test func progressAndALaneServedLongEnoughCountTheAttemptsAfresh() {
        var p = Self.plan(attempts: 1)
        #expect(p.laneLost((0, nil), cause: Self.lost, servedLongEnough: false, now: 0) == .retry(attempt: 1, delayMilliseconds: 100))
        _ = p.takeDue(now: .max)
        // The replacement was accepted, then lost at once: no attempt left.
        #expect(p.laneLost((0, nil), cause: Self.lost, servedLongEnough: false, now: 0) == .fail(attemptsMade: 1))
        p.reset()
        _ = p.laneLost((0, nil), cause: Self.lost, servedLongEnough: false, now: 0)
        _ = p.takeDue(now: .max)
        #expect(p.laneLost((0, nil), cause: Self.lost, servedLongEnough: true, now: 0) == .retry(attempt: 1, delayMilliseconds: 100))
        _ = p.takeDue(now: .max)
        p.progressed()  // a final segment
        #expect(p.laneLost((0, nil), cause: Self.lost, servedLongEnough: false, now: 0) == .retry(attempt: 1, delayMilliseconds: 100))
    }

    @Test func whatAReconnectionCannotMendFailsAtOnceAsItIs() {
        var p = Self.plan()
        #expect(p.laneLost((0, nil), cause: SpeechClientError(.api, "bad app id"), servedLongEnough: false, now: 0) == .fail(attemptsMade: nil))
        var none = Self.plan(attempts: 0)
        #expect(none.laneLost((0, nil), cause: Self.lost, servedLongEnough: false, now: 0) == .fail(attemptsMade: nil))
        var unlimited = Self.plan(attempts: ClientOptions.unlimitedReconnects)
        for _ in 0..<50 {
            guard case .retry = unlimited.laneLost((0, nil), cause: Self.lost, servedLongEnough: false, now: 0) else {
                Issue.record("unlimited attempts ran out")
                return
            }
            _ = unlimited.takeDue(now: .max)
        }
        // A failed attempt with a refusal gives up, whatever is left.
        _ = p.laneLost((0, nil), cause: Self.lost, servedLongEnough: false, now: 0)
        let taken = p.takeDue(now: .max)?.repairs ?? []
        #expect(p.attemptFailed(remaining: taken[...], error: SpeechClientError(.auth, "token rejected"), now: 0) == .giveUp)
    }

    @Test func audioTheReplayBufferNoLongerHoldsIsNotedOnceAsOneLoss() {
        var p = Self.plan()
        // Both lanes' audio starts before the oldest sample kept (32,000).
        #expect(p.replayStart(of: (8_000, 24_000), oldestSample: 32_000) == 24_000)
        #expect(p.replayStart(of: (24_000, nil), oldestSample: 32_000) == 32_000)
        #expect(p.replayStart(of: (40_000, nil), oldestSample: 32_000) == 40_000)
        #expect(p.takePendingLoss().map { [$0.from, $0.to] } == [8_000, 32_000])
        #expect(p.takePendingLoss() == nil)
    }

    @Test func aRejectedTokenIsRetriedOnceAsTheFirstAttempt() {
        var p = Self.plan()
        #expect(p.retryAfterLogin((16_000, nil), now: 0) == 100)
        #expect(p.due?.attempt == 1)
        #expect(p.takeDue(now: .max)?.repairs.map(\.from) == [16_000])
    }

    @Test func theJitterSpreadsDelaysByAQuarter() {
        var p = ReconnectionPlan(attempts: 3, initialDelayMilliseconds: 1_000, maxDelayMilliseconds: 1_000)
        var seen = Set<UInt64>()
        for _ in 0..<50 {
            p.reset()
            guard case .retry(_, let delay) = p.laneLost((0, nil), cause: Self.lost, servedLongEnough: false, now: 0) else { continue }
            #expect((750...1_250).contains(delay))
            seen.insert(delay)
        }
        #expect(seen.count > 10)
    }
}
