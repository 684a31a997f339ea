import Synchronization

/// What a wake-word service tells the worker.
enum WakeEvent: Sendable {
    /// A wake word was heard: its model's name as the service gives it, and where it was heard
    /// in the audio sent since listening began (samples), when the service stamped it.
    case detection(name: String, sample: Int?)
    /// The connection ended (the service closed it, failed, or broke the protocol).
    case closed(SpeechClientError)
    /// A lost service was tried again off the worker (`WakeListener`): it answered (nil), or
    /// not (why).
    case probed(SpeechClientError?)
}

/// A Wyoming wake-word service (wyoming-openwakeword, wyoming-porcupine, ...) listening to the
/// client's audio while it waits for its wake word:
///
///     client: describe                      server: info (a wake program with the wanted model)
///     client: detect {names}, audio-start
///     client: audio-chunk ... (stamped)     server: detection {name, timestamp} ...
///
/// The audio goes on for as long as the client listens (openwakeword answers `audio-stop` by
/// discarding what it had not processed). One wake word can come back as a burst of detections
/// (openwakeword: one per 80 ms frame over its threshold); the worker opens one context for it.
/// Sendable: its fields are immutable after init or atomic (`samplesSent`); `handle` runs inside the loop's work.
final class WyomingWakeStream: @unchecked Sendable {
    private let connection: WyomingConnection
    private let wanted: String?
    private let handler: @Sendable (WakeEvent) -> Void
    private let samplesSent = Atomic<Int>(0)
    /// The client's position (samples since listening began) of this connection's first sample:
    /// a reconnected service stamps from 0 again.
    private let origin: Int
    /// The model asked for: the service's full name for the wanted wake word.
    let model: String?

    /// Connects and checks the service within the connect timeout (on the calling thread), then
    /// starts the detection. `name`: the wake word's model name or its prefix ("hey_jarvis" for
    /// openwakeword's "hey_jarvis_v0.1"); nil for any wake word the service knows.
    init(server: ServerURL, name: String?, origin: Int, connectTimeoutMilliseconds: Int, cancellation: Cancellation?,
         applicationDriven: Bool, handler: @escaping @Sendable (WakeEvent) -> Void) throws(SpeechClientError) {
        let (socket, info, reader) = try WyomingHandshake.describe(server, connectTimeoutMilliseconds: connectTimeoutMilliseconds,
                                                                   cancellation: cancellation)
        let peer = server.description
        do throws(SpeechClientError) {
            model = try Self.model(name, info: info, peer: peer)
            connection = try WyomingConnection(io: PlainStream(socket: socket, peer: peer), reader: reader, peer: peer,
                                               closedMeans: "while it listened for the wake word")
        } catch {
            socket.close()
            throw error
        }
        wanted = name
        self.origin = origin
        self.handler = handler
        connection.onEvent = { [self] event in handle(event) }
        connection.onFailure = { [handler] error in handler(.closed(error)) }
        try connection.start(applicationDriven: applicationDriven)
        var detect: [String: JSONValue] = [:]
        if let model { detect["names"] = .array([.string(model)]) }
        connection.send([WyomingEvent(type: "detect", data: detect),
                         WyomingEvent(type: "audio-start", data: WyomingAudio.format(rate: SpeechAudio.sampleRate, timestamp: 0))])
    }

    /// The service's model for `name`: the first whose name starts with it (case aside). A
    /// service with no wake program, or without such a model, is refused naming what it has.
    static func model(_ name: String?, info: WyomingEvent, peer: String) throws(SpeechClientError) -> String? {
        var programs: [JSONValue] = []
        if case .array(let a)? = info.data["wake"] { programs = a }
        guard !programs.isEmpty else {
            throw SpeechClientError(.invalidArgument, "\(peer) is not a Wyoming wake-word service: its info lists no wake program")
        }
        guard let name else { return nil }
        var names: [String] = []
        for program in programs {
            guard case .array(let models)? = program["models"] else { continue }
            names += models.compactMap { $0["name"]?.stringValue }
        }
        if let found = names.first(where: { $0.lowercased().hasPrefix(name.lowercased()) }) { return found }
        let shown = names.prefix(12).map { $0.shownFromServer(limit: 64) }.joined(separator: ", ") + (names.count > 12 ? ", ..." : "")
        throw SpeechClientError(.invalidArgument, "\(peer) has no wake word '\(name)': its info lists \(names.isEmpty ? "none" : shown)")
    }

    /// Audio heard while listening, from any thread, in order (16 kHz).
    func send(_ samples: [Int16]) {
        let at = samplesSent.add(samples.count, ordering: .relaxed).newValue - samples.count
        connection.send([WyomingAudio.chunk(samples, rate: SpeechAudio.sampleRate, atSample: at)])
    }

    var backlogBytes: Int { connection.backlogBytes }

    /// Ends the detection without a report.
    func close() {
        connection.loop.execute { [connection] in connection.close() }
    }

    // MARK: the loop's side

    private func handle(_ event: WyomingEvent) {
        switch event.type {
        case "detection":
            let name = event.data["name"]?.stringValue ?? ""
            if let wanted, !name.lowercased().hasPrefix(wanted.lowercased()) { return }
            let sample = event.data["timestamp"]?.numberValue.flatMap { ms -> Int? in
                ms.isFinite && ms >= 0 && ms < 1e12 ? origin + SpeechAudio.samples(milliseconds: Int(ms)) : nil
            }
            handler(.detection(name: name.shownFromServer(limit: 256), sample: sample))
        case "error":
            connection.fail(WyomingStream.serverError(event, peer: connection.peer))
        case "ping":
            connection.reply(WyomingEvent(type: "pong", data: event.data["text"].map { ["text": $0] } ?? [:]))
        default:
            break  // not-detected, and events of newer versions
        }
    }
}
