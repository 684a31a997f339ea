import Testing
@testable import SpeechClient
#if canImport(Glibc)
import Glibc
#endif

/// The real ALSA capture path, fed by ALSA's `file` plugin with synthesized speech
/// (recognizer.md: a microphone without a sound card). Serialized: the tests share one device
/// definition, and ALSA_CONFIG_PATH is set once, before this process's first ALSA call.
@Suite(.serialized) struct ALSACaptureTests {
    struct Fixture: Sendable {
        var raw: String
        var samples: [Int16]
    }

    static func run(_ command: String) -> Bool { system(command) == 0 }

    /// Synthesizes speech to raw 16 kHz mono s16 and points ALSA at a config that includes the
    /// system's and adds `testmic`.
    static let fixture: Fixture? = {
        let dir = AudioFixtures.directory()
        let raw = dir + "/speech.raw"
        guard run("espeak-ng -v en-us -s 160 -w \(dir)/speech.wav 'turn on the kitchen lights' && sox -R \(dir)/speech.wav -r 16000 -c 1 -b 16 -e signed-integer -t raw \(raw)") else { return nil }
        let conf = """
        </usr/share/alsa/alsa.conf>
        pcm.testmic { type file; slave.pcm "null"; file "/dev/null"; infile "\(raw)"; format "raw"; hint { show on; description "Test microphone\nsynthesized speech" } }
        pcm.testspeaker { type null; hint { show on; description "Test speaker|IOIDOutput" } }
        pcm.testmic8k { type plug; slave { pcm "testmic"; rate 8000; channels 1; format S16_LE } }
        pcm.testmicfloat { type lfloat; slave { pcm "testmic"; format S16_LE } }

        """
        let confPath = dir + "/asound.conf"
        AudioFixtures.write(Array(conf.utf8), to: confPath)
        setenv("ALSA_CONFIG_PATH", confPath, 1)
        guard let data = Files.read(raw, limit: 10 << 20), data.count > 32_000 else { return nil }
        let samples = stride(from: 0, to: data.count - 1, by: 2).map { Int16(bitPattern: UInt16(data[$0]) | UInt16(data[$0 + 1]) << 8) }
        return Fixture(raw: raw, samples: samples)
    }()

    static func requireFixture() throws -> Fixture {
        try #require(fixture, "espeak-ng, sox and alsa-utils are needed (scripts/setup-debian.sh installs them)")
    }

    static func toInt16(_ block: [Float]) -> [Int16] { block.map { Int16(($0 * 32768).rounded()) } }

