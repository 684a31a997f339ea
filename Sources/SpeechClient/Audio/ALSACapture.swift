#if canImport(Glibc)
import Glibc
#endif
import CALSA
import CShims

/// Capture from an ALSA device by name: S16_LE interleaved, 16 kHz mono when the device offers
/// it, otherwise the first of S32_LE, FLOAT_LE, S24_3LE and S24_LE it offers (I2S MEMS
/// microphones and many audio interfaces give 32 or 24 bits only) and its nearest rate and
/// channel count (`AudioConverter` does the rest, with a
/// better filter than ALSA's default linear rate plugin, which is why ALSA resampling is off).
/// Period 20 ms, buffer 400 ms; overruns (-EPIPE) and suspends (-ESTRPIPE) are recovered with
/// `snd_pcm_recover` (the audio in the gap is lost, as with any device).
///
/// Blocking and stopping: the PCM is opened non-blocking and `read` waits in `poll` on the PCM's
/// descriptors plus an eventfd. `close()` may be called from any thread at any time: it signals
/// the eventfd, which wakes a pending `read` at once (it returns nil), waits for that read to
/// leave the PCM, and only then drops and closes it. This is reliable for every plugin, unlike
/// `snd_pcm_drop` on a PCM another thread is blocked in (plugins differ, and the handle must not
/// be freed under the reader). `read` also returns an empty array after 100 ms without audio,
/// so its caller can look at other work even when a device stops delivering.
///
/// End of stream: `read` returns nil when `snd_pcm_readi` returns 0 frames, which is how
/// current alsa-lib's `file` plugin reports the end of its `infile`. alsa-lib 1.2.8 (Debian 12)
/// never reports it: after the end it keeps returning full reads of stale buffer content
/// (measured), so there the capture ends only with `close()`; tests pad the input with silence.
///
/// Pacing: devices without a clock (ALSA's `file` or `null` plugins, used by tests as a
/// microphone without a sound card) deliver as fast as they are read. For those, `read` holds
/// delivery to real time from the first read, so a test microphone behaves like a real one.
/// Such a device behind other plugins (a `plug` fixing the rate, a `route`) has another type,
/// so a device is also held to real time once it has delivered more than one and a half times
/// the audio that elapsed (plus its buffer and 0.5 s): no real device runs that fast, and a
/// sound card's clock that is merely off by a fraction of a percent never gets there. Real
/// devices are never paced: their clock is the device's.
/// Sendable: `lock` guards what `close()` may change from any thread; the rest is used by one reader at a time.
public final class ALSACapture: AudioSource, @unchecked Sendable {
    public let device: String

    // Guarded by `lock`: what `close()` on another thread may change under a reader.
    private let lock = ConditionLock()
    private var pcm: OpaquePointer?
    private var wakeFD: Int32 = -1
    private var pollFDs: [pollfd] = []
    private var reading = false
    private var closing = false
    private var currentFormat: AudioFormat = .speech
    private var sampleFormat = SampleFormat.s16
    private var clockless = false
    private var deviceBufferFrames = 0
    /// The device buffer as negotiated (ms; 0 before `open`): what a reader may leave unread.
    public var bufferMilliseconds: Int {
        lock.withLock { deviceBufferFrames * 1000 / max(1, currentFormat.sampleRate) }
    }
    /// Half the device buffer: the file plugin in alsa-lib 1.2.8 fills nothing from its input
    /// for a read larger than the buffer ("requested more frames than pcm buffer").
    private var maxReadFrames = 1024
    /// Frames an overrun or a suspend lost since `takeLostFrames` last took them.
    private var lostFrames = 0

    // Touched only by the reading thread (the protocol allows one reader).
    private var buffer: [UInt8] = []
    private var framesDelivered = 0
    private var startNanos: UInt64 = 0
    /// Set when a device of another type delivered far faster than real time (see Pacing).
    private var runsWithoutClock = false
    /// When the last read returned audio (monotonic ns; 0 before the first): an overrun lost
    /// everything the device heard since, up to its recovery.
    private var lastReadNanos: UInt64 = 0

