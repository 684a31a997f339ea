import Testing
@testable import SpeechClient
#if canImport(Glibc)
import Glibc
#endif

func sine(_ frequency: Double, rate: Int, seconds: Double, amplitude: Double = 0.5) -> [Float] {
    (0..<Int(Double(rate) * seconds)).map { Float(amplitude * sin(2 * Double.pi * frequency * Double($0) / Double(rate))) }
}

/// Least-squares fit of a sine at `frequency` over the middle of `signal`; returns the SNR in dB
/// of the signal against the residual (noise + distortion + aliases).
func snr(_ signal: [Float], frequency: Double, rate: Int) -> Double {
    let lo = signal.count / 4, hi = signal.count * 3 / 4
    var ss = 0.0, cc = 0.0, sc = 0.0, ys = 0.0, yc = 0.0
    for n in lo..<hi {
        let s = sin(2 * Double.pi * frequency * Double(n) / Double(rate)), c = cos(2 * Double.pi * frequency * Double(n) / Double(rate))
        let y = Double(signal[n])
        ss += s * s; cc += c * c; sc += s * c; ys += y * s; yc += y * c
    }
    let det = ss * cc - sc * sc
    let a = (ys * cc - yc * sc) / det, b = (yc * ss - ys * sc) / det
    var sig = 0.0, noise = 0.0
    for n in lo..<hi {
        let fit = a * sin(2 * Double.pi * frequency * Double(n) / Double(rate)) + b * cos(2 * Double.pi * frequency * Double(n) / Double(rate))
        sig += fit * fit
        let e = Double(signal[n]) - fit
        noise += e * e
    }
    return 10 * log10(sig / max(noise, 1e-30))
}

func rms(_ x: ArraySlice<Float>) -> Double {
    (x.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(max(x.count, 1))).squareRoot()
}

@Suite struct ResamplerTests {
    @Test(arguments: [48_000, 44_100, 22_050, 8_000, 96_000])
    func toneSurvivesWithHighSNR(rate: Int) {
        let r = Resampler(inputRate: rate, outputRate: 16_000)
        let out = r.process(sine(1000, rate: rate, seconds: 1)) + r.flush()
        #expect(abs(out.count - 16_000) <= 1)
        let value = snr(out, frequency: 1000, rate: 16_000)
        #expect(value >= 60, "SNR \(value) dB at \(rate) Hz")
        print("figure: resampler \(rate) Hz -> 16 kHz, 1 kHz tone SNR \(Int(value)) dB")
    }

    @Test func toneAboveOutputNyquistIsRemoved() {
        let r = Resampler(inputRate: 48_000, outputRate: 16_000)
        let out = r.process(sine(10_000, rate: 48_000, seconds: 1))
        let level = rms(out[out.count / 4..<out.count * 3 / 4]) / (0.5 / 2.0.squareRoot())
        let db = 20 * log10(max(level, 1e-12))
        #expect(db <= -60, "10 kHz alias at \(db) dB")
        print("figure: 10 kHz tone at 48 kHz after resampling to 16 kHz: \(Int(db)) dB")
    }

    @Test func chunkedEqualsOneShot() {
        let input = sine(440, rate: 44_100, seconds: 0.5) .enumerated().map { $0.element + Float($0.offset % 7) * 0.001 }
        let whole = Resampler(inputRate: 44_100, outputRate: 16_000)
        let a = whole.process(input) + whole.flush()
        let chunked = Resampler(inputRate: 44_100, outputRate: 16_000)
        var b: [Float] = []
        var i = 0, step = 1
        while i < input.count {
            let n = min(step, input.count - i)
            b += chunked.process(Array(input[i..<i + n]))
            i += n
            step = step * 3 % 997 + 1
        }
        b += chunked.flush()
        #expect(a.count == b.count)
        #expect(zip(a, b).allSatisfy { abs($0 - $1) < 1e-6 })
    }

    @Test func sameRateIsIdentityAndConverterDownmixes() {
        let conv = AudioConverter(input: AudioFormat(sampleRate: 16_000, channels: 2))
        let out = conv.process([0.5, -0.5, 0.25, 0.25, 1.5, 1.5])
        #expect(out == [0, 8192, 32767])
    }

    @Test func chunkerCutsExactly() {
        var c = Chunker(samplesPerChunk: 4)
        #expect(c.append([1, 2, 3]).isEmpty)
        #expect(c.append([4, 5, 6, 7, 8, 9]) == [[1, 2, 3, 4], [5, 6, 7, 8]])
        #expect(c.flush() == [9])
        #expect(c.flush() == nil)
    }
}
