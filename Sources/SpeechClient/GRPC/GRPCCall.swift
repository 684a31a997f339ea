import Synchronization

/// One gRPC call on one HTTP/2 stream: frames requests, reassembles responses, reads the status
/// from the trailers (or a Trailers-Only response) and delivers events to its handler inside
/// the event loop's work (its thread, or a thread running a task inline: see `EventLoop`), in
/// order, ending with exactly one `.closed` unless cancelled first.
///
/// Backpressure policy (what protects a real-time audio path): `send` never blocks the caller.
/// Request bytes wait in a per-call queue until HTTP/2 flow control lets them out. When a
/// server stops reading, the queue grows; once it would exceed `maxQueuedSendBytes` (default
/// 256 KiB, about 8 s of 16 kHz 16-bit audio on top of the HTTP/2 windows) the call fails:
/// the stream is reset (RST_STREAM CANCEL) and the handler gets `.closed` with a `.network`
/// error saying the server stopped reading. Memory per call therefore stays bounded, the thread
/// sending audio is never stalled, and the layer above learns at once that it must reconnect (it
/// keeps its own replay buffer); audio is never dropped silently.
/// Sendable: `queuedBytes` and `handedOver` are thread-safe; the other mutable fields are touched only inside the loop's work.
final class GRPCCall: GRPCStreamingCall, HTTP2StreamDelegate, @unchecked Sendable {
    let path: String
    private let loop: EventLoop
    /// Let go when the call ends (finished or cancelled): whoever it delivers to often holds
    /// the call, and that cycle would otherwise keep both for the life of the process.
    private var handler: (@Sendable (GRPCCallEvent) -> Void)?
    private let maxQueuedSendBytes: Int
    private let peer: String

    // Any thread: bytes accepted by send() and not yet taken by HTTP/2.
    private let queuedBytes = SendBacklog()
    /// The server ended the call with status OK while request messages were still queued.
    private let requestQueuedAtEnd = Atomic<Bool>(false)
    var endedWithRequestQueued: Bool { requestQueuedAtEnd.load(ordering: .acquiring) }
    /// Requests given to `send` that the loop's work has not taken yet, and whether a task to
    /// take them is on its way: the first request of a batch posts one task for all of them, not
    /// a closure per request (a file's worker turn sends dozens, all of them corked).
    private let handedOver = Mutex<(messages: [[UInt8]], posted: Bool)>(([], false))
    /// Loop only: the batch array between two takes, kept for its capacity.
    private var spareBatch: [[UInt8]] = []

    // Loop thread only.
    private var connection: HTTP2Connection?
    private var streamID: Int32 = 0
    /// Request messages not yet taken by HTTP/2, in order, unframed: the 5-byte gRPC prefix is
    /// written as they are taken (no copy of a message into a framed buffer, no buffer kept
    /// between chunks). `taken` counts the bytes of the first one already out, prefix included.
    private var outgoing = FIFO<[UInt8]>()
    private var current: [UInt8]?
    private var taken = 0
    private var halfClosed = false
    private var deferred = false
    private var finished = false
    private var deframer: MessageDeframer
    private var gotHeaders = false
    /// `.goingAway` is said once (a connection may be told of several GOAWAYs).
    private var toldGoingAway = false
    private var status: Int32?
    private var statusMessage = ""
    private var deadlineTimer: UInt64?
    /// The server refused the stream before processing it (REFUSED_STREAM, e.g. after GOAWAY).
    private(set) var wasRefused = false

    init(path: String, loop: EventLoop, peer: String, maxReceiveMessageBytes: Int, maxQueuedSendBytes: Int,
         handler: @escaping @Sendable (GRPCCallEvent) -> Void) {
        self.path = path
        self.loop = loop
        self.peer = peer
        self.handler = handler
        self.maxQueuedSendBytes = maxQueuedSendBytes
        self.deframer = MessageDeframer(maxMessageBytes: maxReceiveMessageBytes)
    }