    @Test func capturesSynthesizedSpeechSampleForSample() throws {
        let f = try Self.requireFixture()
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
            #expect(block.count <= 1600)
            captured += Self.toInt16(block)
        }
        let seconds = Double(Clock.monotonicNanos() - started) / 1e9
        print("figure: ALSA testmic captured \(captured.count) of \(f.samples.count) samples in \(seconds) s")
        // Everything arrived, the last read possibly running on to the end of its block.
        #expect(captured.count >= f.samples.count && captured.count < f.samples.count + 1600)
        #expect(Array(captured.prefix(f.samples.count)) == f.samples)
        // Held to real time (the file plugin has no clock of its own).
        #expect(seconds > Double(captured.count) / 16_000 - 0.05)
    }

    /// A device offering FLOAT_LE alone (an lfloat plugin in front of the file plugin; I2S
    /// MEMS microphones and audio interfaces offer 32 or 24 bits only) is opened and read in
    /// that format: S16_LE was asked for alone, and such a device failed with
    /// "snd_pcm_hw_params_set_format failed: Invalid argument". The values are not compared:
    /// alsa-lib 1.2.8's lfloat does not scale to -1...1 as a float device does (a full-scale
    /// input read back at 0.29 through it with aplay's own calls); `sampleFormatsConvertExactly`
    /// checks the conversions.
    @Test func aDeviceWithoutS16IsReadInAFormatItOffers() throws {
        let f = try Self.requireFixture()
        let mic = ALSACapture(device: "testmicfloat")
        try mic.open()
        defer { mic.close() }
        #expect(mic.format == AudioFormat(sampleRate: 16_000, channels: 1))
        var captured: [Float] = []
        var idle = 0
        while captured.count < f.samples.count && idle < 20 {
            guard let block = try mic.read(maxFrames: 1600) else { break }
            if block.isEmpty { idle += 1; continue }
            captured += block
        }
        #expect(captured.count >= f.samples.count)
        #expect(captured.contains { $0 != 0 })
    }

    /// Each sample format's bytes as floats: signs, extremes, 24 bits sign-extended (packed in
    /// three bytes, or in the low three of four), a float's NaN as silence and its range kept.
    @Test func sampleFormatsConvertExactly() {
        typealias F = ALSACapture.SampleFormat
        #expect(F.s16.floats([0x00, 0x80, 0xFF, 0x7F, 0x00, 0x40], count: 3) == [-1, Float(32767) / 32768, 0.5])
        #expect(F.s32.floats([0, 0, 0, 0x80, 0, 0, 0, 0x40], count: 2) == [-1, 0.5])
        #expect(F.s24packed.floats([0, 0, 0x80, 0, 0, 0x40, 0xFF, 0xFF, 0xFF], count: 3) == [-1, 0.5, -1 / 8_388_608])
        #expect(F.s24in32.floats([0, 0, 0x80, 0x00, 0, 0, 0x40, 0xFF], count: 2) == [-1, 0.5])  // the top byte ignored
        let nan = Float.nan.bitPattern, two = Float(2).bitPattern, half = Float(-0.5).bitPattern
        let le: (UInt32) -> [UInt8] = { [UInt8($0 & 0xFF), UInt8($0 >> 8 & 0xFF), UInt8($0 >> 16 & 0xFF), UInt8($0 >> 24)] }
        #expect(F.float32.floats(le(nan) + le(two) + le(half), count: 3) == [0, 1, -0.5])
        #expect(F.preference.first == .s16)
    }

    /// A clockless device behind a plugin of another type (here `plug`, fixing the rate at
    /// 8 kHz) is found by its speed and held to real time too. Before, it was read at hundreds
    /// of times real time: an interrupted test microphone had "spoken" 30 minutes in 2 s.
    @Test func aClocklessDeviceBehindAPlugIsHeldToRealTime() throws {
        _ = try Self.requireFixture()
        let mic = ALSACapture(device: "testmic8k")
        try mic.open()
        defer { mic.close() }
        #expect(mic.format == AudioFormat(sampleRate: 8_000, channels: 1))
        var frames = 0
        let started = Clock.monotonicNanos()
        while frames < 3 * 8_000 {
            guard let block = try mic.read(maxFrames: 800) else { break }
            frames += block.count
        }
        let seconds = Double(Clock.monotonicNanos() - started) / 1e9
        print("figure: ALSA plug over the file plugin delivered \(Double(frames) / 8_000) s of audio in \(seconds) s")
        // Up to the device buffer and 0.5 s arrive at once before the speed gives it away.
        #expect(frames >= 3 * 8_000)
        #expect(seconds > Double(frames) / 8_000 - 1.0)
    }

    /// Issue 19 item 9: the capture devices as `arecord -L` lists them, usable as the microphone.
    @Test func captureDevicesAreListedWithTheirDescriptions() throws {
        _ = try Self.requireFixture()
        let devices = try AudioDevice.capture()
        print("figure: ALSA lists \(devices.count) capture device(s): \(devices.map(\.name))")
        #expect(devices.contains(AudioDevice(name: "testmic", description: "Test microphone\nsynthesized speech")))
        #expect(devices.contains { $0.name == "null" })
        #expect(!devices.contains { $0.name == "testspeaker" })  // an output only
        let mic = ALSACapture(device: "testmic")
        try mic.open()
        mic.close()
    }

    /// alsa-lib 1.2.8 never reports the end of the file plugin's input (it repeats stale buffer
    /// content); newer versions return 0 frames, which `read` turns into nil. Either is fine.
    @Test func pastTheEndOfTheInputEitherEndsOrKeepsDelivering() throws {
        let f = try Self.requireFixture()
        let mic = ALSACapture(device: "testmic")
        try mic.open()
        defer { mic.close() }
        var total = 0
        var ended = false
        // Large blocks: the pacing lets a block through every block's duration.
        while total < f.samples.count + 8000 {
            guard let block = try mic.read(maxFrames: 8000) else { ended = true; break }
            total += block.count
        }
        print("figure: ALSA testmic past the end of its input: \(ended ? "nil (end of stream)" : "keeps delivering")")
        #expect(total >= f.samples.count - 1)
    }

    /// Past the end of its input, alsa-lib 1.2.8's file plugin says "invalid frames 0" on every
    /// read: 50 log lines a second (12,000 in a 4-minute test). A message repeated within 10 s
    /// of its report is counted, not logged. (Since the library takes ALSA's messages through
    /// its thread-local handler, this one, an internal debug message that ALSA gives only to a
    /// replaced process-wide handler or with LIBASOUND_DEBUG, no longer comes at all: at most
    /// one line either way.)
    @Test func aMessageALSARepeatsOnEveryReadIsLoggedOnce() throws {
        let f = try Self.requireFixture()
        let said = Locked<[String]>([])
        let mic = ALSACapture(device: "testmic")
        mic.onALSAMessage { m in said.withLock { $0.append(m) } }
        try mic.open()
        defer { mic.close() }
        var total = 0
        var ended = false
        while total < f.samples.count + 16_000 {  // a second past the end: about 50 reads
            guard let block = try mic.read(maxFrames: 320) else { ended = true; break }
            total += block.count
        }
        let lines = said.withLock { $0 }
        print("figure: ALSA messages logged past the end of the input: \(lines.count) \(lines.first ?? "")")
        if !ended {
            #expect(lines.count <= 1, "\(lines.count) lines: \(lines.prefix(3))")
        }
    }

    @Test func closeFromAnotherThreadEndsAPendingRead() throws {
        _ = try Self.requireFixture()
        let mic = ALSACapture(device: "testmic")
        try mic.open()
        // The first read anchors the real-time clock; the second (capped at half the 400 ms
        // buffer) waits about 200 ms for its turn, and the close comes 50 ms into that wait.
        _ = try mic.read(maxFrames: 100)
        let closer = try NativeThread(name: "closer") { [mic] in
            var ts = timespec(tv_sec: 0, tv_nsec: 50_000_000)
            nanosleep(&ts, nil)
            mic.close()
        }
        let t0 = Clock.monotonicNanos()
        let block = try mic.read(maxFrames: 32_000)
        let waited = Double(Clock.monotonicNanos() - t0) / 1e9
        closer.join()
        #expect(block?.count == nil)
        #expect(waited < 0.18, "read returned \(waited) s after it began; close came at 0.05 s")
        #expect(try mic.read(maxFrames: 100) == nil)
        mic.close()
        // And it can be opened again.
        try mic.open()
        #expect(try mic.read(maxFrames: 160)?.isEmpty == false)
        mic.close()
    }

    @Test func closeWhileNotReadingAndTwiceIsFine() throws {
        _ = try Self.requireFixture()
        let mic = ALSACapture(device: "testmic")
        mic.close()
        #expect(try mic.read(maxFrames: 10) == nil)
        try mic.open()
        mic.close()
        mic.close()
        #expect(try mic.read(maxFrames: 10) == nil)
    }

    @Test func unknownDeviceIsAnAudioErrorNamingIt() {
        _ = Self.fixture
        #expect { try ALSACapture(device: "no-such-device-xyz").open() } throws: {
            guard let e = $0 as? SpeechClientError else { return false }
            return e.code == .audio && e.message.contains("'no-such-device-xyz'") && e.message.contains("snd_pcm_open failed")
        }
    }

    /// Issue 19 item 7: ALSA's own message ("Unknown PCM ...") printed itself on stderr, past
    /// the log callback; now it is in the error and goes to the capture's sink, nowhere else.
    @Test func alsasOwnMessagesGoToTheErrorAndTheLog() throws {
        _ = Self.fixture
        let said = Locked<[String]>([])
        let mic = ALSACapture(device: "no-such-device-xyz")
        mic.onALSAMessage { m in said.withLock { $0.append(m) } }
        #expect { try mic.open() } throws: {
            ($0 as? SpeechClientError)?.message.contains("(ALSA says: Unknown PCM no-such-device-xyz") == true
        }
        #expect(said.withLock { $0 }.contains { $0.contains("ALSA says: Unknown PCM no-such-device-xyz") })
    }
}
