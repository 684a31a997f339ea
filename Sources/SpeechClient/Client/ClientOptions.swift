/// Where the client's audio comes from.
public enum AudioInput: Sendable, Equatable {
    case microphone(device: String)
    case file(path: String)
    case push(sampleRate: Int, channels: Int)
    /// A descriptor the application owns (a pipe, standard input): WAV when `sampleRate` is 0,
    /// else raw signed 16-bit little-endian frames.
    case descriptor(fd: Int32, sampleRate: Int, channels: Int)
}

/// A key and its values, sent with every audio context (SLUStart.options).
public struct ContextOption: Sendable, Equatable {
    public var key: String
    public var values: [String]
    public init(key: String, values: [String]) { self.key = key; self.values = values }
}

/// Everything a client is configured with. Setters validate so that a client is never built
/// from an option the C caller got wrong; `validateForClient()` checks what must be present.
public struct ClientOptions: Sendable {
    public var server: ServerURL?
    public var identityServer: ServerURL?
    public var appId: String?
    public var projectId: String?
    public var language = "en-US"
    /// The recognizer model to ask for by name (Wyoming's `transcribe` name); nil: the server's.
    public var model: String?
    public var deviceId: String?
    public var cacheDir: String?
    public var caFile: String?
    public var insecureTLS = false
    public var audio = AudioInput.microphone(device: "default")
    public var chunkMilliseconds = 100
    public var prepareOnInit = false
    public var contextOptions: [ContextOption] = []
    /// Request headers (gRPC metadata) for every call to a Speechly or Riva server.
    public var headers: [(String, String)] = []
    public var logLevel = LogLevel.warning
    public var delivery = Delivery.thread
    /// Who reads the connection: the network thread, or the application in `ApplicationIO.process()`.
    public var io = NetworkIO.library
    /// How long to wait for a connection to answer: TCP, TLS and the server's first HTTP/2
    /// SETTINGS (or a Wyoming service's `info`), before a timeout error.
    public var connectTimeoutMilliseconds = 5_000
    /// The deadline of a login (the Speechly Identity call).
    public var loginTimeoutMilliseconds = 10_000
    /// How long a server may take to acknowledge a context's start on each stream (its
    /// `started`) before the stream counts as lost (and is retried as a lost connection is).
    public var startTimeoutMilliseconds = 10_000
    /// How long a server may take to finish a stream's context after its stop (its `finished`)
    /// before the stream counts as lost (retried as a lost connection is: a hung replica behind a
    /// balancer). Generous: a server decoding a long segment takes its time. Not in the C API.
    public var finishTimeoutMilliseconds = 60_000
    /// An SLU stream with no context is closed after this long and reopened by the next start.
    public var idleStreamMilliseconds = 30_000
    /// Reconnection after a lost connection in a context: attempts, and the backoff between
    /// them (doubling from the initial delay up to the maximum, with ±25 % jitter).
    public var reconnectAttempts = 6
    public var reconnectInitialDelayMilliseconds = 200
    public var reconnectMaxDelayMilliseconds = 5_000
    /// A context longer than this continues in a new server context at the next pause; the
    /// server's limit is 5 minutes, so the default leaves 30 s to find a pause.
    public var contextRolloverMilliseconds = 270_000
    /// Audio of the current context kept for replay after a reconnection.
    public var replayBufferMilliseconds = 30_000
    /// Request bytes one HTTP/2 stream may carry (issue 18): from half of it the context moves to
    /// a new stream at a pause, at all of it at once. Under nginx's default 1 MB request body cap
    /// (client_max_body_size 1m counts the gRPC framing too) with room to spare.
    public var streamBudgetBytes = 900_000
    /// After GOAWAY, the longest a context stays on the closing connection before it moves.
    public var drainTimeoutMilliseconds = 10_000
    /// How long `pushAudio` may wait for room when the audio not yet final would outgrow the
    /// replay buffer (0: never wait, as before 0.5).
    public var pushWaitMilliseconds = 0

