#if canImport(Glibc)
import Glibc
#endif

/// A RIFF/WAVE file read from disk in blocks (files may be hours long): PCM 16, 24 and 32 bit,
/// IEEE float 32, plain or WAVE_FORMAT_EXTENSIBLE, 1000-384000 Hz, 1-32 channels; RF64 too.
/// Every malformed input ends in an `.audio` error naming the file and the problem; no byte
/// sequence can crash the parser (all sizes are checked against the file before use).
///
/// Size fields that lie are common: recorders that stream write 0 or 0xFFFFFFFF (or a huge
/// placeholder) and never come back; a copy may be cut short. The data chunk is therefore read
/// up to the end of the file, in whole frames, whatever it declares (`missingBytes` says how
/// much a cut-short file lacks: the client warns about it). A file whose data chunk holds not
/// even one of its declared frames is rejected as truncated.
public final class WAVFileSource: Int16AudioSource {
    public enum SampleKind: Equatable, Sendable { case int16, int24, int32, float32 }

    public struct Header: Equatable, Sendable {
        public var format: AudioFormat
        public var kind: SampleKind
        public var blockAlign: Int
        public var dataOffset: Int
        /// Bytes of audio that will be read: whole frames, the declared size cut to the file.
        public var dataBytes: Int
        /// Bytes the data chunk declares beyond the end of the file (a copy cut short), 0 when
        /// it holds all of them or declares a streaming placeholder (0, 0xFFFFFFFF).
        public var missingBytes: Int = 0
        public var frames: Int { dataBytes / max(1, blockAlign) }
    }

    public let path: String
    public private(set) var header: Header?
    private var file: UnsafeMutablePointer<FILE>?
    private var remaining = 0
    private var buffer: [UInt8] = []

    /// Frames decoded per `read` at most, so a caller asking for "everything" does not make the
    /// reader allocate the whole file.
    static let maxFramesPerRead = 65_536

    public init(path: String) { self.path = path }

    /// A WAV file already in memory (fuzzing, and callers that hold the bytes): the same parser
    /// and reader through fmemopen. `name` stands for the path in messages.
    public init(bytes: [UInt8], name: String = "<memory>") {
        self.path = name
        self.memory = bytes
    }

    private var memory: [UInt8]?
    private var memoryCopy: UnsafeMutableRawPointer?
    /// stdio's buffer for a file on disk (`setvbuf`), owned here and freed after `fclose`.
    private var stdioBuffer: UnsafeMutablePointer<CChar>?
    static let readBlockBytes = 64 * 1024

    deinit { close() }

    public var format: AudioFormat { header?.format ?? .speech }

    /// Checks a file without keeping it open; returns what `open()` would find.
    public static func validate(path: String) throws(SpeechClientError) -> Header {
        let source = WAVFileSource(path: path)
        try source.open()
        defer { source.close() }
        return source.header ?? Header(format: .speech, kind: .int16, blockAlign: 2, dataOffset: 0, dataBytes: 0)
    }

    public func open() throws(SpeechClientError) {
        close()
        let opened: UnsafeMutablePointer<FILE>?
        if let memory {
            // fmemopen needs a buffer that outlives the FILE: a copy this source owns.
            let copy = UnsafeMutableRawPointer.allocate(byteCount: max(memory.count, 1), alignment: 1)
            memory.withUnsafeBytes { if let base = $0.baseAddress { copy.copyMemory(from: base, byteCount: $0.count) } }
            memoryCopy = copy
            opened = memory.isEmpty ? nil : fmemopen(copy, memory.count, "rb")
        } else {
            let file = try Self.openRegularFile(path)
            // 64 KB reads, not stdio's 4 KB: one system call per 20 chunks of a fast file, not one
            // per chunk. The buffer is ours: glibc ignores the size given with a null buffer.
            let block = UnsafeMutablePointer<CChar>.allocate(capacity: Self.readBlockBytes)
            stdioBuffer = block
            _ = setvbuf(file, block, _IOFBF, Self.readBlockBytes)
            opened = file
        }
        guard let f = opened else {
            let code = errno
            close()
            if memory?.isEmpty == true { throw Self.fail(path, "the file is empty") }
            throw SpeechClientError.errno(.audio, "fmemopen", code, context: "WAV file '\(path)'")
        }
        file = f
        do throws(SpeechClientError) {
            let h = try Self.parseHeader(file: f, path: path, memorySize: memory?.count)
            guard fseeko(f, off_t(h.dataOffset), SEEK_SET) == 0 else {
                throw SpeechClientError.errno(.audio, "fseeko", errno, context: "WAV file '\(path)'")
            }
            header = h
            remaining = h.dataBytes
        } catch {
            close()
            throw error
        }
    }