    /// Opens the stream (inside the loop's work). `initialMessage` is sent first; `endOfBody`
    /// half-closes at once.
    func start(on connection: HTTP2Connection, headers: [(String, String)], initialMessage: [UInt8]? = nil,
               endOfBody: Bool = false, timeoutMilliseconds: Int? = nil) -> SpeechClientError? {
        self.connection = connection
        if let initialMessage {
            outgoing.push(initialMessage)
            queuedBytes.add(initialMessage.count + 5)
        }
        halfClosed = endOfBody
        do {
            streamID = try connection.openStream(headers: headers, delegate: self)
        } catch {
            finished = true
            return GRPCStatus.callError(connectionFailure: error, path: path)
        }
        if let ms = timeoutMilliseconds {
            deadlineTimer = loop.addTimer(milliseconds: ms) { [weak self] in
                self?.deadlineTimer = nil
                self?.fail(SpeechClientError(.timeout, "\(self?.path ?? "call") to \(self?.peer ?? "server") did not finish within its \(ms) ms deadline",
                                             grpcStatus: GRPCStatus.deadlineExceeded))
            }
        }
        return nil
    }

    // MARK: GRPCStreamingCall (any thread)

    func send(_ message: [UInt8]) {
        let total = queuedBytes.add(message.count + 5)
        if total > maxQueuedSendBytes {
            let limit = maxQueuedSendBytes
            loop.execute { [self] in
                // The whole connection's window closed too: no new call goes on it.
                if let connection = self.connection, connection.sendWindowExhausted { connection.retire() }
                self.fail(SpeechClientError(.network, "\(self.peer) stopped reading \(self.path): more than \(limit) bytes of requests are waiting for HTTP/2 flow control",
                                            grpcStatus: GRPCStatus.unavailable))
            }
            return
        }
        let post = handedOver.withLock { h -> Bool in
            h.messages.append(message)
            if h.posted { return false }
            h.posted = true
            return true
        }
        if post { loop.execute { [self] in self.takeHandedOver() } }
    }

    /// Inside the loop's work: the requests handed over since the last take join `outgoing`, in order.
    private func takeHandedOver() {
        var batch: [[UInt8]] = []
        swap(&batch, &spareBatch)  // moved, not copied: the array handed over stays unique
        handedOver.withLock { h in
            h.posted = false
            swap(&h.messages, &batch)
        }
        if !finished {
            for message in batch { outgoing.push(message) }
        }
        batch.removeAll(keepingCapacity: true)
        spareBatch = batch
        if !finished { wakeBody() }
    }

    func halfClose() {
        loop.execute { [self] in
            guard !self.finished, !self.halfClosed else { return }
            // Requests handed over before it go first, even when the task that takes them
            // waits in another thread's cork: the end of the body never overtakes them.
            self.takeHandedOver()
            self.halfClosed = true
            self.wakeBody()
        }
    }

    var queuedSendBytes: Int { queuedBytes.value }

    func notifyWhenQueued(atMost bytes: Int, _ body: @escaping @Sendable () -> Void) -> Bool {
        queuedBytes.notifyWhen(atMost: bytes, body)
    }

    func retireConnection() {
        loop.execute { [self] in self.connection?.retire() }
    }

    func cancel() {
        loop.executeAndWait { [self] in
            guard !self.finished else { return }
            // Ended first: the reset may close the stream at once, and no event follows a cancel.
            _ = self.end()
            self.connection?.reset(stream: self.streamID, errorCode: 8)  // CANCEL
            self.connection = nil  // what the call holds goes now, its connection too
        }
    }

    // MARK: loop thread

    private func wakeBody() {
        if deferred, let connection {
            deferred = false
            connection.resumeBody(stream: streamID)
        }
    }

    private func stopDeadline() {
        if let t = deadlineTimer { loop.cancelTimer(t) }
        deadlineTimer = nil
    }

