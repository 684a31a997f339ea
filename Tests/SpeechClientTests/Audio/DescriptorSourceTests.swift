#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import SpeechClient

/// A pipe whose write end the test holds; the read end is what the source reads.
final class TestPipe {
    let readFD: Int32
    private(set) var writeFD: Int32
    init() {
        var fds: [Int32] = [-1, -1]
        precondition(pipe(&fds) == 0)
        readFD = fds[0]
        writeFD = fds[1]
    }
    func write(_ bytes: [UInt8]) {
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(writeFD, $0.baseAddress! + off, bytes.count - off) }
            precondition(n > 0)
            off += n
        }
    }
    func closeWriter() {
        if writeFD >= 0 { Glibc.close(writeFD) }
        writeFD = -1
    }
    deinit {
        closeWriter()
        Glibc.close(readFD)
    }
}

/// Reads until the end, keeping every block (empty ones mean "nothing yet").
func readToEnd(_ source: DescriptorSource, block: Int = 1000) throws -> [Float] {
    var all: [Float] = []
    while let b = try source.read(maxFrames: block) { all += b }
    return all
}

@Suite struct WAVStreamHeaderTests {
    static let samples: [UInt8] = (0..<64).flatMap { AudioFixtures.le16(UInt16(truncatingIfNeeded: $0 * 311)) }

    /// The header as the file reader sees it and as the stream parser sees it, fed in pieces of
    /// every size from 1 byte: the same format, and the data begins at the same byte.
    @Test(arguments: [
        AudioFixtures.wav(data: samples),
        AudioFixtures.wav(channels: 2, rate: 44_100, data: samples, extraChunk: true),
        AudioFixtures.wav(bits: 24, data: Array(samples.prefix(63)), extensible: true),
        AudioFixtures.wav(tag: 3, bits: 32, data: samples, fmtExtra: 3),
        AudioFixtures.wav(data: samples, declaredDataSize: 0xFFFF_FFFF),
    ])
    func streamedHeaderMatchesTheFileReader(bytes: [UInt8]) throws {
        let file = WAVFileSource(bytes: bytes)
        try file.open()
        let expected = try #require(file.header)
        for piece in [1, 2, 7, 13, bytes.count] {
            var parser = WAVStreamHeader(name: "test")
            var buffer: [UInt8] = []
            var at = 0
            var result: WAVStreamHeader.Result?
            var offset = 0
            while result == nil && offset < bytes.count {
                buffer += bytes[offset..<min(offset + piece, bytes.count)]
                offset += piece
                let (taken, r) = try parser.take(buffer, from: at)
                at += taken
                result = r
            }
            let got = try #require(result)
            #expect(got.format == expected.format)
            #expect(got.kind == expected.kind)
            #expect(got.blockAlign == expected.blockAlign)
            #expect(at == expected.dataOffset)
        }
    }

    @Test func placeholderSizesMeanToTheEnd() throws {
        for size: UInt32 in [0, 0xFFFF_FFFF, 0x7FFF_F000] {
            var parser = WAVStreamHeader(name: "t")
            let r = try parser.take(AudioFixtures.wav(data: [1, 2], declaredDataSize: size), from: 0).result
            #expect(r?.dataBytes == nil)
        }
        var parser = WAVStreamHeader(name: "t")
        #expect(try parser.take(AudioFixtures.wav(data: [1, 2, 3, 4]), from: 0).result?.dataBytes == 4)
    }

    /// A streaming RF64 writer leaves ds64's sizes at 0: to the end of the stream, not empty.
    @Test func anRF64StreamWithAnEmptyDs64IsReadToTheEnd() throws {
        let wav = AudioFixtures.wav(data: [1, 2])
        let fmtAndData = Array(wav[12...])  // "fmt " ... "data" size payload
        var rf64 = Array("RF64".utf8) + AudioFixtures.le32(0xFFFF_FFFF) + Array("WAVE".utf8)
            + Array("ds64".utf8) + AudioFixtures.le32(28) + [UInt8](repeating: 0, count: 28) + fmtAndData
        // The data chunk's own size: the RF64 placeholder.
        let dataAt = rf64.count - 2 - 4
        rf64.replaceSubrange(dataAt..<dataAt + 4, with: AudioFixtures.le32(0xFFFF_FFFF))
        var parser = WAVStreamHeader(name: "t")
        let r = try parser.take(rf64, from: 0)
        #expect(r.result != nil && r.result?.dataBytes == nil)
    }

