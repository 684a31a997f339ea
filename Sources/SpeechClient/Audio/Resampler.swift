#if canImport(Glibc)
import Glibc
#endif

/// A streaming polyphase windowed-sinc resampler (Kaiser window) for any pair of rates.
///
/// The ratio is reduced to L/M; output sample n sits at input time n*M/L. For each of the L
/// fractional phases a table of 2H taps of the low-pass kernel is precomputed, so each output
/// sample costs 2H multiply-adds. The cutoff is 0.45 of the lower rate's sample rate (below the
/// output Nyquist when downsampling, so e.g. a 10 kHz tone at 48 kHz does not alias into 16 kHz
/// audio). State carries across calls, so chunk boundaries leave no trace.
public final class Resampler {
    public let inputRate: Int
    public let outputRate: Int
    private let up: Int        // L
    private let down: Int      // M
    private let halfTaps: Int  // H
    private let table: [Float] // L rows of 2H taps
    /// Input samples not yet consumed; `history[0]` is absolute input index `base`.
    private var history: [Float]
    private var base = 0
    /// Position of the next output sample: input index `index` plus `phase`/L.
    private var index = 0
    private var phase = 0
    private var inputCount = 0
    private var outputCount = 0

    /// Zero crossings of the sinc on each side of the centre: sets the filter's sharpness.
    static let zeroCrossings = 16.0
    static let kaiserBeta = 8.6

    public init(inputRate: Int, outputRate: Int) {
        self.inputRate = max(1, inputRate)
        self.outputRate = max(1, outputRate)
        let g = Self.gcd(self.inputRate, self.outputRate)
        up = self.outputRate / g
        down = self.inputRate / g
        let cutoff = 0.45 * Double(min(self.inputRate, self.outputRate)) / Double(self.inputRate) // cycles per input sample
        let h = Int((Self.zeroCrossings / (2 * cutoff)).rounded(.up))
        halfTaps = max(h, 1)
        var t = [Float](repeating: 0, count: up * 2 * halfTaps)
        let i0Beta = Self.besselI0(Self.kaiserBeta)
        for p in 0..<up {
            var sum = 0.0
            var row = [Double](repeating: 0, count: 2 * halfTaps)
            for m in 0..<(2 * halfTaps) {
                let tau = Double(p) / Double(up) + Double(halfTaps - 1 - m)
                let x = tau / Double(halfTaps)
                guard abs(x) < 1 else { continue }
                let arg = 2 * cutoff * tau
                let sinc = arg == 0 ? 1.0 : sin(Double.pi * arg) / (Double.pi * arg)
                let window = Self.besselI0(Self.kaiserBeta * (1 - x * x).squareRoot()) / i0Beta
                row[m] = 2 * cutoff * sinc * window
                sum += row[m]
            }
            // Each phase passes DC at exactly unity gain, so no ripple at the phase rate.
            for m in 0..<(2 * halfTaps) { t[p * 2 * halfTaps + m] = Float(sum == 0 ? 0 : row[m] / sum) }
        }
        table = t
        // H zeros before the first sample: the output starts aligned with the input's time 0
        // once the delay of H samples has been consumed.
        history = [Float](repeating: 0, count: halfTaps)
        base = -halfTaps
    }

    /// The latency in output samples (the filter's group delay is compensated; this is the
    /// amount of input the resampler needs beyond a point before it can produce it).
    public var delayInputSamples: Int { halfTaps }

    /// Resamples the next block of mono input.
    public func process(_ input: [Float]) -> [Float] {
        if up == down { return input }
        history.append(contentsOf: input)
        var out: [Float] = []
        out.reserveCapacity(input.count * up / down + 2)
        let taps = 2 * halfTaps
        table.withUnsafeBufferPointer { tb in
            history.withUnsafeBufferPointer { hb in
                // Output n needs input indices index-H+1 ... index+H.
                while index + halfTaps - base < hb.count {
                    let start = index - halfTaps + 1 - base
                    let row = phase * taps
                    var acc: Float = 0
                    for m in 0..<taps { acc += tb[row + m] * hb[start + m] }
                    out.append(acc)
                    phase += down
                    index += phase / up
                    phase %= up
                }
            }
        }
        // Keep only what future outputs still need.
        let drop = min(max(0, index - halfTaps + 1 - base), history.count)
        history.removeFirst(drop)
        base += drop
        inputCount += input.count
        outputCount += out.count
        return out
    }

    /// Pushes zeros through so every output sample for the input so far comes out.
    public func flush() -> [Float] {
        if up == down { return [] }
        let total = (inputCount * up + down - 1) / down
        let wanted = max(0, total - outputCount)
        let out = process([Float](repeating: 0, count: 2 * halfTaps))
        return Array(out.prefix(wanted))
    }

    static func gcd(_ a: Int, _ b: Int) -> Int { b == 0 ? a : gcd(b, a % b) }

    /// The modified Bessel function of the first kind, order 0 (for the Kaiser window).
    static func besselI0(_ x: Double) -> Double {
        var sum = 1.0
        var term = 1.0
        let half = x / 2
        for k in 1..<50 {
            term *= (half / Double(k)) * (half / Double(k))
            sum += term
            if term < sum * 1e-12 { break }
        }
        return sum
    }
}
