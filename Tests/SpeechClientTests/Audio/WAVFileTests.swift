import Synchronization
import Testing
@testable import SpeechClient
#if canImport(Glibc)
import Glibc
#endif

@Suite struct WAVFileTests {
    typealias F = AudioFixtures

    /// (format tag, bits, data bytes, expected samples, extensible)
    static let formats: [(UInt16, UInt16, [UInt8], [Float], Bool)] = [
        (1, 16, [0x00, 0x40, 0x00, 0xC0, 0xFF, 0x7F, 0x00, 0x80], [0.5, -0.5, 32767 / 32768, -1], false),
        (1, 24, [0x00, 0x00, 0x40, 0x00, 0x00, 0xC0, 0x01, 0x00, 0x00, 0x00, 0x00, 0x80], [0.5, -0.5, 1 / 8_388_608, -1], false),
        (1, 32, [0, 0, 0, 0x40, 0, 0, 0, 0xC0, 0, 0, 0, 0x80], [0.5, -0.5, -1], false),
        (3, 32, [0, 0, 0, 0x3F, 0, 0, 0, 0xBF, 0, 0, 0xC0, 0x7F, 0, 0, 0x80, 0x40], [0.5, -0.5, 0, 1], false), // NaN → 0, 4.0 clipped
        (1, 16, [0x00, 0x40, 0x00, 0xC0], [0.5, -0.5], true),
        (1, 24, [0x00, 0x00, 0x40, 0x00, 0x00, 0xC0], [0.5, -0.5], true),
        (1, 32, [0, 0, 0, 0x40, 0, 0, 0, 0xC0], [0.5, -0.5], true),
        (3, 32, [0, 0, 0, 0x3F, 0, 0, 0, 0xBF], [0.5, -0.5], true),
    ]

    @Test func decodesEverySupportedFormat() throws {
        for (i, (tag, bits, data, expected, ext)) in Self.formats.enumerated() {
            let path = F.writeTemp(F.wav(tag: tag, bits: bits, data: data, extensible: ext, extraChunk: i % 2 == 0,
                                         fmtExtra: i == 1 ? 2 : 0), name: "f\(i).wav")
            let source = WAVFileSource(path: path)
            try source.open()
            #expect(source.format == AudioFormat(sampleRate: 16_000, channels: 1))
            #expect(try F.readAll(source) == expected, "case \(i)")
            #expect(try source.read(maxFrames: 10) == nil)
            source.close()
            source.close()
        }
    }

    @Test func multichannelRatesAndValidate() throws {
        // 6 channels of 24-bit at 48 kHz: frame k, channel c holds (k*6+c) * 256.
        var data: [UInt8] = []
        for v in 0..<60 { data += [0, UInt8(v), 0] }
        let path = F.writeTemp(F.wav(channels: 6, rate: 48_000, bits: 24, data: data), name: "six.wav")
        let h = try WAVFileSource.validate(path: path)
        #expect(h.format == AudioFormat(sampleRate: 48_000, channels: 6))
        #expect(h.kind == .int24 && h.blockAlign == 18 && h.frames == 10)
        let s = WAVFileSource(path: path)
        try s.open()
        #expect(try F.readAll(s, block: 4) == (0..<60).map { Float($0 * 256) / 8_388_608 })
        for rate: UInt32 in [1000, 8000, 11_025, 44_100, 192_000, 384_000] {
            let p = F.writeTemp(F.wav(channels: 32, rate: rate, data: [UInt8](repeating: 0, count: 64)), name: "r.wav")
            #expect(try WAVFileSource.validate(path: p).format == AudioFormat(sampleRate: Int(rate), channels: 32))
        }
    }

