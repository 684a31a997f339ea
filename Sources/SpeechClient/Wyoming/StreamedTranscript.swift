/// The words of a transcript a Wyoming server streams in pieces (`transcript-chunk`), split as
/// the pieces come: a word followed by white space is split once and kept; only the word still
/// open is split again with each piece. Splitting the whole text again with each piece cost its
/// length per piece, on the event loop every connection shares: 64 KiB sent a byte at a time
/// was two billion scalar checks.
struct StreamedTranscript {
    /// Far above what speech makes (a piece is a word or a token).
    static let maxPieces = 4_096

    private var text = ""
    /// Words followed by white space, and their texts joined.
    private var closed: [SLUWord] = []
    private var closedText = ""
    /// Where the part not yet split into closed words starts (UTF-8 offsets in `text`): the
    /// separator that ended the last closed word, and the open word after it.
    private var openFrom = 0
    private var openWordFrom = 0
    private var pieces = 0

    /// Adds a piece; returns the transcript's words and their text so far, nil when the piece
    /// changed none (white space: it may end a word, which the next piece shows). Throws the
    /// bound the server went past (the stream then ends): pieces, bytes, words, a word's bytes.
    mutating func append(_ piece: String) throws(SpeechClientError) -> (text: String, words: [SLUWord])? {
        pieces += 1
        guard pieces <= Self.maxPieces else {
            throw SpeechClientError(.parse, "streamed more than \(Self.maxPieces) transcript-chunk events for one transcript")
        }
        guard text.utf8.count + piece.utf8.count <= SegmentAssembler.maxSegmentBytes else {
            throw SpeechClientError(.parse, "streamed a transcript of over \(SegmentAssembler.maxSegmentBytes / 1024) KiB (transcript-chunk events)")
        }
        text += piece
        guard piece.unicodeScalars.contains(where: { !Self.separates($0) }) else { return nil }
        let limit = SegmentAssembler.maxWordsPerSegment
        let tooMany = SpeechClientError(.parse, "streamed a transcript of more than \(limit) words (transcript-chunk events)")
        let utf8 = text.utf8
        let start = utf8.index(utf8.startIndex, offsetBy: openFrom)
        // Words before the last separator are closed: split once, here.
        let scalars = text.unicodeScalars
        var cut = scalars.endIndex
        while cut > start, !Self.separates(scalars[scalars.index(before: cut)]) { cut = scalars.index(before: cut) }
        if cut > start {
            let last = scalars.index(before: cut)
            guard let done = SLUWord.words(String(text[start..<last]), atMost: limit - closed.count, firstIndex: closed.count) else {
                throw tooMany
            }
            for word in done { closedText += closedText.isEmpty ? word.text : " " + word.text }
            closed += done
            openFrom = utf8.distance(from: utf8.startIndex, to: last)
            openWordFrom = utf8.distance(from: utf8.startIndex, to: cut)
        }
        // What is left is at most one word: split again with every piece, so bounded as a word is.
        guard utf8.count - openWordFrom <= SegmentAssembler.maxWordBytes else {
            throw SpeechClientError(.parse, "streamed a word of more than \(SegmentAssembler.maxWordBytes) bytes (transcript-chunk events)")
        }
        let openStart = utf8.index(utf8.startIndex, offsetBy: openFrom)
        guard let open = SLUWord.words(String(text[openStart...]), atMost: limit - closed.count, firstIndex: closed.count) else {
            throw tooMany
        }
        let openText = open.map(\.text).joined(separator: " ")
        return (closedText.isEmpty || openText.isEmpty ? closedText + openText : closedText + " " + openText, closed + open)
    }

    /// What ends a word, as `SLUWord.words` splits: white space, and control characters.
    private static func separates(_ scalar: Unicode.Scalar) -> Bool {
        scalar.properties.isWhitespace || scalar.properties.generalCategory == .control
    }
}
