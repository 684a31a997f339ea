#if canImport(Glibc)
import Glibc
#endif
import CALSA

/// Capture from an ALSA device by name: S16_LE interleaved, the device's rate and channel count
/// negotiated (16 kHz mono preferred), xruns recovered. The device is opened non-blocking and
/// `read` waits at most `pollMilliseconds`, so the worker thread that owns it never hangs on a
/// device that stopped delivering.
public final class ALSACapture: AudioSource {
    public let device: String
    public private(set) var format = AudioFormat(sampleRate: 16_000, channels: 1)
    private var pcm: OpaquePointer?
    private var buffer: [Int16] = []
    static let pollMilliseconds: Int32 = 100
    /// Real-time pacing: a capture device cannot run ahead of the clock, but a device with no
    /// clock (ALSA's file plugin over the null device) delivers as fast as it is read. Frames
    /// delivered and the time of the first read let `read` hold such a device to real time.
    private var framesDelivered = 0
    private var startNanos: UInt64 = 0

    public init(device: String = "default") { self.device = device }

    deinit { close() }

    private func fail(_ function: String, _ code: Int32) -> SpeechClientError {
        SpeechClientError(.audio, "ALSA device '\(device)': \(function) failed: \(String(cString: snd_strerror(code)))")
    }

    public func open() throws(SpeechClientError) {
        close()
        var handle: OpaquePointer?
        var rc = snd_pcm_open(&handle, device, SND_PCM_STREAM_CAPTURE, SND_PCM_NONBLOCK)
        guard rc >= 0, let handle else { throw fail("snd_pcm_open", rc) }
        pcm = handle
        var params: OpaquePointer?
        rc = snd_pcm_hw_params_malloc(&params)
        guard rc >= 0, let params else { close(); throw fail("snd_pcm_hw_params_malloc", rc) }
        defer { snd_pcm_hw_params_free(params) }
        var rate: UInt32 = 16_000
        var channels: UInt32 = 1
        var periodMicroseconds: UInt32 = 20_000
        var bufferMicroseconds: UInt32 = 400_000
        var dir: Int32 = 0
        let steps: [(String, () -> Int32)] = [
            ("snd_pcm_hw_params_any", { snd_pcm_hw_params_any(handle, params) }),
            ("snd_pcm_hw_params_set_access", { snd_pcm_hw_params_set_access(handle, params, SND_PCM_ACCESS_RW_INTERLEAVED) }),
            ("snd_pcm_hw_params_set_format (S16_LE)", { snd_pcm_hw_params_set_format(handle, params, SND_PCM_FORMAT_S16_LE) }),
            ("snd_pcm_hw_params_set_channels_near", { snd_pcm_hw_params_set_channels_near(handle, params, &channels) }),
            ("snd_pcm_hw_params_set_rate_near", { snd_pcm_hw_params_set_rate_near(handle, params, &rate, &dir) }),
            ("snd_pcm_hw_params_set_period_time_near", { snd_pcm_hw_params_set_period_time_near(handle, params, &periodMicroseconds, &dir) }),
            ("snd_pcm_hw_params_set_buffer_time_near", { snd_pcm_hw_params_set_buffer_time_near(handle, params, &bufferMicroseconds, &dir) }),
            ("snd_pcm_hw_params", { snd_pcm_hw_params(handle, params) }),
            ("snd_pcm_prepare", { snd_pcm_prepare(handle) }),
            ("snd_pcm_start", { snd_pcm_start(handle) }),
        ]
        for (name, step) in steps {
            let r = step()
            if r < 0 { close(); throw fail(name, r) }
        }
        guard rate >= 1000, channels >= 1 else { close(); throw SpeechClientError(.audio, "ALSA device '\(device)': unusable format \(rate) Hz, \(channels) channels") }
        format = AudioFormat(sampleRate: Int(rate), channels: Int(channels))
    }

    /// Waits up to 100 ms for audio; returns what arrived (possibly nothing), or nil when the
    /// device reports the end of its input (a file plugin that ran out).
    public func read(maxFrames: Int) throws(SpeechClientError) -> [Float]? {
        guard let pcm else { return nil }
        let frames = max(1, maxFrames)
        let need = frames * format.channels
        if buffer.count < need { buffer = [Int16](repeating: 0, count: need) }
        var attempts = 0
        while true {
            let n = buffer.withUnsafeMutableBytes { snd_pcm_readi(pcm, $0.baseAddress, snd_pcm_uframes_t(frames)) }
            if n > 0 {
                pace(frames: Int(n))
                let count = Int(n) * format.channels
                var out = [Float](repeating: 0, count: count)
                for i in 0..<count { out[i] = Float(buffer[i]) / 32768 }
                return out
            }
            if n == 0 { return nil }
            let code = Int32(truncatingIfNeeded: n)
            if code == -EAGAIN {
                let w = snd_pcm_wait(pcm, Self.pollMilliseconds)
                if w == 0 { return [] }       // nothing within the poll time: let the worker look up
                if w < 0 && w != -EPIPE && w != -ESTRPIPE { throw fail("snd_pcm_wait", w) }
                if w > 0 { continue }
            }
            // Overrun or suspend: recover and go on (audio in the gap is lost, as with any device).
            attempts += 1
            let r = snd_pcm_recover(pcm, code == -EAGAIN ? -EPIPE : code, 1)
            if r < 0 { throw fail("snd_pcm_readi", code) }
            if attempts > 3 { return [] }
            _ = snd_pcm_start(pcm)
        }
    }

    private func pace(frames: Int) {
        let now = Clock.monotonicNanos()
        if startNanos == 0 { startNanos = now }
        framesDelivered += frames
        let due = startNanos + UInt64(framesDelivered) * 1_000_000_000 / UInt64(max(format.sampleRate, 1))
        // A real device is never more than a period ahead; sleep only when clearly ahead.
        if due > now + 50_000_000 {
            let wait = due - now
            var ts = timespec(tv_sec: Int(wait / 1_000_000_000), tv_nsec: Int(wait % 1_000_000_000))
            nanosleep(&ts, nil)
        }
    }

    public func close() {
        framesDelivered = 0
        startNanos = 0
        if let pcm {
            snd_pcm_drop(pcm)
            snd_pcm_close(pcm)
        }
        pcm = nil
    }
}