    @Test func lyingSizesAndTrailingChunks() throws {
        // 0xFFFFFFFF and 0: a streaming recorder that never wrote the size; read to the end.
        for size: UInt32 in [0xFFFF_FFFF, 0] {
            let p = F.writeTemp(F.wav(data: [0, 0x40, 0, 0x40], declaredDataSize: size), name: "stream.wav")
            let t = WAVFileSource(path: p)
            try t.open()
            #expect(try F.readAll(t) == [0.5, 0.5])
            #expect(t.header?.missingBytes == 0)  // a placeholder: nothing is said missing
        }
        // Declared 100 bytes, 5 present: the two whole frames are read, the odd byte dropped,
        // and the 95 bytes the copy lacks are counted (the client warns with them).
        let cut = F.writeTemp(F.wav(data: [0, 0x40, 0, 0x40, 7], declaredDataSize: 100), name: "cut.wav")
        #expect(try WAVFileSource.validate(path: cut).dataBytes == 4)
        #expect(try WAVFileSource.validate(path: cut).missingBytes == 95)
        // A chunk after the data is not audio.
        let tail = F.writeTemp(F.wav(data: [0, 0x40, 0, 0xC0], trailingChunk: true), name: "tail.wav")
        let u = WAVFileSource(path: tail)
        try u.open()
        #expect(try F.readAll(u) == [0.5, -0.5])
        // An odd data size (1 frame of 3 channels x 8... not supported; 24-bit mono, 1 frame = 3 bytes) with its pad byte.
        let odd = F.writeTemp(F.wav(bits: 24, data: [0, 0, 0x40], trailingChunk: true), name: "odd.wav")
        #expect(try WAVFileSource.validate(path: odd).frames == 1)
    }

    /// RF64 as ffmpeg writes it (`-rf64 always`): ds64 sizes of 0 until the file is closed, so a
    /// recording killed before its end has them still. Read to the end, not as empty (it was:
    /// every word of the file lost, with no error). A real ds64 size is kept to; a cut copy is
    /// counted missing.
    @Test func anRF64FileWhoseDs64WasNeverFilledInIsReadToTheEnd() throws {
        func rf64(ds64DataSize: UInt64, data: [UInt8]) -> [UInt8] {
            let fmtAndData = Array(F.wav(data: data)[12...])  // "fmt " ... "data" size payload
            var bytes = Array("RF64".utf8) + F.le32(0xFFFF_FFFF) + Array("WAVE".utf8) + Array("ds64".utf8) + F.le32(28)
                + [UInt8](repeating: 0, count: 8)  // the RIFF size
                + F.le32(UInt32(truncatingIfNeeded: ds64DataSize)) + F.le32(UInt32(truncatingIfNeeded: ds64DataSize >> 32))
                + [UInt8](repeating: 0, count: 12) + fmtAndData
            let dataAt = bytes.count - data.count - 4
            bytes.replaceSubrange(dataAt..<dataAt + 4, with: F.le32(0xFFFF_FFFF))
            return bytes
        }
        let audio: [UInt8] = [0, 0x40, 0, 0xC0, 0, 0x40]
        for (ds64, expected, missing) in [(UInt64(0), [Float](arrayLiteral: 0.5, -0.5, 0.5), 0),
                                          (0xFFFF_FFFF_FFFF_FFFF, [0.5, -0.5, 0.5], 0),
                                          (0x7FFF_FFFF_0000_0000, [0.5, -0.5, 0.5], 0),
                                          (4, [0.5, -0.5], 0),
                                          (10, [0.5, -0.5, 0.5], 4)] {
            let source = WAVFileSource(bytes: rf64(ds64DataSize: ds64, data: audio), name: "rf64")
            try source.open()
            #expect(try F.readAll(source) == expected, "ds64 data size \(ds64)")
            #expect(source.header?.missingBytes == missing, "ds64 data size \(ds64)")
            let p = F.writeTemp(rf64(ds64DataSize: ds64, data: audio), name: "rf64-\(ds64).wav")
            #expect(try WAVFileSource.validate(path: p).dataBytes == expected.count * 2, "ds64 data size \(ds64)")
        }
    }

