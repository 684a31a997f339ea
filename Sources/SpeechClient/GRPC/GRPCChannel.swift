/// The contract between the Speechly layer and the gRPC stack (issue 3). The Speechly layer
/// (IdentityClient, SpeechlyService) is written against these types only.
///
/// A channel is one logical connection to one server (host, port, TLS settings), shared by every
/// client in the process that targets the same server; calls are HTTP/2 streams on it.

import Synchronization

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

/// One message or the end of a streaming call, delivered in order inside the event loop's work
/// (see `EventLoop`: usually its thread; a handler must not block).
public enum GRPCCallEvent: Sendable {
    case message([UInt8])
    /// The connection received GOAWAY and this call is below its last stream id: it may finish,
    /// but the server (or proxy worker) is draining; new calls already go to a new connection.
    case goingAway
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
    /// Request bytes queued and not yet taken by HTTP/2 flow control. Sources faster than real
    /// time (files) wait while this is high instead of tripping the queue limit.
    var queuedSendBytes: Int { get }
    /// Runs `body` once (on the thread where the network takes the bytes) when
    /// `queuedSendBytes` falls to `bytes` or the call ends; false, arming nothing, when it
    /// already is that low. A later call replaces the notice.
    func notifyWhenQueued(atMost bytes: Int, _ body: @escaping @Sendable () -> Void) -> Bool
    /// The server ended the call with status OK while request messages were still queued (not
    /// all of the request reached it). Meaningful once the call's `.closed(nil)` is delivered.
    var endedWithRequestQueued: Bool { get }
    /// The call found its server stopped (the caller's timeout): no new call goes on its
    /// connection (`HTTP2Connection.retire`). Before `cancel`.
    func retireConnection()
}

extension GRPCStreamingCall {
    public var endedWithRequestQueued: Bool { false }
    public func retireConnection() {}
}

/// A gRPC channel to one server: unary and bidirectional-streaming calls as HTTP/2 streams on
/// one connection shared per (host, port, TLS settings, configuration) by every channel and
/// client in the process. The connection is opened on first use and replaced after it fails or
/// the server sends GOAWAY.
///
/// Thread-safety: all methods may be called from any thread except inside the event loop's work
/// (a call's handler runs there, so calling `unary` or `openStreamingCall` from inside a handler
/// would wait for itself: it throws `.invalidState` instead).
public final class GRPCChannel: GRPCCalling, Sendable {
    /// Limits and timers; part of the sharing key.
    public struct Configuration: Sendable, Hashable {
        public var http2: HTTP2Settings
        /// Larger incoming messages fail the call (RESOURCE_EXHAUSTED, `.parse`).
        public var maxReceiveMessageBytes: Int
        /// Request bytes a streaming call may hold back under flow control before it fails
        /// (see the backpressure policy on `GRPCCall`).
        public var maxQueuedSendBytes: Int
        public init(http2: HTTP2Settings = HTTP2Settings(), maxReceiveMessageBytes: Int = 4 << 20,
                    maxQueuedSendBytes: Int = 256 << 10) {
            self.http2 = http2
            self.maxReceiveMessageBytes = maxReceiveMessageBytes
            self.maxQueuedSendBytes = maxQueuedSendBytes
        }
    }

    public let server: ServerURL
    public let tls: TLSSettings
    public let connectTimeoutMilliseconds: Int
    public let configuration: Configuration
    private let pool: ConnectionPool

    private init(server: ServerURL, tls: TLSSettings, connectTimeoutMilliseconds: Int,
                 configuration: Configuration, pool: ConnectionPool) {
        self.server = server
        self.tls = tls
        self.connectTimeoutMilliseconds = connectTimeoutMilliseconds
        self.configuration = configuration
        self.pool = pool
    }

    /// The channel for a server; channels for the same server, TLS settings and configuration
    /// share one connection (the connect timeout is per channel).
    public static func shared(server: ServerURL, tls: TLSSettings, connectTimeoutMilliseconds: Int,
                              configuration: Configuration = Configuration()) -> GRPCChannel {
        let pool = ConnectionPool.shared(host: server.host, port: server.port, useTLS: server.useTLS,
                                         tls: tls, settings: configuration.http2)
        return GRPCChannel(server: server, tls: tls, connectTimeoutMilliseconds: connectTimeoutMilliseconds,
                           configuration: configuration, pool: pool)
    }

