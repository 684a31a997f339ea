import CSpeechClientAPI
import SpeechClient

extension CCallbacks {
    /// Turns a core event into the matching C call (on the client's callback thread).
    func deliver(_ client: Client, _ event: ClientEvent) {
        let handle = OpaquePointer(Unmanaged.passUnretained(client).toOpaque())
        switch event {
        case .segment(let segment):
            guard let segmentCallback = self.segment else { return }
            segmentCallback(handle, OpaquePointer(Unmanaged.passUnretained(segment).toOpaque()), segmentData)
        case .error(let error):
            guard let errorCallback = self.error else { return }
            let box = ErrorHandle(error)
            withExtendedLifetime(box) {
                errorCallback(handle, OpaquePointer(Unmanaged.passUnretained(box).toOpaque()), errorData)
            }
        case .start(let id):
            guard let startCallback = self.start else { return }
            id.withCString { startCallback(handle, $0, startData) }
        case .stop(let id):
            guard let stopCallback = self.stop else { return }
            id.withCString { stopCallback(handle, $0, stopData) }
        case .log(let level, let message):
            guard let logCallback = self.log else { return }
            message.withCString { logCallback(handle, spc_log_level(rawValue: UInt32(level.rawValue)), $0, logData) }
        case .connection(let state, let attempt, let delay, let reason):
            guard let stateCallback = self.state else { return }
            let box = reason.map(ErrorHandle.init)
            withExtendedLifetime(box) {
                stateCallback(handle, spc_connection_state(rawValue: UInt32(state.rawValue)), attempt, delay,
                              box.map { OpaquePointer(Unmanaged.passUnretained($0).toOpaque()) }, stateData)
            }
        case .listen(let event, let position, let name):
            guard let listenCallback = self.listen else { return }
            client.deliveringListenName.withLock { $0 = name.map { OwnedCString($0) } }
            listenCallback(handle, spc_listen_event(rawValue: UInt32(event.rawValue)), position, listenData)
            client.deliveringListenName.withLock { $0 = nil }
        case .level(let level, let position):
            guard let levelCallback = self.level else { return }
            levelCallback(handle, level, position, levelData)
        case .idle:
            guard let idleCallback = self.idle else { return }
            idleCallback(handle, idleData)
        }
    }
}

@c @implementation
public func spc_listen_name(_ client: OpaquePointer?) -> UnsafePointer<CChar>? {
    clientFrom(client)?.deliveringListenName.withLock { $0?.constPointer }
}

func clientFrom(_ p: OpaquePointer?) -> Client? {
    guard let p else { return nil }
    return Unmanaged<Client>.fromOpaque(UnsafeRawPointer(p)).takeUnretainedValue()
}

@c @implementation
public func spc_client_new(_ options: OpaquePointer?, _ outClient: UnsafeMutablePointer<OpaquePointer?>?,
                           _ outError: UnsafeMutablePointer<OpaquePointer?>?) -> spc_status {
    outError?.pointee = nil
    guard let outClient else {
        outError?.pointee = ErrorHandle.retained(SpeechClientError(.invalidArgument, "out_client is NULL"))
        return SPC_ERROR_INVALID_ARGUMENT
    }
    outClient.pointee = nil
    guard let handle = OptionsHandle.from(options) else {
        outError?.pointee = ErrorHandle.retained(SpeechClientError(.invalidArgument, "options is NULL"))
        return SPC_ERROR_INVALID_ARGUMENT
    }
    let callbacks = handle.callbacks
    do throws(SpeechClientError) {
        let client = try Client(options: handle.options) { client, event in callbacks.deliver(client, event) }
        outClient.pointee = OpaquePointer(Unmanaged.passRetained(client).toOpaque())
        return SPC_OK
    } catch {
        var error = error
        if error.code == .invalidArgument && !handle.rejected.isEmpty {
            // What is missing may be what a rejected setter would have set: say so.
            error.message += " (rejected earlier: " + handle.rejected.keys.sorted().compactMap { handle.rejected[$0] }.joined(separator: "; ") + ")"
        }
        outError?.pointee = ErrorHandle.retained(error)
        return .from(error)
    }
}

@c @implementation
public func spc_client_free(_ client: OpaquePointer?) -> spc_status {
    guard let client, let c = clientFrom(client) else { return SPC_OK }
    let result = status { () throws(SpeechClientError) in try c.close() }
    if result == SPC_OK {
        Unmanaged<Client>.fromOpaque(UnsafeRawPointer(client)).release()
    }
    return result
}

/// Runs a client call, or returns INVALID_ARGUMENT for a NULL handle.
private func call(_ client: OpaquePointer?, _ body: (Client) throws(SpeechClientError) -> Void) -> spc_status {
    guard let c = clientFrom(client) else { return SPC_ERROR_INVALID_ARGUMENT }
    return status { () throws(SpeechClientError) in try body(c) }
}

