/// Where audio comes from: the microphone (ALSA), a WAV file, or PCM pushed by the application.
/// A source delivers interleaved Float32 samples in [-1, 1] at its own rate and channel count;
/// `AudioConverter` turns them into 16 kHz mono Int16 and `Chunker` cuts them into chunks.
///
/// A source is used by one thread at a time (the client's worker), between `open()` and
/// `close()`.
public protocol AudioSource: AnyObject {
    /// The rate and channel count of what `read` returns; valid after `open()`.
    var format: AudioFormat { get }
    /// Acquires the device or file. Errors are `.audio` and name the device or file.
    func open() throws(SpeechClientError)
    /// Up to `maxFrames` interleaved frames (maxFrames * channels samples). Returns nil at the
    /// end of the stream, possibly an empty array when nothing is available yet.
    func read(maxFrames: Int) throws(SpeechClientError) -> [Float]?
    /// Releases the device or file. Idempotent.
    func close()
    /// Frames the device lost since the last call (an overrun, a suspend: ALSA's recovery
    /// drops what it held), for the reader to stand silence in for them. 0 for other sources.
    func takeLostFrames() -> Int
}

extension AudioSource {
    public func takeLostFrames() -> Int { 0 }
}

/// A source whose samples are 16-bit already (a 16-bit PCM WAV file) hands them over as they
/// are: at 16 kHz mono they then reach the server without a round trip through Float, which
/// was most of a file's conversion time.
public protocol Int16AudioSource: AudioSource {
    /// Whether `readInt16` gives this source's samples (valid after `open()`).
    var deliversInt16: Bool { get }
    /// As `read`, the samples as they are in the source, signed 16-bit.
    func readInt16(maxFrames: Int) throws(SpeechClientError) -> [Int16]?
}

public struct AudioFormat: Sendable, Equatable {
    public var sampleRate: Int
    public var channels: Int
    public init(sampleRate: Int, channels: Int) {
        self.sampleRate = sampleRate
        self.channels = channels
    }
    /// What the server receives: LINEAR16, 16 kHz, mono.
    public static let speech = AudioFormat(sampleRate: SpeechAudio.sampleRate, channels: 1)
}

/// The audio every backend receives after conversion, named once: 16 kHz, mono, 16-bit.
/// Positions inside the library are counted in these samples.
public enum SpeechAudio {
    public static let sampleRate = 16_000
    public static let samplesPerMillisecond = sampleRate / 1_000
    public static let nanosecondsPerSample = UInt64(1_000_000_000 / sampleRate)
    public static let bytesPerSample = 2

    @inline(__always) public static func samples(milliseconds ms: Int) -> Int { ms * samplesPerMillisecond }
    @inline(__always) public static func milliseconds(samples: Int) -> Int { samples / samplesPerMillisecond }
    @inline(__always) public static func seconds(samples: Int) -> Double { Double(samples) / Double(sampleRate) }
}

extension SpeechAudio {
    /// Seconds with one decimal, for messages ("12.3").
    static func secondsText(_ seconds: Double) -> String {
        let tenths = Int((seconds * 10).rounded())
        return "\(tenths / 10).\(tenths % 10)"
    }

    static func secondsText(samples: Int) -> String { secondsText(seconds(samples: samples)) }
}