    /// Blocking unary call from a non-loop thread. Throws the mapped error: `.api` with
    /// `grpcStatus`, `.network` (UNAVAILABLE and transport failures), `.timeout` (deadline),
    /// `.tls`, `.parse` (malformed response). A stream the server refused unprocessed
    /// (REFUSED_STREAM, for example after GOAWAY) is retried once on a new connection.
    public func unary(path: String, metadata: [(String, String)], request: [UInt8],
                      timeoutMilliseconds: Int?, cancellation: Cancellation? = nil) throws(SpeechClientError) -> [UInt8] {
        let deadline = timeoutMilliseconds.map { Clock.monotonicNanos() + UInt64(max($0, 0)) * 1_000_000 }
        var attempt = 0
        while true {
            attempt += 1
            var remaining = timeoutMilliseconds
            if let deadline {
                let now = Clock.monotonicNanos()
                remaining = deadline > now ? Int((deadline - now) / 1_000_000) : 0
            }
            // Keeps the first message and counts the rest (bounded whatever the server sends).
            let result = OneShot<Result<([UInt8]?, Int), SpeechClientError>>()
            let collected = Locked<([UInt8]?, Int)>((nil, 0))
            let call = try open(path: path, metadata: metadata, initialMessage: request,
                                endOfBody: true, timeoutMilliseconds: remaining, cancellation: cancellation) { event in
                switch event {
                case .message(let bytes):
                    collected.withLock { c in
                        if c.1 == 0 { c.0 = bytes }
                        c.1 += 1
                    }
                case .goingAway:
                    break
                case .closed(let error):
                    if let error { result.set(.failure(error)) } else { result.set(.success(collected.withLock { $0 })) }
                }
            }
            // Cancelled before or while waiting for the answer: give up now and reset the stream.
            let registration = cancellation?.onCancel { result.set(.failure(Cancellation.error)) }
            let outcome = cancellation?.isCancelled == true ? nil : result.wait()
            cancellation?.remove(registration)
            guard let outcome, cancellation?.isCancelled != true else {
                call.cancel()
                throw Cancellation.error
            }
            switch outcome {
            case .success(let (first, count)):
                guard count == 1, let first else {
                    throw SpeechClientError(.parse, "\(path): a unary call got \(count) response messages instead of one",
                                            grpcStatus: GRPCStatus.internal)
                }
                return first
            case .failure(var error):
                // wasRefused was written on the loop before the result was set (ordered by its lock).
                if attempt == 1 && call.wasRefused { continue }
                if let ms = timeoutMilliseconds, error.code == .timeout, error.grpcStatus == GRPCStatus.deadlineExceeded {
                    // The call's own deadline: name the one the caller set, not what was left of it.
                    error.message = "\(path) to \(server) did not finish within its \(ms) ms deadline"
                }
                throw error
            }
        }
    }

    /// Opens a bidirectional call; blocks until the stream is open (connected, TLS done,
    /// HEADERS submitted) or throws the connect/TLS error, in which case `handler` is never
    /// called. Events arrive on the loop thread, in order, ending with exactly one `.closed`;
    /// none arrive after `cancel()` returns.
    public func openStreamingCall(path: String, metadata: [(String, String)], cancellation: Cancellation? = nil,
                                  handler: @escaping @Sendable (GRPCCallEvent) -> Void) throws(SpeechClientError) -> any GRPCStreamingCall {
        try open(path: path, metadata: metadata, initialMessage: nil, endOfBody: false, timeoutMilliseconds: nil,
                 cancellation: cancellation, handler: handler)
    }

