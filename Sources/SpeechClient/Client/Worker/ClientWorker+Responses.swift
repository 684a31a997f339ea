/// The server's side: stream events, responses held behind an earlier lane, segments folded
/// into the user's context, lanes lost.
extension ClientWorker {
    // MARK: - Responses

    func handleStream(_ event: StreamEvent, generation gen: Int) {
        if let p = prepared, p.generation == gen {
            // The prepared stream, before any context: only its loss matters.
            switch event {
            case .closed(let error):
                prepared = nil
                if let error {
                    p.stream.cancel()  // ended by the client (a bound passed): reset it
                    client?.log(.warning, "stream closed: \(error.message)")
                    report(.unavailable, reason: error)
                }
            case .endpointed, .ignoredAfterEndpoint:
                break  // no transcription before a context
            case .goingAway:
                // A new context goes to a new connection.
                p.stream.finish()
                prepared = nil
            case .response(let response):
                if case .rttRequest(let id) = response.payload { p.stream.send(.rttResponse(id: id)) }
            }
            return
        }
        guard let stream = supervisor.stream(of: gen) else { return }
        if case .response(let response) = event {
            switch response.payload {
            case .started: break
            case .rttRequest:
                // The server is there (its quiet restarts); not a result (`Lane.heardBeforeStop`).
                supervisor.lanes.update(gen) { $0.lastHeardAt = Clock.monotonicNanos() }
            default: serverAnswered(response, lane: gen)
            }
            if supervisor.dropsResult(response, lane: gen) { return }
        }
        if supervisor.isHeld(gen) {
            // Failed already, its failure waiting for the lane before it: nothing more of it counts.
            if supervisor.lanes.read(gen, { $0.failedWhileHeld != nil }) == true { return }
            switch event {
            case .response(let response):
                if case .started = response.payload { supervisor.laneAcknowledged(gen) }  // applied later
                if case .finished = response.payload { supervisor.laneFinishedHeld(gen) }  // no longer due
                if case .rttRequest(let id) = response.payload {
                    stream.send(.rttResponse(id: id))
                } else if let error = hold(response, lane: gen) {
                    handleStream(.closed(error), generation: gen)
                }
                return
            case .closed(nil):
                supervisor.setEndedWhileHeld(gen, true)
                return
            case .closed(let error?) where error.code == .api && supervisor.waitsBehindEarlierAudio(gen):
                // The server's refusal or `error` event ends the context, while an earlier lane
                // still finishes: it waits for that lane's words (at most its finish timeout).
                // The stream is let go now (nothing more is read from it); its audio stays in the
                // replay buffer. Not a bound the client enforces (held results, a malformed
                // answer): that ends the context at once, as a server that misbehaves must not
                // make it wait.
                stream.cancel()
                supervisor.setFailedWhileHeld(gen, error)
                client?.log(.info, "a stream of context \(contextId) failed (\(error.message)); the context ends once the stream before it has finished")
                return
            default:
                break
            }
        }
        switch event {
        case .closed(let error):
            defer { releaseHeld() }
            guard let lane = supervisor.lanes[gen] else { return }
            // Ended with an error: reset (a stream the server closed ignores it). An error the
            // client decided (a bound passed, a timeout) leaves it open otherwise.
            if error != nil { lane.stream.cancel() }
            let wasCurrent = supervisor.lanes.live == gen
            let cause = error ?? SpeechClientError(.network, "the server ended the stream before it finished the context", grpcStatus: GRPCStatus.unavailable)
            // A rejected token (expired, or a server restarted with a new secret), before the
            // context started or during it: the relay has dropped the cached token. Once, log in
            // afresh and replay the lane's audio, as after a connection loss.
            if !authRetried, cause.code == .auth, supervisor.pendingFailure == nil {
                authRetried = true
                _ = supervisor.lanes.remove(gen)
                dropSegments(of: lane)
                client?.log(.info, "the server rejected the token\(contextId.isEmpty ? "" : " during context \(contextId)"); logging in again")
                let delay = supervisor.reconnection.retryAfterLogin((lane.floor, wasCurrent ? nil : lane.end), now: Clock.monotonicNanos())
                supervisor.reportReconnecting(attempt: 1, delayMilliseconds: delay, cause: cause, host: self)
                return
            }
            if !wasCurrent && ReconnectionPlan.isRetryable(cause) && supervisor.isAllFinal(gen) {
                // Its audio is all in final segments (the server's end of speech ended it there)
                // and it holds nothing: nothing to replay, and nothing lost. As a finish. (An
                // error the client or server chose, or one raised by its held results, fails
                // the context as before, delivering them.)
                client?.log(.debug, "a stream of context \(contextId) ended without finishing (\(cause.message)), its audio all transcribed")
                _ = supervisor.lanes.remove(gen)
                if let id = lane.serverContext { numbering.forget(serverContext: id) }
                closeSegmentsLeftOpen(by: lane, serverContext: lane.serverContext ?? contextId)
                supervisor.openWaitingPieces(host: self)
                releaseReplay()
                endContextIfDone()
                return
            }
            let served = lane.wasServed(until: Clock.monotonicNanos(), servedFor: Self.servedLongEnoughNanos, lostTo: cause)
            let context = supervisor.epoch
            // Still a lane while its loss is decided: one that fails the context delivers the
            // results the lane holds (waiting behind an earlier lane) with the others', in audio
            // order (`applyHeldBeforeFailing`). Removed first, they went with it.
            supervisor.laneLost(from: lane.floor, end: wasCurrent ? nil : lane.end, cause: cause, servedLongEnough: served, lane: gen, host: self)
            // Replaced: the new lane recognises that audio again. A loss that failed the context
            // left them to be delivered final, unconfirmed (`failContext`): nothing replaces them.
            if supervisor.epoch == context {
                if supervisor.pendingFailure != nil && supervisor.isHeld(gen) {
                    // The attempts ran out and the failure waits for the streams before this
                    // one (`giveUp`): it stays, inert, and fails in its turn, the words it
                    // holds delivered first (unconfirmed). Removed, they were dropped with it.
                    supervisor.setFailedWhileHeld(gen, cause)
                    return
                }
                _ = supervisor.lanes.remove(gen)
                dropSegments(of: lane)
            }
        case .goingAway:
            // The server or a proxy worker is draining: a lane still taking audio moves to a new
            // connection at its next pause, within the drain timeout.
            if supervisor.moveLiveLane(gen, by: Clock.monotonicNanos() + UInt64(options.drainTimeoutMilliseconds) * 1_000_000, why: Lane.goingAway) {
                client?.log(.info, "the connection is closing (GOAWAY): context \(contextId) moves to a new connection at its next pause")
            }
        case .endpointed(let ignoresTheRest):
            // The server heard an end of speech and sent its words; the next utterance goes to
            // a new stream. A server that transcribes all it is sent finishes what follows (up to
            // the next pause) at this stream's stop. One that may ignore it (one utterance per
            // connection): a new stream at once, replaying from the pause it ended in.
            // Where, as far as the audio tells: the lane's floor rises there (its words have no
            // times), so a loss replays only what follows.
            let point = supervisor.serverEndpointed(lane: gen, ignoresTheRest: ignoresTheRest, host: self)
            releaseReplay()
            if ignoresTheRest {
                supervisor.resumeAfterServerEndpoint(lane: gen, from: point, host: self)
            } else if supervisor.moveLiveLane(gen, by: Clock.monotonicNanos() &+ Self.moveAfterEndpointNanos, why: Lane.serverEndpointed) {
                client?.log(.debug, "the server ended an utterance: context \(contextId) moves to a new stream at its next pause")
            }
        case .ignoredAfterEndpoint:
            // Taken to transcribe all it was sent, the server ignored what followed its end of
            // speech: that audio goes to a new stream, from the pause where it ended.
            client?.log(.info, "context \(contextId): the server took one utterance on a stream and ignored the rest (it closed the connection at its end)")
            supervisor.resumeAfterServerEndpoint(lane: gen, from: supervisor.lastEndpoint(of: gen, host: self), host: self)
        case .response(let response):
            handleResponse(response, lane: gen)
        }
    }

