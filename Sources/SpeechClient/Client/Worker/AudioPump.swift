/// The client's audio source, read into chunks of 16 kHz mono audio: the microphone (opened
/// once, kept between contexts), a file (opened for each context, read from its start), or a
/// descriptor (kept open, each context reading on from where the last stopped). Pushed audio
/// has no source here: `Client.pushAudio` converts and chunks it itself.
///
/// Used by the worker only, with its `audioLock` held. The worker decides when to read (a file
/// waits for the server); this type only knows how.
final class AudioPump {
    private let input: AudioInput
    private let makeSource: @Sendable (AudioInput) -> (any AudioSource)?
    private let samplesPerChunk: Int
    private let chunkMilliseconds: Int

    private var source: (any AudioSource)?
    private var converter: AudioConverter?
    private var chunker: Chunker
    /// Why a descriptor can no longer be read (its end, or an error), for a later start.
    private var descriptorEnded: String?
    /// The open microphone, for the application's stop and start calls to mark where a
    /// context's audio ends and the next one's begins, at the call (`CaptureBuffer.endAtCall`):
    /// the worker takes those calls only when it is free, up to 15 s later in a connect.
    let microphoneForCalls = Locked<CaptureBuffer?>(nil)
    /// Where the microphone's lost audio is said (the client's error event), from its capture
    /// thread. Set once, before the first open.
    var onAudioLost: (@Sendable (SpeechClientError) -> Void)?

    init(input: AudioInput, chunkMilliseconds: Int, makeSource: @escaping @Sendable (AudioInput) -> (any AudioSource)?) {
        self.input = input
        self.makeSource = makeSource
        self.chunkMilliseconds = chunkMilliseconds
        samplesPerChunk = SpeechAudio.samples(milliseconds: chunkMilliseconds)
        chunker = Chunker(samplesPerChunk: samplesPerChunk)
    }

    /// A source is open (a context has something to read).
    var isOpen: Bool { source != nil }

    /// The source is a microphone (read on its own thread; the worker waits to be poked).
    var isMicrophone: Bool {
        if case .microphone = input { return true }
        return false
    }

    /// A read may wait for audio (a pipe); a file's returns at once, and a microphone's is
    /// made once its capture thread said the chunk is there (`notifyWhenChunkReady`).
    var readMayWait: Bool {
        switch input {
        case .descriptor: return true
        case .microphone, .file, .push: return false
        }
    }

    /// A file or a descriptor can wait for the server; a microphone cannot.
    var waitsForServer: Bool {
        switch input {
        case .file, .descriptor: return true
        case .microphone, .push: return false
        }
    }

    /// Opens the microphone unless it is open. `log` hears of it, and ALSA's own messages
    /// (as warnings) for as long as the device is open.
    /// `forContext`: what it captures from its first read is kept for the context.
    func openMicrophone(forContext: Bool = false, log: @escaping @Sendable (LogLevel, String) -> Void) throws(SpeechClientError) {
        guard case .microphone(let name) = input, source == nil, let mic = makeSource(input) else { return }
        if let alsa = mic as? ALSACapture { alsa.onALSAMessage { log(.warning, $0) } }
        if let buffered = mic as? CaptureBuffer {
            buffered.onMessage { log(.warning, $0) }
            buffered.onLoss(onAudioLost)
            if forContext { buffered.startCollecting() } else { buffered.stopCollecting() }
        }
        try mic.open()
        source = mic
        microphoneForCalls.withLock { $0 = mic as? CaptureBuffer }
        converter = AudioConverter(input: mic.format)
        log(.debug, "microphone '\(name)' opened at \(mic.format.sampleRate) Hz, \(mic.format.channels) channel(s)")
    }

