#if canImport(Glibc)
import Glibc
#endif

/// A streaming polyphase windowed-sinc resampler (Kaiser window) for any pair of rates, mono
/// Float in and out.
///
/// The ratio is reduced to L/M; output sample n sits at input time n*M/L, tracked exactly in
/// integers (an input index plus a phase in units of 1/L), so hours of audio do not drift.
/// The low-pass kernel is precomputed as a table of phases, each a row of taps:
/// - L <= `maxExactPhases` (every common rate to 16 kHz: 48k → L=1, 44.1k → 160, 22.05k → 320,
///   8k → 2): one row per phase, one dot product per output sample;
/// - otherwise (odd rates such as 47999 Hz, L = 16000): `interpolatedPhases` rows, and the
///   kernel between two rows is interpolated linearly (two dot products), which keeps the table
///   small; the kernel is smooth enough that the interpolation error is far below -100 dB.
///
/// The cutoff is 0.44 of the lower rate and the kernel spans 24 zero crossings on each side, so
/// the stop band starts just below the output Nyquist when downsampling (a 10 kHz tone at 48 kHz
/// does not alias into 16 kHz audio) and the pass band is flat to about 6 kHz at 16 kHz.
/// The filter's delay is compensated: output n is aligned with input time n*M/L. State carries
/// across calls, so chunk boundaries leave no trace (chunked and one-shot output are equal).
public final class Resampler {
    public let inputRate: Int
    public let outputRate: Int
    private let up: Int        // L
    private let down: Int      // M
    private let halfTaps: Int  // H: taps on each side of the centre
    private let stride: Int    // 2H rounded up to the SIMD width; the extra taps are zeros
    private let rows: Int      // phases in the table (L when exact)
    private let exact: Bool
    private let table: [Float] // rows(+1 when interpolating) × stride
    /// Input samples not yet consumed; `history[0]` is absolute input index `base`.
    private var history: [Float] = []
    private var base = 0
    /// Position of the next output sample: input index `index` plus `phase`/L.
    private var index = 0
    private var phase = 0
    private var inputCount = 0
    private var outputCount = 0

    /// Zero crossings of the sinc on each side of the centre: sets the filter's sharpness.
    static let zeroCrossings = 24.0
    /// Kaiser beta: about 86 dB of stop-band attenuation.
    static let kaiserBeta = 8.6
    static let cutoffFraction = 0.44
    static let maxExactPhases = 512
    static let interpolatedPhases = 256
    /// Bounds the kernel for absurd rate pairs (the API takes any Int) so memory stays small.
    static let maxHalfTaps = 2048
    static let simdWidth = 8

    /// Rates are clamped to 1...10_000_000; the useful range is 8000...384000.
    public init(inputRate: Int, outputRate: Int) {
        self.inputRate = min(max(1, inputRate), 10_000_000)
        self.outputRate = min(max(1, outputRate), 10_000_000)
        let g = Self.gcd(self.inputRate, self.outputRate)
        up = self.outputRate / g
        down = self.inputRate / g
        let kernel = Self.kernel(inputRate: self.inputRate, outputRate: self.outputRate, up: up)
        halfTaps = kernel.halfTaps
        stride = kernel.stride
        rows = kernel.rows
        exact = kernel.exact
        table = kernel.table
        reset()
    }

    /// Forgets all input: the next `process` starts a new stream.
    public func reset() {
        // H zeros before the first sample: output 0 is aligned with input time 0.
        history = [Float](repeating: 0, count: halfTaps)
        base = -halfTaps
        index = 0
        phase = 0
        inputCount = 0
        outputCount = 0
    }

    /// Input samples of latency: output for input time t needs input up to t + this.
    public var lookaheadInputSamples: Int { stride - halfTaps }

