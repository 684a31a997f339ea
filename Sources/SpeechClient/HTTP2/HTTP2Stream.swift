/// What an HTTP/2 stream reports to its owner (a gRPC call). Every method runs inside the event
/// loop's work, from inside the nghttp2 session, so implementations must not block.
protocol HTTP2StreamDelegate: AnyObject {
    /// A complete header block: the response headers, or the trailers (`endStream` true).
    func http2Headers(_ headers: [(name: String, value: String)], endStream: Bool)
    /// A piece of response body, in order; valid only during the call.
    func http2Data(_ bytes: UnsafeRawBufferPointer)
    /// The server ended its side (END_STREAM on HEADERS or DATA). The request side may still be
    /// open; the stream closes (`http2Closed`) only once both sides are done or it is reset.
    func http2RemoteEnded()
    /// The stream is closed. `errorCode` is the HTTP/2 error code (0 = NO_ERROR, for example
    /// 7 = REFUSED_STREAM after a GOAWAY, 8 = CANCEL); `connectionFailure` is set when the whole
    /// connection failed. Called exactly once, and nothing is called after it.
    func http2Closed(errorCode: UInt32, connectionFailure: SpeechClientError?)
    /// The connection received GOAWAY and this stream is at or below its last stream id: it may
    /// finish, but the peer is draining.
    func http2GoingAway()
    /// Request body for nghttp2's data provider: copies at most `buffer.count` bytes and says
    /// whether the body ended; nil means "nothing now" (the stream is deferred until
    /// `HTTP2Connection.resumeBody` is called).
    func http2ReadBody(into buffer: UnsafeMutableRawBufferPointer) -> (count: Int, endOfBody: Bool)?
}

/// Per-connection tunables, part of the key under which connections are shared.
public struct HTTP2Settings: Sendable, Hashable {
    /// A PING is sent when nothing was received for this long while streams are open (0: never).
    public var keepaliveIntervalMilliseconds: Int
    /// A PING not acknowledged within this time fails the connection (a dead peer).
    public var keepaliveTimeoutMilliseconds: Int
    /// The receive window advertised per stream (flow control towards the server).
    public var streamWindowBytes: Int32
    /// The receive window of the whole connection.
    public var connectionWindowBytes: Int32
    /// The socket is in the application's epoll set (spc_io_fd), served by `ApplicationIO.process()`.
    public var applicationDrivenIO = false

    public init(keepaliveIntervalMilliseconds: Int = 30_000, keepaliveTimeoutMilliseconds: Int = 10_000,
                streamWindowBytes: Int32 = 1 << 20, connectionWindowBytes: Int32 = 16 << 20) {
        self.keepaliveIntervalMilliseconds = keepaliveIntervalMilliseconds
        self.keepaliveTimeoutMilliseconds = keepaliveTimeoutMilliseconds
        self.streamWindowBytes = streamWindowBytes
        self.connectionWindowBytes = connectionWindowBytes
    }
}