    /// Before a context: a new chunker, and the source opened (a file from its start) or kept
    /// (a microphone, a descriptor). `log` hears of a file cut short (a warning).
    func openForContext(log: @escaping @Sendable (LogLevel, String) -> Void) throws(SpeechClientError) {
        chunker = Chunker(samplesPerChunk: samplesPerChunk)
        switch input {
        case .push:
            return
        case .file:
            guard let file = makeSource(input) else { return }
            try file.open()
            source = file
            converter = AudioConverter(input: file.format)
            if let wav = file as? WAVFileSource, let h = wav.header, h.missingBytes > 0 {
                // Issue 19 item 7: a cut-short copy is streamed, and the loss said.
                let rate = Double(max(1, h.format.sampleRate * h.blockAlign))
                log(.warning, "\(wav.path): the data chunk declares \(h.dataBytes + h.missingBytes) bytes but the file holds \(h.dataBytes): its last \(SpeechAudio.secondsText(Double(h.missingBytes) / rate)) s are missing; transcribing the \(SpeechAudio.secondsText(Double(h.dataBytes) / rate)) s there are")
            }
        case .microphone:
            if let buffered = source as? CaptureBuffer, buffered.hasEnded {
                // It failed while no context used it (a microphone unplugged between contexts,
                // perhaps plugged in again since): opened again, as the first start opens it.
                // Kept, its old error failed this context, and only the start after it reopened.
                log(.info, "the microphone had stopped (its capture failed before this context): opening it again")
                close()
            }
            if source == nil {
                collectingAhead = false
                try openMicrophone(forContext: true, log: log)
            } else if collectingAhead {
                // Kept since the start was queued behind the previous context's stop.
                collectingAhead = false
            } else {
                // Kept open since an earlier context: what it captured meanwhile is dropped.
                (source as? CaptureBuffer)?.startCollecting()
            }
            if let source { converter = AudioConverter(input: source.format) }
        case .descriptor(let fd, _, _):
            // The descriptor stays open between contexts. Its format may come with the audio
            // (a WAV header): the converter is made once samples arrive.
            if source == nil {
                if let why = descriptorEnded {
                    throw SpeechClientError(.audio, "audio \(fd == 0 ? "standard input" : "fd \(fd)"): \(why); it cannot be read again")
                }
                guard let stream = makeSource(input) else { return }
                try stream.open()
                source = stream
            }
            converter = nil
        }
    }

    enum Read {
        /// Chunks of the context's audio (possibly none yet).
        case chunks(Chunker.Chunks)
        /// The source ended: its last chunks (the resampler's tail, the partial chunk).
        case ended(last: Chunker.Chunks)
        case failed(SpeechClientError)
    }

    /// A WAV stream that ended short of what its header declared: the warning to give.
    var shortfall: String? { (source as? DescriptorSource)?.shortfall }

    /// Reads one block (a chunk's length at the source's rate): a microphone's buffered audio
    /// without waiting, what a file has, what a descriptor gives (it may wait for it).
    func read() -> Read {
        guard let source else { return .ended(last: Chunker.Chunks()) }
        let frames = max(1, source.format.sampleRate * chunkMilliseconds / 1000)
        do throws(SpeechClientError) {
            if let pcm = source as? Int16AudioSource, pcm.deliversInt16 {
                // 16-bit already: at 16 kHz mono the block itself is the audio (no copy of it).
                guard let block = try pcm.readInt16(maxFrames: frames) else { return .ended(last: drain()) }
                let converter = converter(for: source.format)
                return .chunks(chunker.append(converter.passesThrough ? block : block.withUnsafeBufferPointer { converter.process(int16: $0) }))
            }
            // The microphone's thread has buffered it: taken without waiting (`notifyWhenChunkReady`).
            let read: [Float]?
            if isMicrophone, let mic = source as? CaptureBuffer { read = try mic.readAvailable() } else { read = try source.read(maxFrames: frames) }
            guard let block = read else { return .ended(last: drain()) }
            guard !block.isEmpty else { return .chunks(Chunker.Chunks()) }
            // The format is asked after the read: a descriptor's may come with its first block.
            return .chunks(chunker.append(converter(for: source.format).process(block)))
        } catch {
            return .failed(error)
        }
    }

    /// A microphone without the rest of the current chunk buffered yet: `body` is called once,
    /// from its capture thread, when it has it (or the capture ended), and the worker waits for
    /// that instead of blocking in a read. False when it is there already, or the source is no
    /// microphone: read now.
    func notifyWhenChunkReady(_ body: @escaping @Sendable () -> Void) -> Bool {
        guard isMicrophone, let mic = source as? CaptureBuffer else { return false }
        let format = mic.format
        let missing = max(1, samplesPerChunk - chunker.pendingCount)  // at 16 kHz
        let frames = (missing * format.sampleRate + SpeechAudio.sampleRate - 1) / SpeechAudio.sampleRate
        return mic.notifyWhenAvailable(samples: max(1, frames) * max(1, format.channels), body)
    }

