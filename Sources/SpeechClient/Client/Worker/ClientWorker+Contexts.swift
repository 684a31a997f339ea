/// Contexts: start, stop, the audio read into them, and every way a context ends.
extension ClientWorker {
    // MARK: - Contexts

    func handleStart() {
        guard let client else { return }
        if contextOpen {
            deferredStart = true
            // A microphone keeps what it hears from now on, for this start's context.
            client.flushDeferredWake()  // opening a device may block
            audio.openAndCollectAhead(log: { [link] level, message in link.client?.log(level, message) })
            return
        }
        if options.activation != .manual {
            startListening()
            return
        }
        do throws(SpeechClientError) {
            try openAudioForContext()
            try ensureStream()
        } catch {
            closeFileSource()
            if cancellation.isCancelled {
                abandonContext()
            } else {
                failContext(error)
            }
            return
        }
        audioSamples = 0
        pacedSince = nil
        beginContext()
        client.log(.debug, "start sent")
        pumping = audio.isOpen
    }

    /// Opens a context on the prepared stream: the bookkeeping, then its first lane.
    func beginContext() {
        contextOpen = true
        stopSent = false
        woken = false
        continuesActivation = false
        contextId = ""
        endEvents = []
        finishedErrorsNoted = []
        supervisor.begin()
        numbering.reset()
        client?.transition({ _, _ in }, contextOpen: true)
        do throws(SpeechClientError) {
            try supervisor.openLane(from: 0, end: nil, host: self)
        } catch {
            // Only reached when the prepared stream vanished in between: retried as a loss.
            supervisor.laneLost(from: 0, end: nil, cause: error, servedLongEnough: false, host: self)
        }
    }

    func openAudioForContext() throws(SpeechClientError) {
        client?.flushDeferredWake()  // opening a device may block
        try audio.openForContext(log: { [link] level, message in link.client?.log(level, message) })
    }

    /// Whether `samples` more pushed audio fit in the replay buffer beside what is not final yet
    /// (the caller holds `audioLock`). Outside a context everything fits (it is dropped).
    func hasRoom(forSamples samples: Int) -> Bool {
        // Held for a start that waits for the previous context, they are bounded the same way.
        if deferredStart { return heldForDeferredStart.samples + samples <= supervisor.replay.capacitySamples }
        if let held = heldForQueuedStart { return held.samples + samples <= supervisor.replay.capacitySamples }
        return (contextOpen && !stopSent ? supervisor.unfinishedSamples : 0) + samples <= supervisor.replay.capacitySamples
    }

    /// Whether the live stream `generation`, with `backlog` bytes not yet taken by the server,
    /// has taken none for the finish timeout (its backlog never fell in that time).
    func sendStalled(generation gen: Int, backlog: Int) -> Bool {
        let now = Clock.monotonicNanos()
        guard let watch = sendWatch, watch.generation == gen, backlog >= watch.backlog else {
            sendWatch = (gen, backlog, now)
            return false
        }
        return now &- watch.since >= finishTimeoutNanos
    }