    /// Resamples the next block of mono input.
    public func process(_ input: [Float]) -> [Float] {
        if up == down { return input }
        history.append(contentsOf: input)
        inputCount &+= input.count
        var out: [Float] = []
        out.reserveCapacity(input.count / max(1, down) * up + up + 2)
        let w = Self.simdWidth
        let blocks = stride / w
        let s = stride
        table.withUnsafeBufferPointer { tb in
            history.withUnsafeBufferPointer { hb in
                guard let tp = tb.baseAddress, let hp = hb.baseAddress else { return }
                let traw = UnsafeRawPointer(tp), hraw = UnsafeRawPointer(hp)
                // Output n reads input indices index-H+1 ... index-H+stride (taps past 2H are zero).
                while index - halfTaps + 1 + s - base <= hb.count {
                    let start = index - halfTaps + 1 - base
                    let value: Float
                    if exact {
                        let row = phase * s
                        var acc = SIMD8<Float>()
                        for b in 0..<blocks {
                            let c = traw.loadUnaligned(fromByteOffset: (row + b * w) * 4, as: SIMD8<Float>.self)
                            let x = hraw.loadUnaligned(fromByteOffset: (start + b * w) * 4, as: SIMD8<Float>.self)
                            acc += c * x
                        }
                        value = acc.sum()
                    } else {
                        // Position between table rows k and k+1 (rows+1 rows cover phase 0...1).
                        let r = Double(phase) * Double(rows) / Double(up)
                        let k = min(Int(r), rows - 1)
                        let f = Float(r - Double(k))
                        let rowA = k * s, rowB = rowA + s
                        var a = SIMD8<Float>(), bsum = SIMD8<Float>()
                        for b in 0..<blocks {
                            let x = hraw.loadUnaligned(fromByteOffset: (start + b * w) * 4, as: SIMD8<Float>.self)
                            a += traw.loadUnaligned(fromByteOffset: (rowA + b * w) * 4, as: SIMD8<Float>.self) * x
                            bsum += traw.loadUnaligned(fromByteOffset: (rowB + b * w) * 4, as: SIMD8<Float>.self) * x
                        }
                        let va = a.sum(), vb = bsum.sum()
                        value = va + f * (vb - va)
                    }
                    out.append(value)
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
        outputCount &+= out.count
        return out
    }

    /// Pushes zeros through so every output sample for the input so far comes out (the count
    /// is ceil(inputs * L / M)), then resets for a new stream.
    public func flush() -> [Float] {
        if up == down { return [] }
        let total = (inputCount.multipliedReportingOverflow(by: up).partialValue + down - 1) / down
        let wanted = max(0, total - outputCount)
        let out = process([Float](repeating: 0, count: stride + halfTaps + 1))
        reset()
        return Array(out.prefix(wanted))
    }

    // MARK: - Kernel

    struct Kernel {
        var halfTaps: Int, stride: Int, rows: Int, exact: Bool, table: [Float]
    }

    private struct KernelKey: Hashable { var inputRate: Int, outputRate: Int }
    /// Kernels are shared between resamplers of the same rates (a process may run hundreds of
    /// streams from the same kind of source); arrays are copy-on-write, so sharing is free.
    private static let cache = Locked<[KernelKey: Kernel]>([:])

    static func kernel(inputRate: Int, outputRate: Int, up: Int) -> Kernel {
        let key = KernelKey(inputRate: inputRate, outputRate: outputRate)
        if let k = cache.withLock({ $0[key] }) { return k }
        let k = makeKernel(inputRate: inputRate, outputRate: outputRate, up: up)
        cache.withLock { c in
            if c.count >= 32 { c.removeAll() }
            c[key] = k
        }
        return k
    }

    static func makeKernel(inputRate: Int, outputRate: Int, up: Int) -> Kernel {
        // Cutoff in cycles per input sample.
        let cutoff = cutoffFraction * Double(min(inputRate, outputRate)) / Double(inputRate)
        let h = min(max(Int((zeroCrossings / (2 * cutoff)).rounded(.up)), 1), maxHalfTaps)
        let taps = 2 * h
        let stride = (taps + simdWidth - 1) / simdWidth * simdWidth
        let exact = up <= maxExactPhases
        let rows = exact ? up : interpolatedPhases
        let stored = exact ? rows : rows + 1
        var table = [Float](repeating: 0, count: stored * stride)
        let i0Beta = besselI0(kaiserBeta)
        var row = [Double](repeating: 0, count: taps)
        for p in 0..<stored {
            var sum = 0.0
            for m in 0..<taps {
                // Distance from the output instant to tap m's input sample.
                let tau = Double(p) / Double(rows) + Double(h - 1 - m)
                let x = tau / Double(h)
                row[m] = 0
                guard abs(x) < 1 else { continue }
                let arg = 2 * cutoff * tau
                let sinc = arg == 0 ? 1.0 : sin(Double.pi * arg) / (Double.pi * arg)
                let window = besselI0(kaiserBeta * (1 - x * x).squareRoot()) / i0Beta
                row[m] = sinc * window
                sum += row[m]
            }
            // Each phase passes DC at exactly unity gain, so no ripple at the phase rate.
            for m in 0..<taps { table[p * stride + m] = Float(sum == 0 ? 0 : row[m] / sum) }
        }
        return Kernel(halfTaps: h, stride: stride, rows: rows, exact: exact, table: table)
    }

    static func gcd(_ a: Int, _ b: Int) -> Int {
        var (a, b) = (a, b)
        while b != 0 { (a, b) = (b, a % b) }
        return a
    }

    /// The modified Bessel function of the first kind, order 0 (for the Kaiser window).
    static func besselI0(_ x: Double) -> Double {
        var sum = 1.0
        var term = 1.0
        let half = x / 2
        for k in 1..<60 {
            term *= (half / Double(k)) * (half / Double(k))
            sum += term
            if term < sum * 1e-14 { break }
        }
        return sum
    }
}
