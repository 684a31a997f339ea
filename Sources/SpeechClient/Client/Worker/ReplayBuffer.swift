/// The audio of the current context that the server has not finished with, kept so that it can
/// be sent again after a reconnection. Bounded: past `capacitySamples` the oldest chunks go,
/// and `oldestSample` says from where the buffer can still replay.
struct ReplayBuffer {
    private var chunks = FIFO<(start: Int, samples: [Int16])>()
    private(set) var bufferedSamples = 0
    /// Context sample offset of the first sample still held (== `endSample` when empty).
    private(set) var oldestSample = 0
    /// Context sample offset just past the last sample appended.
    private(set) var endSample = 0
    let capacitySamples: Int

    init(capacitySamples: Int) { self.capacitySamples = max(capacitySamples, 1) }

    mutating func append(_ samples: [Int16]) {
        chunks.push((endSample, samples))
        endSample += samples.count
        bufferedSamples += samples.count
        while bufferedSamples > capacitySamples, let first = chunks.pop() {
            bufferedSamples -= first.samples.count
            oldestSample = first.start + first.samples.count
        }
    }

    /// Forgets audio that ends at or before `sample` (the server finished with it).
    mutating func release(upTo sample: Int) {
        var kept = FIFO<(start: Int, samples: [Int16])>()
        var count = 0
        var oldest = endSample
        while let c = chunks.pop() {
            if c.start + c.samples.count <= sample { continue }
            kept.push(c)
            count += c.samples.count
            oldest = min(oldest, c.start)
        }
        chunks = kept
        bufferedSamples = count
        oldestSample = oldest
    }

    /// The held chunks from `sample` up to `limit` (the first and last cut to fit).
    func chunks(from sample: Int, upTo limit: Int = .max) -> [[Int16]] {
        var copy = chunks
        var out: [[Int16]] = []
        while let c = copy.pop() {
            let end = c.start + c.samples.count
            if end <= sample { continue }
            if c.start >= limit { break }
            let lo = max(sample, c.start) - c.start
            let hi = min(end, limit) - c.start
            out.append(lo == 0 && hi == c.samples.count ? c.samples : Array(c.samples[lo..<hi]))
        }
        return out
    }

    mutating func reset() {
        chunks.removeAll()
        bufferedSamples = 0
        oldestSample = 0
        endSample = 0
    }
}
