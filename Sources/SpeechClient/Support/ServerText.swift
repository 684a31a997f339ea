extension String {
    /// Text a server chose, fit to put in an error or a log line: at most `limit` bytes of
    /// UTF-8 (cut between scalars, "..." said so), control characters (a newline, an escape
    /// sequence for the terminal) as "?". A server's error text went whole into errors and
    /// logs, up to 4 MiB, once per reconnection attempt.
    func shownFromServer(limit: Int = 1_024) -> String {
        var shown = String.UnicodeScalarView()
        var bytes = 0
        for scalar in unicodeScalars {
            let s: Unicode.Scalar = scalar.properties.generalCategory == .control ? "?" : scalar
            bytes += s.utf8.count
            if bytes > limit {
                shown.append(contentsOf: "...".unicodeScalars)
                break
            }
            shown.append(s)
        }
        return String(shown)
    }
}
