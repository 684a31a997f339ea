import CSpeechClientAPI
import SpeechClient

@c @implementation
public func spc_options_new() -> OpaquePointer? {
    OpaquePointer(Unmanaged.passRetained(OptionsHandle()).toOpaque())
}

@c @implementation
public func spc_options_free(_ options: OpaquePointer?) {
    guard let options else { return }
    Unmanaged<OptionsHandle>.fromOpaque(UnsafeRawPointer(options)).release()
}

/// Applies a validated change to the options behind a handle; a rejected change is remembered
/// with its reason, naming the setter (`#function` of the caller).
private func update(_ options: OpaquePointer?, setter: String = #function,
                    _ body: (inout ClientOptions) throws(SpeechClientError) -> Void) -> spc_status {
    guard let handle = OptionsHandle.from(options) else { return SPC_ERROR_INVALID_ARGUMENT }
    let name = String(setter.prefix { $0 != "(" })
    do throws(SpeechClientError) {
        var copy = handle.options
        try body(&copy)
        handle.options = copy
        handle.lastError = nil
        handle.rejected[name] = nil
        return SPC_OK
    } catch {
        let text = "\(name): \(error.message)"
        handle.lastError = OwnedCString(text)
        handle.rejected[name] = text
        return .from(error)
    }
}

@c @implementation
public func spc_options_last_error(_ options: OpaquePointer?) -> UnsafePointer<CChar>? {
    guard let handle = OptionsHandle.from(options) else { return StaticText.empty.constPointer }
    return handle.lastError?.constPointer ?? StaticText.empty.constPointer
}

/// For the callback setters: a callback and its user_data stored in the options.
private func setCallback(_ options: OpaquePointer?, _ body: (inout CCallbacks) -> Void) -> spc_status {
    guard let handle = OptionsHandle.from(options) else { return SPC_ERROR_INVALID_ARGUMENT }
    body(&handle.callbacks)
    handle.lastError = nil  // a setter that succeeded: "" (as every other setter)
    return SPC_OK
}

/// For setters whose string is required.
private func required(_ p: UnsafePointer<CChar>?) throws(SpeechClientError) -> String {
    guard let text = try optionalString(p) else { throw SpeechClientError(.invalidArgument, "a required string argument is NULL") }
    return text
}

@c @implementation
public func spc_options_set_server_url(_ options: OpaquePointer?, _ url: UnsafePointer<CChar>?) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setServer(try required(url)) }
}

@c @implementation
public func spc_options_set_identity_url(_ options: OpaquePointer?, _ url: UnsafePointer<CChar>?) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setIdentityServer(try optionalString(url)) }
}

@c @implementation
public func spc_options_set_app_id(_ options: OpaquePointer?, _ appId: UnsafePointer<CChar>?) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setAppId(try optionalString(appId)) }
}

@c @implementation
public func spc_options_set_project_id(_ options: OpaquePointer?, _ projectId: UnsafePointer<CChar>?) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setProjectId(try optionalString(projectId)) }
}

@c @implementation
public func spc_options_set_language(_ options: OpaquePointer?, _ language: UnsafePointer<CChar>?) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setLanguage(try required(language)) }
}

@c @implementation
public func spc_options_set_model(_ options: OpaquePointer?, _ model: UnsafePointer<CChar>?) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setModel(try optionalString(model)) }
}

@c @implementation
public func spc_options_set_device_id(_ options: OpaquePointer?, _ deviceId: UnsafePointer<CChar>?) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setDeviceId(try optionalString(deviceId)) }
}

@c @implementation
public func spc_options_set_cache_dir(_ options: OpaquePointer?, _ path: UnsafePointer<CChar>?) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setPath(try optionalString(path), for: \.cacheDir, what: "the cache directory") }
}

@c @implementation
public func spc_options_set_ca_file(_ options: OpaquePointer?, _ path: UnsafePointer<CChar>?) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setPath(try optionalString(path), for: \.caFile, what: "the CA file") }
}

@c @implementation
public func spc_options_set_insecure_tls(_ options: OpaquePointer?, _ insecure: Int32) -> spc_status {
    update(options) { o in o.insecureTLS = insecure != 0 }
}

@c @implementation
public func spc_options_set_audio_microphone(_ options: OpaquePointer?, _ device: UnsafePointer<CChar>?) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setAudio(.microphone(device: try optionalString(device) ?? "default")) }
}