    /// The server answered on the lane (a result): where the stream's `started` is its own,
    /// this is the server taking the credentials (see `.started` below); a final may restart
    /// the clock of the lane's `finished`. Every result goes through here, held or not, those
    /// taken directly on the receiving thread too (`takeDirect`).
    func serverAnswered(_ response: SLUResponse, lane gen: Int) {
        supervisor.responseArrived(response, lane: gen)
        if !authRetried { return }
        if supervisor.stream(of: gen)?.serverAcknowledgesStart == false { authRetried = false }
    }

    /// Keeps a response of a lane that waits for an earlier one; an error past the byte bound.
    func hold(_ response: SLUResponse, lane gen: Int) -> SpeechClientError? {
        guard let held = supervisor.lanes.read(gen, { $0.held }) else { return nil }
        // Across the context's lanes: each one may be short (a rotation every few seconds).
        if supervisor.lanes.heldBytes + response.heldBytes > Lane.maxHeldBytes {
            return SpeechClientError(.parse, "the server sent more than \(Lane.maxHeldBytes >> 20) MiB of results on later streams while an earlier stream of the context was still open; the stream was ended")
        }
        held.push(response)
        return nil
    }

    /// The error a server's `finished` carried, for the application.
    func finishedError(_ code: String, _ message: String?, serverContext: String) -> SpeechClientError {
        let id = contextId.isEmpty ? serverContext : contextId
        return SpeechClientError(.api, "context \(id)\(serverContext == id ? "" : " (server context \(serverContext))") finished with error \(code): \(message ?? "")")
    }

