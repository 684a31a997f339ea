/// What a client reports to its application, in order, on its callback thread.
public enum ClientEvent: Sendable {
    case segment(Segment)
    case error(SpeechClientError)
    case start(contextId: String)
    case stop(contextId: String)
    case log(LogLevel, String)
    case connection(ConnectionState, attempt: Int32, delayMilliseconds: Int32, reason: SpeechClientError?)
    /// The hands-free pipeline: VAD state, activation, timeout; position in ms of audio since the
    /// start; for an activation, what was heard (the wake word's name, or the wakeword phrase).
    case listen(ListenEvent, positionMilliseconds: Int64, name: String? = nil)
    /// The level of one chunk of audio in dBFS (with a level callback only).
    case level(Float, positionMilliseconds: Int64)
    /// The work begun by a start or a suspend ended: IDLE or SUSPENDED, no start queued, after
    /// every event before it (with `reportIdle` only). While its callback runs the client counts
    /// as idle, so a wait_idle caller woken by it sees it idle (since 0.11).
    case idle
}

/// Raw values are the C `spc_listen_event` values.
public enum ListenEvent: Int32, Sendable {
    case speech = 0, silence = 1, activate = 2, deactivate = 3, timeout = 4
}

/// How contexts open. Raw values are the C `spc_activation` values.
public enum ActivationMode: Int32, Sendable {
    /// spc_client_start/stop open and close each context.
    case manual = 0
    /// Start begins listening; the VAD opens a context at speech and closes it after silence.
    case voice = 1
    /// As voice, and a context's segments reach the application only from the one holding
    /// the wakeword phrase on.
    case wakeword = 2
}

/// Raw values are the C `spc_connection_state` values.
public enum ConnectionState: Int32, Sendable {
    case connecting = 0, ready = 1, reconnecting = 2, unavailable = 3, suspended = 4
    /// No connection opened yet (only the on-demand query gives it, never an event).
    case idle = 5
}

/// Raw values are the C `spc_io` values: who reads the client's connection.
public enum NetworkIO: Int32, Sendable {
    case library = 0, application = 1
}

/// Raw values are the C `spc_delivery` values.
public enum Delivery: Int32, Sendable {
    case thread = 0, application = 1
    /// On the shared delivery pool (since 0.10).
    case shared = 2
}

/// Raw values are the C `spc_state` values.
public enum ClientState: Int32, Sendable {
    case idle = 0, starting = 1, listening = 2, stopping = 3, suspended = 4
}