    public mutating func setPushWait(milliseconds: Int) throws(SpeechClientError) {
        guard (0...3_600_000).contains(milliseconds) else {
            throw SpeechClientError(.invalidArgument, "push wait \(milliseconds) ms is outside 0-3600000 ms")
        }
        pushWaitMilliseconds = milliseconds
    }

    /// `reconnectAttempts` that means "never give up".
    public static let unlimitedReconnects = Int(UInt32.max)

    // The hands-free pipeline (issue 8).
    public var activation = ActivationMode.manual
    /// The wakeword phrase as normalised words (lower case, letters, digits and apostrophes).
    public var wakeword: [String] = []
    /// A Wyoming wake-word service that decides when wakeword activation opens a context
    /// (instead of the phrase in the transcript), and the wake word's model name or prefix.
    public var wakeService: ServerURL?
    public var wakeName: String?
    public var vad = VADSettings()
    /// Audio kept from before the VAD fired, sent first so the first word is not clipped.
    public var preRollMilliseconds = 300
    /// Silence after which an activation ends (its context is stopped).
    public var trailingSilenceMilliseconds = 1_000
    /// An activation lasts at least this long, and at most the maximum (then a timeout event).
    public var minActivationMilliseconds = 500
    public var maxActivationMilliseconds = 15_000
    /// Level events per chunk: only when the application asked for them.
    public var reportLevels = false
    /// An idle event each time the client's work ends (only when the application asked: an
    /// event more per context for everyone else).
    public var reportIdle = false

    public init() {}

    public static let chunkRange = 20...1000
    public static let pushRateRange = 8_000...192_000
    public static let pushChannelRange = 1...8

    public mutating func setServer(_ url: String) throws(SpeechClientError) {
        server = try ServerURL(parsing: url)
    }

    public mutating func setIdentityServer(_ url: String?) throws(SpeechClientError) {
        identityServer = try url.map { (u) throws(SpeechClientError) in try ServerURL(parsing: u) }
    }

    public mutating func setAppId(_ id: String?) throws(SpeechClientError) {
        appId = try Self.checkIdentifier(id, what: "app id")
    }

    public mutating func setProjectId(_ id: String?) throws(SpeechClientError) {
        projectId = try Self.checkIdentifier(id, what: "project id")
    }

