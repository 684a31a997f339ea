/// Audio out: the replay buffer, rotation to a new stream, reconnection and replay.
extension ClientWorker {
    // MARK: - Audio out, bounded streams, reconnection

    /// Every chunk of the context is kept for replay, then sent on the current lane when it is
    /// caught up. Before it, the lane moves to a new stream when its budget says so.
    func sendAudio(_ chunk: [Int16]) {
        rotateIfDue(before: chunk)
        replay.append(chunk)
        contextSamples += chunk.count
        // In place: a copy of the lane and its write-back were a few percent of a file's time.
        lanes.sendLive(chunk)
    }

    /// Before each chunk of live audio: the lane moves to a new stream when `rotation` says so.
    private func rotateIfDue(before chunk: [Int16]) {
        guard let lane = lanes.liveLane, lane.cursor == nil, !stopSent else { return }
        if let why = rotation.reason(before: chunk, streamBytes: lane.bytes, sentSamples: contextSamples - lane.start,
                                     moveBy: lane.moveBy, now: Clock.monotonicNanos()) {
            rotate(reason: why)
        }
    }

    /// The current lane ends here (stop, then end of stream: it drains) and a new lane on a new
    /// stream takes the audio from here. The application sees one context.
    func rotate(reason: String) {
        guard let gen = lanes.live, var lane = lanes[gen], lane.cursor == nil, !stopSent else { return }
        lane.end = contextSamples
        lane.moveBy = nil
        stopLane(&lane)
        lanes[gen] = lane
        lanes.endLive()
        rotation.reset()
        client?.log(.info, "context \(contextId.isEmpty ? "(not started yet)" : contextId) continues on a new stream at \(Self.seconds(SpeechAudio.seconds(samples: contextSamples))) s: \(reason)")
        do throws(SpeechClientError) {
            try openLane(from: contextSamples, end: nil)
        } catch {
            if cancellation.isCancelled { return }
            laneLost(from: contextSamples, end: nil, cause: error, servedLongEnough: false)
        }
    }

    /// A lost lane will be replaced after `delayMilliseconds` (`reconnection` scheduled it).
    func reportReconnecting(attempt: Int, delayMilliseconds delayMs: UInt64, cause: SpeechClientError) {
        report(.reconnecting, attempt: attempt, delayMilliseconds: Int(delayMs))
        let of = options.reconnectAttempts == ClientOptions.unlimitedReconnects ? "unlimited" : "of \(options.reconnectAttempts)"
        client?.log(.warning, "connection lost during context \(contextId) (\(cause.message)); reconnecting in \(delayMs) ms, attempt \(attempt) \(of)")
    }

    /// Opens a new stream for each lost lane and replays the audio it had not finished. When
    /// the buffer no longer holds all of it, an error says what was lost.
    func attemptReconnect() {
        guard let (attempt, pending) = reconnection.takeDue(now: Clock.monotonicNanos()) else { return }
        for (k, repair) in pending.enumerated() {
            let from = reconnection.replayStart(of: repair, oldestSample: replay.oldestSample)
            do throws(SpeechClientError) {
                try openLane(from: from, end: repair.end)
            } catch {
                if cancellation.isCancelled {
                    // Suspended (or freed) during an outage: the context cannot finish.
                    failContext(lostAudioError(SpeechClientError(.network, "the client was suspended while reconnecting"),
                                               attempts: attempt, from: replayPoint))
                    return
                }
                switch reconnection.attemptFailed(remaining: pending[k...], error: error, now: Clock.monotonicNanos()) {
                case .giveUp:
                    let point = replayPoint  // with the repairs: the error names their audio too
                    reconnection.dropRepairs()
                    report(.unavailable, reason: error)
                    failContext(lostAudioError(error, attempts: attempt, from: point))
                case .retry(let next, let delay):
                    reportReconnecting(attempt: next, delayMilliseconds: delay, cause: error)
                }
                return
            }
            client?.log(.info, "reconnected; replaying \(Self.seconds(SpeechAudio.seconds(samples: (repair.end ?? contextSamples) - from))) s of audio")
        }
        report(.ready)
        _ = pumpReplay()
        endContextIfDone()
    }

    /// Sends replay audio on every lane that has some, while its stream's send backlog is under
    /// the file limit; a lane with an end sends its stop once all of it is out, a live lane then
    /// takes live audio again. Returns whether it made progress.
    @discardableResult
    func pumpReplay() -> Bool {
        var sent = false
        for gen in lanes.generations {
            guard var lane = lanes[gen], let cursor = lane.cursor else { continue }
            // Checked first: this runs each time the worker looks while the stream drains.
            if lane.stream.backlogBytes > Self.fileBacklogLimit { continue }
            let target = lane.end ?? replay.endSample
            var at = max(cursor, replay.oldestSample)
            for chunk in replay.chunks(from: at, upTo: target) {
                if lane.stream.backlogBytes > Self.fileBacklogLimit { break }
                lane.stream.send(.audio(chunk))
                lane.bytes += Lane.audioBytes(samples: chunk.count)
                at += chunk.count
                sent = true
            }
            if at >= target {
                lane.cursor = nil
                if lane.end != nil { stopLane(&lane) }
                client?.log(.debug, "replay done")
            } else {
                lane.cursor = at
            }
            lanes[gen] = lane
        }
        return sent
    }

    /// The error that ends a context whose connection could not be restored: what failed and
    /// exactly which audio was not transcribed.
    func lostAudioError(_ error: SpeechClientError, attempts: Int, from: Int) -> SpeechClientError {
        let lost = SpeechAudio.seconds(samples: contextSamples - from)
        return SpeechClientError(error.code, "reconnection failed after \(attempts) attempt(s) (\(error.message)); "
            + "the last \(Self.seconds(lost)) s of audio, from \(Self.seconds(SpeechAudio.seconds(samples: from))) s into the context, were not transcribed",
            grpcStatus: error.grpcStatus)
    }

    static func seconds(_ s: Double) -> String {
        let tenths = Int((s * 10).rounded())
        return "\(tenths / 10).\(tenths % 10)"
    }
}