    /// A data size that wrapped at 4 GiB (a writer's 32-bit arithmetic: 37 hours at 16 kHz) was
    /// trusted: only the remainder past 4 GiB was read, the rest dropped without a word. Also an
    /// RF64 file whose data chunk holds the low 32 bits of the ds64 size, not 0xFFFFFFFF. Sparse
    /// files: 4 GiB that take no disk space.
    @Test func aSizeThatWrappedAt4GiBIsReadWhole() throws {
        let real = (1 << 32) + 32_000
        let header = Array(F.wav(data: [], declaredDataSize: UInt32(truncatingIfNeeded: real)).dropLast(0))
        let plain = F.writeTemp(header, name: "wrapped.wav")
        #expect(truncate(plain, off_t(header.count + real)) == 0)
        defer { unlink(plain) }
        #expect(try WAVFileSource.validate(path: plain).dataBytes == real)
        // A real size followed by a short trailing chunk is still kept to.
        let rf64Header = Array("RF64".utf8) + F.le32(0xFFFF_FFFF) + Array("WAVE".utf8) + Array("ds64".utf8) + F.le32(28)
            + [UInt8](repeating: 0, count: 8) + F.le32(UInt32(truncatingIfNeeded: real)) + F.le32(UInt32(truncatingIfNeeded: real >> 32))
            + [UInt8](repeating: 0, count: 12) + Array(header[12...])
        let rf64 = F.writeTemp(rf64Header, name: "rf64-low-bits.wav")
        #expect(truncate(rf64, off_t(rf64Header.count + real + 1000)) == 0)  // 1000 bytes of something after it
        defer { unlink(rf64) }
        let h = try WAVFileSource.validate(path: rf64)
        #expect(h.dataBytes == real && h.missingBytes == 0, "\(h)")
    }

    /// arecord's and sox's placeholder sizes (0x7FFFFFFF, 0x7FFFF000) in a file saved from their
    /// pipe output: past 2 GiB comes more audio, and the file is read to its end. Taken as a
    /// size, a recording over 2 GiB (18 h at 16 kHz, 3 h at 48 kHz stereo) stopped there without
    /// a word. A real size of that order followed by chunks (a LIST at the end) is kept to.
    /// Sparse files: gigabytes that take no disk space.
    @Test func aPipesPlaceholderSizeInAFileLongerThan2GiBIsReadToTheEnd() throws {
        for placeholder: UInt32 in [0x7FFF_FFFF, 0x7FFF_F000] {
            let header = F.wav(data: [], declaredDataSize: placeholder)
            let path = F.writeTemp(header, name: "placeholder-\(placeholder).wav")
            defer { unlink(path) }
            let audio = Int(placeholder) + 1 + 64_000  // 2 s more at 16 kHz (and a frame's odd byte)
            #expect(truncate(path, off_t(header.count + audio)) == 0)
            let h = try WAVFileSource.validate(path: path)
            #expect(h.dataBytes == audio - audio % 2 && h.missingBytes == 0, "\(h)")
        }
        // A real size from 0x7FFF0000 on, then a LIST chunk and an odd-sized id3 chunk with
        // its pad byte that end the file: the audio ends where the data chunk says.
        let real = 0x7FFF_0000 + 3_200
        let header = F.wav(data: [], declaredDataSize: UInt32(real))
        let path = F.writeTemp(header, name: "real-2gib.wav")
        defer { unlink(path) }
        #expect(truncate(path, off_t(header.count + real)) == 0)
        let trailer = Array("LIST".utf8) + F.le32(4) + Array("INFO".utf8) + Array("id3 ".utf8) + F.le32(3) + [1, 2, 3, 0]
        if let f = fopen(path, "ab") {
            _ = trailer.withUnsafeBytes { fwrite($0.baseAddress, 1, trailer.count, f) }
            fclose(f)
        }
        let h = try WAVFileSource.validate(path: path)
        #expect(h.dataBytes == real, "\(h)")
        // Also: an odd size (24-bit mono) whose pad byte the writer left out, then an XMP chunk
        // (`_PMX`); and a size that wrapped at 4 GiB to 0x7FFF0000 and more, then a LIST.
        for (name, size, pad, chunkID) in [("odd-no-pad", 0x7FFF_0001 + 2 * 3, 0, "_PMX"), ("wrapped", (1 << 32) + 0x7FFF_0000 + 3_200, 0, "LIST")] {
            let head = F.wav(channels: 1, bits: 24, data: [], declaredDataSize: UInt32(truncatingIfNeeded: size))
            let p = F.writeTemp(head, name: "trailing-\(name).wav")
            defer { unlink(p) }
            #expect(truncate(p, off_t(head.count + size + pad)) == 0)
            let chunk = Array(chunkID.utf8) + F.le32(5) + [1, 2, 3, 4, 5, 0]
            if let f = fopen(p, "ab") {
                _ = chunk.withUnsafeBytes { fwrite($0.baseAddress, 1, chunk.count, f) }
                fclose(f)
            }
            let h = try WAVFileSource.validate(path: p)
            #expect(h.dataBytes == size - size % 3, "\(name): \(h)")
        }
    }

