import Testing
@testable import SpeechClient
#if canImport(Glibc)
import Glibc
#endif

/// The real ALSA capture path, fed by ALSA's `file` plugin with synthesized speech
/// (recognizer.md: a microphone without a sound card).
@Suite(.serialized) struct ALSACaptureTests {
    static func run(_ command: String) -> Bool { system(command) == 0 }

    /// Synthesizes speech to raw 16 kHz mono s16 and points ALSA at a config with `testmic`.
    static let fixture: (raw: String, samples: [Int16])? = {
        let dir = temporaryDirectory()
        let raw = dir + "/speech.raw"
        guard run("espeak-ng -v en-us -s 160 -w \(dir)/speech.wav 'turn on the kitchen lights' && sox \(dir)/speech.wav -r 16000 -c 1 -b 16 -e signed-integer -t raw \(raw)") else { return nil }
        let conf = """
        </usr/share/alsa/alsa.conf>
        pcm.testmic { type file; slave.pcm "null"; file "/dev/null"; infile "\(raw)"; format "raw" }
        """
        let confPath = dir + "/asound.conf"
        let bytes = Array(conf.utf8)
        let fd = open(confPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        setenv("ALSA_CONFIG_PATH", confPath, 1)
        guard let data = Files.read(raw, limit: 10 << 20) else { return nil }
        let samples = stride(from: 0, to: data.count - 1, by: 2).map { Int16(bitPattern: UInt16(data[$0]) | UInt16(data[$0 + 1]) << 8) }
        return (raw, samples)
    }()

    @Test func capturesSynthesizedSpeechSampleForSample() throws {
        let f = try #require(Self.fixture, "espeak-ng and sox are needed (scripts/setup-debian.sh installs them)")
        let mic = ALSACapture(device: "testmic")
        try mic.open()
        defer { mic.close() }
        #expect(mic.format == AudioFormat(sampleRate: 16_000, channels: 1))
        var captured: [Int16] = []
        var idle = 0
        let started = Clock.monotonicNanos()
        while captured.count < f.samples.count && idle < 20 {
            guard let block = try mic.read(maxFrames: 1600) else { break }
            if block.isEmpty { idle += 1; continue }
            captured += block.map { Int16(($0 * 32768).rounded()) }
        }
        let seconds = Double(Clock.monotonicNanos() - started) / 1e9
        print("figure: ALSA testmic captured \(captured.count) of \(f.samples.count) samples in \(seconds) s")
        // The capture is held to real time (the file plugin itself has no clock).
        #expect(seconds > Double(captured.count) / 16_000 - 0.1)
        #expect(captured.count >= f.samples.count - 1600)
        let n = min(captured.count, f.samples.count)
        #expect(n > 16_000)
        #expect(Array(captured.prefix(n)) == Array(f.samples.prefix(n)))
    }

    @Test func unknownDeviceIsAnAudioErrorNamingIt() {
        _ = Self.fixture
        #expect { try ALSACapture(device: "no-such-device-xyz").open() } throws: {
            guard let e = $0 as? SpeechClientError else { return false }
            return e.code == .audio && e.message.contains("no-such-device-xyz")
        }
    }
}
