/// What the Speechly layer needs from gRPC; `GRPCChannel` provides it, unit tests fake it.
public protocol GRPCCalling: Sendable {
    /// `cancellation` (when given) makes the blocking parts (connect, TLS, waiting for the
    /// answer) throw `Cancellation.error` as soon as it is cancelled.
    func unary(path: String, metadata: [(String, String)], request: [UInt8], timeoutMilliseconds: Int?,
               cancellation: Cancellation?) throws(SpeechClientError) -> [UInt8]
    func openStreamingCall(path: String, metadata: [(String, String)], cancellation: Cancellation?,
                           handler: @escaping @Sendable (GRPCCallEvent) -> Void) throws(SpeechClientError) -> any GRPCStreamingCall
}
