/// The final words of one segment, sorted by index, in immutable chunks that the segment's
/// snapshots share (issue 23: every update used to copy the whole segment). Putting a word in
/// copies one chunk of at most `chunkSize` words and the list of chunk references (a few
/// hundred bytes for the largest segment the assembler allows), wherever the word goes; nothing
/// a snapshot holds is ever changed.
struct FinalWords: Sendable {
    final class Chunk: Sendable {
        /// Sorted by index, never empty.
        let words: [SLUWord]
        init(_ words: [SLUWord]) { self.words = words }
    }

    static let chunkSize = 64
    private(set) var chunks: [Chunk] = []
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    /// The word with this index, if any.
    func word(at index: Int32) -> SLUWord? {
        guard let c = chunkFor(index) else { return nil }
        let words = chunks[c].words
        let i = Self.position(of: index, in: words)
        return i < words.count && words[i].index == index ? words[i] : nil
    }

    /// Puts `word` in, replacing the word with the same index; returns the replaced one.
    @discardableResult
    mutating func set(_ word: SLUWord) -> SLUWord? {
        guard let c = chunkFor(word.index) else {
            chunks = [Chunk([word])]
            count = 1
            return nil
        }
        var words = chunks[c].words
        let i = Self.position(of: word.index, in: words)
        if i < words.count && words[i].index == word.index {
            let old = words[i]
            words[i] = word
            chunks[c] = Chunk(words)
            return old
        }
        count += 1
        if words.count < Self.chunkSize {
            words.insert(word, at: i)
            chunks[c] = Chunk(words)
        } else if c == chunks.count - 1 && i == words.count {
            // The usual case, a word after all the others: a new chunk, the full one untouched.
            chunks.append(Chunk([word]))
        } else {
            words.insert(word, at: i)
            let half = words.count / 2
            chunks[c] = Chunk(Array(words[..<half]))
            chunks.insert(Chunk(Array(words[half...])), at: c + 1)
        }
        return nil
    }

    /// Every word, in index order.
    var all: [SLUWord] {
        var out: [SLUWord] = []
        out.reserveCapacity(count)
        for chunk in chunks { out += chunk.words }
        return out
    }

    /// The chunk that holds, or would hold, `index`: the last whose first word is not after it
    /// (the first chunk for an index before every word); nil when there are none.
    private func chunkFor(_ index: Int32) -> Int? {
        guard !chunks.isEmpty else { return nil }
        var lo = 0, hi = chunks.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if chunks[mid].words[0].index <= index { lo = mid + 1 } else { hi = mid }
        }
        return max(0, lo - 1)
    }

    /// The first position in `words` whose index is not below `index`.
    private static func position(of index: Int32, in words: [SLUWord]) -> Int {
        var lo = 0, hi = words.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if words[mid].index < index { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }
}