    static let periodMicroseconds: UInt32 = 20_000
    static let bufferMicroseconds: UInt32 = 400_000
    static let pollMilliseconds: Int32 = 100

    /// ALSA's own messages while this capture calls it (issue 19 item 7: they went to stderr,
    /// past the log callback): the last one is added to an error, each goes to this.
    private let alsaMessages = Locked<AlsaMessages>(AlsaMessages())

    /// ALSA's messages: the last (for an error), and the repeats not logged. A device in a bad
    /// state repeats one message on every read: the file plugin past the end of its input said
    /// "invalid frames 0" 50 times a second, 12,000 log lines in 4 minutes.
    private struct AlsaMessages {
        var last: String?
        var sink: (@Sendable (String) -> Void)?
        var reported: String?
        var reportedAt: UInt64 = 0
        var notReported = 0
    }

    /// The same message again within this long of its report is counted, not logged.
    static let repeatedMessageNanos: UInt64 = 10_000_000_000

    /// Where ALSA's messages about this device go (the client's log); set before `open`.
    public func onALSAMessage(_ sink: (@Sendable (String) -> Void)?) {
        alsaMessages.withLock { $0.sink = sink }
    }

    /// Where ALSA's messages go, set once: to the capture that set itself as the calling
    /// thread's context (`withALSAMessages`, which also sets ALSA's thread-local handler), never
    /// stderr; other threads' messages go where the application's (or ALSA's) handler sends them.
    static let routed: Bool = {
        speechclient_shim_alsa_route_errors { context, message in
            guard let context, let message else { return }
            Unmanaged<ALSACapture>.fromOpaque(context).takeUnretainedValue().alsaSaid(String(cString: message))
        }
        return true
    }()

    /// A message of the capture's own about the device, to the same place as ALSA's, with the
    /// same holding back of repeats (an overrun that recurs at every read flooded the log).
    private func report(_ message: String) {
        alsaSaid(message, own: true)
    }

    private func alsaSaid(_ message: String, own: Bool = false) {
        let now = Clock.monotonicNanos()
        let said = alsaMessages.withLock { m -> (sink: (@Sendable (String) -> Void)?, repeats: Int)? in
            if !own { m.last = message }  // what `fail` quotes as ALSA's last word: ALSA's only
            if message == m.reported, now &- m.reportedAt < Self.repeatedMessageNanos {
                m.notReported += 1
                return nil
            }
            let repeats = message == m.reported ? m.notReported : 0
            m.reported = message
            m.reportedAt = now
            m.notReported = 0
            return (m.sink, repeats)
        }
        guard let said, let sink = said.sink else { return }
        sink("ALSA device '\(device)': \(own ? "" : "ALSA says: ")\(message)" + (said.repeats > 0 ? " (and \(said.repeats) times more since it was last logged)" : ""))
    }