    /// Reads one block from the source into the context; at the end of a file, stops it.
    /// A file is read as fast as the server takes it: while the stream's backlog is above
    /// `LaneSupervisor.backlogLimit`, or the audio in flight (not yet final) fills the replay
    /// buffer, so that a stream lost at any moment loses nothing, the worker waits
    /// (checking commands between waits) instead of sending more. The microphone is never held
    /// back: its audio cannot wait.
    func pumpOnce() {
        guard pumping, audio.isOpen else { pumping = false; return }
        if waitsForServer {
            let unsent = supervisor.lanes.liveStream?.backlogBytes ?? 0
            let chunkSamples = SpeechAudio.samples(milliseconds: options.chunkMilliseconds)
            let capacity = supervisor.replay.capacitySamples
            var full = supervisor.unfinishedSamples + 2 * chunkSamples > capacity
            if full && supervisor.lanes.count == 1 && contextOpen && !stopSent && endpointer == nil {
                // Nothing is draining that would free the buffer: end this server context (the
                // server then finishes every word of it) and go on in a new one.
                let context = supervisor.epoch
                supervisor.rotate(reason: "the audio in flight filled the replay buffer", host: self)
                // A move that failed ended the context: the next step looks afresh.
                if supervisor.epoch != context { return }
                full = supervisor.unfinishedSamples + 2 * chunkSamples > capacity
            }
            // A file heard by a wake-word service is not read ahead of real time (a command
            // still ends the wait).
            let ahead = aheadOfRealTime()
            if ahead > 0 {
                stalledUntil = Clock.monotonicNanos() + ahead
                return
            }
            // A file also waits while an activation waits for the previous context to finish
            // (a command ends that), for audio to become final (`releaseReplay` pokes), or for
            // the current lane's replay to catch up (its stream drains).
            if backlog.isWaiting || full {
                stall(waitingFor: [])
                return
            }
            if supervisor.lanes.liveIsReplaying {
                stall(waitingFor: supervisor.lanes.replayingStreams)
                return
            }
            if unsent > LaneSupervisor.backlogLimit, let stream = supervisor.lanes.liveStream, let gen = supervisor.lanes.live {
                if sendStalled(generation: gen, backlog: unsent) {
                    // The server took none of it for the finish timeout: its flow-control window
                    // stayed shut (a hung application behind a live connection, which answers
                    // PINGs). Lost, as a stream that never finishes is; the file waited for ever.
                    sendWatch = nil
                    stream.retireConnection()  // as for the other give-ups (`expireUnacknowledgedStarts`)
                    handleStream(.closed(SpeechClientError(.timeout, "the server took none of the audio sent on its stream for \(SpeechAudio.secondsText(Double(options.finishTimeoutMilliseconds) / 1000)) s (its flow-control window stayed closed)",
                                                           grpcStatus: GRPCStatus.unavailable)), generation: gen)
                    return
                }
                stall(waitingFor: [stream])
                if stalledUntil != nil { return }
            } else {
                sendWatch = nil
            }
        }
        // A microphone is not waited for in a read, which held the worker (its audio lock, the
        // responses queued behind it, and its pool thread) for up to 100 ms: its capture thread
        // pokes the worker once the chunk is there. A replay meanwhile also wakes it as its
        // streams drain.
        // (Asked of a microphone only: the closure is not made for each chunk of a file.)
        let pokes = client
        if audio.isMicrophone, audio.notifyWhenChunkReady({ [weak pokes] in pokes?.pokeWorker() }) {
            if replaying {
                stall(waitingFor: supervisor.lanes.replayingStreams)
            } else {
                stalledUntil = Clock.monotonicNanos() + Self.microphoneSafetyNanos
            }
            return
        }
        // A pipe may block in the read: the callbacks queued so far go first.
        if audio.readMayWait { client?.flushDeferredWake() }
        switch audio.read() {
        case .chunks(let chunks):
            for c in chunks { take(c) }
        case .ended(let last):
            // End of stream: send what is left and stop the context, as if the user had.
            if let short = audio.shortfall { client?.log(.warning, short) }
            for c in last { take(c) }
            closeFileSource()
            endpointer != nil ? stopListening(auto: true) : sendStop(auto: true)
        case .failed(let error):
            closeFileSource(failed: error.message)
            client?.emit(.error(error))
            if endpointer != nil {
                stopListening(auto: true)
            } else if contextOpen && !stopSent {
                sendStop(auto: true)
            }
        }
    }

    func sendStop(auto: Bool = false) {
        guard contextOpen, !stopSent else { return }
        // While listening, the audio goes on after a context: only the context ends.
        if endpointer == nil {
            if pumping, waitsForServer { closeFileSource() }
            pumping = false
            // The resampler's tail belongs to this context, whatever the source: a descriptor
            // reads on in the next one, a microphone's next gets a new converter (the tail, up
            // to 3.5 ms at 8 kHz, was dropped with the old one).
            for c in audio.takeCapturedAndStop() { supervisor.sendAudio(c, host: self) }
            for c in audio.drain() { supervisor.sendAudio(c, host: self) }
        }
        stopSent = true
        client?.log(.debug, "stop sent for context \(contextId.isEmpty ? "(not started yet)" : contextId)\(auto ? " (end of the audio)" : "")\(replaying ? " (after the replay)" : "")")
        supervisor.endLiveAudio()
        if auto {
            client?.transition { state, _ in
                if state == .starting || state == .listening { state = .stopping }
            }
        }
    }

    /// The end of a context's reading (see `AudioPump.endContext`).
    func closeFileSource(failed: String? = nil) {
        audio.endContext(failed: failed)
        pumping = false
    }