    public mutating func setLanguage(_ code: String) throws(SpeechClientError) {
        // BCP-47 shape: letters, digits and hyphens, starting with a 2-3 letter language.
        let parts = code.split(separator: "-", omittingEmptySubsequences: false)
        guard let first = parts.first, (2...8).contains(first.count), first.allSatisfy({ $0.isASCII && $0.isLetter }),
              parts.dropFirst().allSatisfy({ (1...8).contains($0.count) && $0.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) } })
        else { throw SpeechClientError(.invalidArgument, "language '\(code)' is not a BCP-47 tag such as en-US") }
        language = code
    }

    public mutating func setModel(_ name: String?) throws(SpeechClientError) {
        model = try Self.checkIdentifier(name, what: "model")
    }

    public mutating func setDeviceId(_ id: String?) throws(SpeechClientError) {
        guard let id else { deviceId = nil; return }
        guard SystemRandom.isUUID(id) else {
            throw SpeechClientError(.invalidArgument, "device id '\(id)' is not a UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)")
        }
        deviceId = id.lowercased()
    }

    public mutating func setPath(_ path: String?, for keyPath: WritableKeyPath<ClientOptions, String?>, what: String) throws(SpeechClientError) {
        if let path, path.isEmpty { throw SpeechClientError(.invalidArgument, "\(what) must not be empty") }
        self[keyPath: keyPath] = path
    }

    public mutating func setAudio(_ input: AudioInput) throws(SpeechClientError) {
        switch input {
        case .microphone(let device):
            if device.isEmpty { throw SpeechClientError(.invalidArgument, "the ALSA device name must not be empty") }
        case .file(let path):
            if path.isEmpty { throw SpeechClientError(.invalidArgument, "the WAV file path must not be empty") }
        case .push(let rate, let channels):
            guard Self.pushRateRange.contains(rate) else {
                throw SpeechClientError(.invalidArgument, "push sample rate \(rate) Hz is outside 8000-192000 Hz")
            }
            guard Self.pushChannelRange.contains(channels) else {
                throw SpeechClientError(.invalidArgument, "push channel count \(channels) is outside 1-8")
            }
        case .descriptor(let fd, let rate, let channels):
            guard fd >= 0 else { throw SpeechClientError(.invalidArgument, "audio descriptor \(fd) is negative") }
            if rate == 0 {
                guard channels == 0 else {
                    throw SpeechClientError(.invalidArgument, "audio descriptor: channels must be 0 when the sample rate is 0 (the WAV header gives both), not \(channels)")
                }
            } else {
                guard Self.pushRateRange.contains(rate) else {
                    throw SpeechClientError(.invalidArgument, "audio descriptor sample rate \(rate) Hz is outside 8000-192000 Hz (0: a WAV header gives it)")
                }
                guard Self.pushChannelRange.contains(channels) else {
                    throw SpeechClientError(.invalidArgument, "audio descriptor channel count \(channels) is outside 1-8")
                }
            }
        }
        audio = input
    }

    public mutating func setChunkMilliseconds(_ ms: Int) throws(SpeechClientError) {
        guard Self.chunkRange.contains(ms) else {
            throw SpeechClientError(.invalidArgument, "chunk duration \(ms) ms is outside 20-1000 ms")
        }
        chunkMilliseconds = ms
    }

    public mutating func addContextOption(key: String, value: String) throws(SpeechClientError) {
        guard !key.isEmpty else { throw SpeechClientError(.invalidArgument, "a context option key must not be empty") }
        if let i = contextOptions.firstIndex(where: { $0.key == key }) {
            contextOptions[i].values.append(value)
        } else {
            contextOptions.append(ContextOption(key: key, values: [value]))
        }
    }

    static let maxHeaders = 32
    static let maxHeaderBytes = 16 * 1024

    /// A header for every gRPC call (hosted endpoints' API keys, routing ids). Names are HTTP/2's
    /// (lower case token characters; upper case is lowered); the protocol's own are refused.
    public mutating func addHeader(name: String, value: String) throws(SpeechClientError) {
        let lower = name.lowercased()
        let token: (Unicode.Scalar) -> Bool = { c in
            c.isASCII && (("a"..."z").contains(c) || ("0"..."9").contains(c) || "-_.".unicodeScalars.contains(c))
        }
        guard !lower.isEmpty, lower.unicodeScalars.allSatisfy(token) else {
            throw SpeechClientError(.invalidArgument, "header name '\(name)' must be letters, digits, '-', '_' or '.'")
        }
        let reserved = ["content-type", "te", "user-agent", "host", "connection", "content-length", "transfer-encoding"]
        guard !reserved.contains(lower), !lower.hasPrefix("grpc-") else {
            throw SpeechClientError(.invalidArgument, "header '\(lower)' is set by the library (HTTP/2 and gRPC)")
        }
        guard value.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value < 0x7F || $0.value == 0x09 }) else {
            throw SpeechClientError(.invalidArgument, "the value of header '\(lower)' must be printable ASCII (no line breaks)")
        }
        let total = headers.reduce(0) { $0 + $1.0.utf8.count + $1.1.utf8.count } + lower.utf8.count + value.utf8.count
        guard headers.count < Self.maxHeaders, total <= Self.maxHeaderBytes else {
            throw SpeechClientError(.invalidArgument, "more than \(Self.maxHeaders) headers or \(Self.maxHeaderBytes / 1024) KiB of them")
        }
        headers.append((lower, value))
    }

    public mutating func setReconnect(attempts: Int, initialMilliseconds: Int, maxMilliseconds: Int) throws(SpeechClientError) {
        guard (0...100).contains(attempts) || attempts == Self.unlimitedReconnects else {
            throw SpeechClientError(.invalidArgument, "reconnect attempts \(attempts) is outside 0-100 (or SPC_RECONNECT_UNLIMITED)")
        }
        guard (1...60_000).contains(initialMilliseconds) else {
            throw SpeechClientError(.invalidArgument, "reconnect initial delay \(initialMilliseconds) ms is outside 1-60000 ms")
        }
        guard (initialMilliseconds...600_000).contains(maxMilliseconds) else {
            throw SpeechClientError(.invalidArgument, "reconnect maximum delay \(maxMilliseconds) ms is outside \(initialMilliseconds)-600000 ms")
        }
        reconnectAttempts = attempts
        reconnectInitialDelayMilliseconds = initialMilliseconds
        reconnectMaxDelayMilliseconds = maxMilliseconds
    }

    public mutating func setReplayBuffer(milliseconds: Int) throws(SpeechClientError) {
        guard (1_000...600_000).contains(milliseconds) else {
            throw SpeechClientError(.invalidArgument, "replay buffer \(milliseconds) ms is outside 1000-600000 ms")
        }
        replayBufferMilliseconds = milliseconds
    }

    public static let streamBudgetRange = 65_536...1_073_741_824

    public mutating func setStreamBudget(bytes: Int) throws(SpeechClientError) {
        guard Self.streamBudgetRange.contains(bytes) else {
            throw SpeechClientError(.invalidArgument, "stream budget \(bytes) bytes is outside 65536-1073741824 bytes")
        }
        streamBudgetBytes = bytes
    }

    public mutating func setTimeouts(connectMilliseconds: Int, loginMilliseconds: Int, startMilliseconds: Int) throws(SpeechClientError) {
        for (name, value) in [("connect", connectMilliseconds), ("login", loginMilliseconds), ("start", startMilliseconds)] {
            guard (100...600_000).contains(value) else {
                throw SpeechClientError(.invalidArgument, "\(name) timeout \(value) ms is outside 100-600000 ms")
            }
        }
        connectTimeoutMilliseconds = connectMilliseconds
        loginTimeoutMilliseconds = loginMilliseconds
        startTimeoutMilliseconds = startMilliseconds
    }

    public mutating func setDrainTimeout(milliseconds: Int) throws(SpeechClientError) {
        guard (100...600_000).contains(milliseconds) else {
            throw SpeechClientError(.invalidArgument, "drain timeout \(milliseconds) ms is outside 100-600000 ms")
        }
        drainTimeoutMilliseconds = milliseconds
    }

    /// HTTP/2 PING on a connection with streams open and nothing received for `interval` (0: no
    /// keepalive); no answer within `timeout` fails the connection (a dead peer or path).
    public var keepaliveIntervalMilliseconds = 30_000
    public var keepaliveTimeoutMilliseconds = 10_000

    public mutating func setKeepalive(intervalMilliseconds: Int, timeoutMilliseconds: Int) throws(SpeechClientError) {
        guard intervalMilliseconds == 0 || (1_000...3_600_000).contains(intervalMilliseconds) else {
            throw SpeechClientError(.invalidArgument, "keepalive interval \(intervalMilliseconds) ms is outside 1000-3600000 ms (0: off)")
        }
        guard (100...600_000).contains(timeoutMilliseconds) else {
            throw SpeechClientError(.invalidArgument, "keepalive timeout \(timeoutMilliseconds) ms is outside 100-600000 ms")
        }
        keepaliveIntervalMilliseconds = intervalMilliseconds
        keepaliveTimeoutMilliseconds = timeoutMilliseconds
    }

    public mutating func setContextLimit(milliseconds: Int) throws(SpeechClientError) {
        guard (1_000...3_600_000).contains(milliseconds) else {
            throw SpeechClientError(.invalidArgument, "context limit \(milliseconds) ms is outside 1000-3600000 ms")
        }
        contextRolloverMilliseconds = milliseconds
    }

    public mutating func setLogLevel(_ raw: Int32) throws(SpeechClientError) {
        guard let level = LogLevel(rawValue: raw) else {
            throw SpeechClientError(.invalidArgument, "log level \(raw) is not one of SPC_LOG_NONE..SPC_LOG_DEBUG (0-4)")
        }
        logLevel = level
    }

    public mutating func setIO(_ raw: Int32) throws(SpeechClientError) {
        guard let value = NetworkIO(rawValue: raw) else {
            throw SpeechClientError(.invalidArgument, "io \(raw) is not SPC_IO_LIBRARY (0) or SPC_IO_APPLICATION (1)")
        }
        io = value
    }

    public mutating func setActivation(_ raw: Int32) throws(SpeechClientError) {
        guard let mode = ActivationMode(rawValue: raw) else {
            throw SpeechClientError(.invalidArgument, "activation \(raw) is not one of SPC_ACTIVATION_MANUAL, _VOICE, _WAKEWORD (0-2)")
        }
        activation = mode
    }

    /// Words of a phrase as the wakeword matcher compares them.
    public static func normalizedWords(_ text: String) -> [String] {
        var words: [String] = []
        var current = ""
        for ch in text.lowercased() {
            if ch.isLetter || ch.isNumber || ch == "'" {
                current.append(ch)
            } else if !current.isEmpty {
                words.append(current)
                current = ""
            }
        }
        if !current.isEmpty { words.append(current) }
        return words
    }

    public mutating func setWakeword(_ phrase: String?) throws(SpeechClientError) {
        guard let phrase else { wakeword = []; return }
        let words = Self.normalizedWords(phrase)
        guard !words.isEmpty, words.count <= 8, phrase.utf8.count <= 256 else {
            throw SpeechClientError(.invalidArgument, "wakeword '\(phrase)' must have 1-8 words (letters or digits), 256 bytes at most")
        }
        wakeword = words
    }

    /// A wake-word service (`wyoming://HOST:PORT` or `wyoming+unix:///PATH`) and its wake word
    /// (a model name or its prefix: "hey_jarvis"; nil: any); a nil URL clears both.
    public mutating func setWakeService(_ url: String?, name: String?) throws(SpeechClientError) {
        guard let url else { wakeService = nil; wakeName = nil; return }
        let parsed = try ServerURL(parsing: url)
        guard parsed.backend == .wyoming else {
            throw SpeechClientError(.invalidArgument, "wakeword service URL '\(url)' must be wyoming://HOST:PORT or wyoming+unix:///PATH")
        }
        if let name {
            guard !name.isEmpty, name.utf8.count <= 128,
                  name.unicodeScalars.allSatisfy({ $0.properties.isAlphabetic || ("0"..."9").contains($0) || "_-.".unicodeScalars.contains($0) }) else {
                throw SpeechClientError(.invalidArgument, "wake word name '\(name)' must be 1-128 letters, digits, '_', '-' or '.'")
            }
        }
        wakeService = parsed
        wakeName = name
    }

    /// Raw parameter numbers are the C `spc_vad_param` values.
    public mutating func setVAD(parameter: Int32, value: Double) throws(SpeechClientError) {
        func check(_ range: ClosedRange<Double>, _ name: String) throws(SpeechClientError) {
            guard value.isFinite, range.contains(value) else {
                throw SpeechClientError(.invalidArgument, "VAD \(name) \(value) is outside \(range.lowerBound)...\(range.upperBound)")
            }
        }
        // Frame counts and milliseconds are whole numbers: 2.5 frames is a mistake, not 2.
        if [2, 3, 6].contains(parameter), value.isFinite, value.rounded() != value {
            throw SpeechClientError(.invalidArgument, "VAD parameter \(parameter) takes a whole number, not \(value)")
        }
        var v = vad
        switch parameter {
        case 0: try check(0...60, "SNR (dB)"); v.snrDecibels = value
        case 1: try check(-100...0, "noise gate (dBFS)"); v.noiseGateDecibels = value
        case 2: try check(20...60_000, "noise learning half-time (ms)"); v.noiseLearnHalftimeMilliseconds = Int(value)
        case 3: try check(1...100, "window (frames)"); v.windowFrames = Int(value)
        case 4: try check(0.01...1, "activation ratio"); v.activationRatio = value
        case 5: try check(0...1, "release ratio"); v.releaseRatio = value
        case 6: try check(0...10_000, "hold (ms)"); v.holdMilliseconds = Int(value)
        default: throw SpeechClientError(.invalidArgument, "VAD parameter \(parameter) is not one of SPC_VAD_* (0-6)")
        }
        guard v.releaseRatio < v.activationRatio else {
            throw SpeechClientError(.invalidArgument, "the VAD release ratio (\(v.releaseRatio)) must be below the activation ratio (\(v.activationRatio))")
        }
        vad = v
    }

    public mutating func setEndpointing(preRoll: Int, trailingSilence: Int, minActivation: Int, maxActivation: Int) throws(SpeechClientError) {
        guard (0...5_000).contains(preRoll) else {
            throw SpeechClientError(.invalidArgument, "pre-roll \(preRoll) ms is outside 0-5000 ms")
        }
        guard (100...60_000).contains(trailingSilence) else {
            throw SpeechClientError(.invalidArgument, "trailing silence \(trailingSilence) ms is outside 100-60000 ms")
        }
        guard (0...60_000).contains(minActivation) else {
            throw SpeechClientError(.invalidArgument, "minimum activation \(minActivation) ms is outside 0-60000 ms")
        }
        guard (max(minActivation, 500)...3_600_000).contains(maxActivation) else {
            throw SpeechClientError(.invalidArgument, "maximum activation \(maxActivation) ms is outside \(max(minActivation, 500))-3600000 ms")
        }
        preRollMilliseconds = preRoll
        trailingSilenceMilliseconds = trailingSilence
        minActivationMilliseconds = minActivation
        maxActivationMilliseconds = maxActivation
    }

    /// What spc_client_new requires beyond what the setters checked.
    public func validateForClient() throws(SpeechClientError) {
        // The fields are public to Swift: an audio input or chunk length set without its setter
        // is checked here, as a 0-channel format would divide by zero later.
        var checked = self
        try checked.setAudio(audio)
        try checked.setChunkMilliseconds(chunkMilliseconds)
        guard server != nil else {
            throw SpeechClientError(.invalidArgument, "no server URL: call spc_options_set_server_url()")
        }
        // Only Speechly logs in; a Wyoming server has no notion of an app.
        guard appId != nil || server?.backend != .speechly else {
            throw SpeechClientError(.invalidArgument, projectId == nil
                ? "no app id: call spc_options_set_app_id()"
                : "a project id needs an app id as well: each start of a project-scoped login names the app (spc_options_set_app_id())")
        }
        if server?.backend == .speechly, headers.contains(where: { $0.0 == "authorization" }) {
            throw SpeechClientError(.invalidArgument, "header 'authorization' carries the login token on a Speechly server: "
                                    + "it cannot be set with spc_options_add_header()")
        }
        if activation == .wakeword && wakeword.isEmpty && wakeService == nil {
            throw SpeechClientError(.invalidArgument, "wakeword activation needs a phrase (spc_options_set_wakeword()) or a wake-word service (spc_options_set_wakeword_url())")
        }
    }

    static func checkIdentifier(_ id: String?, what: String) throws(SpeechClientError) -> String? {
        guard let id else { return nil }
        guard !id.isEmpty, id.utf8.count <= 256, id.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value != 0x7F }) else {
            throw SpeechClientError(.invalidArgument, "\(what) '\(id)' must be 1-256 characters without spaces or control characters")
        }
        return id
    }
}