    /// An RF64 stream whose data chunk holds the low 32 bits of the ds64 size (as some writers
    /// put it) declares the ds64 size: it stopped at the low bits. Zeros after the header (a
    /// damaged or pre-allocated stream) are refused after 1,024 empty chunks, as in a file:
    /// they were read for ever.
    @Test func anRF64StreamWithTheLowBitsOfItsSizeAndZerosBeforeTheDataAreHandled() throws {
        let real = (1 << 32) + 1_000
        let wav = AudioFixtures.wav(data: [1, 2])
        var rf64 = Array("RF64".utf8) + AudioFixtures.le32(0xFFFF_FFFF) + Array("WAVE".utf8)
            + Array("ds64".utf8) + AudioFixtures.le32(28) + [UInt8](repeating: 0, count: 8)
            + AudioFixtures.le32(UInt32(truncatingIfNeeded: real)) + AudioFixtures.le32(UInt32(truncatingIfNeeded: real >> 32))
            + [UInt8](repeating: 0, count: 12) + Array(wav[12...])
        let dataAt = rf64.count - 2 - 4
        rf64.replaceSubrange(dataAt..<dataAt + 4, with: AudioFixtures.le32(UInt32(truncatingIfNeeded: real)))
        var parser = WAVStreamHeader(name: "t")
        #expect(try parser.take(rf64, from: 0).result?.dataBytes == real)

        var zeros = WAVStreamHeader(name: "t")
        let head = Array(AudioFixtures.wav(data: [])[..<12])
        #expect(throws: SpeechClientError.self) {
            var fed = try zeros.take(head, from: 0).taken
            #expect(fed == 12)
            for _ in 0..<2_000 { fed += try zeros.take([UInt8](repeating: 0, count: 8), from: 0).taken }
        }
    }

    /// A WAV stream that ends before the data its header declares: the source says what is
    /// missing (the client logs it as a warning, as for a cut-short file). It ended as if whole.
    @Test func aWAVStreamEndingShortOfItsDeclaredSizeSaysSo() throws {
        let pipe = TestPipe()
        var wav = AudioFixtures.wav(data: [UInt8](repeating: 1, count: 3_200))
        let sizeAt = wav.count - 3_200 - 4
        wav.replaceSubrange(sizeAt..<sizeAt + 4, with: AudioFixtures.le32(32_000 + 3_200))  // 1 s more declared
        pipe.write(wav)
        pipe.closeWriter()
        let source = DescriptorSource(fd: pipe.readFD, raw: nil)
        try source.open()
        #expect(try readToEnd(source).count == 1_600)
        #expect(source.shortfall?.contains("its last 1.0 s are missing") == true, "\(source.shortfall ?? "nil")")
        let whole = TestPipe()
        whole.write(AudioFixtures.wav(data: [UInt8](repeating: 1, count: 3_200)))
        whole.closeWriter()
        let complete = DescriptorSource(fd: whole.readFD, raw: nil)
        try complete.open()
        _ = try readToEnd(complete)
        #expect(complete.shortfall == nil)
    }

    /// A chunk before the data that claims a gigabyte is skipped as it streams, not buffered:
    /// the parser asks for nothing more than the bytes it is given.
    @Test func aHugeChunkIsSkippedWithoutBuffering() throws {
        var parser = WAVStreamHeader(name: "t")
        let head = Array("RIFF".utf8) + AudioFixtures.le32(0xFFFF_FFFF) + Array("WAVE".utf8)
            + Array("JUNK".utf8) + AudioFixtures.le32(1 << 30)
        let first = try parser.take(head, from: 0)
        #expect(first.taken == head.count && first.result == nil)
        let filler = [UInt8](repeating: 0, count: 1 << 20)
        #expect(try parser.take(filler, from: 0).taken == filler.count)
        #expect(parser.consumed == head.count + filler.count)
    }

    @Test(arguments: [
        (Array("ID3\u{3}\0\0\0\0\0\0\0\0".utf8), "an MP3 file"),
        (Array("OggS\0\u{2}\0\0\0\0\0\0".utf8), "an Ogg file"),
        (Array("hello world, this is text".utf8), "not a RIFF file"),
        (Array("RIFF\0\0\0\0AVI LIST".utf8), "not WAVE"),
        (Array("RIFF\0\0\0\0WAVEdata\u{4}\0\0\0".utf8), "data chunk before the fmt chunk"),
        (AudioFixtures.wav(bits: 8, data: [1, 2]), "8-bit PCM samples are not supported"),
    ])
    func badStreamsAreNamed(bytes: [UInt8], why: String) throws {
        var parser = WAVStreamHeader(name: "standard input")
        let error = #expect(throws: SpeechClientError.self) { try parser.take(bytes, from: 0) }
        #expect(error?.code == .audio)
        #expect(error?.message.hasPrefix("WAV stream (standard input): ") == true)
        #expect(error?.message.contains(why) == true, "\(error?.message ?? "")")
    }
}

@Suite struct DescriptorSourceTests {
    @Test func aWAVStreamArrivingInPiecesIsReadWhole() throws {
        let samples = (0..<4000).map { Int16(truncatingIfNeeded: $0 * 7) }
        let bytes = AudioFixtures.wav(channels: 2, rate: 8000, data: samples.flatMap { AudioFixtures.le16(UInt16(bitPattern: $0)) },
                                      declaredDataSize: 0xFFFF_FFFF)
        let pipe = TestPipe()
        let source = DescriptorSource(fd: pipe.readFD, raw: nil)
        try source.open()
        // Odd pieces: the header and frames are split anywhere.
        var got: [Float] = []
        var offset = 0
        while offset < bytes.count {
            let end = min(offset + 333, bytes.count)
            pipe.write(Array(bytes[offset..<end]))
            offset = end
            got += try source.read(maxFrames: 100) ?? []
        }
        pipe.closeWriter()
        got += try readToEnd(source)
        #expect(source.format == AudioFormat(sampleRate: 8000, channels: 2))
        #expect(got == samples.map { Float($0) / 32768 })
        #expect(source.ended)
    }