    /// A context could not run: report the error, then the stop. A start queued behind it still
    /// happens (the header promises it after the pending stop completes; an error completes it).
    /// A loss `supervisor.reconnection` noted is not reported: the error names everything from the last final segment on.
    /// What later lanes held for the one that failed is delivered first (`applyHeldBeforeFailing`).
    /// While listening, an activation still going on when its context fails carries on in a new
    /// context, once, when the failure is one a new connection may mend
    /// (`ActivationBacklog.Continuing`): its speech after the failure was dropped until its
    /// endpoint, unsaid. Otherwise (a second failure, a refusal) the activation ends there, said
    /// in the error. (Only while nothing waits: otherwise the endpointer's activation is a later
    /// one, waiting, not this context's.)
    func failContext(_ error: SpeechClientError) {
        applyHeldBeforeFailing()
        var error = error
        let activationGoesOn = endpointer?.isActive == true && contextOpen && !stopSent && !suspended && !backlog.isWaiting
        // An earlier lane's `finished` error (`endEvents`) is said too: dropped, it vanished.
        let events = closeUnfinishedSegments(why: "the context failed") + endEvents
        if activationGoesOn && !continuesActivation && ReconnectionPlan.isRetryable(error) {
            backlog.wait(continuing: ActivationBacklog.Continuing(woken: woken))
            // Its end is not here: the context that carries it on says it (`endContext`).
            if wake == nil { woken = false }
            client?.log(.info, "the activation goes on in a new context")
        } else if activationGoesOn, var ep = endpointer {
            error = SpeechClientError(error.code, "\(error.message); the rest of the activation was not transcribed\(continuesActivation ? " (its second context failed too)" : "")", grpcStatus: error.grpcStatus)
            perform(ep.abandon())
            endpointer = ep
            if wake != nil { client?.emit(.listen(.deactivate, positionMilliseconds: Int64(SpeechAudio.milliseconds(samples: audioSamples)))) }
        }
        endContext(events: events + [.error(error), .stop(contextId: contextId)], startQueued: true)
    }

    /// A context whose start a suspend (or free) interrupted before the server opened it: it
    /// ends with the stop callback alone. It had no start callback and no results; the audio
    /// pushed into it is dropped, as audio pushed while suspended is.
    func abandonContext() {
        client?.log(.info, "a context that had not started yet was abandoned (suspend or free)")
        endContext(events: [.stop(contextId: "")], startQueued: false)
    }

    /// Segments that had words and never got their final update (the server never ended them):
    /// each is delivered final, its unconfirmed words flagged `final` false, so nothing heard is
    /// dropped silently. Returns the events, with a warning per context.
    func closeUnfinishedSegments(why: String) -> [ClientEvent] {
        guard !contextId.isEmpty else { return [] }
        let closed = assembler.closeUnfinished(context: contextId)
        guard !closed.isEmpty else { return [] }
        // Segments withheld until the wake word was heard stay withheld (a failed lane's are
        // kept now, no longer dropped: they reached here too).
        if options.activation == .wakeword && !woken { return [] }
        warnClosedUnfinished(closed, "context \(contextId): \(why)")
        return closed.map { .segment($0) }
    }

    /// The warning for segments delivered final though their server never ended them; `what`
    /// names the context and how it ended.
    func warnClosedUnfinished(_ closed: [Segment], _ what: String) {
        let words = closed.reduce(0) { $0 + $1.words.count }
        client?.log(.warning, "\(what) with \(closed.count) segment(s) the server never ended; their \(words) word(s) are delivered as a final update with the words marked unconfirmed")
    }

    /// Every way a context ends (finished, failed, abandoned): the per-context state is reset,
    /// `events` are queued with the state change, and then, with `startQueued`, a start the
    /// application queued behind this context (or made during a resume) begins.
    func endContext(events: [ClientEvent], startQueued: Bool) {
        supervisor.end()
        authRetried = false
        contextOpen = false
        stopSent = false
        endEvents = []
        finishedErrorsNoted = []
        // While listening the source keeps being read between contexts. Otherwise a microphone
        // keeps nothing until the next start (a failed context reached here without a stop).
        if endpointer == nil {
            pumping = false
            audio.stopCollecting()
        }
        if !contextId.isEmpty { _ = assembler.apply(SLUResponse(audioContext: contextId, segmentId: 0, payload: .finished(errorCode: nil, errorMessage: nil))) }
        contextId = ""
        var events = events
        if woken {
            woken = false
            // A wake-word service's activation said its end at its endpoint (`perform(.close)`).
            if wake == nil {
                events.insert(.listen(.deactivate, positionMilliseconds: Int64(SpeechAudio.milliseconds(samples: audioSamples))), at: max(0, events.count - 1))
            }
        }
        if (endpointer != nil || backlog.isWaiting) && !suspended {
            client?.transition({ _, _ in }, contextOpen: false, events: events)
            if backlog.isWaiting { openWaitingActivation() }
            finishListeningIfDone()
            return
        }
        var restart = false
        var staleStop = false
        let deferred = deferredStart && startQueued
        client?.transition({ [client] state, pending in
            if state == .suspended { pending = false; return }
            if startQueued && (deferred || (client?.untakenStarts ?? 0) > 0) {
                // A start made after a resume, while the suspended context still finished:
                // its state (STARTING, or STOPPING if stopped since) stands, and it begins now
                // (deferred) or when the worker takes it. IDLE here left it open but IDLE. A
                // start queued behind that one (`pending`) waits for it to end, as usual.
                return
            }
            if pending && startQueued {
                // Begins STOPPING when push_end already ended it (its end is held with its audio).
                state = (client?.takeQueuedStartEndedLocked() ?? false) ? .stopping : .starting
                restart = true
                // A stop still queued was made before that start, for the context that just
                // ended: taken later, it would stop the next one (and drop its audio).
                staleStop = (client?.untakenStops ?? 0) > 0
            } else {
                state = .idle
            }
            pending = false
        }, contextOpen: false, events: events)
        deferredStart = false
        let held = heldForDeferredStart
        heldForDeferredStart = HeldCommands()
        // What was pushed for the queued start goes into its context; nothing waits otherwise
        // (the start was cancelled, or a suspend abandoned it).
        let queuedHeld = restart ? heldForQueuedStart : nil
        heldForQueuedStart = nil
        // A start that begins now keeps what the microphone collected for it (queued behind
        // the stop, or deferred behind a suspended context); otherwise it is dropped.
        if !restart && !(deferred && !suspended) { audio.stopCollectingAhead() }
        if suspended {
            prepared?.stream.finish()
            prepared = nil
            if suspendReportPending {
                suspendReportPending = false
                report(.suspended)
            }
        } else if restart && staleStop {
            startAfterStaleStop = true
            heldForQueuedStart = queuedHeld  // still held, until that stop is taken
        } else if restart || deferred {
            handleStart()
            // Into the context it opened, or the listening it began (VOICE, WAKEWORD).
            if deferred && (contextOpen || endpointer != nil) { applyHeld(held) }
            if let queuedHeld, contextOpen || endpointer != nil { applyHeld(queuedHeld) }
        }
    }

