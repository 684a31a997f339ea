import Testing
@testable import SpeechClient

@Suite struct ChunkerTests {
    @Test func cutsExactChunksAndKeepsTheRest() {
        var c = Chunker(samplesPerChunk: 4)
        #expect(c.append([1, 2, 3]).isEmpty)
        #expect(Array(c.append([4, 5, 6, 7, 8, 9])) == [[1, 2, 3, 4], [5, 6, 7, 8]])
        #expect(c.append([]).isEmpty)
        #expect(c.flush() == [9])
        #expect(c.flush() == nil)
        #expect(Array(c.append([1, 2, 3, 4])) == [[1, 2, 3, 4]])
        #expect(c.flush() == nil)
    }

    @Test func everySampleComesOutOnceInOrder() {
        var c = Chunker(samplesPerChunk: 1600)
        var out: [Int16] = []
        var next: Int16 = 0
        for size in [1, 1599, 1600, 3201, 7, 0, 4000, 333] {
            let block = (0..<size).map { _ -> Int16 in defer { next &+= 1 }; return next }
            for chunk in c.append(block) {
                #expect(chunk.count == 1600)
                out += chunk
            }
        }
        if let rest = c.flush() { out += rest }
        #expect(out == (0..<Int(next)).map { Int16($0) })
    }

    @Test func chunksHoldOneInlineAndMoreInOrder() {
        var chunks = Chunker.Chunks()
        #expect(chunks.isEmpty && Array(chunks).isEmpty && chunks.sampleCount == 0)
        chunks.append([1, 2])
        #expect(!chunks.isEmpty && Array(chunks) == [[1, 2]] && chunks.sampleCount == 2)
        chunks.append([3])
        chunks.append([4, 5, 6])
        #expect(Array(chunks) == [[1, 2], [3], [4, 5, 6]] && chunks.sampleCount == 6)
        #expect(Array(chunks) == [[1, 2], [3], [4, 5, 6]])  // iterated again, the same
    }

    @Test func nonPositiveSizeIsClampedToOne() {
        var c = Chunker(samplesPerChunk: 0)
        #expect(Array(c.append([1, 2])) == [[1], [2]])
    }
}
