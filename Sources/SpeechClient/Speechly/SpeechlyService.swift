/// The real `RecognitionService`: logs in, then opens `SLU/Stream` with the bearer token and
/// turns its messages into `SLUResponse`s. A stream rejected with PERMISSION_DENIED or
/// UNAUTHENTICATED drops the cached token, so the next stream logs in afresh, and is reported as
/// an auth error.
/// Sendable: immutable after init; `channel` and `identity` are thread-safe.
public final class SpeechlyService: RecognitionService, @unchecked Sendable {
    public static let streamPath = "/speechly.slu.v1.SLU/Stream"

    private let channel: any GRPCCalling
    private let identity: IdentityClient
    private let log: @Sendable (LogLevel, String) -> Void
    private let headers: [(String, String)]

    public init(channel: any GRPCCalling, identity: IdentityClient, headers: [(String, String)] = [],
                log: @escaping @Sendable (LogLevel, String) -> Void) {
        self.channel = channel
        self.identity = identity
        self.headers = headers
        self.log = log
    }

    public func openStream(config: SLUConfig, cancellation: Cancellation?, handler: @escaping @Sendable (StreamEvent) -> Void)
        throws(SpeechClientError) -> any RecognitionStream {
        let (token, warning) = try identity.token(cancellation: cancellation)
        if let warning { log(.warning, warning) }
        // Never the token itself (issue 9): only that there is one.
        log(.debug, "login token ready; opening \(Self.streamPath)")
        let relay = StreamRelay(handler: handler, identity: identity)
        let call = try channel.openStreamingCall(path: Self.streamPath, metadata: [("authorization", "Bearer " + token)] + headers,
                                               cancellation: cancellation) {
            relay.deliver($0)
        }
        relay.attach(call)
        return SLUStream(call: call)
    }
}

/// Decodes a call's messages and makes sure the client sees exactly one `.closed`: a message
/// that does not decode ends the stream with a parse error and cancels the call.
/// It holds the call (to cancel it) and the call holds it (its handler) until the call ends:
/// each lets go of the other then (`GRPCCall` drops its handler when it finishes or is
/// cancelled), or the cycle would keep both for the life of the process.
/// Sendable: the lock `state` guards `closed` and `call`; `handler` and `identity` are immutable.
final class StreamRelay: @unchecked Sendable {
    private let handler: @Sendable (StreamEvent) -> Void
    private let identity: IdentityClient
    private let state = ConditionLock()
    private var closed = false
    private var call: (any GRPCStreamingCall)?

    init(handler: @escaping @Sendable (StreamEvent) -> Void, identity: IdentityClient) {
        self.handler = handler
        self.identity = identity
    }

    func attach(_ call: any GRPCStreamingCall) {
        let cancelNow = state.withLock { () -> Bool in
            if !closed { self.call = call }
            return closed
        }
        if cancelNow { call.cancel() }
    }

    func deliver(_ event: GRPCCallEvent) {
        if state.withLock({ closed }) { return }
        switch event {
        case .goingAway:
            handler(.goingAway)
        case .message(let bytes):
            do throws(SpeechClientError) {
                handler(.response(try SLUResponse.decode(bytes[...])))
            } catch {
                let call = state.withLock { () -> (any GRPCStreamingCall)? in
                    closed = true
                    defer { self.call = nil }
                    return self.call
                }
                call?.cancel()
                handler(.closed(error))
            }
        case .closed(let error):
            state.withLock {
                closed = true
                call = nil
            }
            guard var error else { handler(.closed(nil)); return }
            if GRPCStatus.isAuthFailure(error) {
                identity.invalidate()
                error.code = .auth
                error.message = "the server rejected the login token: \(error.message)"
            }
            handler(.closed(error))
        }
    }
}

/// A `RecognitionStream` over one gRPC streaming call.
/// Sendable: immutable; `call` is a Sendable `GRPCStreamingCall`.
final class SLUStream: RecognitionStream, @unchecked Sendable {
    private let call: any GRPCStreamingCall

    init(call: any GRPCStreamingCall) { self.call = call }

    func send(_ request: SLURequest) { call.send(request.encoded()) }
    func finish() { call.halfClose() }
    func cancel() { call.cancel() }
    func retireConnection() { call.retireConnection() }
    var backlogBytes: Int { call.queuedSendBytes }
    func notifyWhenBacklog(atMost bytes: Int, _ body: @escaping @Sendable () -> Void) -> Bool {
        call.notifyWhenQueued(atMost: bytes, body)
    }
}
