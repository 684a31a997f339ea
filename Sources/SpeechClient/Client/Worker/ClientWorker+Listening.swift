/// Audio in: each chunk taken, hands-free listening (the endpointer, an activation waiting for
/// the previous context) and the wake-word service.
extension ClientWorker {
    // MARK: - Audio in, hands-free listening

    /// One chunk of the source (or pushed): its level, then into the open context (manual) or
    /// through the endpointer (listening).
    func take(_ chunk: [Int16], toWakeService: Bool = true) {
        let listening = endpointer != nil
        guard listening || (contextOpen && !stopSent) else { return }
        let at = audioSamples
        audioSamples += chunk.count
        if options.reportLevels {
            client?.emit(.level(Float(VoiceActivityDetector.decibels(chunk)), positionMilliseconds: Int64(SpeechAudio.milliseconds(samples: at))))
        }
        guard var ep = endpointer else {
            supervisor.sendAudio(chunk, host: self)
            return
        }
        if toWakeService, let wake { hearForWake(chunk, at: at, on: wake) }
        let actions = ep.process(chunk)
        endpointer = ep
        perform(actions)
    }

    /// Carries out the endpointer's actions. Its sample positions are ours: both count from the
    /// start of listening.
    func perform(_ actions: [Endpointer.Action]) {
        for action in actions {
            switch action {
            case .event(let e, let sample):
                client?.emit(.listen(e, positionMilliseconds: Int64(SpeechAudio.milliseconds(samples: sample))))
            case .open:
                if contextOpen || backlog.isWaiting {
                    // The previous context is still finishing, or no context could be opened
                    // for the activation before (its retry is due): this one waits behind it.
                    backlog.wait()
                } else {
                    openListeningContext()
                }
            case .audio(let chunk):
                if backlog.isWaiting {
                    if backlog.append(chunk) {
                        client?.emit(.error(SpeechClientError(.network, "the server has not finished the previous context (or cannot be reached); speech heard meanwhile is being dropped")))
                    }
                } else if contextOpen && !stopSent {
                    supervisor.sendAudio(chunk, host: self)
                }
            case .close:
                lastActivationEnd = audioSamples
                if wake != nil {
                    // A detection's activation ends here, at its endpoint, as the header says:
                    // said when its context ended, it came seconds late (the recognizer
                    // finishing), while nothing was heard any more and wake words were waited for.
                    client?.emit(.listen(.deactivate, positionMilliseconds: Int64(SpeechAudio.milliseconds(samples: audioSamples))))
                }
                if backlog.isWaiting {
                    backlog.close()
                } else if contextOpen && !stopSent {
                    sendStop()
                }
            }
        }
    }

    /// Start in voice or wakeword mode: open the audio and the stream, then listen.
    func startListening() {
        do throws(SpeechClientError) {
            try openAudioForContext()
            try ensureStream()
        } catch {
            closeFileSource()
            if cancellation.isCancelled { abandonContext() } else { failContext(error) }
            return
        }
        audioSamples = 0
        lastActivationEnd = 0
        pacedSince = nil
        if let wake {
            do throws(SpeechClientError) {
                client?.flushDeferredWake()  // a connect: callbacks first
                client?.log(.info, try wake.open(origin: audioSamples))
            } catch {
                closeFileSource()
                if cancellation.isCancelled { abandonContext() } else { failContext(error) }
                return
            }
        }
        endpointer = Endpointer(settings: Endpointer.Settings(options: options))
        backlog.clear()
        client?.log(.debug, "listening (\(options.activation == .voice ? "voice" : "wakeword") activation)")
        client?.transition { state, _ in if state == .starting { state = .listening } }
        pumping = audio.isOpen
    }

