/// The contract between the Speechly layer and the gRPC stack (issue 3). The Speechly layer
/// (IdentityClient, SLUSession) is written against these types only.
///
/// A channel is one logical connection to one server (host, port, TLS settings), shared by every
/// client in the process that targets the same server; calls are HTTP/2 streams on it.

public struct TLSSettings: Sendable, Equatable, Hashable {
    /// PEM file of trusted CAs; nil means the system store.
    public var caFile: String?
    /// Skip certificate and hostname verification (development only).
    public var insecure: Bool
    public init(caFile: String? = nil, insecure: Bool = false) {
        self.caFile = caFile
        self.insecure = insecure
    }
}

/// One message or the end of a streaming call, delivered in order on the event-loop thread.
public enum GRPCCallEvent: Sendable {
    case message([UInt8])
    /// The call ended. nil means gRPC status OK; otherwise the error carries the status
    /// (`grpcStatus`) or the transport failure (network, TLS, timeout, parse).
    case closed(SpeechClientError?)
}

/// A bidirectional-streaming call in progress.
public protocol GRPCStreamingCall: AnyObject, Sendable {
    /// Queues one request message (framed with the 5-byte gRPC prefix by the stack).
    func send(_ message: [UInt8])
    /// Ends the request side (END_STREAM); responses keep arriving until the status.
    func halfClose()
    /// Abandons the call (RST_STREAM CANCEL); no more events are delivered after it returns.
    func cancel()
}
