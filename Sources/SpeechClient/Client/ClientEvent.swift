/// What a client reports to its application, in order, on its callback thread.
public enum ClientEvent: Sendable {
    case segment(Segment)
    case error(SpeechClientError)
    case start(contextId: String)
    case stop(contextId: String)
    case log(LogLevel, String)
    case connection(ConnectionState, attempt: Int32, delayMilliseconds: Int32, reason: SpeechClientError?)
}

/// Raw values are the C `spc_connection_state` values.
public enum ConnectionState: Int32, Sendable {
    case connecting = 0, ready = 1, reconnecting = 2, unavailable = 3, suspended = 4
}

/// Raw values are the C `spc_delivery` values.
public enum Delivery: Int32, Sendable {
    case thread = 0, application = 1
}

/// Raw values are the C `spc_state` values.
public enum ClientState: Int32, Sendable {
    case idle = 0, starting = 1, listening = 2, stopping = 3, suspended = 4
}