@c @implementation
public func spc_options_set_audio_file(_ options: OpaquePointer?, _ path: UnsafePointer<CChar>?) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setAudio(.file(path: try required(path))) }
}

@c @implementation
public func spc_options_set_audio_push(_ options: OpaquePointer?, _ sampleRate: UInt32, _ channels: UInt32) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setAudio(.push(sampleRate: Int(sampleRate), channels: Int(channels))) }
}

@c @implementation
public func spc_options_set_audio_fd(_ options: OpaquePointer?, _ fd: Int32, _ sampleRate: UInt32, _ channels: UInt32) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in
        try o.setAudio(.descriptor(fd: fd, sampleRate: Int(sampleRate), channels: Int(channels)))
    }
}

@c @implementation
public func spc_options_set_chunk_ms(_ options: OpaquePointer?, _ chunkMs: UInt32) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setChunkMilliseconds(Int(chunkMs)) }
}

@c @implementation
public func spc_options_set_prepare_on_init(_ options: OpaquePointer?, _ prepare: Int32) -> spc_status {
    update(options) { o in o.prepareOnInit = prepare != 0 }
}

@c @implementation
public func spc_options_add_context_option(_ options: OpaquePointer?, _ key: UnsafePointer<CChar>?, _ value: UnsafePointer<CChar>?) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.addContextOption(key: try required(key), value: try required(value)) }
}

@c @implementation
public func spc_options_add_header(_ options: OpaquePointer?, _ name: UnsafePointer<CChar>?, _ value: UnsafePointer<CChar>?) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.addHeader(name: try required(name), value: try required(value)) }
}

@c @implementation
public func spc_options_clear_headers(_ options: OpaquePointer?) -> spc_status {
    update(options) { o in o.headers = [] }
}

@c @implementation
public func spc_options_clear_context_options(_ options: OpaquePointer?) -> spc_status {
    update(options) { o in o.contextOptions = [] }
}

@c @implementation
public func spc_options_set_reconnect(_ options: OpaquePointer?, _ maxAttempts: UInt32, _ initialDelayMs: UInt32, _ maxDelayMs: UInt32) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in
        try o.setReconnect(attempts: Int(maxAttempts), initialMilliseconds: Int(initialDelayMs), maxMilliseconds: Int(maxDelayMs))
    }
}

@c @implementation
public func spc_options_set_replay_buffer_ms(_ options: OpaquePointer?, _ ms: UInt32) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setReplayBuffer(milliseconds: Int(ms)) }
}

@c @implementation
public func spc_options_set_context_limit_ms(_ options: OpaquePointer?, _ ms: UInt32) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setContextLimit(milliseconds: Int(ms)) }
}

@c @implementation
public func spc_options_set_stream_budget(_ options: OpaquePointer?, _ maxBytes: UInt32) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setStreamBudget(bytes: Int(maxBytes)) }
}

@c @implementation
public func spc_options_set_drain_timeout_ms(_ options: OpaquePointer?, _ ms: UInt32) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setDrainTimeout(milliseconds: Int(ms)) }
}

@c @implementation
public func spc_options_set_timeouts(_ options: OpaquePointer?, _ connectMs: UInt32, _ loginMs: UInt32, _ startMs: UInt32) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in
        try o.setTimeouts(connectMilliseconds: Int(connectMs), loginMilliseconds: Int(loginMs), startMilliseconds: Int(startMs))
    }
}

@c @implementation
public func spc_options_set_keepalive(_ options: OpaquePointer?, _ intervalMs: UInt32, _ timeoutMs: UInt32) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in
        try o.setKeepalive(intervalMilliseconds: Int(intervalMs), timeoutMilliseconds: Int(timeoutMs))
    }
}

@c @implementation
public func spc_options_set_push_wait_ms(_ options: OpaquePointer?, _ ms: UInt32) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setPushWait(milliseconds: Int(ms)) }
}

@c @implementation
public func spc_options_set_log_level(_ options: OpaquePointer?, _ level: spc_log_level) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setLogLevel(Int32(bitPattern: level.rawValue)) }
}

@c @implementation
public func spc_options_set_segment_cb(_ options: OpaquePointer?, _ cb: spc_segment_cb?, _ userData: UnsafeMutableRawPointer?) -> spc_status {
    setCallback(options) { $0.segment = cb; $0.segmentData = userData }
}

@c @implementation
public func spc_options_set_error_cb(_ options: OpaquePointer?, _ cb: spc_error_cb?, _ userData: UnsafeMutableRawPointer?) -> spc_status {
    setCallback(options) { $0.error = cb; $0.errorData = userData }
}