    @Test func aDeclaredSizeEndsTheAudioBeforeTrailingChunks() throws {
        let pipe = TestPipe()
        let source = DescriptorSource(fd: pipe.readFD, raw: nil)
        pipe.write(AudioFixtures.wav(data: [0, 0x40, 0, 0xC0], trailingChunk: true))
        // The writer stays open: the declared size alone ends the audio.
        #expect(try readToEnd(source) == [0.5, -0.5])
    }

    @Test func rawFramesKeepAPartialFrameForTheNextRead() throws {
        let pipe = TestPipe()
        let source = DescriptorSource(fd: pipe.readFD, raw: AudioFormat(sampleRate: 16_000, channels: 2))
        pipe.write([0, 0x40, 0])  // a frame and a half of a sample
        #expect(try source.read(maxFrames: 10) == [])
        pipe.write([0xC0])
        #expect(try source.read(maxFrames: 10) == [0.5, -0.5])
        pipe.closeWriter()
        #expect(try source.read(maxFrames: 10) == nil)
    }

    /// A silent pipe: `read` comes back empty within its poll slice, so the client can take a
    /// stop or a free; it never blocks on the descriptor.
    @Test func aSilentPipeReturnsEmptyInsteadOfBlocking() throws {
        let pipe = TestPipe()
        let source = DescriptorSource(fd: pipe.readFD, raw: nil)
        for _ in 0..<3 { #expect(try source.read(maxFrames: 100) == []) }
        #expect(!source.ended)
    }

    @Test func rawPCMThatIsAWAVStreamIsRefused() throws {
        let pipe = TestPipe()
        let source = DescriptorSource(fd: pipe.readFD, raw: AudioFormat(sampleRate: 16_000, channels: 1))
        pipe.write(AudioFixtures.wav(data: [1, 2]))
        let error = #expect(throws: SpeechClientError.self) { try readToEnd(source) }
        #expect(error?.message.contains("starts with a WAV header: give sample rate 0") == true)
    }

    @Test func aStreamEndingInsideTheHeaderIsNamed() throws {
        for bytes in [[UInt8](), Array(AudioFixtures.wav(data: [1, 2]).prefix(30))] {
            let pipe = TestPipe()
            let source = DescriptorSource(fd: pipe.readFD, raw: nil)
            pipe.write(bytes)
            pipe.closeWriter()
            let error = #expect(throws: SpeechClientError.self) { try readToEnd(source) }
            #expect(error?.message.contains(bytes.isEmpty ? "ended before any audio" : "ended inside the WAV header, after 30 bytes") == true,
                    "\(error?.message ?? "")")
        }
    }

    /// The application closed the descriptor under a running context: an audio error naming it,
    /// not a loop on an invalid descriptor.
    @Test func aDescriptorClosedWhileReadIsAnError() throws {
        var fds: [Int32] = [-1, -1]
        #expect(pipe(&fds) == 0)
        defer { Glibc.close(fds[1]) }
        let source = DescriptorSource(fd: fds[0], raw: nil)
        Glibc.close(fds[0])
        let error = #expect(throws: SpeechClientError.self) { try source.read(maxFrames: 10) }
        #expect(error?.code == .audio)
        #expect(error?.message == "audio fd \(fds[0]) was closed while the client was reading it")
    }

    @Test func descriptorsThatCannotBeReadAreRefusedUpFront() throws {
        let pipe = TestPipe()
        let notOpen = #expect(throws: SpeechClientError.self) { try DescriptorSource.check(fd: 987) }
        #expect(notOpen?.message == "audio descriptor 987 (fd 987) is not open")
        let writeOnly = #expect(throws: SpeechClientError.self) { try DescriptorSource.check(fd: pipe.writeFD) }
        #expect(writeOnly?.message.contains("is open for writing only") == true)
        try DescriptorSource.check(fd: pipe.readFD)
    }

    @Test func optionsCheckTheDescriptorFormat() throws {
        var o = ClientOptions()
        #expect(throws: SpeechClientError.self) { try o.setAudio(.descriptor(fd: -1, sampleRate: 0, channels: 0)) }
        #expect(throws: SpeechClientError.self) { try o.setAudio(.descriptor(fd: 0, sampleRate: 0, channels: 1)) }
        #expect(throws: SpeechClientError.self) { try o.setAudio(.descriptor(fd: 0, sampleRate: 7999, channels: 1)) }
        #expect(throws: SpeechClientError.self) { try o.setAudio(.descriptor(fd: 0, sampleRate: 16_000, channels: 0)) }
        try o.setAudio(.descriptor(fd: 0, sampleRate: 0, channels: 0))
        try o.setAudio(.descriptor(fd: 0, sampleRate: 48_000, channels: 8))
    }
}
