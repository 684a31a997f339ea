/// Turns a source's interleaved frames into what the server takes: mono (channels averaged),
/// 16 kHz (through `Resampler`, skipped when the rates are equal), signed 16-bit (rounded half
/// away from zero, clipped, NaN as 0). The output is always mono: `output.channels` is not used.
/// A trailing partial frame of a block is dropped, so give whole frames. `flush()` ends the
/// stream (the resampler's last samples) and leaves the converter ready for a new one.
public final class AudioConverter {
    public let input: AudioFormat
    public let output: AudioFormat
    private let resampler: Resampler?

    public init(input: AudioFormat, output: AudioFormat = .speech) {
        self.input = AudioFormat(sampleRate: max(1, input.sampleRate), channels: max(1, input.channels))
        self.output = output
        resampler = input.sampleRate == output.sampleRate ? nil
            : Resampler(inputRate: self.input.sampleRate, outputRate: output.sampleRate)
    }

    public func process(_ interleaved: [Float]) -> [Int16] {
        let mono = downmix(interleaved)
        return quantize(resampler?.process(mono) ?? mono)
    }

    /// The input is the output format already (mono at 16 kHz): 16-bit samples pass as they are.
    public var passesThrough: Bool { input.channels == 1 && resampler == nil }

    /// Pushed PCM: 16-bit interleaved samples.
    public func process(int16 interleaved: UnsafeBufferPointer<Int16>) -> [Int16] {
        if passesThrough { return Array(interleaved) }
        var floats = [Float](repeating: 0, count: interleaved.count)
        for i in 0..<interleaved.count { floats[i] = Float(interleaved[i]) / 32768 }
        return process(floats)
    }

    public func flush() -> [Int16] {
        quantize(resampler?.flush() ?? [])
    }

    private func downmix(_ interleaved: [Float]) -> [Float] {
        let c = input.channels
        if c == 1 { return interleaved }
        let frames = interleaved.count / c
        var mono = [Float](repeating: 0, count: frames)
        let scale = 1 / Float(c)
        interleaved.withUnsafeBufferPointer { src in
            for f in 0..<frames {
                var sum: Float = 0
                for ch in 0..<c { sum += src[f * c + ch] }
                mono[f] = sum * scale
            }
        }
        return mono
    }

    private func quantize(_ samples: [Float]) -> [Int16] {
        [Int16](unsafeUninitializedCapacity: samples.count) { out, count in
            samples.withUnsafeBufferPointer { src in
                for i in 0..<src.count { out[i] = Self.quantize(src[i]) }
            }
            count = samples.count
        }
    }

    /// One sample, rounded half away from zero without a call into libm (`rounded()` is
    /// `roundf` on baseline x86-64: most of a file's conversion time). Clipped first, so the
    /// truncation cannot trap; the fraction is exact below 2^24.
    @inline(__always)
    static func quantize(_ s: Float) -> Int16 {
        if s.isNaN { return 0 }
        let v = max(-32768, min(32767, s * 32768))
        let t = Int32(v)
        let fraction = v - Float(t)
        return Int16(fraction >= 0.5 ? t + 1 : fraction <= -0.5 ? t - 1 : t)
    }
}
