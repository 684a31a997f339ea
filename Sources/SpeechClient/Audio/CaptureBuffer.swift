/// A microphone read on a thread of its own (`spc-audio`) into a bounded buffer, so that its
/// audio is kept while the client's worker is held up: a connect or a login blocks the worker
/// for up to their timeouts (5 s and 10 s by default), during a reconnection above all, and the
/// device's own buffer holds 400 ms. Read directly by the worker, everything past that was
/// overrun and lost, though keeping the audio of an outage for replay is the point of
/// reconnecting.
///
/// The worker does not block in a read: it asks to be told when the rest of its chunk is there
/// (`notifyWhenAvailable`), then takes everything buffered (`readAvailable`), so it wakes once
/// per chunk, not once per 20 ms period, and a worker back from a connect sends the audio of
/// the wait at once. (`read` waits instead, up to 100 ms for the first audio, as the device
/// read did.) Past
/// `capacitySeconds` the oldest audio is dropped and that is said once per episode. Audio is
/// kept only between `startCollecting` and `stopCollecting` (a context, or listening): outside,
/// the device is still read, every 100 ms (a quarter of its buffer at most), so that it never
/// overruns, and what it gives is dropped: up to that much audio from just before a start may
/// begin the context. Read every period instead, an idle client with its microphone open cost
/// 0.7 % of a core here, against 0.004 % before this thread existed.
/// Sendable: the buffer and flags are guarded by `lock`; `inner` is read by the capture thread
/// only, and closed (thread-safe for `ALSACapture`) by `close`.
public final class CaptureBuffer: AudioSource, @unchecked Sendable {
    public let inner: any AudioSource & Sendable
    public let capacitySeconds: Int

    private let lock = ConditionLock()
    private var samples = FIFO<[Float]>()
    private var bufferedSamples = 0
    private var ended = false
    private var failure: SpeechClientError?
    private var dropping = false
    private var collecting = false
    private var closing = false
    /// Marks made by the application's calls, on its thread, while the worker may be held up
    /// (a connect, a login: up to 15 s). Taken only when the worker got to the commands, a
    /// stop gave the old context everything heard until then, the first words of a start
    /// queued behind it among them, and that start collected only from then on.
    /// `endedAtCall`: a stop was called; `ending` is what its context heard until then (and
    /// the block the device was reading), the only audio reads give until the worker takes it
    /// (`takeBufferedAndStop`). `collectingSinceCall`: a start queued behind that stop was
    /// called, and `samples` keeps what is heard since, for it, until the worker takes it.
    private var endedAtCall = false
    private var ending = FIFO<[Float]>()
    private var endingSamples = 0
    private var endingTakesNextBlock = false
    private var collectingSinceCall = false
    /// Called once when `availableAt` samples are buffered or the capture ends (`notifyWhenAvailable`).
    private var onAvailable: (@Sendable () -> Void)?
    private var availableAt = 0
    private var thread: NativeThread?
    private var openFormat: AudioFormat = .speech
    private let messages = Locked<(@Sendable (String) -> Void)?>(nil)
    /// Where audio lost while collecting is said (the client's error event, `onLoss`).
    private let losses = Locked<(@Sendable (SpeechClientError) -> Void)?>(nil)
    /// Samples dropped for capacity in the episode under way, said when it ends (guarded by `lock`).
    private var droppedInEpisode = 0
    private var droppedToSay = 0
    /// At most this much silence stands in for audio the device lost (an overrun; a suspend
    /// of the whole machine may last hours): past it, later word times are early by the rest.
    static let maxSilenceFillSeconds = 5

    static let readWaitMilliseconds: Int32 = 100
    /// How often the device is read while its audio is not kept.
    static let idleReadMilliseconds = 100

    public init(_ inner: any AudioSource & Sendable, capacitySeconds: Int = 30) {
        self.inner = inner
        self.capacitySeconds = max(1, capacitySeconds)
    }

    deinit { close() }

    public var format: AudioFormat { lock.withLock { openFormat } }

    /// Where the device's messages and this buffer's go (the client's log, as warnings).
    public func onMessage(_ sink: (@Sendable (String) -> Void)?) {
        messages.withLock { $0 = sink }
        (inner as? ALSACapture)?.onALSAMessage(sink)
    }

    /// Where audio lost while collecting is said: an overrun's gap (filled with silence), or
    /// audio dropped for capacity (said when the worker takes audio again).
    public func onLoss(_ sink: (@Sendable (SpeechClientError) -> Void)?) {
        losses.withLock { $0 = sink }
    }

