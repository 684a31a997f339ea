#if canImport(Glibc)
import Glibc
#endif

/// A RIFF/WAVE file read from disk in blocks (files may be hours long): PCM 16, 24 and 32 bit,
/// IEEE float 32, plain or WAVE_FORMAT_EXTENSIBLE, any rate and channel count. Every malformed
/// input ends in an `.audio` error naming the file and the problem.
public final class WAVFileSource: AudioSource {
    public enum SampleKind: Equatable, Sendable { case int16, int24, int32, float32 }

    public struct Header: Equatable, Sendable {
        public var format: AudioFormat
        public var kind: SampleKind
        public var blockAlign: Int
        public var dataOffset: Int
        /// Bytes of audio available (the declared size, cut to what the file holds).
        public var dataBytes: Int
    }

    public let path: String
    public private(set) var header: Header?
    private var file: UnsafeMutablePointer<FILE>?
    private var remaining = 0
    private var buffer: [UInt8] = []

    public init(path: String) { self.path = path }

    deinit { close() }

    public var format: AudioFormat { header?.format ?? AudioFormat(sampleRate: 16_000, channels: 1) }

    public func open() throws(SpeechClientError) {
        close()
        guard let f = fopen(path, "rb") else {
            throw SpeechClientError.errno(.audio, "fopen", errno, context: "WAV file '\(path)'")
        }
        file = f
        do throws(SpeechClientError) {
            let h = try Self.parseHeader(file: f, path: path)
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

    public func read(maxFrames: Int) throws(SpeechClientError) -> [Float]? {
        guard let file, let header else { return nil }
        let frames = min(max(1, maxFrames), remaining / header.blockAlign)
        guard frames > 0 else { return nil }
        let bytes = frames * header.blockAlign
        if buffer.count < bytes { buffer = [UInt8](repeating: 0, count: bytes) }
        let got = buffer.withUnsafeMutableBytes { fread($0.baseAddress, 1, bytes, file) }
        if got < bytes && ferror(file) != 0 {
            throw SpeechClientError(.audio, "WAV file '\(path)': read error")
        }
        let whole = got / header.blockAlign
        remaining = whole < frames ? 0 : remaining - got
        guard whole > 0 else { return nil }
        return Self.decode(buffer, count: whole * header.format.channels, kind: header.kind)
    }

    public func close() {
        if let file { fclose(file) }
        file = nil
    }

    // MARK: - Parsing

    static func fail(_ path: String, _ why: String) -> SpeechClientError {
        SpeechClientError(.audio, "WAV file '\(path)': \(why)")
    }

    /// Reads the chunks up to `data` and checks the format.
    static func parseHeader(file: UnsafeMutablePointer<FILE>, path: String) throws(SpeechClientError) -> Header {
        var st = stat()
        guard fstat(fileno(file), &st) == 0 else { throw SpeechClientError.errno(.audio, "fstat", errno, context: "WAV file '\(path)'") }
        guard (st.st_mode & S_IFMT) == S_IFREG else { throw fail(path, "not a regular file") }
        let fileSize = Int(st.st_size)
        var riff = [UInt8](repeating: 0, count: 12)
        guard fread(&riff, 1, 12, file) == 12 else { throw fail(path, "too short to be a WAV file (\(fileSize) bytes)") }
        guard riff[0..<4] == [0x52, 0x49, 0x46, 0x46][...] else { throw fail(path, "not a RIFF file") }
        guard riff[8..<12] == [0x57, 0x41, 0x56, 0x45][...] else { throw fail(path, "a RIFF file but not WAVE") }
        var offset = 12
        var fmt: (format: AudioFormat, kind: SampleKind, blockAlign: Int)?
        while true {
            var chunk = [UInt8](repeating: 0, count: 8)
            guard fread(&chunk, 1, 8, file) == 8 else {
                throw fail(path, fmt == nil ? "no fmt chunk" : "no data chunk")
            }
            offset += 8
            let id = String(decoding: chunk[0..<4], as: UTF8.self)
            let size = Int(le32(chunk, 4))
            if id == "fmt " {
                guard size >= 16, size <= 1024 else { throw fail(path, "fmt chunk of \(size) bytes") }
                var body = [UInt8](repeating: 0, count: size)
                guard fread(&body, 1, size, file) == size else { throw fail(path, "truncated fmt chunk") }
                fmt = try parseFormat(body, path: path)
                offset += size
            } else if id == "data" {
                guard let fmt else { throw fail(path, "data chunk before the fmt chunk") }
                let available = max(0, fileSize - offset)
                // 0 and 0xFFFFFFFF are written by streaming recorders that never went back.
                let declared = (size == 0 || size == 0xFFFF_FFFF) ? available : size
                let usable = min(declared, available)
                if declared > 0 && usable < fmt.blockAlign {
                    throw fail(path, "truncated: the data chunk declares \(declared) bytes but the file holds \(usable)")
                }
                return Header(format: fmt.format, kind: fmt.kind, blockAlign: fmt.blockAlign, dataOffset: offset,
                              dataBytes: usable - usable % fmt.blockAlign)
            } else {
                let skip = size + (size & 1)   // chunks are padded to even sizes
                guard offset + skip <= fileSize, fseeko(file, off_t(skip), SEEK_CUR) == 0 else {
                    throw fail(path, "chunk '\(printable(id))' runs past the end of the file")
                }
                offset += skip
            }
            if size & 1 == 1 && id == "fmt " {
                guard fseeko(file, 1, SEEK_CUR) == 0 else { throw fail(path, "truncated after fmt chunk") }
                offset += 1
            }
        }
    }

    static func parseFormat(_ b: [UInt8], path: String) throws(SpeechClientError) -> (format: AudioFormat, kind: SampleKind, blockAlign: Int) {
        var tag = Int(le16(b, 0))
        let channels = Int(le16(b, 2))
        let rate = Int(le32(b, 4))
        let blockAlign = Int(le16(b, 12))
        let bits = Int(le16(b, 14))
        if tag == 0xFFFE {
            guard b.count >= 40 else { throw fail(path, "WAVE_FORMAT_EXTENSIBLE without its extension") }
            tag = Int(le16(b, 24))   // the sub-format GUID starts with the format tag
        }
        guard channels >= 1, channels <= 32 else { throw fail(path, "\(channels) channels (1-32 supported)") }
        guard rate >= 1000, rate <= 384_000 else { throw fail(path, "sample rate \(rate) Hz (1000-384000 supported)") }
        let kind: SampleKind
        switch (tag, bits) {
        case (1, 16): kind = .int16
        case (1, 24): kind = .int24
        case (1, 32): kind = .int32
        case (3, 32): kind = .float32
        case (1, _), (3, _): throw fail(path, "\(bits)-bit \(tag == 3 ? "float" : "PCM") samples are not supported (16, 24, 32-bit PCM or 32-bit float)")
        default: throw fail(path, "format tag \(tag) is not PCM or IEEE float (compressed WAV is not supported)")
        }
        guard blockAlign == channels * bits / 8 else {
            throw fail(path, "block align \(blockAlign) does not match \(channels) channels of \(bits) bits")
        }
        return (AudioFormat(sampleRate: rate, channels: channels), kind, blockAlign)
    }

    static func decode(_ b: [UInt8], count: Int, kind: SampleKind) -> [Float] {
        var out = [Float](repeating: 0, count: count)
        b.withUnsafeBufferPointer { p in
            switch kind {
            case .int16:
                for i in 0..<count { out[i] = Float(Int16(bitPattern: UInt16(p[2 * i]) | UInt16(p[2 * i + 1]) << 8)) / 32768 }
            case .int24:
                for i in 0..<count {
                    let u = UInt32(p[3 * i]) << 8 | UInt32(p[3 * i + 1]) << 16 | UInt32(p[3 * i + 2]) << 24
                    out[i] = Float(Int32(bitPattern: u) >> 8) / 8_388_608
                }
            case .int32:
                for i in 0..<count { out[i] = Float(Int32(bitPattern: le32(p, 4 * i))) / 2_147_483_648 }
            case .float32:
                for i in 0..<count {
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

    static func printable(_ s: String) -> String {
        String(s.unicodeScalars.map { $0.value >= 0x20 && $0.value < 0x7F ? Character($0) : "?" })
    }
}
