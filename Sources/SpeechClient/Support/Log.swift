/// Log levels; raw values are the C `spc_log_level` values.
public enum LogLevel: Int32, Sendable, Comparable {
    case none = 0, error = 1, warning = 2, info = 3, debug = 4
    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }
}
