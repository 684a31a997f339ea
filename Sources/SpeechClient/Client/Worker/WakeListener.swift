/// Wakeword mode with a wake-word service (Wyoming, such as wyoming-openwakeword): the
/// connection that hears the listening audio. Every chunk heard while listening goes to it,
/// also during a context, so that its detector's state stays continuous. Lost, it is tried
/// again every 2 s while audio comes.
///
/// Used by the worker only, with its `audioLock` held. Its events reach the worker tagged with
/// the generation of the connection that sent them: those of an older connection are stale.
final class WakeListener {
    private let server: ServerURL
    private let name: String?
    private let connectTimeoutMilliseconds: Int
    private let applicationDriven: Bool
    private let cancellation: Cancellation
    private let onEvent: @Sendable (WakeEvent, Int) -> Void

    private var stream: WyomingWakeStream?
    /// The current connection's generation.
    private(set) var generation = 0
    /// When to try again after losing the service (monotonic ns).
    private var retryAt: UInt64?

    static let retryNanos: UInt64 = 2_000_000_000
    /// A service that stops reading must not make the audio pile up here: 1 MiB is 30 s.
    static let maxBacklogBytes = 1 << 20

    init(server: ServerURL, name: String?, connectTimeoutMilliseconds: Int, applicationDriven: Bool,
         cancellation: Cancellation, onEvent: @escaping @Sendable (WakeEvent, Int) -> Void) {
        self.server = server
        self.name = name
        self.connectTimeoutMilliseconds = connectTimeoutMilliseconds
        self.applicationDriven = applicationDriven
        self.cancellation = cancellation
        self.onEvent = onEvent
    }

    var isConnected: Bool { stream != nil }

    /// Connects (blocking, within the connect timeout). `origin` is the listening position of
    /// the next chunk sent, so detections come back in listening samples. Returns a line for the log.
    func open(origin: Int) throws(SpeechClientError) -> String {
        generation += 1
        let gen = generation
        retryAt = nil
        let handler = onEvent
        stream = try WyomingWakeStream(server: server, name: name, origin: origin,
                                       connectTimeoutMilliseconds: connectTimeoutMilliseconds,
                                       cancellation: cancellation, applicationDriven: applicationDriven) { event in
            handler(event, gen)
        }
        return "listening for the wake word \(stream?.model.map { "'\($0)'" } ?? "(any)") at \(server)"
    }

    /// Listening ended: the connection goes, and its late events are stale.
    func close() {
        stream?.close()
        stream = nil
        generation += 1
        retryAt = nil
    }

    /// The service was lost (its connection closed or it stopped reading): tried again in 2 s.
    func lost() {
        stream?.close()
        stream = nil
        generation += 1
        retryAt = Clock.monotonicNanos() + Self.retryNanos
    }

    enum Outcome {
        case sent
        /// The service came back (a line for the log) and took the chunk.
        case back(String)
        /// Still unavailable (a line for the debug log); the chunk is not heard.
        case stillDown(String)
        /// It took none of the last 30 s: the caller reports it lost (`lost()` was called).
        case stalled(SpeechClientError)
    }

    /// Sends one chunk heard at listening position `at`, reconnecting first when the retry is due.
    func hear(_ chunk: [Int16], at: Int) -> Outcome {
        var outcome = Outcome.sent
        if stream == nil {
            guard let due = retryAt, Clock.monotonicNanos() >= due else { return .stillDown("") }
            do throws(SpeechClientError) {
                _ = try open(origin: at)
                outcome = .back("the wake-word service is back: listening for the wake word again")
            } catch {
                retryAt = Clock.monotonicNanos() + Self.retryNanos
                return .stillDown("the wake-word service is still unavailable: \(error.message)")
            }
        }
        if let s = stream, s.backlogBytes > Self.maxBacklogBytes {
            lost()
            return .stalled(SpeechClientError(.timeout, "\(server) took none of the last 30 s of audio"))
        }
        stream?.send(chunk)
        return outcome
    }
}