    /// Said when the context ends; one per code and message (a server ending each stream of a
    /// long context with the same error added one per stream, without bound), 16 at most.
    func noteFinishedError(_ code: String, _ message: String?, serverContext: String) {
        let key = code + "\u{0}" + (message ?? "")
        guard !finishedErrorsNoted.contains(key), finishedErrorsNoted.count < 16 else { return }
        finishedErrorsNoted.insert(key)
        endEvents.append(.error(finishedError(code, message, serverContext: serverContext)))
    }

    /// After a lane ended, or a repair was taken (after every step of the worker that left a
    /// lane holding responses): the earliest open lane applies the responses it was holding,
    /// in order (which may end it too, and so on).
    func releaseHeld() {
        if releasingHeld { return }
        releasingHeld = true
        defer { releasingHeld = false }
        while contextOpen, let (gen, lane) = supervisor.lanes.first {
            if supervisor.waitsBehindEarlierAudio(gen) { return }
            if let response = lane.held.pop() {
                handleResponse(response, lane: gen)
                continue
            }
            if let failure = lane.failedWhileHeld {
                supervisor.setFailedWhileHeld(gen, nil)
                handleStream(.closed(failure), generation: gen)
                continue
            }
            guard lane.endedWhileHeld else { return }
            supervisor.setEndedWhileHeld(gen, false)
            handleStream(.closed(nil), generation: gen)
        }
    }

    /// The context fails while lanes after the one that failed hold results (they waited for it
    /// to finish): those are the server's words for later audio, applied now in audio order so
    /// that the failure delivers them (a segment left open then as unconfirmed) instead of
    /// dropping them with the lanes. Only what carries words, and a lane's `started` (which maps
    /// its server context); a response the assembler refuses ends that lane's share. The
    /// segments open before a lane's held results are of earlier audio (an earlier lane's, the
    /// failed lane's): they are delivered first, final and unconfirmed, to keep audio order.
    func applyHeldBeforeFailing() {
        for gen in supervisor.lanes.inAudioOrder {
            guard let held = supervisor.lanes.read(gen, { $0.held }), !held.isEmpty else { continue }
            for event in closeUnfinishedSegments(why: "the context failed") { client?.emit(event) }
            while let response = held.pop() {
                switch response.payload {
                case .started:
                    if supervisor.serverContext(of: gen) == nil { handleResponse(response, lane: gen) }
                case .finished, .rttRequest:
                    continue
                default:
                    if applySegmentUpdate(response, lane: gen) != nil {
                        while held.pop() != nil {}
                    }
                }
            }
        }
    }