    /// Ends the call with an error of our own: resets the stream, then reports.
    private func fail(_ error: SpeechClientError) {
        guard !finished else { return }
        connection?.reset(stream: streamID, errorCode: 8)
        finish(error)
    }

    private func finish(_ error: SpeechClientError?) {
        guard !finished else { return }
        end()?(.closed(error))
    }

    /// The call is over: its queued requests and its handler (and whatever that holds) go.
    /// Returns the handler, for the last event.
    private func end() -> (@Sendable (GRPCCallEvent) -> Void)? {
        finished = true
        stopDeadline()
        outgoing.removeAll()
        handedOver.withLock { $0.messages.removeAll() }  // a take already posted finds none
        current = nil
        queuedBytes.clear()
        defer { handler = nil }
        return handler
    }

    // MARK: HTTP2StreamDelegate

    func http2Headers(_ headers: [(name: String, value: String)], endStream: Bool) {
        guard !finished else { return }
        if !gotHeaders {
            let httpStatus = headers.first { $0.name == ":status" }?.value ?? ""
            // An informational answer (100 Continue, 103 Early Hints) comes before the response
            // (RFC 9113 8.1): not the response. Taken as one, it failed the call as HTTP 1xx.
            if httpStatus.count == 3, httpStatus.hasPrefix("1"), !endStream { return }
            gotHeaders = true
            if httpStatus != "200" {
                let grpc = GRPCStatus.fromHTTPStatus(Int(httpStatus) ?? 0)
                var e = GRPCStatus.error(status: grpc, message: "HTTP status \(httpStatus) instead of 200 from \(peer)", path: path)
                    ?? SpeechClientError(.api, "HTTP status \(httpStatus)")
                if grpc == GRPCStatus.unknown { e.code = .api }
                if httpStatus == "413" {
                    // A proxy's request size cap (nginx client_max_body_size): retrying the same
                    // way fails again; the stream budget must be below the cap.
                    e.message += ": the request was larger than a proxy allows; set a smaller stream budget (spc_options_set_stream_budget) than the proxy's limit"
                }
                fail(e)
                return
            }
            let contentType = headers.first { $0.name == "content-type" }?.value ?? ""
            // A Trailers-Only answer that omits content-type but carries grpc-status (grpclib's
            // answer to an unknown method) is still a gRPC status: take it, as grpcio's client does.
            let bareTrailersOnly = endStream && contentType.isEmpty && headers.contains { $0.name == "grpc-status" }
            if !contentType.hasPrefix("application/grpc") && !bareTrailersOnly {
                fail(SpeechClientError(.parse, "\(peer) answered \(path) with content-type '\(contentType)': not a gRPC server",
                                       grpcStatus: GRPCStatus.internal))
                return
            }
        }
        // The status is the trailers' (or a Trailers-Only answer's): the block that ends the
        // stream. One in the response's headers, read as the call's, made a stream cut after
        // them (DATA with END_STREAM, no trailers: a proxy whose server died) an OK finish.
        guard endStream else { return }
        for (name, value) in headers {
            if name == "grpc-status" {
                guard let s = Int32(value), s >= 0 else {
                    fail(SpeechClientError(.parse, "\(peer) sent an invalid grpc-status '\(value)' for \(path)", grpcStatus: GRPCStatus.internal))
                    return
                }
                // Codes past 16 are not gRPC's: UNKNOWN, as gRPC's own clients take them (the
                // header promises 0-16 from spc_error_grpc_status()).
                status = s <= GRPCStatus.unauthenticated ? s : GRPCStatus.unknown
            } else if name == "grpc-message" {
                statusMessage = GRPCStatus.percentDecode(value).shownFromServer()
            }
        }
    }

    func http2GoingAway() {
        guard !finished, !toldGoingAway else { return }
        toldGoingAway = true
        handler?(.goingAway)
    }

    func http2Data(_ bytes: UnsafeRawBufferPointer) {
        guard !finished else { return }
        do throws(SpeechClientError) {
            try deframer.append(bytes) { message in
                if !finished { handler?(.message(message)) }
            }
        } catch {
            var e = error
            e.message = "\(path): \(e.message)"
            fail(e)
        }
    }