    /// A context for an activation (the endpointer's new one, or the first waiting). When none
    /// can be opened because the server cannot be reached, the activation waits (its audio
    /// kept, as for a context still finishing: `ActivationBacklog`) and the open is tried again
    /// with the reconnect attempts and delays, each said as RECONNECTING: dropped at the first
    /// failure, a command said while a recognizer restarted was lost. When the attempts run out,
    /// or the error is not one a retry mends, the waiting speech is dropped with an error naming
    /// it; listening goes on. Returns whether a context opened.
    @discardableResult
    private func openListeningContext() -> Bool {
        do throws(SpeechClientError) {
            try ensureStream(reportsFailure: false)
        } catch {
            let attempt = (backlog.retry?.attempt ?? 0) + 1
            if (ReconnectionPlan.isRetryable(error) && supervisor.reconnection.allows(attempt: attempt)) || cancellation.isCancelled {
                // (Interrupted by a suspend, it waits: the suspend, taken next, says it dropped.)
                if !backlog.isWaiting { backlog.wait() }  // this activation, its audio follows
                let delay = supervisor.reconnection.delayMilliseconds(attempt: attempt)
                backlog.retryOpening(attempt: attempt, at: Clock.monotonicNanos() + delay * 1_000_000)
                if !cancellation.isCancelled {
                    client?.log(.info, "no context could be opened for the speech heard (\(error.message)); it is kept, and tried again in \(delay) ms (attempt \(attempt))")
                    report(.reconnecting, attempt: attempt, delayMilliseconds: Int(delay), reason: error)
                }
                return false
            }
            giveUpOpening(error, attempts: attempt - 1)
            return false
        }
        beginContext()
        return true
    }

    /// No context can be opened for the speech heard: what waits for one is dropped, said with
    /// how much; an activation still going on ends (the speech going on opens no other at once).
    private func giveUpOpening(_ error: SpeechClientError, attempts: Int) {
        let lost = backlog.heldSamples
        let held = attempts > 0 || lost > 0 ? "; after \(attempts + 1) attempt(s), \(backlog.count) activation(s) (\(SpeechAudio.secondsText(samples: lost)) s of speech) were not transcribed"
                                            : "; the activation's speech is not transcribed"
        report(.unavailable, reason: error)
        client?.emit(.error(SpeechClientError(error.code, "a context could not be opened for the speech heard: \(error.message)\(held)", grpcStatus: error.grpcStatus)))
        sayEndOfDroppedContinuation()
        if var ep = endpointer, ep.isActive {
            perform(ep.abandon())
            endpointer = ep
            // A detection's activation says its own end (the endpointer's abandon does not,
            // nor will its endpoint come).
            if wake != nil { client?.emit(.listen(.deactivate, positionMilliseconds: Int64(SpeechAudio.milliseconds(samples: audioSamples)))) }
        }
        backlog.clear()
    }

    /// The previous context has ended, or a retry to open one is due: the first activation
    /// that waits opens its own context (or waits on: `openListeningContext`).
    func openWaitingActivation() {
        guard backlog.isWaiting, openListeningContext() else { return }
        let first = backlog.take()
        // With a wake-word service every activation is a detection's (speech opens none); one
        // going on after its context failed was woken there.
        if wake != nil || first.continuing?.woken == true { wokenByDetection() }
        continuesActivation = first.continuing != nil
        // Into this context only: should it fail meanwhile (a move that could not open), the
        // next may have opened, for the next activation.
        let context = supervisor.epoch
        for (i, c) in first.chunks.enumerated() {
            guard contextOpen && supervisor.epoch == context else {
                // Failed, the activation carried on (`failContext`): the rest of its audio goes
                // first into the context that carries it on, or waits with it.
                let rest = first.chunks[i...]
                if backlog.isWaiting {
                    backlog.prependToFirst(rest)
                } else if contextOpen && continuesActivation && !stopSent {
                    for r in rest { supervisor.sendAudio(r, host: self) }
                }
                return
            }
            supervisor.sendAudio(c, host: self)
        }
        if first.closed && supervisor.epoch == context { sendStop() }
    }

    /// An activation a wake phrase had woken, carried on after its context failed and dropped
    /// before a context opened for it, says its end (its failed context did not: the one that
    /// carried it on would have). Call before the backlog is cleared.
    func sayEndOfDroppedContinuation() {
        guard wake == nil, backlog.holdsWokenContinuation else { return }
        client?.emit(.listen(.deactivate, positionMilliseconds: Int64(SpeechAudio.milliseconds(samples: audioSamples))))
    }

    /// Listening stopped and nothing is left to open or finish: idle.
    func finishListeningIfDone() {
        if endpointer == nil && !backlog.isWaiting && !contextOpen { finishListening() }
    }

    /// How far before its arrival a detection without a time is taken to be (the command follows
    /// the wake word; starting a little early costs the wake word's tail in the context).
    static let unstampedDetectionLead = SpeechAudio.samples(milliseconds: 500)

    /// The context a detection opened delivers every segment (set after it opened: a new context
    /// starts unwoken). One that could not open said its end already (`openListeningContext`).
    private func wokenByDetection() {
        woken = contextOpen
    }

