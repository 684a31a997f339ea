/// Cuts a stream of 16 kHz samples into messages of the configured duration.
public struct Chunker {
    public let samplesPerChunk: Int
    private var pending: [Int16] = []

    public init(samplesPerChunk: Int) {
        self.samplesPerChunk = max(1, samplesPerChunk)
    }

    /// Samples held towards the next chunk.
    public var pendingCount: Int { pending.count }

    /// The chunks that one `append` completed, in order: nearly always one or none, so the
    /// first is held inline and an array is made only for a second (an array per append was one
    /// allocation per chunk of every file and every push).
    public struct Chunks: Sequence {
        private var first: [Int16]?
        private var more: [[Int16]] = []

        public init() {}

        public var isEmpty: Bool { first == nil }
        public var sampleCount: Int { more.reduce(first?.count ?? 0) { $0 + $1.count } }

        public mutating func append(_ chunk: [Int16]) {
            if first == nil { first = chunk } else { more.append(chunk) }
        }

        public struct Iterator: IteratorProtocol {
            fileprivate let chunks: Chunks
            fileprivate var position = 0

            public mutating func next() -> [Int16]? {
                defer { position += 1 }
                if position == 0 { return chunks.first }
                return position - 1 < chunks.more.count ? chunks.more[position - 1] : nil
            }
        }

        public func makeIterator() -> Iterator { Iterator(chunks: self) }
    }

    /// Adds samples; returns the chunks that are now full, in order. A full chunk is handed
    /// over, not copied again, and no buffer is kept between chunks (memory per client).
    public mutating func append(_ samples: [Int16]) -> Chunks {
        var out = Chunks()
        // The usual case (a file's block, a push of exactly one chunk): the array itself is the chunk.
        if pending.isEmpty && samples.count == samplesPerChunk {
            out.append(samples)
            return out
        }
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