    /// The start that waited for a stale stop (`startAfterStaleStop`) begins, with the audio
    /// pushed for it meanwhile.
    func startAfterTheStaleStop() {
        startAfterStaleStop = false
        let queuedHeld = heldForQueuedStart
        heldForQueuedStart = nil
        handleStart()
        if let queuedHeld, contextOpen || endpointer != nil { applyHeld(queuedHeld) }
    }

    /// The audio and the stop the application made for a start that waited for the previous
    /// context, in their order, now that its context is open.
    private func applyHeld(_ held: HeldCommands) {
        for c in held.chunks { take(c) }
        if held.stop { endpointer != nil ? stopListening(auto: false) : sendStop() }
        audioLock.broadcast()  // a push waiting for room counted the held audio
    }

    /// While a start waits for the previous context (`deferredStart`), what the application
    /// pushed or stopped is for the waiting start: it is held, not taken into the context that
    /// is finishing (which took no more audio and would drop it). Returns false when there is
    /// no waiting start.
    func holdForDeferredStart(chunks: Chunker.Chunks, stop: Bool) -> Bool {
        if !deferredStart, !stop, var held = heldForQueuedStart {
            // Audio for a start queued behind the pending stop (a stop cancels that start
            // instead: none comes here for it).
            hold(chunks, in: &held)
            heldForQueuedStart = held
            return true
        }
        guard deferredStart else { return false }
        hold(chunks, in: &heldForDeferredStart)
        if stop {
            heldForDeferredStart.stop = true
            // The microphone's audio for that start ends here: what it hears after the stop
            // is not the context's (kept, it ran on until the old context ended, and past 30 s
            // pushed out the words said before the stop).
            audio.pauseCollectingAhead()
        }
        return true
    }

    /// push_end for the start queued behind the pending stop, not begun yet: its tail joins what
    /// is held, and the context ends once it opens. False when there is no such start waiting.
    func endHeldForQueuedStart(with tail: Chunker.Chunks) -> Bool {
        guard var held = heldForQueuedStart else { return false }
        hold(tail, in: &held)
        held.stop = true
        heldForQueuedStart = held
        return true
    }

    /// Keeps `chunks` for a start that waits, up to the replay buffer's length (then says so).
    private func hold(_ chunks: Chunker.Chunks, in held: inout HeldCommands) {
        for c in chunks {
            if held.samples + c.count > supervisor.replay.capacitySamples {
                if !held.overflowed {
                    held.overflowed = true
                    client?.emit(.error(SpeechClientError(.network, "the server has not finished the previous context; audio pushed for the next one beyond the replay buffer (\(options.replayBufferMilliseconds) ms) is being dropped")))
                }
                continue
            }
            held.samples += c.count
            held.chunks.append(c)
        }
    }

    /// The context ends once the user's stop was sent and every lane has finished.
    func endContextIfDone() {
        if contextOpen, let failure = supervisor.failsWhenFinished() {
            // The reconnection gave up while streams before the lost audio finished: they have.
            failContext(failure)
            return
        }
        guard contextOpen, stopSent, supervisor.lanes.live == nil, supervisor.lanes.isEmpty, supervisor.reconnection.isSettled else { return }
        let id = contextId
        client?.log(.debug, "context \(id) finished")
        endContext(events: closeUnfinishedSegments(why: "the context ended") + endEvents + [.stop(contextId: id)], startQueued: true)
    }
}