    /// A server context finished with segments it never ended: nothing more comes for them, so
    /// they are delivered final now (words unconfirmed, as at a context's end), not held open
    /// until the user's stop. A context carried by many streams (rotation) would otherwise keep
    /// one more open segment per stream: memory that grows with the context's length, words
    /// that reach the user only at its end, and past `maxOpenSegments` a failed context.
    /// The lane's ended segments are forgotten too: nothing can update them any more.
    private func closeSegmentsLeftOpen(by lane: Lane, serverContext: String) {
        let closed = assembler.closeUnfinished(context: contextId, segments: lane.openSegments)
        assembler.forgetEnded(context: contextId, segments: lane.endedSegments.union(lane.openSegments))
        guard !closed.isEmpty else { return }
        warnClosedUnfinished(closed, serverContext == contextId ? "context \(contextId) finished" : "context \(contextId): server context \(serverContext) finished")
        // Segments withheld until the wake word was heard stay withheld.
        if options.activation == .wakeword && !woken { return }
        for segment in closed { client?.emit(.segment(segment)) }
    }

    /// Forgets a lost lane's unfinished segments (its replacement recognises that audio again)
    /// and its server context's mappings.
    private func dropSegments(of lane: Lane) {
        assembler.drop(context: contextId, segments: lane.openSegments)
        assembler.forgetEnded(context: contextId, segments: lane.endedSegments)
        if let id = lane.serverContext { numbering.forget(serverContext: id) }
        numbering.giveBack(lane.openSegments, latestOpenElsewhere: supervisor.lanes.latestOpenSegment)
    }

