/// Cuts a stream of 16 kHz samples into messages of the configured duration.
public struct Chunker {
    public let samplesPerChunk: Int
    private var pending: [Int16] = []

    public init(samplesPerChunk: Int) {
        self.samplesPerChunk = max(1, samplesPerChunk)
    }

    /// Adds samples; returns the chunks that are now full, in order. A full chunk is handed
    /// over, not copied again, and no buffer is kept between chunks (memory per client).
    public mutating func append(_ samples: [Int16]) -> [[Int16]] {
        // The usual case (pushes of exactly one chunk): the array itself is the chunk.
        if pending.isEmpty && samples.count == samplesPerChunk { return [samples] }
        var out: [[Int16]] = []
        var offset = 0
        while offset < samples.count {
            if pending.isEmpty && samples.count - offset >= samplesPerChunk {
                out.append(Array(samples[offset..<offset + samplesPerChunk]))
                offset += samplesPerChunk
                continue
            }
            if pending.isEmpty { pending.reserveCapacity(samplesPerChunk) }
            let take = min(samplesPerChunk - pending.count, samples.count - offset)
            pending.append(contentsOf: samples[offset..<offset + take])
            offset += take
            if pending.count == samplesPerChunk {
                out.append(pending)
                pending = []
            }
        }
        return out
    }

    /// The partial chunk left over, or nil when there is none.
    public mutating func flush() -> [Int16]? {
        guard !pending.isEmpty else { return nil }
        defer { pending = [] }
        return pending
    }
}
