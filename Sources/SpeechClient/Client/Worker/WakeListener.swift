/// Wakeword mode with a wake-word service (Wyoming, such as wyoming-openwakeword): the
/// connection that hears the listening audio. Every chunk heard while listening goes to it,
/// also during a context, so that its detector's state stays continuous. Lost, it is tried
/// again every 2 s while audio comes: first probed off the worker (a connect and describe on a
/// pool thread, within the connect timeout), then, once it answered, connected. Connected on the
/// worker each time, a service that had gone silent (a host dropping packets, a hung process)
/// held the worker for the whole connect timeout every 2 s: the open context's audio and the
/// application's stop waited, and the capture buffer filled.
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
    /// A probe of the lost service is running; it answered (connect now).
    private var probing = false
    private var answered = false
    private let retryNanos: UInt64

    static let retryNanos: UInt64 = 2_000_000_000
    /// A service that stops reading must not make the audio pile up here: 1 MiB is 30 s.
    static let maxBacklogBytes = 1 << 20

    init(server: ServerURL, name: String?, connectTimeoutMilliseconds: Int, applicationDriven: Bool,
         cancellation: Cancellation, retryNanos: UInt64 = WakeListener.retryNanos,
         onEvent: @escaping @Sendable (WakeEvent, Int) -> Void) {
        self.retryNanos = retryNanos
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
        probing = false
        answered = false
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
        probing = false
        answered = false
    }

    /// The service was lost (its connection closed or it stopped reading): tried again in 2 s.
    func lost() {
        stream?.close()
        stream = nil
        generation += 1
        retryAt = Clock.monotonicNanos() + retryNanos
        probing = false
        answered = false
    }

    /// The probe's answer (`WakeEvent.probed`, of the current generation): connect at the next
    /// chunk, or try again in 2 s. Returns a line for the debug log.
    func probed(_ failure: SpeechClientError?) -> String {
        probing = false
        if let failure {
            retryAt = Clock.monotonicNanos() + retryNanos
            return "the wake-word service is still unavailable: \(failure.message)"
        }
        answered = true
        return ""
    }

    /// Connects and describes on a pool thread; the answer comes back as `WakeEvent.probed`.
    private func probe() {
        probing = true
        let (server, timeout, cancellation, handler, gen) = (server, connectTimeoutMilliseconds, cancellation, onEvent, generation)
        ThreadPool.workers.schedule(WakeProbe {
            do throws(SpeechClientError) {
                let (socket, _, _) = try WyomingHandshake.describe(server, connectTimeoutMilliseconds: timeout, cancellation: cancellation)
                socket.close()
                handler(.probed(nil), gen)
            } catch {
                handler(.probed(error), gen)
            }
        })
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
            guard answered else {
                if !probing, let due = retryAt, Clock.monotonicNanos() >= due { probe() }
                return .stillDown("")
            }
            // It answered a moment ago: connected here (quick, unless it went silent since).
            do throws(SpeechClientError) {
                _ = try open(origin: at)
                outcome = .back("the wake-word service is back: listening for the wake word again")
            } catch {
                answered = false
                retryAt = Clock.monotonicNanos() + retryNanos
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

/// A probe of a lost wake-word service, run once on a pool thread.
private final class WakeProbe: PoolWork, @unchecked Sendable {  // `body` is run once, by one thread
    private let body: () -> Void
    init(_ body: @escaping () -> Void) { self.body = body }
    func runOnPool() -> Bool {
        body()
        return false
    }
}
