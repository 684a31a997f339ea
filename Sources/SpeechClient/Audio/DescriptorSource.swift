#if canImport(Glibc)
import Glibc
#endif

/// Audio read from a file descriptor the application owns: a pipe, standard input, a socket,
/// a file. Either a WAV stream (its header read as it arrives: `WAVStreamHeader`) or raw
/// interleaved signed 16-bit little-endian frames of a given format.
///
/// The descriptor is the application's: this source never closes it and never changes its
/// flags (standard input is shared with the rest of the process). It waits in `poll` on it, at
/// most `pollMilliseconds` per `read`, which then returns an empty array so that its caller can
/// take commands (a stop, a free) even while a pipe stays silent; a blocking descriptor is only
/// read once `poll` said it is readable, so `read(2)` never blocks.
///
/// A context stopped mid-stream leaves the rest unread: the next `read` goes on from there,
/// and a partial frame read earlier is kept for it.
public final class DescriptorSource: AudioSource {
    public let fd: Int32
    /// "standard input" or "fd N", for messages.
    public let name: String
    /// The raw format given, or nil for a WAV stream.
    private let raw: AudioFormat?
    private var header: WAVStreamHeader
    private var stream: WAVStreamHeader.Result?
    /// Bytes read and not yet used; `head` is where the unused ones begin.
    private var pending: [UInt8] = []
    private var head = 0
    /// Data bytes still to read when the WAV header declared a size.
    private var remaining: Int?
    public private(set) var ended = false
    /// The stream ended before the data its WAV header declared: what is missing, for a warning
    /// (a cut-short file gets one: `AudioPump`), nil otherwise.
    public private(set) var shortfall: String?
    /// Nothing more will come: the end was read, or the WAV header's declared data is all read.
    public var exhausted: Bool { ended || remaining == 0 }
    private var rawChecked = false

    static let pollMilliseconds: Int32 = 100
    /// Frames decoded per `read` at most (as for a WAV file).
    static let maxFramesPerRead = 65_536

    /// `raw` nil: the stream starts with a WAV header.
    public init(fd: Int32, raw: AudioFormat?) {
        self.fd = fd
        self.raw = raw
        name = fd == 0 ? "standard input" : "fd \(fd)"
        header = WAVStreamHeader(name: name)
        if let raw { stream = WAVStreamHeader.Result(format: raw, kind: .int16, blockAlign: 2 * raw.channels, dataBytes: nil) }
    }

    /// Checks that `fd` is open for reading, without reading it (spc_client_new).
    public static func check(fd: Int32) throws(SpeechClientError) {
        let name = fd == 0 ? "standard input" : "fd \(fd)"
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0 else {
            if errno == EBADF { throw SpeechClientError(.audio, "audio descriptor \(fd) (\(name)) is not open") }
            throw SpeechClientError.errno(.audio, "fcntl", errno, context: "audio descriptor \(fd)")
        }
        guard flags & O_ACCMODE != O_WRONLY else {
            throw SpeechClientError(.audio, "audio descriptor \(fd) (\(name)) is open for writing only")
        }
    }

    /// Known once the WAV header has been read (before that: 16 kHz mono, a placeholder; `read`
    /// returns no samples until the header is in).
    public var format: AudioFormat { stream?.format ?? .speech }

    public func open() throws(SpeechClientError) {
        try Self.check(fd: fd)
    }

    /// Nothing to release: the descriptor stays the application's.
    public func close() {}

    public func read(maxFrames: Int) throws(SpeechClientError) -> [Float]? {
        if ended { return nil }
        var waited = false
        while true {
            if let block = try decodePending(maxFrames: maxFrames) { return block }
            if remaining == 0 { return finish() }
            if waited { return [] }
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&p, 1, Self.pollMilliseconds)
            if ready < 0 {
                if errno == EINTR { continue }
                throw SpeechClientError.errno(.audio, "poll", errno, context: "audio \(name)")
            }
            if ready == 0 { return [] }
            if p.revents & Int16(POLLNVAL) != 0 {
                throw SpeechClientError(.audio, "audio \(name) was closed while the client was reading it")
            }
            let got = try readSome(maxFrames: maxFrames)
            if got == 0 { return try endOfStream() }
            // One read per call once data flowed, so a steady stream is passed on as it comes.
            waited = true
        }
    }

    /// Reads what is there (at most a block's worth); 0 at the end of the stream.
    private func readSome(maxFrames: Int) throws(SpeechClientError) -> Int {
        if head > 0 && head >= pending.count / 2 {
            pending.removeFirst(head)
            head = 0
        }
        let align = stream?.blockAlign ?? 1
        var want = max(4096, min(max(1, maxFrames), Self.maxFramesPerRead) * align)
        if let remaining { want = max(1, min(want, remaining - (pending.count - head))) }
        let old = pending.count
        pending.append(contentsOf: repeatElement(0, count: want))
        while true {
            let n = pending.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress.map { $0 + old }, want) }
            if n >= 0 {
                pending.removeLast(want - n)
                return n
            }
            let e = errno
            if e == EINTR { continue }
            pending.removeLast(want)
            // A non-blocking descriptor that poll called readable but had nothing after all.
            if e == EAGAIN || e == EWOULDBLOCK { return -1 }
            throw SpeechClientError.errno(.audio, "read", e, context: "audio \(name)")
        }
    }

    /// Whole frames from what was read (after the WAV header, once it is in), or nil when
    /// there are none yet.
    private func decodePending(maxFrames: Int) throws(SpeechClientError) -> [Float]? {
        if raw != nil && !rawChecked {
            // Raw PCM that begins "RIFF" is a WAV stream given a rate by mistake: its header
            // would be heard as a click and its format guessed wrong.
            guard pending.count - head >= 4 else { return nil }
            rawChecked = true
            if WAVFileSource.fourCC(Array(pending[head..<head + 4]), 0) == "RIFF" {
                throw SpeechClientError(.audio, "raw PCM stream (\(name)): it starts with a WAV header: give sample rate 0 to have the header read")
            }
        }
        if stream == nil {
            let (taken, result) = try header.take(pending, from: head)
            head += taken
            guard let result else { return nil }
            stream = result
            remaining = result.dataBytes
        }
        guard let stream else { return nil }
        var frames = min(max(1, maxFrames), Self.maxFramesPerRead, (pending.count - head) / stream.blockAlign)
        if let remaining { frames = min(frames, remaining / stream.blockAlign) }
        guard frames > 0 else { return nil }
        let bytes = frames * stream.blockAlign
        let block = WAVFileSource.decode(Array(pending[head..<head + bytes]), count: frames * stream.format.channels, kind: stream.kind)
        head += bytes
        if let r = remaining { remaining = r - bytes }
        return block
    }

    /// The stream ended: an error when it ended inside the header, nil (the end) otherwise. A
    /// trailing partial frame is dropped (it holds no whole sample set).
    private func endOfStream() throws(SpeechClientError) -> [Float]? {
        if stream == nil {
            let seen = header.consumed + pending.count - head
            throw header.fail(seen == 0 ? "the stream ended before any audio (empty)" : "the stream ended inside the WAV header, after \(seen) bytes")
        }
        if let remaining, remaining > 0, let stream {
            let rate = Double(max(1, stream.format.sampleRate * stream.blockAlign))
            shortfall = "WAV stream (\(name)): it ended \(remaining) bytes before the end its data chunk declares: its last \(SpeechAudio.secondsText(Double(remaining) / rate)) s are missing (its writer stopped early?)"
        }
        return finish()
    }

    private func finish() -> [Float]? {
        ended = true
        pending = []
        head = 0
        return nil
    }
}