    /// Runs ALSA calls with this capture receiving ALSA's messages on this thread.
    private func withALSAMessages<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        _ = Self.routed
        let previous = speechclient_shim_alsa_set_context(Unmanaged.passUnretained(self).toOpaque())
        defer { _ = speechclient_shim_alsa_set_context(previous) }
        return try body()
    }

    public init(device: String = "default") { self.device = device }

    deinit { close() }

    public var format: AudioFormat { lock.withLock { currentFormat } }

    private func fail(_ function: String, _ code: Int32) -> SpeechClientError {
        let reason = snd_strerror(code).map { String(cString: $0) } ?? "error \(code)"
        let said = alsaMessages.withLock { m -> String? in
            defer { m.last = nil }
            return m.last
        }
        return SpeechClientError(.audio, "ALSA device '\(device)': \(function) failed: \(reason)" + (said.map { " (ALSA says: \($0))" } ?? ""))
    }

    public func open() throws(SpeechClientError) {
        try withALSAMessages { () throws(SpeechClientError) in try openDevice() }
    }

    /// ALSA is loaded on first use (CShims/alsa_loader.c): without it, an error naming the package.
    static func requireALSA(for what: String) throws(SpeechClientError) {
        if let why = speechclient_shim_alsa_unavailable() {
            throw SpeechClientError(.audio, "\(what): \(String(cString: why))")
        }
    }

    private func openDevice() throws(SpeechClientError) {
        close()
        try Self.requireALSA(for: "ALSA device '\(device)'")
        alsaMessages.withLock { $0.last = nil }
        var opened: OpaquePointer?
        let rc = snd_pcm_open(&opened, device, SND_PCM_STREAM_CAPTURE, SND_PCM_NONBLOCK)
        guard rc >= 0, let handle = opened else { throw fail("snd_pcm_open", rc) }
        let format: AudioFormat
        let samples: SampleFormat
        let bufferFrames: Int
        var fds: [pollfd]
        let wake: Int32
        do throws(SpeechClientError) {
            (format, samples, bufferFrames) = try configure(handle)
            let count = snd_pcm_poll_descriptors_count(handle)
            guard count > 0 else { throw fail("snd_pcm_poll_descriptors_count", count < 0 ? count : -EINVAL) }
            fds = [pollfd](repeating: pollfd(), count: Int(count) + 1)
            let got = snd_pcm_poll_descriptors(handle, &fds, UInt32(count))
            guard got == count else { throw fail("snd_pcm_poll_descriptors", got < 0 ? got : -EINVAL) }
            wake = eventfd(0, Int32(EFD_NONBLOCK) | Int32(EFD_CLOEXEC))
            guard wake >= 0 else { throw SpeechClientError.errno(.audio, "eventfd", errno, context: "ALSA device '\(device)'") }
        } catch {
            snd_pcm_close(handle)
            throw error
        }
        fds[fds.count - 1] = pollfd(fd: wake, events: Int16(POLLIN), revents: 0)
        let type = snd_pcm_type(handle)
        framesDelivered = 0
        startNanos = 0
        runsWithoutClock = false
        lastReadNanos = 0
        lock.withLock {
            lostFrames = 0
            pcm = handle
            wakeFD = wake
            pollFDs = fds
            currentFormat = format
            sampleFormat = samples
            maxReadFrames = max(1, bufferFrames / 2)
            deviceBufferFrames = bufferFrames
            clockless = type == SND_PCM_TYPE_FILE || type == SND_PCM_TYPE_NULL
        }
    }

    /// Negotiates S16_LE (or the first of `SampleFormat.preference` the device offers)
    /// interleaved, 16 kHz (or the nearest rate), mono (or the fewest channels). The stream
    /// starts with the first read, so nothing stale is buffered before.
    private func configure(_ handle: OpaquePointer) throws(SpeechClientError) -> (AudioFormat, SampleFormat, Int) {
        var allocated: OpaquePointer?
        let rc = snd_pcm_hw_params_malloc(&allocated)
        guard rc >= 0, let params = allocated else { throw fail("snd_pcm_hw_params_malloc", rc) }
        defer { snd_pcm_hw_params_free(params) }
        var rate = UInt32(SpeechAudio.sampleRate)
        var channels: UInt32 = 1
        var period = Self.periodMicroseconds
        var bufferTime = Self.bufferMicroseconds
        var dir: Int32 = 0
        func check(_ name: String, _ r: Int32) throws(SpeechClientError) { if r < 0 { throw fail(name, r) } }
        try check("snd_pcm_hw_params_any", snd_pcm_hw_params_any(handle, params))
        try check("snd_pcm_hw_params_set_access", snd_pcm_hw_params_set_access(handle, params, SND_PCM_ACCESS_RW_INTERLEAVED))
        // S16_LE alone, such devices failed with "Invalid argument" though listed as usable.
        guard let samples = SampleFormat.preference.first(where: { snd_pcm_hw_params_test_format(handle, params, $0.alsa) == 0 }) else {
            throw SpeechClientError(.audio, "ALSA device '\(device)' offers none of the sample formats read here ("
                                    + SampleFormat.preference.map(\.name).joined(separator: ", ")
                                    + "); its plughw: or plug: form converts")
        }
        try check("snd_pcm_hw_params_set_format", snd_pcm_hw_params_set_format(handle, params, samples.alsa))
        try check("snd_pcm_hw_params_set_channels_near", snd_pcm_hw_params_set_channels_near(handle, params, &channels))
        // Not fatal: some plugins (pulse, pipewire) resample anyway and refuse the setting.
        _ = snd_pcm_hw_params_set_rate_resample(handle, params, 0)
        try check("snd_pcm_hw_params_set_rate_near", snd_pcm_hw_params_set_rate_near(handle, params, &rate, &dir))
        try check("snd_pcm_hw_params_set_period_time_near", snd_pcm_hw_params_set_period_time_near(handle, params, &period, &dir))
        try check("snd_pcm_hw_params_set_buffer_time_near", snd_pcm_hw_params_set_buffer_time_near(handle, params, &bufferTime, &dir))
        try check("snd_pcm_hw_params", snd_pcm_hw_params(handle, params))
        guard rate >= 1000, rate <= 384_000, channels >= 1, channels <= 32 else {
            throw SpeechClientError(.audio, "ALSA device '\(device)': unusable format \(rate) Hz, \(channels) channels")
        }
        var bufferFrames: snd_pcm_uframes_t = 0
        try check("snd_pcm_hw_params_get_buffer_size", snd_pcm_hw_params_get_buffer_size(params, &bufferFrames))
        return (AudioFormat(sampleRate: Int(rate), channels: Int(channels)), samples, Int(min(bufferFrames, 1 << 20)))
    }

    /// The sample formats read from a device, in order of preference (`configure`), and their
    /// conversion to floats in -1...1.
    enum SampleFormat: CaseIterable {
        case s16, s32, float32, s24packed, s24in32

        static let preference: [SampleFormat] = [.s16, .s32, .float32, .s24packed, .s24in32]

        var alsa: snd_pcm_format_t {
            switch self {
            case .s16: SND_PCM_FORMAT_S16_LE
            case .s32: SND_PCM_FORMAT_S32_LE
            case .float32: SND_PCM_FORMAT_FLOAT_LE
            case .s24packed: SND_PCM_FORMAT_S24_3LE
            case .s24in32: SND_PCM_FORMAT_S24_LE
            }
        }
        var name: String {
            switch self {
            case .s16: "S16_LE"
            case .s32: "S32_LE"
            case .float32: "FLOAT_LE"
            case .s24packed: "S24_3LE"
            case .s24in32: "S24_LE"
            }
        }
        var bytes: Int { self == .s16 ? 2 : self == .s24packed ? 3 : 4 }

        /// `count` samples from the start of `raw` (little-endian), as floats; a NaN or
        /// infinite float sample is silence, and floats are kept within -1...1.
        func floats(_ raw: [UInt8], count: Int) -> [Float] {
            var out = [Float](repeating: 0, count: count)
            raw.withUnsafeBufferPointer { b in
                switch self {
                case .s16:
                    for i in 0..<count {
                        out[i] = Float(Int16(bitPattern: UInt16(b[2 * i]) | UInt16(b[2 * i + 1]) << 8)) * (1 / 32768)
                    }
                case .s32:
                    for i in 0..<count {
                        let u = UInt32(b[4 * i]) | UInt32(b[4 * i + 1]) << 8 | UInt32(b[4 * i + 2]) << 16 | UInt32(b[4 * i + 3]) << 24
                        out[i] = Float(Int32(bitPattern: u)) * (1 / 2_147_483_648)
                    }
                case .s24in32:
                    // The low three bytes, sign-extended from bit 23 (the top byte is padding).
                    for i in 0..<count {
                        let u = UInt32(b[4 * i]) | UInt32(b[4 * i + 1]) << 8 | UInt32(b[4 * i + 2]) << 16
                        out[i] = Float(Int32(bitPattern: u << 8) >> 8) * (1 / 8_388_608)
                    }
                case .s24packed:
                    for i in 0..<count {
                        let u = UInt32(b[3 * i]) | UInt32(b[3 * i + 1]) << 8 | UInt32(b[3 * i + 2]) << 16
                        out[i] = Float(Int32(bitPattern: u << 8) >> 8) * (1 / 8_388_608)
                    }
                case .float32:
                    for i in 0..<count {
                        let u = UInt32(b[4 * i]) | UInt32(b[4 * i + 1]) << 8 | UInt32(b[4 * i + 2]) << 16 | UInt32(b[4 * i + 3]) << 24
                        let f = Float(bitPattern: u)
                        out[i] = f.isFinite ? min(1, max(-1, f)) : 0
                    }
                }
            }
            return out
        }
    }

    /// Frames lost to overruns and suspends since the last call (see `AudioSource`).
    public func takeLostFrames() -> Int {
        lock.withLock {
            defer { lostFrames = 0 }
            return lostFrames
        }
    }

    /// Up to `maxFrames` frames (at most half the device buffer, 200 ms) as soon as some are
    /// there (a period, 20 ms, on a real device);
    /// an empty array after 100 ms without audio; nil after `close()` or at the end of a file
    /// plugin's input.

    public func read(maxFrames: Int) throws(SpeechClientError) -> [Float]? {
        try withALSAMessages { () throws(SpeechClientError) in try readFrames(maxFrames: maxFrames) }
    }

    private func readFrames(maxFrames: Int) throws(SpeechClientError) -> [Float]? {
        let begun: (pcm: OpaquePointer, fds: [pollfd], format: AudioFormat, samples: SampleFormat, clockless: Bool, limit: Int, bufferFrames: Int)? = lock.withLock {
            guard let pcm = self.pcm, !closing, !reading else { return nil }
            reading = true
            return (pcm, pollFDs, currentFormat, sampleFormat, clockless, maxReadFrames, deviceBufferFrames)
        }
        guard let begun else { return nil }
        defer {
            lock.withLock {
                reading = false
                lock.broadcast()
            }
        }
        var fds = begun.fds
        let pcm = begun.pcm
        let channels = begun.format.channels
        let frames = min(max(1, maxFrames), begun.limit)
        let frameBytes = channels * begun.samples.bytes
        if buffer.count < frames * frameBytes { buffer = [UInt8](repeating: 0, count: frames * frameBytes) }
        let deadline = Clock.monotonicNanos() + UInt64(Self.pollMilliseconds) * 1_000_000
        var recoveries = 0
        while true {
            let n = buffer.withUnsafeMutableBytes { snd_pcm_readi(pcm, $0.baseAddress, snd_pcm_uframes_t(frames)) }
            if n > 0 {
                let got = min(Int(n), frames)
                if !pace(frames: got, rate: begun.format.sampleRate, clockless: begun.clockless,
                         bufferFrames: begun.bufferFrames, fds: &fds) { return nil }
                lastReadNanos = Clock.monotonicNanos()
                return begun.samples.floats(buffer, count: got * channels)
            }
            if n == 0 { return nil }
            let code = Int32(truncatingIfNeeded: n)
            switch -code {
            case EAGAIN:
                let now = Clock.monotonicNanos()
                guard now < deadline else { return [] }
                let wait = Int32(min((deadline - now) / 1_000_000 + 1, UInt64(Self.pollMilliseconds)))
                switch try waitReadable(pcm, &fds, milliseconds: wait) {
                case .woken: return nil
                case .timeout: return []
                case .ready: continue
                }
            case EPIPE, ESTRPIPE:
                recoveries += 1
                if recoveries > 3 {
                    // Recovered, and overrun again at once, over and over (a device or plugin
                    // stuck in that state): a period's pause before the next try, so that the
                    // capture thread does not spin a core on it.
                    usleep(20_000)
                    return []
                }
                // Audio was lost: said in the client's log, never silently.
                report(-code == EPIPE
                       ? "overrun: the capture was not read for more than its \(begun.bufferFrames * 1000 / max(1, begun.format.sampleRate)) ms buffer; the audio of the gap is lost"
                       : "the device was suspended; the audio of the gap is lost")
                let r = snd_pcm_recover(pcm, code, 1)
                if r < 0 { throw fail("snd_pcm_readi", code) }
                // What it heard from the last read to now is gone: counted, so that silence can
                // stand in for it (later word times stay true) and the loss be said.
                let now = Clock.monotonicNanos()
                if lastReadNanos != 0 && now > lastReadNanos {
                    let gap = now - lastReadNanos
                    let frames = Int(gap / 1_000_000) * begun.format.sampleRate / 1_000
                    lock.withLock { lostFrames += frames }
                    lastReadNanos = now
                }
                framesDelivered = 0
                startNanos = 0
            case EINTR:
                continue
            default:
                throw fail("snd_pcm_readi", code)
            }
        }
    }

    private enum Wait { case ready, timeout, woken }

    /// Polls the PCM's descriptors and the eventfd (the last entry of `fds`).
    private func waitReadable(_ pcm: OpaquePointer, _ fds: inout [pollfd], milliseconds: Int32) throws(SpeechClientError) -> Wait {
        for i in fds.indices { fds[i].revents = 0 }
        let r = poll(&fds, nfds_t(fds.count), milliseconds)
        if r < 0 {
            if errno == EINTR { return .ready }
            throw SpeechClientError.errno(.audio, "poll", errno, context: "ALSA device '\(device)'")
        }
        if r == 0 { return .timeout }
        if let last = fds.last, last.revents != 0 { return .woken }
        // The PCM's revents need translating (plugins may use a different event); an error
        // event comes back from the next readi as -EPIPE or similar, so any event means retry.
        var revents: UInt16 = 0
        _ = fds.withUnsafeMutableBufferPointer { p in
            snd_pcm_poll_descriptors_revents(pcm, p.baseAddress, UInt32(p.count - 1), &revents)
        }
        return .ready
    }

    /// Counts what the device delivered since its first read, and holds a clockless device (or
    /// one found running far ahead of real time) to real time. Returns false when woken by
    /// `close()` while waiting.
    private func pace(frames: Int, rate: Int, clockless: Bool, bufferFrames: Int, fds: inout [pollfd]) -> Bool {
        let now = Clock.monotonicNanos()
        if startNanos == 0 { startNanos = now }
        framesDelivered += frames
        // Whole seconds and the rest apart, so days of frames cannot overflow the nanoseconds.
        let perSecond = UInt64(max(rate, 1)), f = UInt64(framesDelivered)
        let audioNanos = (f / perSecond) &* 1_000_000_000 &+ (f % perSecond) * 1_000_000_000 / perSecond
        let due = startNanos &+ audioNanos
        if !clockless, !runsWithoutClock {
            let elapsed = now - startNanos
            let slack = UInt64(max(bufferFrames, 0)) * 1_000_000_000 / perSecond + 500_000_000
            guard audioNanos > elapsed + elapsed / 2 + slack else { return true }
            runsWithoutClock = true
        }
        guard due > now + 1_000_000, let wake = fds.last else { return true }
        var pfd = [wake]
        pfd[0].revents = 0
        let ms = Int32(min((due - now) / 1_000_000, 10_000))
        let r = poll(&pfd, 1, ms)
        return !(r > 0 && pfd[0].revents != 0)
    }

    /// Releases the device. Safe from any thread, also while another thread is in `read`
    /// (that read returns nil); idempotent.
    public func close() {
        let taken: (pcm: OpaquePointer?, wake: Int32) = lock.withLock {
            guard pcm != nil || wakeFD >= 0 else { return (nil, -1) }
            closing = true
            if wakeFD >= 0 {
                var one: UInt64 = 1
                _ = withUnsafeBytes(of: &one) { write(wakeFD, $0.baseAddress, 8) }
            }
            while reading { lock.wait() }
            let taken = (pcm, wakeFD)
            pcm = nil
            wakeFD = -1
            pollFDs = []
            closing = false
            return taken
        }
        if let p = taken.pcm {
            snd_pcm_drop(p)
            snd_pcm_close(p)
        }
        if taken.wake >= 0 { Glibc.close(taken.wake) }
    }
}