    private func converter(for format: AudioFormat) -> AudioConverter {
        if let converter, converter.input == format { return converter }
        let made = AudioConverter(input: format)
        converter = made
        return made
    }

    /// What is buffered at a context's end: the resampler's tail, then the partial chunk.
    func drain() -> Chunker.Chunks {
        var out = Chunker.Chunks()
        if let converter { out = chunker.append(converter.flush()) }
        if let partial = chunker.flush() { out.append(partial) }
        return out
    }

    /// The end of a context's reading. A file is closed (the next start reads it again from its
    /// beginning); a descriptor stays open, its position kept for the next start, until it
    /// ended or its reading `failed` (then a start says so); a microphone stays open unless its
    /// capture failed or ended (a device unplugged): then the next start opens it again, and
    /// says why if it still cannot, instead of ending at once on the old error.
    func endContext(failed: String? = nil) {
        switch input {
        case .file:
            close()
        case .descriptor:
            let ended = (source as? DescriptorSource)?.exhausted == true
            if ended || failed != nil {
                descriptorEnded = failed.map { "its reading failed earlier (\($0))" } ?? "the stream has ended"
                close()
            }
        case .microphone:
            if failed != nil || (source as? CaptureBuffer)?.hasEnded == true {
                close()
            } else {
                stopCollecting()
            }
        case .push:
            break
        }
    }

    /// A microphone keeps nothing from now on (until the next context's start), unless it
    /// collects for a start queued behind the pending stop (`collectAhead`).
    func stopCollecting() {
        guard !collectingAhead else { return }
        (source as? CaptureBuffer)?.stopCollecting()
    }

    /// A start was queued behind the pending stop: an open microphone keeps what it hears from
    /// now on, for that start's context (its opening keeps it: `openForContext`). Heard between
    /// the start call and the previous context's end, it was dropped: the first words.
    private(set) var collectingAhead = false

    func collectAhead() {
        guard let buffered = source as? CaptureBuffer else { return }
        buffered.startCollecting()
        collectingAhead = true
    }

    /// A start made after a resume while the suspended context still finishes waits for it: the
    /// microphone, which the suspend closed, is opened now and keeps what it hears for that
    /// start's context. Opened only when that context began, everything said meanwhile (up to
    /// the old context's finish) was lost. A device that cannot be opened now is tried again,
    /// and its error reported, when the context begins.
    func openAndCollectAhead(log: @escaping @Sendable (LogLevel, String) -> Void) {
        guard case .microphone = input else { return }
        if source == nil {
            do throws(SpeechClientError) {
                try openMicrophone(forContext: true, log: log)
            } catch {
                return
            }
            collectingAhead = source != nil
        } else {
            collectAhead()
        }
    }

    /// The application stopped the start collected for, before its context opened: what the
    /// microphone heard until then is kept for it, nothing after.
    func pauseCollectingAhead() {
        guard collectingAhead else { return }
        (source as? CaptureBuffer)?.pauseCollecting()
    }

    /// The queued start was cancelled (a stop) or abandoned (a suspend).
    func stopCollectingAhead() {
        guard collectingAhead else { return }
        collectingAhead = false
        stopCollecting()
    }

    /// The microphone's audio captured and not read yet, as chunks, without waiting, and no
    /// more kept from now on: a stop sends what was heard before it (the last word, unread when
    /// the stop came). Nothing for other sources.
    func takeCapturedAndStop() -> Chunker.Chunks {
        guard let buffered = source as? CaptureBuffer, let source else { return Chunker.Chunks() }
        let block = buffered.takeBufferedAndStop()
        guard !block.isEmpty else { return Chunker.Chunks() }
        return chunker.append(converter(for: source.format).process(block))
    }

    /// Lets the device go (suspend) or everything (free).
    func close() {
        collectingAhead = false
        microphoneForCalls.withLock { $0 = nil }
        source?.close()
        source = nil
    }
}
