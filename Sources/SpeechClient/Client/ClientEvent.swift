/// What a client reports to its application, in order, on its callback thread.
public enum ClientEvent: Sendable {
    case segment(Segment)
    case error(SpeechClientError)
    case start(contextId: String)
    case stop(contextId: String)
    case log(LogLevel, String)
}

/// Raw values are the C `spc_state` values.
public enum ClientState: Int32, Sendable {
    case idle = 0, starting = 1, listening = 2, stopping = 3, suspended = 4
}
