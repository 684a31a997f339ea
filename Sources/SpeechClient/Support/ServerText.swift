extension String {
    /// Text a server chose, fit to put in an error or a log line: at most `limit` bytes of
    /// UTF-8, cut between characters as the reader sees them ("..." says so: a cut inside one
    /// would show half a flag or an accent on nothing), and what could make a line lie about
    /// itself shown as "?": control characters (a newline, a terminal's escape sequence), line
    /// and paragraph separators, and bidirectional controls (U+202E turns the rest of a log
    /// line around). A server's error text went whole into errors and logs, up to 4 MiB, once
    /// per reconnection attempt.
    func shownFromServer(limit: Int = 1_024) -> String {
        var shown = String.UnicodeScalarView()
        var bytes = 0
        for character in self {
            var piece = String.UnicodeScalarView()
            var pieceBytes = 0
            for scalar in character.unicodeScalars {
                let s: Unicode.Scalar = scalar.isHiddenInAServersText ? "?" : scalar
                piece.append(s)
                pieceBytes += s.utf8.count
            }
            if bytes + pieceBytes > limit {
                shown.append(contentsOf: "...".unicodeScalars)
                break
            }
            bytes += pieceBytes
            shown.append(contentsOf: piece)
        }
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