    public func open() throws(SpeechClientError) {
        close()
        try inner.open()
        let format = inner.format
        lock.withLock {
            openFormat = format
            clearLocked()
            clearEndingLocked()
            ended = false
            closing = false
            failure = nil
            dropping = false
            // `collecting` stays as set: a microphone opened for a context collects from its
            // first read (a device without a clock, ALSA's file plugin in the tests, gives its
            // audio as fast as it is read until it is paced: none of it may be dropped).
        }
        do throws(SpeechClientError) {
            let started = try NativeThread(name: "spc-audio") { [self] in capture(format: format) }
            lock.withLock { thread = started }
        } catch {
            inner.close()
            throw error
        }
    }

    /// The capture thread: reads the device until it ends, fails or is closed.
    private func capture(format: AudioFormat) {
        let block = max(1, format.sampleRate / 50)  // 20 ms, the device's period
        let idleBlock = max(1, format.sampleRate / 5)  // 200 ms: all the device holds after an idle wait
        let capacity = capacitySeconds * format.sampleRate * max(1, format.channels)
        // A quarter of the device's buffer at most (a device may grant less than the 400 ms
        // asked): one read, of at most half of it, then takes all that came.
        let deviceBuffer = (inner as? ALSACapture)?.bufferMilliseconds ?? 0
        let idleWait = deviceBuffer > 0 ? min(Self.idleReadMilliseconds, max(5, deviceBuffer / 4)) : Self.idleReadMilliseconds
        while true {
            // Not collecting: wait out the idle interval (a start or a close ends it at once).
            let idle: Bool = lock.withLock {
                let until = Clock.monotonicNanos() + UInt64(idleWait) * 1_000_000
                while !collecting && !closing {
                    if !lock.wait(untilMonotonicNanos: until) { break }
                }
                return !collecting
            }
            let read: [Float]?
            do throws(SpeechClientError) {
                read = try inner.read(maxFrames: idle ? idleBlock : block)
            } catch {
                let (notify, unused) = lock.withLock { () -> ((@Sendable () -> Void)?, Bool) in
                    failure = error
                    ended = true
                    lock.broadcast()
                    return (takeNotificationLocked(force: true), !collecting)
                }
                notify?()
                if unused {
                    // No context reads it to say so (a microphone unplugged between contexts).
                    messages.withLock { $0 }?("the microphone failed while no context used it (\(error.message)); the next start opens it again")
                }
                return
            }
            guard let read else {
                let notify = lock.withLock { () -> (@Sendable () -> Void)? in
                    ended = true
                    lock.broadcast()
                    return takeNotificationLocked(force: true)
                }
                notify?()
                return
            }
            if read.isEmpty { continue }
            let lostFrames = inner.takeLostFrames()
            var filledFrames = 0
            var dropped = 0
            var notify: (@Sendable () -> Void)?
            let firstDrop: Bool = lock.withLock {
                // An idle read began after the stop: what it holds from before it (up to a
                // period) is dropped with it, rather than a later start's audio given to the stop.
                if idle { endingTakesNextBlock = false }
                if endedAtCall && endingTakesNextBlock && !idle {
                    // The block the device was reading when the stop was called ends with
                    // audio from before it: the stop's context's (up to a period of its last word).
                    endingTakesNextBlock = false
                    _ = ending.push(read)
                    endingSamples += read.count
                    lock.broadcast()
                    notify = takeNotificationLocked(force: false)
                    return false
                }
                guard collecting, !idle else { return false }  // an idle read is audio from before a start
                if lostFrames > 0 {
                    // The device lost audio just before this block (an overrun): silence takes
                    // its place, so that what the server hears after it keeps its time.
                    filledFrames = min(lostFrames, Self.maxSilenceFillSeconds * format.sampleRate)
                    let fill = [Float](repeating: 0, count: filledFrames * max(1, format.channels))
                    _ = samples.push(fill)
                    bufferedSamples += fill.count
                }
                _ = samples.push(read)
                bufferedSamples += read.count
                while bufferedSamples > capacity, let oldest = samples.pop() {
                    bufferedSamples -= oldest.count
                    dropped += oldest.count
                }
                let first = dropped > 0 && !dropping
                if dropped > 0 { dropping = true }
                droppedInEpisode += dropped
                lock.broadcast()
                notify = takeNotificationLocked(force: false)
                return first
            }
            notify?()
            if filledFrames > 0, let sink = losses.withLock({ $0 }) {
                let ms = Int(Int64(lostFrames) * 1000 / Int64(max(1, format.sampleRate)))
                let rest = lostFrames > filledFrames
                    ? " for its first \(Self.maxSilenceFillSeconds) s (word times after it are early by the rest)" : ""
                sink(SpeechClientError(.audio, "the microphone lost \(ms) ms of audio (the device overran or was suspended: it was not read in time); silence stands in for it\(rest)"))
            }
            if firstDrop {
                let sink = messages.withLock { $0 }
                sink?("the microphone's audio was not taken for over \(capacitySeconds) s (the client was held up): the oldest is being dropped")
            }
        }
    }