@c @implementation
public func spc_client_start(_ client: OpaquePointer?) -> spc_status {
    call(client) { (c) throws(SpeechClientError) in try c.start() }
}

@c @implementation
public func spc_client_stop(_ client: OpaquePointer?) -> spc_status {
    call(client) { (c) throws(SpeechClientError) in try c.stop() }
}

@c @implementation
public func spc_client_suspend(_ client: OpaquePointer?) -> spc_status {
    call(client) { (c) throws(SpeechClientError) in try c.suspend() }
}

@c @implementation
public func spc_client_resume(_ client: OpaquePointer?) -> spc_status {
    call(client) { (c) throws(SpeechClientError) in try c.resume() }
}

@c @implementation
public func spc_client_get_state(_ client: OpaquePointer?, _ outState: UnsafeMutablePointer<spc_state>?) -> spc_status {
    guard let c = clientFrom(client), let outState else { return SPC_ERROR_INVALID_ARGUMENT }
    outState.pointee = spc_state(rawValue: UInt32(c.currentState.rawValue))
    return SPC_OK
}

@c @implementation
public func spc_client_get_connection_state(_ client: OpaquePointer?, _ outState: UnsafeMutablePointer<spc_connection_state>?) -> spc_status {
    guard let c = clientFrom(client), let outState else { return SPC_ERROR_INVALID_ARGUMENT }
    outState.pointee = spc_connection_state(rawValue: UInt32(c.currentConnectionState.rawValue))
    return SPC_OK
}

@c @implementation
public func spc_client_push_audio(_ client: OpaquePointer?, _ frames: UnsafePointer<Int16>?, _ frameCount: Int) -> spc_status {
    // A size_t past Int.max arrives negative: no buffer is that large (a negative count cast).
    guard let c = clientFrom(client), frameCount >= 0 else { return SPC_ERROR_INVALID_ARGUMENT }
    if frameCount == 0 { return status { () throws(SpeechClientError) in try c.pushAudio(UnsafeBufferPointer(start: nil, count: 0)) } }
    guard let frames else { return SPC_ERROR_INVALID_ARGUMENT }
    guard case .push(_, let channels) = c.options.audio else { return SPC_ERROR_INVALID_STATE }
    let (samples, overflow) = frameCount.multipliedReportingOverflow(by: channels)
    if overflow { return SPC_ERROR_INVALID_ARGUMENT }
    return status { () throws(SpeechClientError) in try c.pushAudio(UnsafeBufferPointer(start: frames, count: samples)) }
}

@c @implementation
public func spc_client_push_end(_ client: OpaquePointer?) -> spc_status {
    call(client) { (c) throws(SpeechClientError) in try c.pushEnd() }
}

@c @implementation
public func spc_client_wait_idle(_ client: OpaquePointer?, _ timeoutMs: Int32) -> spc_status {
    guard let c = clientFrom(client) else { return SPC_ERROR_INVALID_ARGUMENT }
    do throws(SpeechClientError) {
        return try c.waitIdle(timeoutMilliseconds: Int(timeoutMs)) ? SPC_OK : SPC_ERROR_TIMEOUT
    } catch {
        return .from(error)
    }
}

@c @implementation
public func spc_client_event_fd(_ client: OpaquePointer?) -> Int32 {
    clientFrom(client)?.eventFD ?? -1
}

@c @implementation
public func spc_io_fd() -> Int32 {
    (try? ApplicationIO.fd()) ?? -1
}

@c @implementation
public func spc_io_process(_ outReady: UnsafeMutablePointer<UInt32>?) -> spc_status {
    outReady?.pointee = 0
    do throws(SpeechClientError) {
        let ready = try ApplicationIO.process()
        outReady?.pointee = UInt32(clamping: ready)
        return SPC_OK
    } catch {
        return .from(error)
    }
}

@c @implementation
public func spc_io_dispatch(_ outReady: UnsafeMutablePointer<UInt32>?, _ outCallbacks: UnsafeMutablePointer<UInt32>?) -> spc_status {
    outReady?.pointee = 0
    outCallbacks?.pointee = 0
    do throws(SpeechClientError) {
        let (ready, callbacks) = try ApplicationIO.dispatch()
        outReady?.pointee = UInt32(clamping: ready)
        outCallbacks?.pointee = UInt32(clamping: callbacks)
        return SPC_OK
    } catch {
        return .from(error)
    }
}

@c @implementation
public func spc_client_dispatch(_ client: OpaquePointer?, _ maxEvents: UInt32, _ outCount: UnsafeMutablePointer<UInt32>?) -> spc_status {
    outCount?.pointee = 0
    guard let c = clientFrom(client) else { return SPC_ERROR_INVALID_ARGUMENT }
    do throws(SpeechClientError) {
        let ran = try c.dispatch(maxEvents: Int(maxEvents))
        outCount?.pointee = UInt32(clamping: ran)
        return SPC_OK
    } catch {
        return .from(error)
    }
}
