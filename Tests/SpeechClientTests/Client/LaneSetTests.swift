import Testing
import Synchronization
@testable import SpeechClient

/// The lanes of a context, without a client or a server: their audio order (which decides whose
/// responses wait), the live lane, and what the worker reads across them.
@Suite struct LaneSetTests {
    /// A stream that only counts what it is given.
    final class CountingStream: RecognitionStream, @unchecked Sendable {
        let sent = Atomic<Int>(0)
        func send(_ request: SLURequest) { sent.add(1, ordering: .relaxed) }
        func finish() {}
        func cancel() {}
        var backlogBytes: Int { 0 }
        func notifyWhenBacklog(atMost bytes: Int, _ body: @escaping @Sendable () -> Void) -> Bool { false }
    }

    func lane(start: Int, end: Int? = nil, replayFrom: Int? = nil, stream: CountingStream = CountingStream()) -> Lane {
        Lane(stream: stream, start: start, end: end, replayFrom: replayFrom)
    }


    /// A loss counts as progress only after the server took the lane's audio 5 s, before its
    /// stop; never a loss by a timeout. Before, any lane lost 5 s after its start counted: a
    /// Wyoming server failing each transcription after the audio's end (its `started` is the
    /// stream's own), or a server hanging at each stop, was retried forever, each loss
    /// counting as the first attempt.
    @Test func aLaneCountsAsServedOnlyWhenTheServerServedIt() {
        let five: UInt64 = 5_000_000_000
        let reset = SpeechClientError(.network, "reset"), hung = SpeechClientError(.timeout, "no finished")
        var lane = self.lane(start: 0)
        #expect(!lane.wasServed(until: 6 * five, servedFor: five, lostTo: reset))  // never started
        lane.startedAt = five
        // Taking audio: served (a proxy cutting an idle stream must not use up the attempts).
        #expect(lane.wasServed(until: 2 * five, servedFor: five, lostTo: reset))
        #expect(!lane.wasServed(until: 2 * five - 1, servedFor: five, lostTo: reset))
        #expect(!lane.wasServed(until: 2 * five, servedFor: five, lostTo: hung))
        // After its stop: the server's answer to it is what counts (a final, `finished`).
        lane.stopSent = true
        #expect(!lane.wasServed(until: 3 * five, servedFor: five, lostTo: reset))
    }

    /// Only the live lane, caught up with its replay, has a move deadline (GOAWAY): any other
    /// lane's was due at every step and the worker spun until that lane finished.
    @Test func onlyTheLiveLaneCaughtUpHasAMoveDeadline() {
        var set = LaneSet()
        var replaying = lane(start: 0, replayFrom: 0)
        replaying.moveBy = 500
        set.add(replaying, generation: 1, live: true)
        #expect(set.nextMoveDeadline == nil)
        set.update(1) { $0.cursor = nil }
        #expect(set.nextMoveDeadline == 500)
        set.endLive()  // the stop came before the move
        #expect(set.nextMoveDeadline == nil)
    }

    @Test func audioOrderIsTheFirstSampleThenTheOlderStream() {
        var set = LaneSet()
        set.add(lane(start: 100), generation: 3, live: true)
        set.add(lane(start: 200, end: 300), generation: 1, live: false)
        set.add(lane(start: 100, end: 200), generation: 2, live: false)
        #expect(set.first?.generation == 2)
        #expect(!set.hasEarlier(than: 2))
        #expect(set.hasEarlier(than: 3))  // same start, a newer stream
        #expect(set.hasEarlier(than: 1))  // an older stream, later audio
        #expect(!set.hasEarlier(than: 9))  // not a lane of the set
        #expect(set.generations == [1, 2, 3])
        set.remove(2)
        #expect(set.first?.generation == 3 && !set.hasEarlier(than: 3))
    }

    @Test func onlyTheLiveLaneTakesLiveAudioAndOnlyOnceCaughtUp() {
        var set = LaneSet()
        let draining = CountingStream(), live = CountingStream()
        set.sendLive([0, 1])  // no lane: nothing happens
        set.add(lane(start: 0, end: 10, stream: draining), generation: 1, live: false)
        set.add(lane(start: 10, replayFrom: 5, stream: live), generation: 2, live: true)
        set.sendLive([0, 1])
        #expect(live.sent.load(ordering: .relaxed) == 0)  // still replaying
        set[2]?.cursor = nil
        set.sendLive([0, 1])
        #expect(live.sent.load(ordering: .relaxed) == 1 && draining.sent.load(ordering: .relaxed) == 0)
        #expect(set[2]?.bytes == Lane.audioBytes(samples: 2))  // the send is counted on the lane kept
        #expect(set.liveStream === live)
        #expect(!set.remove(1) && set.live == 2)
        set.endLive()
        #expect(set.live == nil && set.count == 1)
        set.sendLive([0, 1])
        #expect(live.sent.load(ordering: .relaxed) == 1)
        set.add(lane(start: 20), generation: 3, live: true)
        #expect(set.remove(3) && set.live == nil)
        set.add(lane(start: 30), generation: 4, live: true)
        #expect(set.removeAll().count == 2 && set.isEmpty && set.live == nil)
    }