    public func read(maxFrames: Int) throws(SpeechClientError) -> [Float]? {
        let deadline = Clock.monotonicNanos() + UInt64(Self.readWaitMilliseconds) * 1_000_000
        defer { sayDropped() }
        return try lock.withLock { () throws(SpeechClientError) -> [Float]? in
            while readableLocked == 0 && !ended && !(endedAtCall && !endingTakesNextBlock) {
                if !lock.wait(untilMonotonicNanos: deadline) { break }
            }
            return try takeLocked()
        }
    }

    /// Everything buffered, without waiting: nil once the capture has ended and all is taken,
    /// the capture's error once it failed and all is taken.
    public func readAvailable() throws(SpeechClientError) -> [Float]? {
        defer { sayDropped() }
        return try lock.withLock { () throws(SpeechClientError) -> [Float]? in try takeLocked() }
    }

    /// Audio dropped for capacity in an episode that ended: an error names how much (the log's
    /// warning when it began said only that it did). Outside the lock.
    private func sayDropped() {
        let (samples, format) = lock.withLock { () -> (Int, AudioFormat) in
            defer { droppedToSay = 0 }
            return (droppedToSay, openFormat)
        }
        guard samples > 0, let sink = losses.withLock({ $0 }) else { return }
        let seconds = Double(samples) / Double(max(1, format.sampleRate * max(1, format.channels)))
        sink(SpeechClientError(.audio, "\(SpeechAudio.secondsText(seconds)) s of the microphone's audio were dropped, not transcribed: the client was held up for over \(capacitySeconds) s and its buffer was full (word times after it are early by that much)"))
    }

    /// What `read` and `readAvailable` return: everything buffered, else the end or the failure.
    private func takeLocked() throws(SpeechClientError) -> [Float]? {
        if endedAtCall {
            // Only the stop's context's audio, until the worker takes the stop.
            return takeEndingLocked()
        }
        if samples.isEmpty {
            if let failure { throw failure }
            return ended ? nil : []
        }
        return takeAllLocked()
    }

    /// The capture has ended or failed (a device unplugged): it gives nothing more until opened again.
    public var hasEnded: Bool { lock.withLock { ended } }

    /// Calls `body` once, on the capture thread, when `samples` (interleaved) are buffered or
    /// the capture has ended, in place of an earlier request. Returns false, asking nothing,
    /// when that is so already: read now. Lets the worker wait for the microphone without
    /// blocking in a read (holding its lock, and its pool thread, for up to 100 ms).
    public func notifyWhenAvailable(samples wanted: Int, _ body: @escaping @Sendable () -> Void) -> Bool {
        lock.withLock {
            if readableLocked >= wanted || ended { return false }
            onAvailable = body
            availableAt = wanted
            return true
        }
    }

    private func takeNotificationLocked(force: Bool) -> (@Sendable () -> Void)? {
        guard let body = onAvailable, force || readableLocked >= availableAt else { return nil }
        onAvailable = nil
        return body
    }

    /// From now on the audio is kept for `read` (what came before is dropped): a context's start,
    /// taken by the worker. Unless the application's start call began it already
    /// (`collectAtCall`): what was kept since is the context's. Nothing while the stop called
    /// for the context before is not taken yet (`endAtCall`): the start collects already, or
    /// it is that context's own, stopped since.
    public func startCollecting() {
        lock.withLock {
            guard !endedAtCall else { return }
            if collectingSinceCall {
                collectingSinceCall = false
                collecting = true
                return
            }
            clearLocked()
            collecting = true
            lock.broadcast()  // the capture thread waits out its idle interval (and `waitUntilCollecting`)
        }
    }

    /// Waits, at most `timeoutMilliseconds`, until the audio is kept (for tests: when the
    /// worker has taken a start). Returns whether it is.
    public func waitUntilCollecting(timeoutMilliseconds: Int) -> Bool {
        let deadline = Clock.monotonicNanos() + UInt64(max(0, timeoutMilliseconds)) * 1_000_000
        lock.lock()
        defer { lock.unlock() }
        while !collecting {
            if !lock.wait(untilMonotonicNanos: deadline) { return collecting }
        }
        return true
    }

