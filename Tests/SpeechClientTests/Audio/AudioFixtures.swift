@testable import SpeechClient
#if canImport(Glibc)
import Glibc
#endif

/// Helpers shared by the audio tests (namespaced so they cannot clash with other suites').
enum AudioFixtures {
    /// A fresh directory under /tmp for one test's files.
    static func directory() -> String {
        var template = Array("/tmp/spc-audio-XXXXXX".utf8CString)
        return template.withUnsafeMutableBufferPointer { buf in
            guard let base = buf.baseAddress, let p = mkdtemp(base) else { return "/tmp" }
            return String(cString: p)
        }
    }

    static func write(_ bytes: [UInt8], to path: String) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        close(fd)
    }

    static func writeTemp(_ bytes: [UInt8], name: String) -> String {
        let path = directory() + "/" + name
        write(bytes, to: path)
        return path
    }

    static func le16(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }
    static func le32(_ v: UInt32) -> [UInt8] { [UInt8(v & 0xFF), UInt8((v >> 8) & 0xFF), UInt8((v >> 16) & 0xFF), UInt8(v >> 24)] }

    /// The tail of KSDATAFORMAT_SUBTYPE_PCM / _IEEE_FLOAT after the 2-byte format tag.
    static let guidTail: [UInt8] = [0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71]

    /// WAV bytes: RIFF header, optional extra chunk (odd-sized, padded), fmt and data.
    static func wav(tag: UInt16 = 1, channels: UInt16 = 1, rate: UInt32 = 16_000, bits: UInt16 = 16,
                    blockAlign: UInt16? = nil, data: [UInt8], extensible: Bool = false, guid: [UInt8]? = nil,
                    extraChunk: Bool = false, fmtExtra: Int = 0, declaredDataSize: UInt32? = nil,
                    trailingChunk: Bool = false) -> [UInt8] {
        let align = blockAlign ?? UInt16(truncatingIfNeeded: Int(channels) * Int(bits) / 8)
        var fmt = le16(extensible ? 0xFFFE : tag) + le16(channels) + le32(rate)
            + le32(rate &* UInt32(align)) + le16(align) + le16(bits)
        if extensible { fmt += le16(22) + le16(bits) + le32(0) + le16(tag) + (guid ?? guidTail) }
        fmt += [UInt8](repeating: 0, count: fmtExtra)
        var body = Array("WAVE".utf8)
        if extraChunk { body += Array("LIST".utf8) + le32(3) + [1, 2, 3, 0] }
        body += Array("fmt ".utf8) + le32(UInt32(fmt.count)) + fmt + (fmt.count % 2 == 1 ? [0] : [])
        body += Array("data".utf8) + le32(declaredDataSize ?? UInt32(data.count)) + data
        if trailingChunk { body += (data.count % 2 == 1 ? [0] : []) + Array("id3 ".utf8) + le32(4) + [9, 9, 9, 9] }
        return Array("RIFF".utf8) + le32(UInt32(body.count)) + body
    }

    static func readAll(_ source: WAVFileSource, block: Int = 3) throws -> [Float] {
        var all: [Float] = []
        while let b = try source.read(maxFrames: block) { all += b }
        return all
    }

    static func sine(_ frequency: Double, rate: Int, seconds: Double, amplitude: Double = 0.5) -> [Float] {
        (0..<Int(Double(rate) * seconds)).map { Float(amplitude * sin(2 * Double.pi * frequency * Double($0) / Double(rate))) }
    }

    /// Least-squares fit of a sine at `frequency` over the middle half of `signal` (well past
    /// the filter's start-up); the SNR in dB of the fit against the residual (noise,
    /// distortion, aliases, and any timing error, since the fit has a free phase only).
    static func snr(_ signal: [Float], frequency: Double, rate: Int) -> Double {
        let lo = signal.count / 4, hi = signal.count * 3 / 4
        var ss = 0.0, cc = 0.0, sc = 0.0, ys = 0.0, yc = 0.0
        for n in lo..<hi {
            let w = 2 * Double.pi * frequency * Double(n) / Double(rate)
            let s = sin(w), c = cos(w), y = Double(signal[n])
            ss += s * s; cc += c * c; sc += s * c; ys += y * s; yc += y * c
        }
        let det = ss * cc - sc * sc
        let a = (ys * cc - yc * sc) / det, b = (yc * ss - ys * sc) / det
        var sig = 0.0, noise = 0.0
        for n in lo..<hi {
            let w = 2 * Double.pi * frequency * Double(n) / Double(rate)
            let fit = a * sin(w) + b * cos(w)
            sig += fit * fit
            let e = Double(signal[n]) - fit
            noise += e * e
        }
        return 10 * log10(sig / max(noise, 1e-30))
    }

    static func rms(_ x: ArraySlice<Float>) -> Double {
        (x.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(max(x.count, 1))).squareRoot()
    }

    static func isAudioError(_ error: any Error, naming name: String) -> Bool {
        guard let e = error as? SpeechClientError else { return false }
        return e.code == .audio && e.message.contains(name)
    }
}
