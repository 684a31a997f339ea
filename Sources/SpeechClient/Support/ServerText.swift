extension String {
    /// Text a server chose, fit to put in an error or a log line: at most `limit` bytes of
    /// UTF-8, cut between characters as the reader sees them ("..." says so: a cut inside one
    /// would show half a flag or an accent on nothing), and what could make a line lie about
    /// itself shown as "?": control characters (a newline, a terminal's escape sequence), line
    /// and paragraph separators, and bidirectional controls (U+202E turns the rest of a log
    /// line around). A server's error text went whole into errors and logs, up to 4 MiB, once
    /// per reconnection attempt.
    func shownFromServer(limit: Int = 1_024) -> String {
        // Only the first `limit` bytes and one scalar more are looked at, so a long text (one
        // character of 4 MiB: a letter and two million accents) costs no more than a short one.
        // Boundaries inside that prefix are the whole text's; its last character may go on.
        var prefix = String.UnicodeScalarView()
        var prefixBytes = 0
        var whole = true
        for scalar in unicodeScalars {
            if prefixBytes > limit {
                whole = false
                break
            }
            prefix.append(scalar)
            prefixBytes += scalar.utf8.count
        }
        var characters = Array(String(prefix))
        if !whole { characters.removeLast() }
        var shown = String.UnicodeScalarView()
        var bytes = 0
        for character in characters {
            var piece = String.UnicodeScalarView()
            var pieceBytes = 0
            for scalar in character.unicodeScalars {
                let s: Unicode.Scalar = scalar.isHiddenInAServersText ? "?" : scalar
                piece.append(s)
                pieceBytes += s.utf8.count
            }
            if bytes + pieceBytes > limit {
                whole = false
                break
            }
            bytes += pieceBytes
            shown.append(contentsOf: piece)
        }
        if !whole { shown.append(contentsOf: "...".unicodeScalars) }
        return String(shown)
    }
}

extension Unicode.Scalar {
    var isHiddenInAServersText: Bool {
        switch properties.generalCategory {
        case .control, .lineSeparator, .paragraphSeparator: return true
        default: return properties.isBidiControl
        }
    }
}