@c @implementation
public func spc_options_set_start_cb(_ options: OpaquePointer?, _ cb: spc_start_cb?, _ userData: UnsafeMutableRawPointer?) -> spc_status {
    setCallback(options) { $0.start = cb; $0.startData = userData }
}

@c @implementation
public func spc_options_set_stop_cb(_ options: OpaquePointer?, _ cb: spc_stop_cb?, _ userData: UnsafeMutableRawPointer?) -> spc_status {
    setCallback(options) { $0.stop = cb; $0.stopData = userData }
}

@c @implementation
public func spc_options_set_log_cb(_ options: OpaquePointer?, _ cb: spc_log_cb?, _ userData: UnsafeMutableRawPointer?) -> spc_status {
    setCallback(options) { $0.log = cb; $0.logData = userData }
}

@c @implementation
public func spc_options_set_state_cb(_ options: OpaquePointer?, _ cb: spc_state_cb?, _ userData: UnsafeMutableRawPointer?) -> spc_status {
    setCallback(options) { $0.state = cb; $0.stateData = userData }
}

@c @implementation
public func spc_options_set_delivery(_ options: OpaquePointer?, _ delivery: spc_delivery) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in
        guard let d = Delivery(rawValue: Int32(bitPattern: delivery.rawValue)) else {
            throw SpeechClientError(.invalidArgument, "delivery \(delivery.rawValue) is not SPC_DELIVERY_THREAD (0), SPC_DELIVERY_APPLICATION (1) or SPC_DELIVERY_SHARED (2)")
        }
        o.delivery = d
    }
}

// MARK: - Application-driven network I/O (0.3)

@c @implementation
public func spc_options_set_io(_ options: OpaquePointer?, _ io: spc_io) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setIO(Int32(bitPattern: io.rawValue)) }
}

// MARK: - Hands-free listening (0.2)

@c @implementation
public func spc_options_set_activation(_ options: OpaquePointer?, _ mode: spc_activation) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setActivation(Int32(bitPattern: mode.rawValue)) }
}

@c @implementation
public func spc_options_set_wakeword(_ options: OpaquePointer?, _ phrase: UnsafePointer<CChar>?) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setWakeword(try optionalString(phrase)) }
}

@c @implementation
public func spc_options_set_wakeword_url(_ options: OpaquePointer?, _ url: UnsafePointer<CChar>?,
                                         _ name: UnsafePointer<CChar>?) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setWakeService(try optionalString(url), name: try optionalString(name)) }
}

@c @implementation
public func spc_options_set_vad(_ options: OpaquePointer?, _ param: spc_vad_param, _ value: Double) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in try o.setVAD(parameter: Int32(bitPattern: param.rawValue), value: value) }
}

@c @implementation
public func spc_options_set_endpointing(_ options: OpaquePointer?, _ preRollMs: UInt32, _ trailingSilenceMs: UInt32,
                                        _ minActivationMs: UInt32, _ maxActivationMs: UInt32) -> spc_status {
    update(options) { (o) throws(SpeechClientError) in
        try o.setEndpointing(preRoll: Int(preRollMs), trailingSilence: Int(trailingSilenceMs),
                             minActivation: Int(minActivationMs), maxActivation: Int(maxActivationMs))
    }
}

@c @implementation
public func spc_options_set_listen_cb(_ options: OpaquePointer?, _ cb: spc_listen_cb?, _ userData: UnsafeMutableRawPointer?) -> spc_status {
    setCallback(options) { $0.listen = cb; $0.listenData = userData }
}

@c @implementation
public func spc_options_set_level_cb(_ options: OpaquePointer?, _ cb: spc_level_cb?, _ userData: UnsafeMutableRawPointer?) -> spc_status {
    // Levels cost a pass over every chunk: computed only for an application that wants them.
    if let h = OptionsHandle.from(options) { h.options.reportLevels = cb != nil }
    return setCallback(options) { $0.level = cb; $0.levelData = userData }
}

@c @implementation
public func spc_options_set_idle_cb(_ options: OpaquePointer?, _ cb: spc_idle_cb?, _ userData: UnsafeMutableRawPointer?) -> spc_status {
    // Queued only for an application that takes it: one event more per context otherwise.
    if let h = OptionsHandle.from(options) { h.options.reportIdle = cb != nil }
    return setCallback(options) { $0.idle = cb; $0.idleData = userData }
}
