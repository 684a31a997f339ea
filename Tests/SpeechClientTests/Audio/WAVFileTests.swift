import Testing
@testable import SpeechClient
#if canImport(Glibc)
import Glibc
#endif

/// Builds WAV bytes: a RIFF header, optional extra chunks, fmt and data.
func wavBytes(tag: UInt16 = 1, channels: UInt16 = 1, rate: UInt32 = 16_000, bits: UInt16 = 16,
              blockAlign: UInt16? = nil, data: [UInt8], extensible: Bool = false, extraChunk: Bool = false,
              declaredDataSize: UInt32? = nil) -> [UInt8] {
    func le16(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }
    func le32(_ v: UInt32) -> [UInt8] { [UInt8(v & 0xFF), UInt8((v >> 8) & 0xFF), UInt8((v >> 16) & 0xFF), UInt8(v >> 24)] }
    let align = blockAlign ?? channels * bits / 8
    var fmt = le16(extensible ? 0xFFFE : tag) + le16(channels) + le32(rate) + le32(rate * UInt32(align)) + le16(align) + le16(bits)
    if extensible { fmt += le16(22) + le16(bits) + le32(0) + le16(tag) + [UInt8](repeating: 0xAA, count: 14) }
    var body = Array("WAVE".utf8)
    if extraChunk { body += Array("LIST".utf8) + le32(3) + [1, 2, 3, 0] }
    body += Array("fmt ".utf8) + le32(UInt32(fmt.count)) + fmt
    body += Array("data".utf8) + le32(declaredDataSize ?? UInt32(data.count)) + data
    return Array("RIFF".utf8) + le32(UInt32(body.count)) + body
}

func writeTemp(_ bytes: [UInt8], name: String) -> String {
    let path = temporaryDirectory() + "/" + name
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    close(fd)
    return path
}

func readAll(_ source: WAVFileSource) throws -> [Float] {
    var all: [Float] = []
    while let block = try source.read(maxFrames: 3) { all += block }
    return all
}

@Suite struct WAVFileTests {
    @Test func decodesEveryFormat() throws {
        let cases: [(UInt16, UInt16, [UInt8], [Float], Bool)] = [
            (1, 16, [0x00, 0x40, 0x00, 0xC0], [0.5, -0.5], false),
            (1, 24, [0x00, 0x00, 0x40, 0x00, 0x00, 0xC0], [0.5, -0.5], false),
            (1, 32, [0, 0, 0, 0x40, 0, 0, 0, 0xC0], [0.5, -0.5], false),
            (3, 32, [0, 0, 0, 0x3F, 0, 0, 0, 0xBF], [0.5, -0.5], false),
            (3, 32, [0, 0, 0, 0x3F, 0, 0, 0, 0xBF], [0.5, -0.5], true),   // extensible float
            (1, 16, [0x00, 0x40, 0x00, 0xC0], [0.5, -0.5], true),          // extensible PCM
        ]
        for (i, (tag, bits, data, expected, ext)) in cases.enumerated() {
            let path = writeTemp(wavBytes(tag: tag, bits: bits, data: data, extensible: ext, extraChunk: i % 2 == 0), name: "f\(i).wav")
            let source = WAVFileSource(path: path)
            try source.open()
            #expect(source.format == AudioFormat(sampleRate: 16_000, channels: 1))
            #expect(try readAll(source) == expected, "case \(i)")
        }
    }

    @Test func stereo44kAndStreamingSizeAndTruncatedData() throws {
        let stereo = writeTemp(wavBytes(channels: 2, rate: 44_100, data: [0, 0x40, 0, 0xC0, 0, 0x20, 0, 0xE0]), name: "st.wav")
        let s = WAVFileSource(path: stereo)
        try s.open()
        #expect(s.format == AudioFormat(sampleRate: 44_100, channels: 2))
        #expect(try readAll(s) == [0.5, -0.5, 0.25, -0.25])
        // 0xFFFFFFFF: a recorder that never wrote the size; read to the end of the file.
        let streaming = writeTemp(wavBytes(data: [0, 0x40, 0, 0x40], declaredDataSize: 0xFFFF_FFFF), name: "stream.wav")
        let t = WAVFileSource(path: streaming)
        try t.open()
        #expect(try readAll(t).count == 2)
        // Declared 100 bytes, 5 present: the two whole frames are read, the odd byte dropped.
        let cut = writeTemp(wavBytes(data: [0, 0x40, 0, 0x40, 7], declaredDataSize: 100), name: "cut.wav")
        let u = WAVFileSource(path: cut)
        try u.open()
        #expect(try readAll(u).count == 2)
    }

    @Test(arguments: [
        ("empty", [UInt8]()),
        ("text", Array("hello, this is not audio at all".utf8)),
        ("riff-not-wave", Array("RIFF\u{4}\0\0\0AVI ".utf8)),
        ("no-fmt", Array("RIFF\u{4}\0\0\0WAVE".utf8)),
        ("mp3-tag", wavBytes(tag: 0x55, data: [1, 2])),
        ("8-bit", wavBytes(bits: 8, data: [1, 2])),
        ("zero-channels", wavBytes(channels: 0, data: [1, 2])),
        ("bad-rate", wavBytes(rate: 5, data: [1, 2])),
        ("block-align", wavBytes(blockAlign: 7, data: [1, 2])),
        ("truncated-data", wavBytes(data: [], declaredDataSize: 4000)),
        ("huge-chunk", Array("RIFF\u{20}\0\0\0WAVEjunk".utf8) + [0xFF, 0xFF, 0xFF, 0x7F]),
        ("truncated-fmt", Array(wavBytes(data: [1, 2]).prefix(30))),
    ])
    func malformedFilesAreAudioErrorsNamingTheFile(name: String, bytes: [UInt8]) {
        let path = writeTemp(bytes, name: name + ".wav")
        #expect {
            try WAVFileSource(path: path).open()
        } throws: {
            guard let e = $0 as? SpeechClientError else { return false }
            return e.code == .audio && e.message.contains(path)
        }
    }

    @Test func missingFileNamesThePath() {
        #expect { try WAVFileSource(path: "/nonexistent/x.wav").open() } throws: {
            ($0 as? SpeechClientError)?.message.contains("/nonexistent/x.wav") == true
        }
    }

    @Test func randomBytesNeverCrash() {
        var rng = SystemRandomNumberGenerator()
        let good = wavBytes(channels: 2, bits: 24, data: [UInt8](repeating: 1, count: 60))
        for i in 0..<300 {
            var bytes = good
            for _ in 0..<Int.random(in: 1...6, using: &rng) {
                bytes[Int.random(in: 0..<bytes.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
            }
            if i % 3 == 0 { bytes = Array(bytes.prefix(Int.random(in: 0...bytes.count, using: &rng))) }
            let s = WAVFileSource(path: writeTemp(bytes, name: "r\(i).wav"))
            if (try? s.open()) != nil { _ = try? readAll(s) }
        }
    }
}
