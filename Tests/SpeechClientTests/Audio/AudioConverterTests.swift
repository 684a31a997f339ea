import Testing
@testable import SpeechClient

@Suite struct AudioConverterTests {
    @Test func sameRateDownmixesRoundsAndClips() {
        let conv = AudioConverter(input: AudioFormat(sampleRate: 16_000, channels: 2))
        // (0.5 + -0.5)/2 = 0; 0.25 → 8192; 1.5 clips to 32767; -2 clips to -32768; 1/65536 rounds to 1 (half away from zero).
        let out = conv.process([0.5, -0.5, 0.25, 0.25, 1.5, 1.5, -2, -2, 1.0 / 65536, 1.0 / 65536, .nan, .nan])
        #expect(out == [0, 8192, 32767, -32768, 1, 0])
        #expect(conv.flush().isEmpty)
    }

    /// The inlined rounding is `rounded()` (half away from zero) then clipping, for every
    /// value that matters: ties, values next to ties, the clip edges, infinities, NaN.
    @Test func quantizeRoundsHalfAwayFromZeroLikeLibm() {
        func reference(_ s: Float) -> Int16 {
            let v = (s * 32768).rounded()
            if v.isNaN { return 0 }
            return Int16(max(-32768, min(32767, v)))
        }
        var values: [Float] = [0, -0, .nan, .infinity, -.infinity, 1, -1, 2, -2, .greatestFiniteMagnitude, -.greatestFiniteMagnitude,
                               32767.5 / 32768, -32768.5 / 32768, 32766.5 / 32768, -32767.5 / 32768, .leastNonzeroMagnitude]
        for k in -40...40 {
            let tie = (Float(k) + 0.5) / 32768
            values += [tie, tie.nextUp, tie.nextDown, -tie, (-tie).nextUp, (-tie).nextDown]
        }
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<100_000 { values.append(Float.random(in: -1.2...1.2, using: &rng)) }
        for v in values {
            #expect(AudioConverter.quantize(v) == reference(v), "\(v)")
        }
    }

    @Test func int16MonoAtTheOutputRatePassesThrough() {
        let conv = AudioConverter(input: .speech)
        let samples: [Int16] = [0, 1, -1, 32767, -32768, 1234]
        #expect(samples.withUnsafeBufferPointer { conv.process(int16: $0) } == samples)
    }

    @Test func int16StereoIsAveraged() {
        let conv = AudioConverter(input: AudioFormat(sampleRate: 16_000, channels: 2))
        let samples: [Int16] = [100, 300, -32768, -32768, 32767, 32767, 1, 2]
        #expect(samples.withUnsafeBufferPointer { conv.process(int16: $0) } == [200, -32768, 32767, 2])
    }

    @Test func stereo48kBecomes16kMonoWithTheRightLength() {
        let conv = AudioConverter(input: AudioFormat(sampleRate: 48_000, channels: 2))
        let tone = AudioFixtures.sine(1000, rate: 48_000, seconds: 1)
        var interleaved: [Float] = []
        for s in tone { interleaved += [s, s] }
        var out: [Int16] = []
        for start in stride(from: 0, to: interleaved.count, by: 9_600) {
            out += conv.process(Array(interleaved[start..<min(interleaved.count, start + 9_600)]))
        }
        out += conv.flush()
        #expect(out.count == 16_000)
        let value = AudioFixtures.snr(out.map { Float($0) / 32768 }, frequency: 1000, rate: 16_000)
        #expect(value > 60, "SNR \(value) dB after 16-bit quantisation")
    }

    @Test func aPartialFrameIsIgnored() {
        let conv = AudioConverter(input: AudioFormat(sampleRate: 16_000, channels: 3))
        #expect(conv.process([0.5, 0.5, 0.5, 0.1]) == [16384])
    }
}