    func http2RemoteEnded() {
        guard !finished else { return }
        var result: SpeechClientError?
        if let status {
            if deframer.isMidMessage {
                result = SpeechClientError(.parse, "\(path): the response from \(peer) ended in the middle of a message (status \(status) notwithstanding)",
                                           grpcStatus: GRPCStatus.internal)
            } else {
                result = GRPCStatus.error(status: status, message: statusMessage, path: path)
            }
        } else {
            // What a proxy sends when the server behind it died (HAProxy ends the stream, no
            // trailers): the call was broken in transit, so it is a network error, retried with
            // replay. The status stays INTERNAL, as grpc-go reports it.
            result = SpeechClientError(.network, "\(path): the response from \(peer) ended without a grpc-status"
                                       + (deframer.isMidMessage ? ", in the middle of a message" : "")
                                       + " (the server or a proxy in front of it broke the call)",
                                       grpcStatus: GRPCStatus.internal)
        }
        // The call is over even if we were still sending: stop the request side.
        let requestUnsent = !(halfClosed && current == nil && outgoing.isEmpty)
        if requestUnsent {
            connection?.reset(stream: streamID, errorCode: 8)
        }
        if result == nil && (current != nil || !outgoing.isEmpty || queuedBytes.value > 0) {
            // Status OK with request messages still queued here (behind flow control): the
            // server, or a proxy, ended the call without taking all of them. Said to the
            // caller, which knows whether they mattered: a recognizer's audio never heard (Riva:
            // `RivaRelay`), or an answer to the server's ping sent as it ended (Speechly).
            requestQueuedAtEnd.store(true, ordering: .releasing)
        }
        finish(result)
    }

    func http2Closed(errorCode: UInt32, connectionFailure: SpeechClientError?) {
        connection = nil
        guard !finished else { return }
        if let connectionFailure {
            finish(GRPCStatus.callError(connectionFailure: connectionFailure, path: path))
        } else if errorCode != 0 {
            wasRefused = errorCode == 7
            let grpc = GRPCStatus.fromHTTP2ErrorCode(errorCode)
            var e = GRPCStatus.error(status: grpc, message: "\(peer) reset the stream (HTTP/2 error code \(errorCode))", path: path)
            // A reset is the transport breaking the call, not the server's answer: a network
            // error (the client reconnects and replays), except the two codes that mean "no".
            if errorCode != 11 && errorCode != 12 { e?.code = .network }
            finish(e)
        } else {
            finish(SpeechClientError(.parse, "\(path): the stream to \(peer) closed without a response",
                                     grpcStatus: GRPCStatus.internal))
        }
    }

    func http2ReadBody(into buffer: UnsafeMutableRawBufferPointer) -> (count: Int, endOfBody: Bool)? {
        guard let to = buffer.baseAddress else {
            deferred = true
            return nil
        }
        var n = 0
        while n < buffer.count {
            if current == nil {
                guard let next = outgoing.pop() else { break }
                current = next
                taken = 0
            }
            guard let message = current else { break }
            while taken < 5 && n < buffer.count {
                to.storeBytes(of: MessageDeframer.prefixByte(taken, length: message.count), toByteOffset: n, as: UInt8.self)
                taken += 1
                n += 1
            }
            let count = min(message.count - (taken - 5), buffer.count - n)
            if count > 0 {
                message.withUnsafeBytes { src in
                    guard let from = src.baseAddress else { return }
                    (to + n).copyMemory(from: from + (taken - 5), byteCount: count)
                }
                taken += count
                n += count
            }
            if taken == message.count + 5 { current = nil }
        }
        if n == 0 {
            if halfClosed || finished { return (0, true) }
            deferred = true
            return nil
        }
        queuedBytes.subtract(n)
        return (n, halfClosed && current == nil && outgoing.isEmpty)
    }
}