    private func handleResponse(_ response: SLUResponse, lane gen: Int) {
        guard supervisor.lanes.contains(gen) else { return }
        switch response.payload {
        case .started:
            if supervisor.serverContext(of: gen) != nil {
                // One context per lane: a second started would map another server context
                // (and keep it) for every such message.
                handleStream(.closed(SpeechClientError(.parse, "the server sent started twice on the stream of one context; the stream was ended",
                                                       grpcStatus: GRPCStatus.internal)), generation: gen)
                return
            }
            guard let start = supervisor.laneStarted(gen, serverContext: response.audioContext) else { return }
            // The server took the credentials: a later rejection may log in afresh once again.
            // Not on a stream whose `started` is its own (Riva, Wyoming): made before the server
            // answered, it cleared the flag before each rejection, and a key revoked mid-session
            // was retried forever, each time as attempt 1.
            if supervisor.stream(of: gen)?.serverAcknowledgesStart ?? true { authRetried = false }
            numbering.started(serverContext: response.audioContext, atSample: start)
            if let loss = supervisor.reconnection.takePendingLoss() {
                // The replay was taken: now the loss is final, and reported once.
                client?.emit(.error(SpeechClientError(.network,
                    "the replay buffer overflowed while reconnecting: \(SpeechAudio.secondsText(samples: loss.to - loss.from)) s of audio from \(SpeechAudio.secondsText(samples: loss.from)) s into context \(contextId) were not transcribed")))
            }
            if contextId.isEmpty {
                contextId = response.audioContext
                client?.log(.debug, "context \(contextId) started")
                client?.transition({ state, _ in
                    if state == .starting { state = .listening }
                }, events: [.start(contextId: response.audioContext)])
            } else {
                client?.log(.info, "context \(contextId) continues on the server as \(response.audioContext) from \(SpeechAudio.secondsText(samples: start)) s")
            }
        case .finished(let code, let message):
            guard let lane = supervisor.lanes[gen] else { return }
            if !lane.stopSent || lane.finishedBeforeStop || code != nil {
                // The server ended its context before the end of the lane's audio (before its
                // stop), or dropped some of it (an error: a limit, `context_too_long` at 5 minutes
                // for a Speechly server, under a context_limit_ms raised past it; a file's lane
                // has sent its stop by then). It finished what it had heard; the audio after the
                // lane's last final goes to a new stream, as after a loss. Taken as the end of the
                // user's context, the rest of a file (or all the microphone heard after it) was
                // never sent. Not when it ended the lane with an error and no word: a refusal,
                // which a new stream would meet again.
                let progressed = lane.floor > lane.start
                    || lane.wasServed(until: Clock.monotonicNanos(), servedFor: Self.servedLongEnoughNanos, lostTo: SpeechClientError(.network, ""))
                if code == nil || progressed {
                    let why = code.map { " with error \($0): \(message ?? "")" } ?? ""
                    if let code, code != SLUResponse.contextTooLong {
                        // The server's error is said when the context ends, whatever follows
                        // (taken as a loss only, it was in the log alone, or nowhere when the
                        // lane's audio proved all final). Not its length limit: a new stream
                        // is the answer to that, as the client's own limit moves it to one.
                        noteFinishedError(code, message, serverContext: response.audioContext)
                    }
                    handleStream(.closed(SpeechClientError(.network, "the server ended its context \(response.audioContext)\(why) before the end of the audio sent to it",
                                                           grpcStatus: GRPCStatus.unavailable)), generation: gen)
                    return
                }
            }
            // Everything this lane carried is final now. Its stream ends with its stop
            // (`Lane.stop`, or just below): what it still sends is nothing to the worker
            // (`Client.retireStream`).
            client?.retireStream(generation: gen)
            if supervisor.lanes.remove(gen) {  // it was the live lane
                // The server ended the context by itself (a limit, an error): no more audio.
                if !stopSent {
                    stopSent = true
                    if endpointer == nil {
                        closeFileSource()
                        client?.transition { state, _ in
                            if state == .starting || state == .listening { state = .stopping }
                        }
                    }
                }
            }
            if !lane.stopSent { lane.stream.finish() }
            if let id = lane.serverContext { numbering.forget(serverContext: id) }
            closeSegmentsLeftOpen(by: lane, serverContext: response.audioContext)
            if let code { noteFinishedError(code, message, serverContext: response.audioContext) }
            supervisor.reconnection.progressed()
            supervisor.openWaitingPieces(host: self)
            releaseReplay()
            releaseHeld()
            endContextIfDone()
        case .rttRequest(let id):
            supervisor.stream(of: gen)?.send(.rttResponse(id: id))
        default:
            if let error = applySegmentUpdate(response, lane: gen) {
                // A server past the assembler's bounds: end the stream as for a malformed message.
                handleStream(.closed(error), generation: gen)
            }
        }
    }

    /// Forgets audio every lane has finished with, and wakes a push waiting for room (and a
    /// file waiting for it: this may run on the thread that received the final segment).
    func releaseReplay() {
        supervisor.releaseReplay()
        audioLock.broadcast()
        if pumping && waitsForServer { client?.pokeWorker() }
    }

    /// The pump waits: until one of `streams` has drained to `LaneSupervisor.backlogLimit` (each is asked
    /// to say so), a command, a poke, or the safety bound. A stream that has drained already
    /// means no wait.
    func stall(waitingFor streams: [any RecognitionStream]) {
        let client = self.client
        for stream in streams where !stream.notifyWhenBacklog(atMost: LaneSupervisor.backlogLimit, { [weak client] in client?.pokeWorker() }) {
            stalledUntil = nil
            return
        }
        stalledUntil = Clock.monotonicNanos() + Self.stallSafetyNanos
    }