    /// Opens `path` for reading if it is a regular file. Opened without blocking and checked on
    /// the descriptor: `fopen` on a named pipe with no writer would wait forever (and the client
    /// with it), and a character device could be read without end.
    static func openRegularFile(_ path: String) throws(SpeechClientError) -> UnsafeMutablePointer<FILE> {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { throw SpeechClientError.errno(.audio, "open", errno, context: "WAV file '\(path)'") }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            let code = errno
            _ = Glibc.close(fd)
            throw SpeechClientError.errno(.audio, "fstat", code, context: "WAV file '\(path)'")
        }
        guard (st.st_mode & S_IFMT) == S_IFREG else {
            _ = Glibc.close(fd)
            throw fail(path, "not a regular file (\(fileKind(st.st_mode)))")
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        guard let file = fdopen(fd, "rb") else {
            let code = errno
            _ = Glibc.close(fd)
            throw SpeechClientError.errno(.audio, "fdopen", code, context: "WAV file '\(path)'")
        }
        return file
    }

    private static func fileKind(_ mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFDIR: return "a directory"
        case S_IFIFO: return "a named pipe: give it as a descriptor instead"
        case S_IFCHR: return "a character device"
        case S_IFBLK: return "a block device"
        case S_IFSOCK: return "a socket"
        default: return "not a plain file"
        }
    }

    public func read(maxFrames: Int) throws(SpeechClientError) -> [Float]? {
        guard let header, let samples = try readBlock(maxFrames: maxFrames) else { return nil }
        return Self.decode(buffer, count: samples, kind: header.kind)
    }

    public var deliversInt16: Bool { header?.kind == .int16 }

    public func readInt16(maxFrames: Int) throws(SpeechClientError) -> [Int16]? {
        guard header?.kind == .int16, let samples = try readBlock(maxFrames: maxFrames) else { return nil }
        return buffer.withUnsafeBytes { raw in
            [Int16](unsafeUninitializedCapacity: samples) { out, count in
                for i in 0..<samples { out[i] = Int16(littleEndian: raw.loadUnaligned(fromByteOffset: 2 * i, as: Int16.self)) }
                count = samples
            }
        }
    }

    /// Reads up to `maxFrames` whole frames into `buffer`; returns how many samples, nil at the end.
    private func readBlock(maxFrames: Int) throws(SpeechClientError) -> Int? {
        guard let file, let header, header.blockAlign > 0 else { return nil }
        let frames = min(max(1, maxFrames), Self.maxFramesPerRead, remaining / header.blockAlign)
        guard frames > 0 else { return nil }
        let bytes = frames * header.blockAlign
        if buffer.count < bytes { buffer = [UInt8](repeating: 0, count: bytes) }
        let got = buffer.withUnsafeMutableBytes { fread($0.baseAddress, 1, bytes, file) }
        if got < bytes && ferror(file) != 0 {
            throw SpeechClientError.errno(.audio, "fread", errno, context: "WAV file '\(path)'")
        }
        // A file that shrank while open ends at its last whole frame.
        let whole = got / header.blockAlign
        remaining = whole < frames ? 0 : remaining - got
        guard whole > 0 else { return nil }
        return whole * header.format.channels
    }

    public func close() {
        if let file { fclose(file) }
        file = nil
        stdioBuffer?.deallocate()  // after fclose, which may still use it
        stdioBuffer = nil
        memoryCopy?.deallocate()
        memoryCopy = nil
    }

    // MARK: - Parsing

    static func fail(_ path: String, _ why: String) -> SpeechClientError {
        SpeechClientError(.audio, "WAV file '\(path)': \(why)")
    }

    typealias Format = (format: AudioFormat, kind: SampleKind, blockAlign: Int)

    /// What a file that is not RIFF is, from its first 12 bytes, for the error message.
    static func compressedFormat(_ b: [UInt8]) -> String? {
        guard b.count >= 12 else { return nil }
        let head = fourCC(b, 0)
        if head == "fLaC" { return "a FLAC file" }
        if head == "OggS" { return "an Ogg file (Vorbis, Opus or FLAC)" }
        if b[0] == 0x49 && b[1] == 0x44 && b[2] == 0x33 { return "an MP3 file (with an ID3 tag)" }
        if b[0] == 0xFF && (b[1] & 0xE0) == 0xE0 && (b[1] & 0x06) != 0 { return "an MP3 (MPEG audio) file" }
        if b[0] == 0xFF && (b[1] & 0xF6) == 0xF0 { return "an AAC (ADTS) file" }
        if fourCC(b, 4) == "ftyp" { return "an MP4/M4A file" }
        if head == "FORM" && (fourCC(b, 8) == "AIFF" || fourCC(b, 8) == "AIFC") { return "an AIFF file" }
        if head == "caff" { return "a CAF file" }
        if head == ".snd" { return "a Sun/NeXT .au file" }
        if b[0] == 0x1A && b[1] == 0x45 && b[2] == 0xDF && b[3] == 0xA3 { return "a Matroska/WebM file" }
        return nil
    }

    /// Reads the chunks up to `data` and checks the format. Leaves the file position anywhere.
    /// `memorySize`: the size of an fmemopen'ed buffer (which has no descriptor to fstat).
    static func parseHeader(file: UnsafeMutablePointer<FILE>, path: String, memorySize: Int? = nil) throws(SpeechClientError) -> Header {
        let fileSize: Int
        if let memorySize {
            fileSize = memorySize
        } else {
            var st = stat()
            guard fstat(fileno(file), &st) == 0 else { throw SpeechClientError.errno(.audio, "fstat", errno, context: "WAV file '\(path)'") }
            guard (st.st_mode & S_IFMT) == S_IFREG else { throw fail(path, "not a regular file") }
            fileSize = Int(st.st_size)
        }
        guard fileSize > 0 else { throw fail(path, "empty file") }
        var riff = [UInt8](repeating: 0, count: 12)
        guard fread(&riff, 1, 12, file) == 12 else { throw fail(path, "too short to be a WAV file (\(fileSize) bytes)") }
        let magic = fourCC(riff, 0)
        guard magic == "RIFF" || magic == "RF64" else {
            // Issue 19 item 7: a compressed file was "not a RIFF file"; name what it is.
            if let format = compressedFormat(riff) {
                throw fail(path, "\(format), not WAV: only WAV (PCM or float) is read; convert it first, for example with `sox IN -r 16000 -c 1 -b 16 OUT.wav` or `ffmpeg -i IN -ar 16000 -ac 1 OUT.wav`")
            }
            throw fail(path, "not a RIFF file")
        }
        guard fourCC(riff, 8) == "WAVE" else { throw fail(path, "a RIFF file but not WAVE") }
        var offset = 12
        var fmt: Format?
        var ds64DataSize: Int?
        var chunk = [UInt8](repeating: 0, count: 8)
        var counted = 0
        while true {
            guard fread(&chunk, 1, 8, file) == 8 else {
                throw fail(path, fmt == nil ? "no fmt chunk" : "no data chunk")
            }
            offset += 8
            let id = fourCC(chunk, 0)
            // Zeros after the header read as empty chunks, 8 bytes each (and a crafted file may
            // repeat `fmt `): a damaged file of gigabytes took minutes to refuse (at
            // spc_client_new and at every start). Real files have a handful before `data`.
            if id != "data" {
                counted += 1
                guard counted <= Self.maxChunksBeforeData else {
                    throw fail(path, "more than \(Self.maxChunksBeforeData) chunks before the data chunk (a damaged file?)")
                }
            }
            let size = Int(le32(chunk, 4))
            let available = fileSize - offset
            switch id {
            case "fmt ":
                guard size >= 16 else { throw fail(path, "fmt chunk of \(size) bytes (at least 16 needed)") }
                guard size <= available else { throw fail(path, "truncated fmt chunk (\(size) bytes declared, \(available) in the file)") }
                // Only the first 40 bytes matter (WAVE_FORMAT_EXTENSIBLE); the rest is skipped.
                let keep = min(size, 40)
                var body = [UInt8](repeating: 0, count: keep)
                guard fread(&body, 1, keep, file) == keep else { throw fail(path, "truncated fmt chunk") }
                fmt = try parseFormat(body, path: path)
                try skip(file, size - keep + (size & 1), path: path, what: "fmt")
                offset += size + (size & 1)
            case "ds64" where magic == "RF64":
                // RF64: the 64-bit sizes live here; the data chunk's own size is 0xFFFFFFFF.
                guard size >= 16, size <= available else { throw fail(path, "malformed ds64 chunk") }
                var body = [UInt8](repeating: 0, count: 16)
                guard fread(&body, 1, 16, file) == 16 else { throw fail(path, "truncated ds64 chunk") }
                let d = UInt64(le32(body, 8)) | UInt64(le32(body, 12)) << 32
                ds64DataSize = d > UInt64(Int.max) ? Int.max : Int(d)
                try skip(file, size - 16 + (size & 1), path: path, what: "ds64")
                offset += size + (size & 1)
            case "data":
                guard let fmt else { throw fail(path, "data chunk before the fmt chunk") }
                // Streaming recorders that never went back leave a placeholder: 0 or 0xFFFFFFFF,
                // and in RF64 a ds64 size of 0 or all ones (ffmpeg's, killed before its end: as
                // WAVStreamHeader reads it). Read to the end of the file, nothing said missing.
                var declared = size
                var placeholder = size == 0 || size == 0xFFFF_FFFF
                if ds64DataSize == nil, !placeholder, size >= 0x7FFF_0000, available > declared + (declared & 1) {
                    // arecord's and sox's placeholder when they write to a pipe (0x7FFFFFFF,
                    // 0x7FFFF000), saved to a file: past it comes audio, not a chunk. Taken as a
                    // size, a recording longer than 2 GiB (18 h at 16 kHz, 3 h at 48 kHz stereo)
                    // stopped there without a word. A real size (wrapped at 4 GiB, perhaps: as
                    // below) ends the file or is followed by chunks.
                    let end = declared + ((available - declared) >> 32) << 32
                    if end + (end & 1) >= available || Self.chunksFollow(file, at: offset + end, afterOddSize: end & 1 == 1, fileSize: fileSize) {
                        declared = end
                    } else {
                        placeholder = true
                    }
                } else if let ds64DataSize, size == 0xFFFF_FFFF || size == ds64DataSize & 0xFFFF_FFFF {
                    // RF64's 64-bit size (the chunk's own is 0xFFFFFFFF, or, from some writers,
                    // the low 32 bits of the real one, which alone cut the audio short).
                    placeholder = ds64DataSize == 0 || ds64DataSize >= 0x7FFF_FFFF_0000_0000
                    declared = ds64DataSize
                } else if !placeholder && available - declared >= 1 << 32 {
                    // A size that wrapped at 4 GiB (a writer's 32-bit arithmetic: more than
                    // 37 hours at 16 kHz, two at 96 kHz 24-bit stereo): the file holds at least
                    // 4 GiB more than it says, which no trailing chunk explains. The lost
                    // multiples of 4 GiB are added back; read as declared, all but the
                    // remainder was dropped without a word.
                    declared += ((available - declared) >> 32) << 32
                }
                if placeholder { declared = available }
                let usable = min(declared, available)
                if usable < fmt.blockAlign {
                    // Not even one frame: a context would open, send nothing and end.
                    if declared > usable {
                        throw fail(path, "truncated: the data chunk declares \(declared) bytes but the file holds \(usable)")
                    }
                    throw fail(path, usable == 0 ? "no audio: the data chunk is empty"
                                                 : "no audio: the data chunk holds \(usable) bytes, less than one frame (\(fmt.blockAlign) bytes)")
                }
                // A RIFF size of 0x7FFF0000 and up is arecord's and sox's placeholder too.
                return Header(format: fmt.format, kind: fmt.kind, blockAlign: fmt.blockAlign, dataOffset: offset,
                              dataBytes: usable - usable % fmt.blockAlign,
                              missingBytes: placeholder || (size >= 0x7FFF_0000 && ds64DataSize == nil) ? 0 : declared - usable)
            default:
                // Chunks are padded to even sizes; the pad byte is not counted in the size.
                let padded = size + (size & 1)
                guard padded <= available || (size <= available && padded == available + 1) else {
                    throw fail(path, "chunk '\(printable(chunk[0..<4]))' of \(size) bytes runs past the end of the file")
                }
                try skip(file, min(padded, available), path: path, what: printable(chunk[0..<4]))
                offset += min(padded, available)
            }
        }
    }

    /// Chunks read before `data` before the file is refused as damaged.
    static let maxChunksBeforeData = 1024

    /// Whether what follows `at` (or the byte after it: the pad of an odd size) up to the end
    /// of the file is a chain of chunks (a `LIST`, an `id3 `, `_PMX` after the audio): each
    /// header four printable characters and a size that lands the next one, the last at the end
    /// of the file. Audio is never that: this tells a real data size from a placeholder. The
    /// file's position is kept; 64 headers are read at most.
    static func chunksFollow(_ file: UnsafeMutablePointer<FILE>, at start: Int, afterOddSize: Bool, fileSize: Int) -> Bool {
        let back = ftello(file)
        defer { _ = fseeko(file, back, SEEK_SET) }
        var reads = 0
        // Each chunk's end, then its pad byte when its size is odd (some writers leave it out).
        func chain(_ at: Int, odd: Bool) -> Bool {
            if at == fileSize || (odd && at + 1 == fileSize) { return true }
            if odd && chain(at + 1, odd: false) { return true }
            reads += 1
            guard reads <= 64, fileSize - at >= 8, fseeko(file, off_t(at), SEEK_SET) == 0 else { return false }
            var head = [UInt8](repeating: 0, count: 8)
            guard fread(&head, 1, 8, file) == 8 else { return false }
            let named = (0x21...0x7E).contains(head[0]) && head[1..<4].allSatisfy { (0x20...0x7E).contains($0) }
            let size = Int(le32(head, 4))
            guard named, size <= fileSize - at - 8 else { return false }
            return chain(at + 8 + size, odd: size & 1 == 1)
        }
        return chain(start, odd: afterOddSize)
    }

    private static func skip(_ file: UnsafeMutablePointer<FILE>, _ count: Int, path: String, what: String) throws(SpeechClientError) {
        guard count > 0 else { return }
        guard fseeko(file, off_t(count), SEEK_CUR) == 0 else {
            throw SpeechClientError.errno(.audio, "fseeko", errno, context: "WAV file '\(path)' (after the \(what) chunk)")
        }
    }

    /// The GUID tail shared by every KSDATAFORMAT_SUBTYPE (…-0000-0010-8000-00AA00389B71).
    static let subformatTail: [UInt8] = [0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71]

    /// `describe` words a failure (a stream has no path); by default "WAV file 'path': why".
    static func parseFormat(_ b: [UInt8], path: String, describe: ((String) -> SpeechClientError)? = nil) throws(SpeechClientError) -> Format {
        let fail = describe ?? { Self.fail(path, $0) }
        guard b.count >= 16 else { throw fail("fmt chunk too short") }
        var tag = Int(le16(b, 0))
        let channels = Int(le16(b, 2))
        let rate = Int(le32(b, 4))
        let blockAlign = Int(le16(b, 12))
        let bits = Int(le16(b, 14))
        if tag == 0xFFFE {
            guard b.count >= 40 else { throw fail("WAVE_FORMAT_EXTENSIBLE without its 22-byte extension") }
            // The sub-format GUID starts with the plain format tag; the rest is fixed.
            guard le16(b, 26) == 0, Array(b[26..<40]) == subformatTail else {
                throw fail("WAVE_FORMAT_EXTENSIBLE with an unknown sub-format GUID")
            }
            tag = Int(le16(b, 24))
        }
        guard channels >= 1, channels <= 32 else { throw fail("\(channels) channels (1-32 supported)") }
        guard rate >= 1000, rate <= 384_000 else { throw fail("sample rate \(rate) Hz (1000-384000 supported)") }
        let kind: SampleKind
        switch (tag, bits) {
        case (1, 16): kind = .int16
        case (1, 24): kind = .int24
        case (1, 32): kind = .int32
        case (3, 32): kind = .float32
        case (1, _), (3, _):
            throw fail("\(bits)-bit \(tag == 3 ? "float" : "PCM") samples are not supported (16, 24, 32-bit PCM or 32-bit float)")
        default:
            throw fail("format tag 0x\(String(tag, radix: 16)) is not PCM or IEEE float (compressed WAV is not supported)")
        }
        guard blockAlign == channels * bits / 8 else {
            throw fail("block align \(blockAlign) does not match \(channels) channels of \(bits) bits")
        }
        return (AudioFormat(sampleRate: rate, channels: channels), kind, blockAlign)
    }

    /// Little-endian samples to Float in [-1, 1]. `b` holds at least `count` samples.
    static func decode(_ b: [UInt8], count: Int, kind: SampleKind) -> [Float] {
        let width: Int
        switch kind {
        case .int16: width = 2
        case .int24: width = 3
        case .int32, .float32: width = 4
        }
        let n = min(count, b.count / width)
        var out = [Float](repeating: 0, count: n)
        b.withUnsafeBufferPointer { p in
            switch kind {
            case .int16:
                for i in 0..<n { out[i] = Float(Int16(bitPattern: UInt16(p[2 * i]) | UInt16(p[2 * i + 1]) << 8)) / 32768 }
            case .int24:
                for i in 0..<n {
                    let u = UInt32(p[3 * i]) << 8 | UInt32(p[3 * i + 1]) << 16 | UInt32(p[3 * i + 2]) << 24
                    out[i] = Float(Int32(bitPattern: u) >> 8) / 8_388_608
                }
            case .int32:
                for i in 0..<n { out[i] = Float(Int32(bitPattern: le32(p, 4 * i))) / 2_147_483_648 }
            case .float32:
                for i in 0..<n {
                    let v = Float(bitPattern: le32(p, 4 * i))
                    out[i] = v.isFinite ? max(-1, min(1, v)) : 0
                }
            }
        }
        return out
    }

    static func le16<C: RandomAccessCollection>(_ b: C, _ i: Int) -> UInt16 where C.Element == UInt8, C.Index == Int {
        UInt16(b[b.startIndex + i]) | UInt16(b[b.startIndex + i + 1]) << 8
    }

    static func le32<C: RandomAccessCollection>(_ b: C, _ i: Int) -> UInt32 where C.Element == UInt8, C.Index == Int {
        UInt32(le16(b, i)) | UInt32(le16(b, i + 2)) << 16
    }

    static func fourCC(_ b: [UInt8], _ i: Int) -> String {
        String(decoding: b[i..<i + 4], as: UTF8.self)
    }

    static func printable(_ bytes: ArraySlice<UInt8>) -> String {
        String(bytes.map { $0 >= 0x20 && $0 < 0x7F ? Character(Unicode.Scalar($0)) : "?" })
    }
}
