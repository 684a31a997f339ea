/// A WAV header read from a stream that cannot seek (a pipe, standard input, a socket): the
/// same formats and checks as `WAVFileSource`, fed bytes as they arrive. Chunks before `data`
/// are skipped as they stream past, never buffered, so a header with a huge `LIST` chunk costs
/// no memory. The data chunk's size is kept when it is a real size; the placeholders streaming
/// writers put there (0, 0xFFFFFFFF, or anything from 0x7FFF0000 on, as sox and arecord write
/// to a pipe) mean "to the end of the stream".
struct WAVStreamHeader {
    /// What the data chunk holds: its format, and how many bytes it declares (nil: to the end).
    struct Result: Equatable {
        var format: AudioFormat
        var kind: WAVFileSource.SampleKind
        var blockAlign: Int
        var dataBytes: Int?
    }

    /// Stands for the stream in messages ("standard input", "fd 5").
    let name: String
    private var stage = Stage.riff
    private var fmt: WAVFileSource.Format?
    private var rf64 = false
    private var ds64DataSize: Int?
    /// Bytes of the current chunk still to be skipped.
    private var skipping = 0
    /// Bytes consumed so far, for "ended inside the header" messages.
    private(set) var consumed = 0
    /// Chunks before `data`: bounded as in a file (`WAVFileSource.maxChunksBeforeData`). Zeros
    /// after the header read as empty chunks of 8 bytes: an endless source of them was read for
    /// ever, the context open and sending nothing.
    private var chunksBeforeData = 0

    private enum Stage: Equatable { case riff, chunkHeader, body(id: String, size: Int) }

    init(name: String) { self.name = name }

    func fail(_ why: String) -> SpeechClientError {
        SpeechClientError(.audio, "WAV stream (\(name)): \(why)")
    }

    /// Consumes what it can of `bytes[start...]`; returns how many bytes it took and, once the
    /// data chunk begins (right after the bytes taken), the header.
    mutating func take(_ bytes: [UInt8], from start: Int) throws(SpeechClientError) -> (taken: Int, result: Result?) {
        var i = start
        defer { consumed += i - start }
        while true {
            if skipping > 0 {
                let n = min(skipping, bytes.count - i)
                i += n
                skipping -= n
                if skipping > 0 { return (i - start, nil) }
            }
            let available = bytes.count - i
            switch stage {
            case .riff:
                guard available >= 12 else { return (i - start, nil) }
                let head = Array(bytes[i..<i + 12])
                let magic = WAVFileSource.fourCC(head, 0)
                guard magic == "RIFF" || magic == "RF64" else {
                    if let format = WAVFileSource.compressedFormat(head) {
                        throw fail("\(format), not WAV: only WAV (PCM or float) or raw 16-bit PCM is read; convert it first, for example with `sox IN -t wav -r 16000 -c 1 -b 16 -`")
                    }
                    throw fail("not a RIFF file (no WAV header; for raw PCM give its sample rate and channels)")
                }
                guard WAVFileSource.fourCC(head, 8) == "WAVE" else { throw fail("a RIFF stream but not WAVE") }
                rf64 = magic == "RF64"
                i += 12
                stage = .chunkHeader
            case .chunkHeader:
                guard available >= 8 else { return (i - start, nil) }
                let head = Array(bytes[i..<i + 8])
                i += 8
                let id = WAVFileSource.fourCC(head, 0)
                let size = Int(WAVFileSource.le32(head, 4))
                if id != "data" {
                    chunksBeforeData += 1
                    guard chunksBeforeData <= WAVFileSource.maxChunksBeforeData else {
                        throw fail("more than \(WAVFileSource.maxChunksBeforeData) chunks before the data chunk (a damaged stream?)")
                    }
                }
                switch id {
                case "fmt ":
                    guard size >= 16 else { throw fail("fmt chunk of \(size) bytes (at least 16 needed)") }
                    stage = .body(id: id, size: size)
                case "ds64" where rf64:
                    guard size >= 16 else { throw fail("malformed ds64 chunk") }
                    stage = .body(id: id, size: size)
                case "data":
                    guard let fmt else { throw fail("data chunk before the fmt chunk") }
                    var declared: Int? = size
                    if let ds64DataSize, size == 0xFFFF_FFFF || size == ds64DataSize & 0xFFFF_FFFF {
                        // A streaming RF64 writer leaves ds64 at 0 (or all ones) too. Some
                        // writers put the low 32 bits of the real size in the chunk's own field
                        // (as `WAVFileSource` reads it): taken alone, the audio stopped there.
                        declared = ds64DataSize == 0 || ds64DataSize >= 0x7FFF_FFFF_0000_0000 ? nil : ds64DataSize
                    } else if size == 0 || size >= 0x7FFF_0000 {
                        declared = nil
                    }
                    return (i - start, Result(format: fmt.format, kind: fmt.kind, blockAlign: fmt.blockAlign,
                                              dataBytes: declared.map { $0 - $0 % fmt.blockAlign }))
                default:
                    skipping = size + (size & 1)
                }
            case .body(let id, let size):
                // Only the first 40 bytes of fmt matter (WAVE_FORMAT_EXTENSIBLE), 16 of ds64.
                let keep = min(size, id == "fmt " ? 40 : 16)
                guard available >= keep else { return (i - start, nil) }
                let body = Array(bytes[i..<i + keep])
                i += keep
                if id == "fmt " {
                    let stream = self
                    fmt = try WAVFileSource.parseFormat(body, path: name, describe: { stream.fail($0) })
                } else {
                    let d = UInt64(WAVFileSource.le32(body, 8)) | UInt64(WAVFileSource.le32(body, 12)) << 32
                    ds64DataSize = d > UInt64(Int.max) ? Int.max : Int(d)
                }
                skipping = size - keep + (size & 1)
                stage = .chunkHeader
            }
        }
    }
}