    private func open(path: String, metadata: [(String, String)], initialMessage: [UInt8]?, endOfBody: Bool,
                      timeoutMilliseconds: Int?, cancellation: Cancellation?,
                      handler: @escaping @Sendable (GRPCCallEvent) -> Void) throws(SpeechClientError) -> GRPCCall {
        let loop = try EventLoop.shared()
        if loop.isInLoop {
            throw SpeechClientError(.invalidState, "a gRPC call cannot be started from the event-loop thread (inside a call's handler)")
        }
        let headers = try requestHeaders(path: path, metadata: metadata, timeoutMilliseconds: timeoutMilliseconds)
        var lastError: SpeechClientError?
        var tries = 0
        var takenMeanwhile = 0
        while tries < 2 {
            tries += 1
            try cancellation?.check()
            let connection: HTTP2Connection
            do throws(SpeechClientError) {
                connection = try pool.connection(loop: loop, timeoutMilliseconds: connectTimeoutMilliseconds,
                                                 cancellation: cancellation)
            } catch {
                // No connection (refused, unreachable, no answer, TLS failed): the call never
                // reached a server, which gRPC reports as UNAVAILABLE (issue 19 item 4: the
                // header promises 14 where -1 was given).
                var e = error
                if e.grpcStatus == nil && e.code != .invalidState && !(cancellation?.isCancelled ?? false) {
                    e.grpcStatus = GRPCStatus.unavailable
                }
                throw e
            }
            let call = GRPCCall(path: path, loop: loop, peer: connection.peer,
                                maxReceiveMessageBytes: configuration.maxReceiveMessageBytes,
                                maxQueuedSendBytes: configuration.maxQueuedSendBytes, handler: handler)
            let message = initialMessage
            let (error, full) = loop.executeAndWait { () -> (SpeechClientError?, Bool) in
                let error = call.start(on: connection, headers: headers, initialMessage: message, endOfBody: endOfBody,
                                       timeoutMilliseconds: timeoutMilliseconds)
                return (error, error != nil && connection.refusedForStreamLimit)
            }
            guard let error else { return call }
            lastError = error
            // Another call took the connection's last stream between lookup and use: the pool
            // gives another (or opens one).
            if full && takenMeanwhile < 16 {
                takenMeanwhile += 1
                tries -= 1
                continue
            }
            // The connection went away between lookup and use: one more try on a new one.
            if connection.isUsable { break }
        }
        throw lastError ?? SpeechClientError(.network, "cannot open \(path) on \(server)", grpcStatus: GRPCStatus.unavailable)
    }

    private func requestHeaders(path: String, metadata: [(String, String)], timeoutMilliseconds: Int?) throws(SpeechClientError) -> [(String, String)] {
        guard path.hasPrefix("/"), !path.utf8.contains(where: { $0 <= 0x20 || $0 >= 0x7f }) else {
            throw SpeechClientError(.invalidArgument, "gRPC method path '\(path)' must start with '/' and be printable ASCII")
        }
        var headers: [(String, String)] = [
            (":method", "POST"),
            (":scheme", server.useTLS ? "https" : "http"),
            (":path", path),
            (":authority", server.authority),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("user-agent", "libspeechclient/\(LibraryVersion.string)"),
        ]
        if let ms = timeoutMilliseconds { headers.append(("grpc-timeout", GRPCStatus.timeoutHeader(milliseconds: ms))) }
        let reserved: Set<String> = ["content-type", "te", "user-agent", "grpc-timeout", "connection", "host",
                                     "transfer-encoding", "keep-alive", "upgrade", "proxy-connection"]
        for (key, value) in metadata {
            let name = key.lowercased()
            let nameOK = !name.isEmpty && name.utf8.allSatisfy { b in
                (b >= 0x61 && b <= 0x7a) || (b >= 0x30 && b <= 0x39) || b == 0x2d || b == 0x5f || b == 0x2e
            }
            guard nameOK, !reserved.contains(name) else {
                throw SpeechClientError(.invalidArgument, "gRPC metadata name '\(key)' is not allowed")
            }
            guard value.utf8.allSatisfy({ $0 >= 0x20 && $0 != 0x7f }) else {
                throw SpeechClientError(.invalidArgument, "gRPC metadata '\(key)' has a control character in its value")
            }
            headers.append((name, value))
        }
        return headers
    }
}
