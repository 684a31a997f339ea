/// Audio out: the replay buffer, rotation to a new stream, reconnection and replay.
extension ClientWorker {
    // MARK: - Audio out, bounded streams, reconnection

    /// Every chunk of the context is kept for replay, then sent on the current lane when it is
    /// caught up. Before it, the lane moves to a new stream when its budget says so.
    func sendAudio(_ chunk: [Int16]) {
        rotateIfDue(before: chunk)
        replay.append(chunk)
        contextSamples += chunk.count
        if let gen = current, var lane = lanes[gen], lane.cursor == nil {
            lane.stream.send(.audio(chunk))
            lane.bytes += Lane.audioBytes(samples: chunk.count)
            lanes[gen] = lane
        }
    }

    /// Before each chunk of live audio: the lane moves to a new stream when `rotation` says so.
    private func rotateIfDue(before chunk: [Int16]) {
        guard let gen = current, let lane = lanes[gen], lane.cursor == nil, !stopSent else { return }
        if let why = rotation.reason(before: chunk, streamBytes: lane.bytes, sentSamples: contextSamples - lane.start,
                                     moveBy: lane.moveBy, now: Clock.monotonicNanos()) {
            rotate(reason: why)
        }
    }

    /// The current lane ends here (stop, then end of stream: it drains) and a new lane on a new
    /// stream takes the audio from here. The application sees one context.
    func rotate(reason: String) {
        guard let gen = current, var lane = lanes[gen], lane.cursor == nil, !stopSent else { return }
        lane.end = contextSamples
        lane.moveBy = nil
        stopLane(&lane)
        lanes[gen] = lane
        current = nil
        rotation.reset()
        client?.log(.info, "context \(contextId.isEmpty ? "(not started yet)" : contextId) continues on a new stream at \(Self.seconds(SpeechAudio.seconds(samples: contextSamples))) s: \(reason)")
        do throws(SpeechClientError) {
            try openLane(from: contextSamples, end: nil)
        } catch {
            if cancellation.isCancelled { return }
            laneLost(from: contextSamples, end: nil, cause: error, servedLongEnough: false)
        }
    }

    func scheduleReconnect(attempt: Int, cause: SpeechClientError) {
        let base = min(Double(options.reconnectInitialDelayMilliseconds) * Double(1 << min(attempt - 1, 20)),
                       Double(options.reconnectMaxDelayMilliseconds))
        let jitter = Double.random(in: 0.75...1.25)
        let delayMs = UInt64(max(0, base * jitter))
        reconnect = (attempt, Clock.monotonicNanos() + delayMs * 1_000_000, cause)
        report(.reconnecting, attempt: attempt, delayMilliseconds: Int(delayMs))
        let of = options.reconnectAttempts == ClientOptions.unlimitedReconnects ? "unlimited" : "of \(options.reconnectAttempts)"
        client?.log(.warning, "connection lost during context \(contextId) (\(cause.message)); reconnecting in \(delayMs) ms, attempt \(attempt) \(of)")
    }

    /// Opens a new stream for each lost lane and replays the audio it had not finished. When
    /// the buffer no longer holds all of it, an error says what was lost.
    func attemptReconnect() {
        guard let r = reconnect else { return }
        reconnect = nil
        let pending = repairs.sorted { $0.from < $1.from }
        repairs = []
        for (k, repair) in pending.enumerated() {
            var from = repair.from
            if replay.oldestSample > from {
                pendingLoss = (pendingLoss?.from ?? from, replay.oldestSample)
                from = min(replay.oldestSample, repair.end ?? replay.oldestSample)
            }
            do throws(SpeechClientError) {
                try openLane(from: from, end: repair.end)
            } catch {
                repairs.append(contentsOf: pending[k...].map { ($0.from, $0.end) })
                if cancellation.isCancelled {
                    // Suspended (or freed) during an outage: the context cannot finish.
                    repairs = []
                    failContext(lostAudioError(SpeechClientError(.network, "the client was suspended while reconnecting"),
                                               attempts: r.attempt, from: replayPoint))
                    return
                }
                lossesWithoutProgress += 1
                let unlimited = options.reconnectAttempts == ClientOptions.unlimitedReconnects
                if (!unlimited && lossesWithoutProgress > options.reconnectAttempts) || !Self.isRetryable(error) {
                    let point = replayPoint
                    repairs = []
                    report(.unavailable, reason: error)
                    failContext(lostAudioError(error, attempts: r.attempt, from: point))
                } else {
                    scheduleReconnect(attempt: lossesWithoutProgress, cause: error)
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
        for gen in lanes.keys.sorted() {
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
