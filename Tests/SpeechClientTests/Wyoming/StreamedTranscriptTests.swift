import Testing
@testable import SpeechClient

@Suite struct StreamedTranscriptTests {
    /// A small deterministic generator: the same cases on every run.
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return state >> 11 ^ state
        }
    }

    /// Split as it comes, a transcript has the words and text of the whole split at once,
    /// however it is cut into pieces.
    @Test func piecesGiveTheWordsOfTheWhole() throws {
        var rng = Generator(state: 7)
        // With marks that join a space into one character: a Prepend (U+0600) before it, a
        // combining accent after it; pieces are cut between scalars, as a server's bytes may be.
        let alphabet: [String] = ["a", "b", "é", "c\u{301}", " ", " ", "\n", "\t", "\u{0}", "\r\n",
                                  "\u{600}", "\u{301}", "\u{200D}", "\u{1F1EB}"]
        for _ in 0..<300 {
            let whole = (0..<Int.random(in: 0...60, using: &rng)).map { _ in alphabet.randomElement(using: &rng) ?? "" }.joined()
            var pieces: [String] = []
            var rest = Substring(whole).unicodeScalars
            while !rest.isEmpty {
                let n = Int.random(in: 1...5, using: &rng)
                pieces.append(String(String.UnicodeScalarView(rest.prefix(n))))
                rest = rest.dropFirst(n)
            }
            var streamed = StreamedTranscript()
            var latest: (text: String, words: [SLUWord])? = nil
            for (k, piece) in pieces.enumerated() {
                // Updates are made once per read: here after some pieces, and after the last.
                if try streamed.append(piece), k % 3 == 0 || k == pieces.count - 1 { latest = streamed.words() }
            }
            latest = streamed.words() ?? latest
            let expected = try #require(SLUWord.words(whole))
            #expect((latest?.words ?? []) == expected, "\(pieces)")
            #expect((latest?.text ?? "") == expected.map(\.text).joined(separator: " "), "\(pieces)")
        }
    }

    /// White space splits whatever character it is part of, and nothing is dropped with it.
    @Test func wordsSplitAtEverySpaceAndKeepEveryMark() throws {
        #expect(SLUWord.words("\u{600} x")?.map(\.text) == ["\u{600}", "x"])
        #expect(SLUWord.words("a \u{301}b")?.map(\.text) == ["a", "\u{301}b"])
        #expect(SLUWord.words("a\u{0}b\u{2028}c")?.map(\.text) == ["a", "b", "c"])
        #expect(SLUWord.words("a b c", atMost: 2) == nil)
        #expect(SLUWord.words("a b", atMost: 2, firstIndex: 5)?.map(\.index) == [5, 6])
    }

    @Test func blankPiecesChangeNoWord() throws {
        var streamed = StreamedTranscript()
        #expect(try streamed.append("turn"))
        #expect(streamed.words()?.words.map(\.text) == ["turn"])
        #expect(try !streamed.append(" "))
        #expect(try !streamed.append(""))
        #expect(try !streamed.append("\n\u{0}"))
        #expect(try streamed.append("on"))
        let now = streamed.words()
        #expect(now?.words.map(\.text) == ["turn", "on"])
        #expect(now?.words.map(\.index) == [0, 1])
        #expect(now?.text == "turn on")
        #expect(StreamedTranscript().words() == nil)
    }

    @Test func theBoundsEndTheTranscript() throws {
        func fails(_ pieces: [String], saying: String) {
            var streamed = StreamedTranscript()
            var thrown: SpeechClientError?
            for piece in pieces {
                do throws(SpeechClientError) { _ = try streamed.append(piece) } catch { thrown = error; break }
            }
            #expect(thrown?.code == .parse && thrown?.message.contains(saying) == true, "\(String(describing: thrown))")
        }
        fails(Array(repeating: String(repeating: " ", count: 1_024), count: 65), saying: "over 64 KiB")
        fails(Array(repeating: "x", count: SegmentAssembler.maxWordBytes + 1), saying: "a word of more than")
        fails([String(repeating: "x", count: SegmentAssembler.maxWordBytes + 1) + " "], saying: "a word of more than")
        fails([String(repeating: "a ", count: SegmentAssembler.maxWordsPerSegment), "b"], saying: "more than \(SegmentAssembler.maxWordsPerSegment) words")
        // Many pieces are no bound of their own: 10,000 blank and 5,000 one-letter ones are fine.
        var many = StreamedTranscript()
        for _ in 0..<10_000 { _ = try many.append("") }
        for _ in 0..<5_000 { _ = try many.append("a ") }
        #expect(many.words()?.words.count == 5_000)
        var fine = StreamedTranscript()
        _ = try fine.append(String(repeating: "x", count: SegmentAssembler.maxWordBytes))
        #expect(fine.words()?.words.count == 1)
    }
}
