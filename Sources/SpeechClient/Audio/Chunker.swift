/// Cuts a stream of 16 kHz samples into messages of the configured duration.
public struct Chunker {
    public let samplesPerChunk: Int
    private var pending: [Int16] = []

    public init(samplesPerChunk: Int) {
        self.samplesPerChunk = max(1, samplesPerChunk)
        pending.reserveCapacity(self.samplesPerChunk)
    }

    /// Adds samples; returns the chunks that are now full, in order.
    public mutating func append(_ samples: [Int16]) -> [[Int16]] {
        var out: [[Int16]] = []
        var offset = 0
        while offset < samples.count {
            let take = min(samplesPerChunk - pending.count, samples.count - offset)
            pending.append(contentsOf: samples[offset..<offset + take])
            offset += take
            if pending.count == samplesPerChunk {
                out.append(pending)
                pending.removeAll(keepingCapacity: true)
            }
        }
        return out
    }

    /// The partial chunk left over, or nil when there is none.
    public mutating func flush() -> [Int16]? {
        guard !pending.isEmpty else { return nil }
        defer { pending.removeAll(keepingCapacity: true) }
        return pending
    }
}