    /// Folds a segment update into the user's context (its id, continuous segment ids and word
    /// times) and emits the segment. Returns the error when the assembler refuses it.
    func applySegmentUpdate(_ response: SLUResponse, lane gen: Int) -> SpeechClientError? {
        // A result for another context than the one this stream carries was filed under the
        // current one (issue 23 item 3): it is a protocol error that ends the stream.
        guard let expected = supervisor.serverContext(of: gen) else {
            // Before started there is no context to file it under: it was filed under the
            // server's string, outside every clean-up (256 such segments failed every later
            // context on the open-segment bound).
            return SpeechClientError(.parse, "the server sent a result before the stream's context started; the stream was ended",
                                     grpcStatus: GRPCStatus.internal)
        }
        if response.audioContext != expected {
            let named = response.audioContext.shownFromServer(limit: 64)
            return SpeechClientError(.parse, "the server sent a result for audio context '\(named)' on the stream of context '\(expected)'; the stream was ended",
                                     grpcStatus: GRPCStatus.internal)
        }
        var mapped = response
        mapped.audioContext = contextId.isEmpty ? response.audioContext : contextId
        mapped.segmentId = numbering.userSegment(serverContext: response.audioContext, segment: response.segmentId)
        mapped.payload = numbering.userTimes(response.payload, serverContext: response.audioContext,
                                             gaps: supervisor.lanes.read(gen) { $0.gaps } ?? [])
        let applied: Segment?
        do throws(SpeechClientError) {
            applied = try assembler.applyChecked(mapped)
        } catch {
            return error
        }
        // Counted against the lane's ends of speech (`LaneSupervisor.serverEndpointed`).
        if case .finalTranscript = response.payload, supervisor.finalApplied(lane: gen) { releaseReplay() }
        if let heard = response.heardMilliseconds {
            // Final words without times, from a server that says nothing else of where they
            // end: the floor rises to the pause that ended them, once they are all applied.
            supervisor.untimedFinalArrived(lane: gen, heardMilliseconds: Int(heard), host: self)
            releaseReplay()
        }
        guard let segment = applied else { return nil }
        // Only a final's words are read here: a snapshot's word array is made when first read,
        // and reading it for every tentative update of a long segment cost its size each time
        // (16,383 words: 15 MB -> 157 MB peak in Tests/e2e's hostile server).
        let end = segment.isFinal ? segment.words.map(\.endMilliseconds).max().map { Int($0) } : nil
        if supervisor.segmentUpdated(lane: gen, segment: segment.segmentId, isFinal: segment.isFinal, endMilliseconds: end,
                                     hasWords: end != nil) {
            releaseReplay()
        }
        if options.activation == .wakeword && !woken {
            // Withheld until the phrase is heard; from that snapshot on, the context's
            // segments are delivered.
            guard Self.contains(segment.words.map(\.text), phrase: options.wakeword) else { return nil }
            woken = true
            client?.emit(.listen(.activate, positionMilliseconds: Int64(SpeechAudio.milliseconds(samples: audioSamples)), name: options.wakeword.joined(separator: " ")))
        }
        client?.emit(.segment(segment))
        if segment.isFinal, let client, client.isOverwhelmed {
            // Finals are never dropped, so the queue is bounded by ending the context.
            return SpeechClientError(.noMemory, "the application has not taken its results: \(client.pendingMebibytes) MiB of them wait for its callbacks, over the \(Client.maxPendingFinalBytes >> 20) MiB limit; the context was ended (what waits is still delivered)")
        }
        return nil
    }

    /// Whether the words hold the phrase (normalised words, contiguous).
    static func contains(_ words: [String], phrase: [String]) -> Bool {
        guard !phrase.isEmpty else { return true }
        let normalized = words.flatMap { ClientOptions.normalizedWords($0) }
        guard normalized.count >= phrase.count else { return false }
        for i in 0...(normalized.count - phrase.count) where Array(normalized[i..<i + phrase.count]) == phrase {
            return true
        }
        return false
    }
}
