/// The real service. The gRPC/HTTP/2 transport is issue 3 and not written yet: this connects
/// for real, so an unreachable server gives the real network error, and then says plainly that
/// it cannot speak the protocol. It never pretends to recognise anything.
public struct NetworkRecognitionService: RecognitionService {
    public let server: ServerURL
    public let connectTimeoutMilliseconds: Int

    public init(server: ServerURL, connectTimeoutMilliseconds: Int) {
        self.server = server
        self.connectTimeoutMilliseconds = connectTimeoutMilliseconds
    }

    public func openStream(config: SLUConfig, handler: @escaping @Sendable (StreamEvent) -> Void)
        throws(SpeechClientError) -> any RecognitionStream {
        let socket = try TCPSocket.connect(host: server.host, port: server.port,
                                           timeoutMilliseconds: connectTimeoutMilliseconds)
        socket.close()
        throw SpeechClientError(.internal,
            "connected to \(server) but this build has no gRPC/HTTP/2 transport yet (libspeechclient issue 3)")
    }
}
