/// The seam between the client and the network: a service opens SLU streams. The real one runs
/// gRPC over HTTP/2; unit tests use an in-process fake that answers like a server.
public protocol RecognitionService: Sendable {
    /// Connects (and logs in) as needed and opens one `SLU/Stream`; blocks the calling (client
    /// worker) thread for at most the connect timeout. `handler` receives the stream's events
    /// on any thread, in order, ending with exactly one `.closed`. A cancelled `cancellation`
    /// ends the connect or login early with `Cancellation.error`.
    func openStream(config: SLUConfig, cancellation: Cancellation?, handler: @escaping @Sendable (StreamEvent) -> Void)
        throws(SpeechClientError) -> any RecognitionStream
}

public enum StreamEvent: Sendable {
    case response(SLUResponse)
    /// The connection carrying the stream is going away (GOAWAY): the stream may finish, but new
    /// work belongs on a new connection.
    case goingAway
    /// The server ended an utterance by itself (its own voice activity detection; a Wyoming
    /// `transcript` before `audio-stop`): the next utterance belongs on a new stream. With
    /// `ignoresTheRest`, the server may take nothing more on this one (one utterance per
    /// connection, or not known yet): the new stream starts at once, from the pause where the
    /// server ended the utterance. Else (it transcribes all it is sent) at the next pause.
    case endpointed(ignoresTheRest: Bool)
    /// The server took nothing after the end of speech it sent on this stream, learnt only now
    /// (a Wyoming server that said nothing of it closed the connection at `audio-stop`): what
    /// the stream carried after that pause goes to a new stream.
    case ignoredAfterEndpoint
    /// The stream ended: nil when the server closed it with OK, else why it failed.
    case closed(SpeechClientError?)
}

public protocol RecognitionStream: AnyObject, Sendable {
    /// Queues a request; never blocks for long. Requests are sent in order.
    func send(_ request: SLURequest)
    /// Half-closes the stream (no more requests); the server finishes and closes it.
    func finish()
    /// Abandons the stream at once (RST_STREAM CANCEL); no further events are delivered.
    func cancel()
    /// Bytes sent but not yet taken by the network (flow control); see `GRPCStreamingCall`.
    var backlogBytes: Int { get }
    /// Runs `body` once, from a network thread, when `backlogBytes` falls to `bytes` or the
    /// stream ends: a file waits for this instead of polling. False, arming nothing, when it
    /// already is that low. A later call replaces the notice.
    func notifyWhenBacklog(atMost bytes: Int, _ body: @escaping @Sendable () -> Void) -> Bool
    /// Its `started` is the server's answer to the start (Speechly). False where the protocol
    /// has none and the stream says it itself (Wyoming, Riva): only a result the server sends
    /// later shows it took the credentials (`ClientWorker.serverAnswered`).
    var serverAcknowledgesStart: Bool { get }
    /// The server ends utterances by itself (its own voice activity detection: a Wyoming
    /// server whose info says `requires_external_vad: false`, or that sent a transcript before
    /// `audio-stop`). A file is then read at real time: such a server answers an utterance when
    /// it hears its end, and one that takes one utterance per connection ignores what was sent
    /// after it, which a file sent far ahead would all be.
    var endsUtterancesItself: Bool { get }
    /// The client gave up waiting for the server on this stream (a start or a finish that never
    /// came, a replay it took none of): a new stream must not share its connection, which the
    /// stream's server may hold stuck while it still answers PINGs. Before `cancel`.
    func retireConnection()
}

extension RecognitionStream {
    var serverAcknowledgesStart: Bool { true }
    var endsUtterancesItself: Bool { false }
    func retireConnection() {}
}