    /// From now on the audio is dropped as it comes (and so is what is buffered): a context
    /// ended. Not what a start called since collects for it (`collectAtCall`).
    public func stopCollecting() {
        lock.withLock {
            clearEndingLocked()
            guard !collectingSinceCall else { return }
            clearLocked()
            collecting = false
        }
    }

    /// The application called stop: its context's audio ends here, whenever the worker takes
    /// that stop (`takeBufferedAndStop`), with the block the device is reading now. Nothing if
    /// no audio is kept. Returns whether it was cut here (a start queued behind the stop may
    /// then collect from its own call: `collectAtCall`).
    @discardableResult
    public func endAtCall() -> Bool {
        lock.withLock {
            guard collecting, !endedAtCall else { return false }
            while let block = samples.pop() { _ = ending.push(block) }
            endingSamples += bufferedSamples
            bufferedSamples = 0
            dropping = false
            droppedToSay += droppedInEpisode  // said when the worker takes the stop
            droppedInEpisode = 0
            collecting = false
            collectingSinceCall = false  // its own audio, if it was a start's at its call
            endedAtCall = true
            endingTakesNextBlock = true
            return true
        }
    }

    /// The application called start, queued behind the stop above: what is heard from now on
    /// is kept for that start's context (`startCollecting` takes it over).
    public func collectAtCall() {
        lock.withLock {
            clearLocked()
            collecting = true
            collectingSinceCall = true
            lock.broadcast()
        }
    }

    /// That queued start was stopped or the client suspended before the worker took it: nothing
    /// is kept for it.
    public func cancelCollectingAtCall() {
        lock.withLock {
            guard collectingSinceCall else { return }
            collectingSinceCall = false
            clearLocked()
            collecting = false
        }
    }

    /// Nothing more is kept from now on; what is buffered stays, to be read. Not when the stop
    /// was cut at its call already (`endAtCall`): what is kept now is a later start's.
    public func pauseCollecting() {
        lock.withLock {
            guard !endedAtCall else { return }
            collecting = false
        }
    }

    /// What is buffered now, without waiting (a stop sends the audio captured before it).
    public func takeBuffered() -> [Float] {
        defer { sayDropped() }
        return lock.withLock { takeAllLocked() }
    }

    /// What is buffered now, and nothing kept from now on, in one hold of the lock: taken and
    /// then stopped in two, a block the capture thread pushed in between was dropped with the
    /// stop (up to a period of the last word).
    public func takeBufferedAndStop() -> [Float] {
        defer { sayDropped() }
        return lock.withLock {
            if endedAtCall {
                // Stopped at the call: what is kept now is for a start called since, if any.
                let all = takeEndingLocked()
                clearEndingLocked()
                return all
            }
            let all = takeAllLocked()
            collecting = false
            return all
        }
    }

    /// Everything buffered, in order, and the buffer emptied.
    private func takeAllLocked() -> [Float] {
        if droppedInEpisode > 0 {
            // The worker takes audio again: the episode is over, and said (`sayDropped`).
            droppedToSay += droppedInEpisode
            droppedInEpisode = 0
        }
        if samples.count == 1, let only = samples.pop() {  // one block: no copy
            bufferedSamples = 0
            dropping = false
            return only
        }
        var out: [Float] = []
        out.reserveCapacity(bufferedSamples)
        while let block = samples.pop() { out.append(contentsOf: block) }
        bufferedSamples = 0
        dropping = false
        return out
    }

    private func clearLocked() {
        samples = FIFO()
        bufferedSamples = 0
        dropping = false
        droppedInEpisode = 0
    }

    /// What a read may give now: the stop's context's audio alone while it is not taken.
    private var readableLocked: Int { endedAtCall ? endingSamples : bufferedSamples }

    private func takeEndingLocked() -> [Float] {
        var out: [Float] = []
        out.reserveCapacity(endingSamples)
        while let block = ending.pop() { out.append(contentsOf: block) }
        endingSamples = 0
        return out
    }

    private func clearEndingLocked() {
        ending = FIFO()
        endingSamples = 0
        endedAtCall = false
        endingTakesNextBlock = false
    }

    /// Stops the capture thread (closing the device wakes its read) and waits for it.
    public func close() {
        let running = lock.withLock { () -> NativeThread? in
            defer { thread = nil }
            closing = true
            lock.broadcast()
            return thread
        }
        inner.close()
        running?.join()
        let notify = lock.withLock { () -> (@Sendable () -> Void)? in
            clearLocked()
            clearEndingLocked()
            collectingSinceCall = false
            ended = true
            lock.broadcast()
            return takeNotificationLocked(force: true)
        }
        notify?()
    }
}