    @Test func settingALaneReplacesItInItsPlaceAndNilTakesItOut() {
        var set = LaneSet()
        let first = CountingStream(), replacement = CountingStream()
        set.add(lane(start: 0, stream: first), generation: 2, live: true)
        set.add(lane(start: 0, end: 5), generation: 1, live: false)  // an older stream, added later
        #expect(set.generations == [1, 2])
        set[2] = lane(start: 0, stream: replacement)
        #expect(set.live == 2 && set.liveStream === replacement && set.generations == [1, 2])
        #expect(!set.liveIsReplaying)
        set[1] = nil
        #expect(set.generations == [2] && set.live == 2)
        set[7]?.floor = 3  // no lane 7: nothing is added
        #expect(set.count == 1)
    }

    @Test func aLaneIsReadAndChangedWhereItIs() {
        var set = LaneSet()
        let stream = CountingStream()
        set.add(lane(start: 0, end: 8), generation: 1, live: false)
        set.add(lane(start: 8, stream: stream), generation: 2, live: true)
        #expect(set.update(2) { lane -> Int in
            lane.floor = 12
            lane.openSegments.insert(4)
            return lane.start
        } == 8)
        #expect(set.read(2) { $0.floor == 12 && $0.openSegments == [4] && $0.stream === stream } == true)
        #expect(set.read(1) { $0.floor } == 0)  // the other lane is untouched
        #expect(set.update(9) { $0.floor = 1 } == nil && set.read(9) { $0.floor } == nil && !set.contains(9))
        #expect(set.contains(1) && set.contains(2) && set.count == 2)
    }

    @Test func whatTheWorkerReadsAcrossTheLanes() {
        var set = LaneSet()
        #expect(set.lowestFloor == nil && set.latestOpenSegment == nil && !set.replaying)
        #expect(set.nextMoveDeadline == nil && set.nextStartDeadline == nil && set.liveStream == nil)
        set.add(lane(start: 0), generation: 1, live: true)  // acknowledged: startDue is .max
        #expect(set.nextStartDeadline == nil && set.unacknowledged(at: .max - 1).isEmpty)
        _ = set.removeAll()
        let replaying = CountingStream()
        var a = lane(start: 0, end: 100, replayFrom: 40, stream: replaying)
        a.floor = 40
        a.openSegments = [3, 7]
        a.startDue = 500
        var b = lane(start: 100)
        b.floor = 160
        b.openSegments = [9]
        b.moveBy = 900
        var c = lane(start: 100, end: 150)
        c.startDue = 300
        c.moveBy = 700
        set.add(a, generation: 5, live: false)
        set.add(b, generation: 6, live: true)
        set.add(c, generation: 4, live: false)
        #expect(set.lowestFloor == 40)
        #expect(set.latestOpenSegment == 9)
        #expect(set.replaying && set.replayingStreams.count == 1 && set.replayingStreams.first === replaying)
        #expect(set.nextMoveDeadline == 900)  // the live lane's: c's (700) is not live, it cannot move
        #expect(set.nextStartDeadline == 300)  // b's acknowledged start (.max) is not a deadline
        #expect(set.unacknowledged(at: 299).isEmpty)
        #expect(set.unacknowledged(at: 500).map(\.generation) == [4, 5])
        #expect(set.heldBytes == 0)
        let response = SLUResponse(audioContext: "ctx", segmentId: 0, payload: .intent("turn_on"))
        set[5]?.held.push(response)
        set[4]?.held.push(response)
        #expect(set.heldBytes == 2 * response.heldBytes && response.heldBytes > 0)
    }

    /// Finals restart a stopped lane's finish clock only when they reach a second further, only
    /// within the audio the lane carried, and at most ten times that audio after the clock
    /// started: a server sending a word a second further each 59 s (or words past the lane's
    /// audio) held the first review's version of it for years.
    @Test func finalsRestartTheFinishClockWithinBounds() {
        var l = lane(start: 0)
        l.bytes = Lane.audioBytes(samples: 3 * 16_000)  // 3 s carried
        l.finalArrived(endMilliseconds: 1_500, now: 5)  // before the stop: the reach only
        #expect(l.awaitingFinishSince == nil && l.finalsReachMilliseconds == 1_500)
        l.stop()
        let stopped = l.finishClockStarted
        #expect(l.awaitingFinishSince == stopped)
        l.finalArrived(endMilliseconds: 2_000, now: stopped + 1_000)  // half a second further: no
        #expect(l.awaitingFinishSince == stopped)
        l.finalArrived(endMilliseconds: 60_000, now: stopped + 2_000)  // past the lane's audio: no
        #expect(l.awaitingFinishSince == stopped && l.finalsReachMilliseconds == 1_500)
        l.finalArrived(endMilliseconds: 2_600, now: stopped + 3_000)
        #expect(l.awaitingFinishSince == stopped + 3_000)
        // Late: capped at ten times the 3 s carried after the clock started.
        l.finalArrived(endMilliseconds: 3_900, now: stopped + 100_000_000_000)
        #expect(l.awaitingFinishSince == stopped + 30_000_000_000, "\(l.awaitingFinishSince.map { $0 - stopped } ?? 0)")
        // Held behind an earlier lane, its `finished` arrived: no clock.
        l.awaitingFinishSince = nil
        l.finalArrived(endMilliseconds: 3_950, now: stopped + 1)
        #expect(l.awaitingFinishSince == nil)
    }

    /// A final whose words have no times (Wyoming, Riva without word offsets) restarts the
    /// clock too, within the same bound: a Wyoming server slower than real time, sent a stream
    /// ahead, answers its utterances one by one after the stop, and the lane was cut at the
    /// finish timeout while they still came, then replayed (its utterances came twice).
    @Test func untimedFinalsRestartTheFinishClockWithinBounds() {
        var l = lane(start: 0)
        l.bytes = Lane.audioBytes(samples: 3 * 16_000)  // 3 s carried
        l.untimedFinalArrived(now: 5)  // before the stop: nothing to restart
        #expect(l.awaitingFinishSince == nil)
        l.stop()
        let stopped = l.finishClockStarted
        l.untimedFinalArrived(now: stopped + 1_000)
        #expect(l.awaitingFinishSince == stopped + 1_000)
        l.untimedFinalArrived(now: stopped + 100_000_000_000)
        #expect(l.awaitingFinishSince == stopped + 30_000_000_000)
    }

    /// A replay held back by its stream's backlog is given up after the timeout only for the
    /// first lane in audio order (a server serving a context's streams one at a time reads a
    /// later one only once the earlier one is done), and its clock starts afresh when it
    /// becomes the first; a lane caught up has no clock. Every lane's clock ran before: a
    /// healthy later stream of such a server was cut and replayed, again and again.
    @Test func onlyTheFirstLanesStalledReplayIsGivenUp() {
        var set = LaneSet()
        set.add(lane(start: 0), generation: 1, live: false)
        set.add(lane(start: 100, replayFrom: 100), generation: 2, live: true)
        set[2]?.noteReplayBacklog(1_000_000, now: 10)
        set[2]?.noteReplayBacklog(1_000_000, now: 50)  // not fallen: the clock runs from 10
        #expect(set[2]?.replayStall?.since == 10)
        #expect(set.nextReplayStallDeadline(timeout: 100) == nil)
        #expect(set.replayStalled(at: 1_000, timeout: 100).isEmpty)
        set.remove(1)
        #expect(set[2]?.replayStall == nil)  // first now: afresh
        set[2]?.noteReplayBacklog(1_000_000, now: 2_000)
        #expect(set.nextReplayStallDeadline(timeout: 100) == 2_100)
        #expect(set.replayStalled(at: 2_100, timeout: 100) == [2])
        set[2]?.noteReplayBacklog(900_000, now: 2_050)  // fallen: progress, the clock restarts
        #expect(set.replayStalled(at: 2_100, timeout: 100).isEmpty)
        set[2]?.cursor = nil  // caught up
        #expect(set.nextReplayStallDeadline(timeout: 100) == nil)
    }

    /// Only the first lane in audio order has its finish clock running; the lane that becomes    /// Only the first lane in audio order has its finish clock running; the lane that becomes    /// Only the first lane in audio order has its finish clock running; the lane that becomes
    /// first starts its clock afresh.
    @Test func onlyTheFirstLaneHasAFinishDeadline() {
        var set = LaneSet()
        set.add(lane(start: 0), generation: 1, live: false)
        set.add(lane(start: 100), generation: 2, live: false)
        set.update(1) { $0.stop() }
        set.update(2) { $0.stop() }
        let second = set.read(2) { $0.awaitingFinishSince } ?? nil
        let timeout: UInt64 = 1_000
        #expect(set.nextFinishDeadline(timeout: timeout) == (set.read(1) { $0.awaitingFinishSince } ?? nil).map { $0 + timeout })
        #expect(set.unfinished(at: .max - timeout, timeout: timeout) == [1])
        set.remove(1)
        let restarted = set.read(2) { $0.awaitingFinishSince } ?? nil
        #expect(restarted != nil && restarted! >= second!)
        #expect(set.nextFinishDeadline(timeout: timeout) == restarted.map { $0 + timeout })
        // A lane opened before it (a replay) takes the clock; a live one has none.
        set.add(lane(start: 50), generation: 3, live: true)
        #expect(set.nextFinishDeadline(timeout: timeout) == nil)
        #expect(set.unfinished(at: .max - timeout, timeout: timeout).isEmpty)
    }
}