    /// Stop (or the end of the audio) while listening: the open activation ends, its context
    /// delivers its last results, then the client is idle.
    func stopListening(auto: Bool) {
        guard endpointer != nil else { return }
        // What the microphone captured and was not taken yet, and the chunk in progress, are the
        // end of what was said: heard (and sent, or kept by an activation waiting for the
        // previous context) before the endpointer finishes, as a manual stop sends them. With an
        // activation waiting, the previous context's end cleared the capture buffer: the last
        // words before the stop (up to a chunk, more when the worker was held up) were lost.
        // Only into an open activation: outside one, a cough in that tail would open a context
        // during the stop. Not to the wake-word service, which is closed right after (it may
        // reconnect). The tail is taken either way: none of it is for a later start.
        let intoActivation = endpointer?.isActive == true
        for c in audio.takeCapturedAndStop() where intoActivation { take(c, toWakeService: false) }
        for c in audio.drain() where intoActivation { take(c, toWakeService: false) }
        guard var ep = endpointer else { return }
        let actions = ep.finish()
        endpointer = nil
        closeWake()
        perform(actions)
        pumping = false
        closeFileSource()
        if auto {
            client?.transition { state, _ in
                if state == .starting || state == .listening { state = .stopping }
            }
        }
        if !contextOpen && !backlog.isWaiting { finishListening() }
    }

    /// Listening is over and no context is open: idle (or a start queued meanwhile runs).
    func finishListening() {
        endContext(events: [], startQueued: true)
    }

    // MARK: - Wake-word service

    /// Every chunk heard while listening goes to the service (see `WakeListener`).
    private func hearForWake(_ chunk: [Int16], at: Int, on wake: WakeListener) {
        if !wake.isConnected { client?.flushDeferredWake() }  // it may reconnect (blocking, briefly)
        switch wake.hear(chunk, at: at) {
        case .sent: break
        case .back(let line): client?.log(.info, line)
        case .stillDown(let line): if !line.isEmpty { client?.log(.debug, line) }
        case .stalled(let error): reportWakeLost(error)
        }
    }

    func closeWake() {
        wake?.close()
    }

    /// The service is gone until it is back: said once per loss.
    private func reportWakeLost(_ error: SpeechClientError) {
        client?.emit(.error(SpeechClientError(error.code, "the wake-word service: \(error.message); the wake word is not heard until it is back (tried every 2 s)", grpcStatus: error.grpcStatus)))
    }

    func handleWake(_ event: WakeEvent) {
        switch event {
        case .detection(let name, let sample):
            guard var ep = endpointer else { return }
            // One wake word comes back as a burst of detections: the first opens the context,
            // the rest find it open, or come from before its end. One while the previous
            // context still finishes (its stop sent, the server not done: Whisper's seconds)
            // opens an activation that waits for it, as speech does in voice mode: ignored, the
            // command said after it was lost, without a word.
            // A detection without a time (the Wyoming field is optional) was heard a moment
            // before it reached here: taken as now, a service (and a worker) slower than the
            // pre-roll cut the first word of the command.
            let at = min(sample ?? max(0, audioSamples - Self.unstampedDetectionLead), audioSamples)
            guard !ep.isActive, !(contextOpen && !stopSent), at > lastActivationEnd else { return }
            let waits = contextOpen
            client?.log(.info, "wake word '\(name)' heard at \(SpeechAudio.secondsText(samples: at)) s")
            client?.emit(.listen(.activate, positionMilliseconds: Int64(SpeechAudio.milliseconds(samples: at)), name: name))
            let actions = ep.activate(from: at)
            endpointer = ep
            perform(actions)
            // Waiting, it is woken when its context opens (`openWaitingActivation`).
            if !waits { wokenByDetection() }
        case .closed(let error):
            wake?.lost()
            reportWakeLost(error)
        case .probed(let failure):
            if let line = wake?.probed(failure), !line.isEmpty { client?.log(.debug, line) }
        }
    }

    /// A file heard by a wake-word service, or sent to a server that ends utterances by itself
    /// (`RecognitionStream.endsUtterancesItself`): how far (ns) the audio read so far is ahead
    /// of the time since listening (or the context) began; 0 when it is not.
    func aheadOfRealTime() -> UInt64 {
        guard (wake != nil && endpointer != nil) || supervisor.lanes.liveStream?.endsUtterancesItself == true else { return 0 }
        let now = Clock.monotonicNanos()
        guard let since = pacedSince else { pacedSince = now; return 0 }
        let due = UInt64(audioSamples) * SpeechAudio.nanosecondsPerSample
        return due > now - since ? due - (now - since) : 0
    }
}
