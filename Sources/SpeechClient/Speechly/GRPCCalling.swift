/// What the Speechly layer needs from gRPC; `GRPCChannel` provides it, unit tests fake it.
public protocol GRPCCalling: Sendable {
    func unary(path: String, metadata: [(String, String)], request: [UInt8], timeoutMilliseconds: Int?) throws(SpeechClientError) -> [UInt8]
    func openStreamingCall(path: String, metadata: [(String, String)], handler: @escaping @Sendable (GRPCCallEvent) -> Void) throws(SpeechClientError) -> any GRPCStreamingCall
}

public enum GRPCStatusCode {
    public static let permissionDenied: Int32 = 7
    public static let unauthenticated: Int32 = 16

    public static func isAuthFailure(_ error: SpeechClientError) -> Bool {
        error.grpcStatus == permissionDenied || error.grpcStatus == unauthenticated
    }
}
