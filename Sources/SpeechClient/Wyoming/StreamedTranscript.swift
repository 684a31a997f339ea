/// The words of a transcript a Wyoming server streams in pieces (`transcript-chunk`), split as
/// the pieces come: a word followed by white space is split once and kept; only the word still
/// open is split again for each update. Splitting the whole text again with each piece cost its
/// length per piece, on the event loop every connection shares: 64 KiB sent a byte at a time
/// was two billion scalar checks. The updates themselves (every word so far) are made once per
/// read, not per piece (`WyomingService.deliverTentative`).
struct StreamedTranscript {
    private var text = ""
    /// Words followed by white space, and their texts joined.
    private var closed: [SLUWord] = []
    private var closedText = ""
    /// Where the part not yet split into closed words starts (UTF-8 offsets in `text`): the
    /// separator that ended the last closed word, and the open word after it.
    private var openFrom = 0
    private var openWordFrom = 0

    /// Adds a piece; true when it may have changed the words (white space changes none: it may
    /// end a word, which the next piece shows). Throws the bound the server went past (the
    /// stream then ends): bytes, words, a word's bytes.
    mutating func append(_ piece: String) throws(SpeechClientError) -> Bool {
        guard text.utf8.count + piece.utf8.count <= SegmentAssembler.maxSegmentBytes else {
            throw SpeechClientError(.parse, "streamed a transcript of over \(SegmentAssembler.maxSegmentBytes / 1024) KiB (transcript-chunk events)")
        }
        text += piece
        guard piece.unicodeScalars.contains(where: { !SLUWord.separates($0) }) else { return false }
        let limit = SegmentAssembler.maxWordsPerSegment
        let utf8 = text.utf8
        let start = utf8.index(utf8.startIndex, offsetBy: openFrom)
        // Words before the last separator are closed: split once, here.
        let scalars = text.unicodeScalars
        var cut = scalars.endIndex
        while cut > start, !SLUWord.separates(scalars[scalars.index(before: cut)]) { cut = scalars.index(before: cut) }
        if cut > start {
            let last = scalars.index(before: cut)
            guard let done = SLUWord.words(String(text[start..<last]), atMost: limit - closed.count, firstIndex: closed.count) else {
                throw Self.tooMany
            }
            for word in done {
                guard word.text.utf8.count <= SegmentAssembler.maxWordBytes else { throw Self.wordTooLong }
                closedText += closedText.isEmpty ? word.text : " " + word.text
            }
            closed += done
            openFrom = utf8.distance(from: utf8.startIndex, to: last)
            openWordFrom = utf8.distance(from: utf8.startIndex, to: cut)
        }
        // What is left is at most one word: split again for every update, so bounded as a word is.
        guard utf8.count - openWordFrom <= SegmentAssembler.maxWordBytes else { throw Self.wordTooLong }
        if cut < scalars.endIndex && closed.count >= limit { throw Self.tooMany }
        return true
    }

    /// The words so far and their text; nil when there are none.
    func words() -> (text: String, words: [SLUWord])? {
        let utf8 = text.utf8
        let openStart = utf8.index(utf8.startIndex, offsetBy: openFrom)
        // Within the bound: `append` split the closed words against it, and the open part is
        // one word at most (SLUWord.words gives nil only past `atMost`).
        let open = SLUWord.words(String(text[openStart...]), atMost: .max, firstIndex: closed.count) ?? []
        guard !(closed.isEmpty && open.isEmpty) else { return nil }
        let openText = open.map(\.text).joined(separator: " ")
        return (closedText.isEmpty || openText.isEmpty ? closedText + openText : closedText + " " + openText, closed + open)
    }

    private static let tooMany = SpeechClientError(.parse, "streamed a transcript of more than \(SegmentAssembler.maxWordsPerSegment) words (transcript-chunk events)")
    private static let wordTooLong = SpeechClientError(.parse, "streamed a word of more than \(SegmentAssembler.maxWordBytes) bytes (transcript-chunk events)")
}