    /// A file whose data chunk holds no frame opened a context that sent nothing and ended,
    /// without an error; zeros after the header read as empty chunks, 8 bytes at a time (a
    /// damaged file of gigabytes took minutes to refuse). Both are named errors now.
    @Test func noAudioAndDamagedChunkListsAreNamedErrors() throws {
        for (name, bytes, said) in [
            ("empty-data", F.wav(data: []), "no audio: the data chunk is empty"),
            ("placeholder-empty", F.wav(data: [], declaredDataSize: 0xFFFF_FFFF), "no audio: the data chunk is empty"),
            ("one-byte", F.wav(data: [7], declaredDataSize: 1), "less than one frame (2 bytes)"),
            ("zeros", Array(F.wav(data: []).dropLast(8)) + [UInt8](repeating: 0, count: 8 * 1100), "more than 1024 chunks"),
        ] {
            let path = F.writeTemp(bytes, name: name + ".wav")
            #expect { try WAVFileSource.validate(path: path) } throws: { ($0 as? SpeechClientError)?.message.contains(said) == true }
        }
    }

    /// A file of a few seconds read in blocks equals what was written, block size irrelevant.
    @Test func longFileStreamsInBlocks() throws {
        let n = 3 * 44_100 * 2
        var data = [UInt8](repeating: 0, count: n * 2)
        for i in 0..<n {
            let v = Int16(truncatingIfNeeded: i &* 7919)
            data[2 * i] = UInt8(truncatingIfNeeded: v)
            data[2 * i + 1] = UInt8(truncatingIfNeeded: v >> 8)
        }
        let path = F.writeTemp(F.wav(channels: 2, rate: 44_100, data: data), name: "long.wav")
        let s = WAVFileSource(path: path)
        try s.open()
        var got: [Float] = []
        while let b = try s.read(maxFrames: 4410) {
            #expect(b.count <= 4410 * 2)
            got += b
        }
        #expect(got.count == n)
        #expect(got == (0..<n).map { Float(Int16(truncatingIfNeeded: $0 &* 7919)) / 32768 })
        // A caller asking for everything gets bounded blocks.
        try s.open()
        #expect(try s.read(maxFrames: Int.max)?.count == WAVFileSource.maxFramesPerRead * 2)
    }

    /// This thread's read system calls so far (`syscr` of /proc/thread-self/io).
    static func readCalls() -> Int? {
        guard let f = fopen("/proc/thread-self/io", "r") else { return nil }
        defer { fclose(f) }
        var line = [CChar](repeating: 0, count: 128)
        while fgets(&line, Int32(line.count), f) != nil {
            let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if text.hasPrefix("syscr:") { return Int(text.dropFirst(6).filter { $0.isNumber }) }
        }
        return nil
    }

    /// A file is read from disk in 64 KB blocks, not in stdio's 4 KB ones: a fast file's every
    /// chunk was one system call (stop 33 asked stdio for 64 KB with a null buffer, which glibc
    /// ignores). 1 MB read 100 ms at a time: 16 reads, not 256.
    @Test func aFileIsReadFromDiskInLargeBlocks() throws {
        let bytes = 1 << 20
        let path = F.writeTemp(F.wav(data: [UInt8](repeating: 7, count: bytes)), name: "blocks.wav")
        let s = WAVFileSource(path: path)
        try s.open()
        let before = try #require(Self.readCalls())
        var samples = 0
        while let b = try s.readInt16(maxFrames: 1_600) { samples += b.count }
        let calls = try #require(Self.readCalls()) - before
        #expect(samples == bytes / 2)
        #expect(calls <= bytes / WAVFileSource.readBlockBytes + 2, "\(calls) read calls for 1 MB")
        s.close()
    }

    static let riff = Array("RIFF".utf8), wave = Array("WAVE".utf8)

    static let malformed: [(String, [UInt8])] = [
        ("empty", [UInt8]()),
        ("text", Array("hello, this is not audio at all".utf8)),
        ("riff-only", Array("RIFF".utf8)),
        ("riff-not-wave", riff + [4, 0, 0, 0] + Array("AVI ".utf8)),
        ("no-fmt", riff + [4, 0, 0, 0] + wave),
        ("no-data", Array(F.wav(data: []).dropLast(8))),
        ("data-before-fmt", riff + [0, 0, 0, 0] + wave + Array("data".utf8) + [2, 0, 0, 0, 1, 2]),
        ("truncated-header", Array(F.wav(data: [1, 2]).prefix(30))),
        ("mp3-tag", F.wav(tag: 0x55, data: [1, 2])),
        ("8-bit", F.wav(bits: 8, data: [1, 2])),
        ("64-bit-float", F.wav(tag: 3, bits: 64, data: [UInt8](repeating: 0, count: 8))),
        ("extensible-bad-guid", F.wav(bits: 16, data: [1, 2], extensible: true, guid: [UInt8](repeating: 0xAA, count: 14))),
        ("extensible-adpcm", F.wav(tag: 2, bits: 16, data: [1, 2], extensible: true)),
        ("zero-channels", F.wav(channels: 0, data: [1, 2])),
        ("33-channels", F.wav(channels: 33, data: [UInt8](repeating: 0, count: 66))),
        ("rate-5", F.wav(rate: 5, data: [1, 2])),
        ("rate-huge", F.wav(rate: 0xFFFF_FFFF, data: [1, 2])),
        ("block-align", F.wav(blockAlign: 7, data: [1, 2])),
        ("truncated-data", F.wav(data: [], declaredDataSize: 4000)),
        ("one-byte-of-a-frame", F.wav(bits: 24, data: [1], declaredDataSize: 3)),
        ("huge-chunk", riff + [0x20, 0, 0, 0] + wave + Array("junk".utf8) + [0xFF, 0xFF, 0xFF, 0xFF]),
        ("huge-fmt", riff + [0x20, 0, 0, 0] + wave + Array("fmt ".utf8) + [0xFF, 0xFF, 0xFF, 0xFF] + [1, 0, 1, 0]),
        ("tiny-fmt", riff + [0x20, 0, 0, 0] + wave + Array("fmt ".utf8) + [4, 0, 0, 0, 1, 0, 1, 0]),
    ]

    @Test(arguments: malformed)
    func malformedFilesAreAudioErrorsNamingTheFile(name: String, bytes: [UInt8]) {
        let path = F.writeTemp(bytes, name: name + ".wav")
        #expect { try WAVFileSource(path: path).open() } throws: { F.isAudioError($0, naming: path) }
        #expect { try WAVFileSource.validate(path: path) } throws: { F.isAudioError($0, naming: path) }
    }

    /// A named pipe given as a file path is refused at once: `fopen` on it waited for a writer
    /// forever (the client's worker with it). A watchdog opens the pipe's other end after 5 s so
    /// that a regression fails instead of hanging the suite.
    @Test func aNamedPipeOrADirectoryIsRefusedWithoutWaiting() throws {
        let dir = F.directory()
        let fifo = dir + "/pipe.wav"
        #expect(mkfifo(fifo, 0o600) == 0)
        let opened = Atomic<Bool>(false)
        let watchdogOpened = Atomic<Bool>(false)
        let watchdog = try NativeThread(name: "fifo-watchdog") {
            for _ in 0..<500 where !opened.load(ordering: .acquiring) { usleepMs(10) }
            guard !opened.load(ordering: .acquiring) else { return }
            watchdogOpened.store(true, ordering: .releasing)
            let fd = Glibc.open(fifo, O_RDWR | O_NONBLOCK)
            if fd >= 0 { usleepMs(100); Glibc.close(fd) }
        }
        #expect { try WAVFileSource(path: fifo).open() } throws: {
            F.isAudioError($0, naming: fifo) && "\($0)".contains("named pipe")
        }
        opened.store(true, ordering: .releasing)
        watchdog.join()
        let waited = watchdogOpened.load(ordering: .acquiring)
        #expect(!waited, "open() waited for a writer")

        let directory = dir + "/adir.wav"
        mkdir(directory, 0o700)
        #expect { try WAVFileSource(path: directory).open() } throws: {
            F.isAudioError($0, naming: directory) && "\($0)".contains("a directory")
        }
    }

    @Test func bytesInMemoryReadLikeTheFile() throws {
        for (i, (tag, bits, data, expected, ext)) in Self.formats.enumerated() {
            let source = WAVFileSource(bytes: F.wav(tag: tag, bits: bits, data: data, extensible: ext), name: "m\(i)")
            try source.open()
            #expect(try F.readAll(source) == expected, "case \(i)")
            source.close()
        }
        for (name, bytes) in Self.malformed {
            #expect { try WAVFileSource(bytes: bytes, name: name).open() } throws: { F.isAudioError($0, naming: name) }
        }
        #expect { try WAVFileSource(bytes: [], name: "empty").open() } throws: { F.isAudioError($0, naming: "empty") }
    }

    /// Issue 19 item 7: compressed files are named, not "not a RIFF file".
    static let compressed: [(bytes: [UInt8], named: String)] = {
        let flac: [UInt8] = Array("fLaC".utf8) + [0, 0, 0, 34, 16, 0, 16, 0]
        let ogg: [UInt8] = Array("OggS".utf8) + [0, 2, 0, 0, 0, 0, 0, 0]
        let id3: [UInt8] = Array("ID3".utf8) + [4, 0, 0, 0, 0, 0, 0, 0, 0]
        let mpeg: [UInt8] = [0xFF, 0xFB, 0x90, 0x64, 0, 0, 0, 0, 0, 0, 0, 0]
        let m4a: [UInt8] = [0, 0, 0, 32] + Array("ftypM4A ".utf8)
        let aiff: [UInt8] = Array("FORM".utf8) + [0, 0, 0, 0] + Array("AIFF".utf8)
        return [(flac, "a FLAC file"), (ogg, "an Ogg file"), (id3, "an MP3 file"),
                (mpeg, "an MP3 (MPEG audio) file"), (m4a, "an MP4/M4A file"), (aiff, "an AIFF file")]
    }()

    @Test func compressedFilesAreNamed() {
        for (bytes, named) in Self.compressed {
            let padded: [UInt8] = bytes + [UInt8](repeating: 0, count: 64)
            #expect(throws: SpeechClientError.self) { try WAVFileSource(bytes: padded, name: "x").open() }
            do {
                try WAVFileSource(bytes: padded, name: "x").open()
            } catch {
                #expect(error.message.contains(named), "\(named): \(error.message)")
            }
        }
    }

    @Test func missingFileAndDirectoryNameThePath() {
        #expect { try WAVFileSource(path: "/nonexistent/x.wav").open() } throws: { F.isAudioError($0, naming: "/nonexistent/x.wav") }
        let dir = F.directory()
        #expect { try WAVFileSource(path: dir).open() } throws: { F.isAudioError($0, naming: dir) }
    }

    @Test func readBeforeOpenAndAfterCloseIsNil() throws {
        let s = WAVFileSource(path: F.writeTemp(F.wav(data: [0, 0x40]), name: "a.wav"))
        #expect(try s.read(maxFrames: 10) == nil)
        try s.open()
        s.close()
        #expect(try s.read(maxFrames: 10) == nil)
    }

    /// Mutated and truncated versions of good files of every format: opening and reading may
    /// fail, but only with `.audio` errors, and never crash.
    @Test func randomBytesNeverCrash() {
        var rng = SystemRandomNumberGenerator()
        let dir = F.directory()
        let goods = Self.formats.map { F.wav(tag: $0.0, channels: 2, bits: $0.1, data: [UInt8](repeating: 1, count: 48), extensible: $0.4, extraChunk: true) }
        for i in 0..<600 {
            var bytes = goods[i % goods.count]
            for _ in 0..<Int.random(in: 1...6, using: &rng) {
                bytes[Int.random(in: 0..<bytes.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
            }
            if i % 3 == 0 { bytes = Array(bytes.prefix(Int.random(in: 0...bytes.count, using: &rng))) }
            if i % 50 == 0 { bytes = (0..<Int.random(in: 0...200, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) } }
            let path = dir + "/r\(i % 8).wav"
            F.write(bytes, to: path)
            let s = WAVFileSource(path: path)
            do {
                try s.open()
                _ = try F.readAll(s, block: Int.random(in: 1...64, using: &rng))
            } catch {
                #expect(F.isAudioError(error, naming: path))
            }
        }
    }
}
