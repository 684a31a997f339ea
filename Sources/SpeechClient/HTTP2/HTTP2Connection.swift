#if canImport(Glibc)
import Glibc
#endif
import CNghttp2
import CShims
import Synchronization

/// One HTTP/2 client connection: an nghttp2 client session driven with mem_recv/mem_send over a
/// non-blocking byte stream (TCP or TLS), registered with the event loop. Many concurrent
/// streams share it. Owns the session, the byte stream and the I/O buffers.
///
/// Thread-safety: everything runs inside the event loop's work (its thread, or a task run
/// inline under its lock) except `isUsable` (atomic), which any thread may read, and
/// `onEnhanceYourCalm`, set by `ConnectionPool` before `start`; hence Sendable. The connection
/// stays alive while registered with the loop (the loop holds it).
final class HTTP2Connection: EventLoopHandler, @unchecked Sendable {
    let loop: EventLoop
    let peer: String
    private let settings: HTTP2Settings
    private let io: any ByteStream
    private var session: OpaquePointer?
    private var streams: [Int32: any HTTP2StreamDelegate] = [:] {
        didSet {
            openStreamCount.store(streams.count, ordering: .releasing)
            idleSinceNanos.store(streams.isEmpty ? Clock.monotonicNanos() : 0, ordering: .releasing)
            // Retired, it closes with its last stream, however that went (a reset, a close);
            // posted: this may run inside nghttp2's callback.
            if retired && streams.isEmpty && !oldValue.isEmpty { loop.post { [self] in closeIfIdle() } }
        }
    }
    private var pendingHeaders: [Int32: [(name: String, value: String)]] = [:]
    private var pendingHeaderBytes: [Int32: Int] = [:]
    /// Streams reset for a header block over the limit: their close names it (issue 23 item 3:
    /// it read "content-type '': not a gRPC server").
    private var oversizedHeaders: Set<Int32> = []
    /// A response header block larger than this resets its stream (a hostile server cannot make
    /// the client buffer without bound).
    private static let maxHeaderBlockBytes = 64 * 1024

    /// False once the connection received GOAWAY, failed or closed: new calls need another.
    private let usable = Atomic<Bool>(true)
    var isUsable: Bool { usable.load(ordering: .acquiring) }

    /// The streams open, and the server's SETTINGS_MAX_CONCURRENT_STREAMS (nginx allows 128 by
    /// default, HAProxy 100): atomics, so the pool can pick a connection with room from any
    /// thread. A request past the limit is not refused by nghttp2 but parked until a stream
    /// closes: a context's stream waited there, its audio queuing, until its start timed out.
    private let openStreamCount = Atomic<Int>(0)
    private let peerStreamLimit = Atomic<Int>(Int(UInt32.max))
    var hasRoomForStream: Bool {
        openStreamCount.load(ordering: .acquiring) < peerStreamLimit.load(ordering: .acquiring)
    }
    /// The last `openStream` was refused for the limit (read inside the same loop work).
    private(set) var refusedForStreamLimit = false
    /// Since when no stream is open (monotonic ns; 0 while some are): the pool closes a
    /// connection opened beside another for a burst once it stayed idle.
    private let idleSinceNanos = Atomic<UInt64>(Clock.monotonicNanos())
    var idleSince: UInt64 { idleSinceNanos.load(ordering: .acquiring) }

    // Output: bytes from nghttp2 not yet accepted by the socket.
    private var out: [UInt8] = []
    private var outOffset = 0
    private var wantsWritable = false
    private var flushScheduled = false
    private let readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    private var closed = false

    /// Called (on the loop) when the server sent GOAWAY with ENHANCE_YOUR_CALM: the pool
    /// lengthens the keepalive interval of the next connections.
    var onEnhanceYourCalm: (() -> Void)?

    /// Called once (on the loop): nil when the server's first SETTINGS frame arrived (it speaks
    /// HTTP/2), or the error that ended the connection before that, naming what answered
    /// instead (issue 19 item 1: a connection is not "ready" until the server answered).
    var onAnswer: ((SpeechClientError?) -> Void)?
    private var answered = false
    /// The first bytes received before the answer: what a wrong protocol is recognised by.
    private var firstBytes: [UInt8] = []

    // Keepalive.
    private var lastReceiveNanos: UInt64 = 0
    private var pingSentNanos: UInt64?
    private var keepaliveTimer: UInt64?
    /// A GOAWAY ENHANCE_YOUR_CALM was taken (its keepalive lesson is learnt once per connection).
    private var calmed = false
    /// `retire` was called: closed once its last stream ends.
    private var retired = false
    /// A GOAWAY came: its streams were told. A server may repeat it (the same last-stream-id,
    /// thousands in a read): each told every stream again, on the shared loop.
    private var toldGoingAway = false

    /// Outbound bytes above which nghttp2 is not asked for more frames until the socket drains.
    private static let outputHighWater = 256 * 1024

    init(io: any ByteStream, loop: EventLoop, peer: String, settings: HTTP2Settings) {
        self.io = io
        self.loop = loop
        self.peer = peer
        self.settings = settings
    }

    /// A GOAWAY's debug data is gRPC's "too_many_pings".
    static func saysTooManyPings(_ data: UnsafeMutablePointer<UInt8>?, _ count: Int) -> Bool {
        let wanted = Array("too_many_pings".utf8)
        guard let data, count == wanted.count else { return false }
        return UnsafeBufferPointer(start: data, count: count).elementsEqual(wanted)
    }

    deinit {
        if let session { nghttp2_session_del(session) }
        readBuffer.deallocate()
    }

    // MARK: starting (loop thread)

    /// Creates the session, queues the client preface and SETTINGS, registers with the loop.
    func start() throws(SpeechClientError) {
        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else {
            throw SpeechClientError(.noMemory, "nghttp2_session_callbacks_new failed")
        }
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, onBeginHeaders)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, onHeader)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, onFrameRecv)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, onDataChunk)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, onStreamClose)
        var s: OpaquePointer?
        let rc = nghttp2_session_client_new(&s, callbacks, Unmanaged.passUnretained(self).toOpaque())
        guard rc == 0, let s else { throw HTTP2Connection.error("nghttp2_session_client_new", rc, peer: peer) }
        session = s
        var entries = [
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_PUSH.rawValue), value: 0),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue),
                                   value: UInt32(max(settings.streamWindowBytes, 65_535))),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE.rawValue), value: 64 * 1024),
        ]
        let src = nghttp2_submit_settings(s, UInt8(NGHTTP2_FLAG_NONE.rawValue), &entries, entries.count)
        guard src == 0 else { throw HTTP2Connection.error("nghttp2_submit_settings", src, peer: peer) }
        _ = nghttp2_session_set_local_window_size(s, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0,
                                                  max(settings.connectionWindowBytes, 65_535))
        try loop.register(fd: io.fd, events: EPOLLIN.rawValue, handler: self, applicationDriven: settings.applicationDrivenIO)
        lastReceiveNanos = Clock.monotonicNanos()
        armKeepalive()
        flush()
    }

    static func error(_ function: String, _ rc: Int32, peer: String) -> SpeechClientError {
        SpeechClientError(.network, "HTTP/2 with \(peer): \(function) failed: \(String(cStringOrEmpty: nghttp2_strerror(rc)))")
    }

    // MARK: streams (loop thread)

    /// Submits a request (HEADERS, then DATA from the delegate's body) and returns its stream id.
    func openStream(headers: [(String, String)], delegate: any HTTP2StreamDelegate) throws(SpeechClientError) -> Int32 {
        guard let session, !closed, isUsable else {
            throw SpeechClientError(.network, "the connection to \(peer) is closing")
        }
        let limit = peerStreamLimit.load(ordering: .relaxed)
        refusedForStreamLimit = streams.count >= limit
        guard !refusedForStreamLimit else {
            throw SpeechClientError(.network, "\(peer) allows \(limit) concurrent streams on a connection, all in use")
        }
        // One buffer for all names and values; nghttp2 copies them during submit.
        var blob: [UInt8] = []
        var ranges: [(Int, Int, Int, Int)] = []
        for (name, value) in headers {
            let n = blob.count
            blob.append(contentsOf: name.utf8)
            let v = blob.count
            blob.append(contentsOf: value.utf8)
            ranges.append((n, v - n, v, blob.count - v))
        }
        blob.append(0)
        var provider = nghttp2_data_provider(source: nghttp2_data_source(ptr: nil), read_callback: onReadBody)
        let id = blob.withUnsafeMutableBufferPointer { buf -> Int32 in
            guard let base = buf.baseAddress else { return -1 }
            var nva = ranges.map { r in
                nghttp2_nv(name: base + r.0, value: base + r.2, namelen: r.1, valuelen: r.3,
                           flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue))
            }
            return nghttp2_submit_request(session, nil, &nva, nva.count, &provider, nil)
        }
        guard id > 0 else { throw HTTP2Connection.error("nghttp2_submit_request", id, peer: peer) }
        streams[id] = delegate
        if streams.count == 1 { keepaliveResumes() }
        scheduleFlush()
        return id
    }

    /// Tells nghttp2 that a deferred request body has more data (or its end).
    func resumeBody(stream id: Int32) {
        guard let session, streams[id] != nil else { return }
        _ = nghttp2_session_resume_data(session, id)
        scheduleFlush()
    }

    /// Resets a stream (RST_STREAM with `errorCode`, CANCEL = 8). The delegate is dropped
    /// first, so it hears nothing more.
    func reset(stream id: Int32, errorCode: UInt32) {
        guard let session, streams.removeValue(forKey: id) != nil else { return }
        oversizedHeaders.remove(id)
        pendingHeaders[id] = nil
        pendingHeaderBytes[id] = nil
        _ = nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), id, errorCode)
        scheduleFlush()
    }

    // MARK: I/O (loop thread)

    func handleEvents(_ events: UInt32) {
        if closed { return }
        if events & (EPOLLIN.rawValue | EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 {
            readAvailable()
        }
        if !closed { flush() }
    }

    /// Reads what the socket holds, at most `EventLoop.readsPerWake` buffers: a server that
    /// sends faster than the loop parses (frames that cost it nothing) must not keep the shared
    /// loop, its timers and the other connections waiting. What is left is read on the next turn
    /// (a posted continuation: TLS may hold decrypted bytes the socket's readiness does not show).
    private func readAvailable() {
        guard let session else { return }
        var reads = 0
        while !closed {
            if reads == EventLoop.readsPerWake {
                readingContinues()
                return
            }
            reads += 1
            switch io.read(into: readBuffer) {
            case .bytes(let n):
                lastReceiveNanos = Clock.monotonicNanos()
                guard let base = readBuffer.baseAddress else { return }
                if !answered && firstBytes.count < 64 {
                    firstBytes += UnsafeRawBufferPointer(rebasing: readBuffer[..<min(n, 64 - firstBytes.count)])
                }
                var rc = 0
                loop.batchingWakes { rc = nghttp2_session_mem_recv(session, base.assumingMemoryBound(to: UInt8.self), n) }
                if rc < 0 {
                    fail(SpeechClientError(.network, "HTTP/2 protocol error from \(peer): \(String(cStringOrEmpty: nghttp2_strerror(Int32(truncatingIfNeeded: rc))))"))
                    return
                }
                if n < readBuffer.count && io.shortReadMeansDrained { return }
            case .wouldBlock:
                return
            case .closed:
                fail(SpeechClientError(.network, "the connection to \(peer) was closed by the server"))
                return
            case .failed(let error):
                fail(error)
                return
            }
        }
    }

    /// One continuation at a time: the socket's readiness reads it too each turn, and a
    /// continuation posted by every read that used its budget piled up (n of them at turn n).
    private func readingContinues() {
        if readContinuationPending { return }
        readContinuationPending = true
        loop.post { [self] in
            self.readContinuationPending = false
            guard !self.closed else { return }
            self.readAvailable()
            if !self.closed { self.flush() }
        }
    }
    private var readContinuationPending = false

    /// Coalesces the writes of everything queued during one loop turn into one flush.
    private func scheduleFlush() {
        if flushScheduled || closed { return }
        flushScheduled = true
        loop.execute { [self] in
            self.flushScheduled = false
            self.flush()
        }
    }

    /// Moves frames from nghttp2 to the socket until nghttp2 has nothing or the socket is full.
    private func flush() {
        guard let session, !closed else { return }
        while true {
            // Gather frames into `out` (bounded), then write them in one call.
            while out.count - outOffset < HTTP2Connection.outputHighWater {
                var data: UnsafePointer<UInt8>?
                let n = nghttp2_session_mem_send(session, &data)
                if n < 0 {
                    fail(HTTP2Connection.error("nghttp2_session_mem_send", Int32(truncatingIfNeeded: n), peer: peer))
                    return
                }
                guard n > 0, let data else { break }
                if outOffset > 0 && outOffset == out.count { out.removeAll(keepingCapacity: true); outOffset = 0 }
                out.append(contentsOf: UnsafeBufferPointer(start: data, count: n))
            }
            if outOffset == out.count { break }
            let result = out.withUnsafeBytes { raw in
                io.write(UnsafeRawBufferPointer(rebasing: raw[outOffset...]))
            }
            switch result {
            case .bytes(let n):
                outOffset += n
                if outOffset == out.count { out.removeAll(keepingCapacity: out.count <= 1 << 20); outOffset = 0 }
                continue
            case .wouldBlock(let wantRead):
                // TLS may need to read before it can write: wait for readable data (a read
                // flushes after it), not for a writable socket, which is writable at once and
                // turned the wait into a spin.
                setWantsWritable(!wantRead)
                return
            case .closed:
                fail(SpeechClientError(.network, "the connection to \(peer) was closed by the server"))
                return
            case .failed(let error):
                fail(error)
                return
            }
        }
        setWantsWritable(false)
        if nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0 {
            // GOAWAY exchanged and no stream left (or the session is done): close quietly.
            fail(SpeechClientError(.network, "the connection to \(peer) was closed (GOAWAY)"))
        }
    }

    private func setWantsWritable(_ on: Bool) {
        guard on != wantsWritable, !closed else { return }
        wantsWritable = on
        loop.modify(fd: io.fd, events: EPOLLIN.rawValue | (on ? EPOLLOUT.rawValue : 0))
    }

    /// No new stream goes on this connection (loop thread): a stream on it found its server
    /// stopped (a start or a finish that never came, the connection's flow-control window
    /// never reopened). Kept, it was the pool's first choice for every new attempt, and each
    /// met the same fate while the connection still answered PINGs. The streams on it may
    /// finish; it closes when the last one ends.
    func retire() {
        guard !closed else { return }
        usable.store(false, ordering: .releasing)
        retired = true
        closeIfIdle()
    }

    /// The server has given no room to send on the connection as a whole (loop thread).
    var sendWindowExhausted: Bool {
        guard let session, !closed else { return false }
        return nghttp2_session_get_remote_window_size(session) <= 0
    }

    /// Closes the connection if no stream is open (the pool's idle connections; loop thread).
    func closeIfIdle() {
        guard streams.isEmpty, !closed else { return }
        fail(SpeechClientError(.network, "the connection to \(peer) was closed (idle)"))
    }

    /// Ends the connection: every open stream fails with `error`, the socket and session go.
    /// Before the server answered, the error names what answered instead (`unanswered`).
    func fail(_ failure: SpeechClientError) {
        if closed { return }
        var error = failure
        if !answered {
            error = unanswered(failure)
            answered = true
            onAnswer?(error)
            onAnswer = nil
        }
        closed = true
        usable.store(false, ordering: .releasing)
        if let t = keepaliveTimer { loop.cancelTimer(t) }
        keepaliveTimer = nil
        loop.unregister(fd: io.fd)
        io.close()
        let open = streams
        streams.removeAll()
        pendingHeaders.removeAll()
        pendingHeaderBytes.removeAll()
        oversizedHeaders.removeAll()
        for (_, delegate) in open.sorted(by: { $0.key < $1.key }) {
            delegate.http2Closed(errorCode: 0, connectionFailure: error)
        }
    }

    /// Names why a connection ended before the server's SETTINGS: an HTTP/1 answer, a TLS
    /// record (a TLS server dialled without TLS), other bytes, or nothing at all. A write that
    /// failed first (the server answered and closed) still gets what the server had sent.
    private func unanswered(_ error: SpeechClientError) -> SpeechClientError {
        if firstBytes.isEmpty, case .bytes(let n) = io.read(into: readBuffer) {
            firstBytes = Array(UnsafeRawBufferPointer(rebasing: readBuffer[..<min(n, 64)]))
        }
        let b = firstBytes
        let reason: String
        if b.starts(with: Array("HTTP/".utf8)) {
            let line = b.prefix { $0 != 13 && $0 != 10 }.map { $0 >= 0x20 && $0 < 0x7f ? Character(UnicodeScalar($0)) : "?" }
            reason = "not an HTTP/2 server: it answered HTTP/1 ('\(String(line))')"
        } else if b.count >= 2 && (b[0] == 0x15 || b[0] == 0x16) && b[1] == 0x03 {
            reason = "it answered with TLS: a TLS server dialled without TLS (use the scheme with TLS, such as grpc+tls:// or rivas://)"
        } else if !b.isEmpty {
            let hex = b.prefix(8).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined(separator: " ")
            reason = "not an HTTP/2 server: it answered with unexpected bytes (\(hex) ...)"
        } else {
            reason = "the server closed the connection without an HTTP/2 answer (\(error.message)); a TLS server dialled without TLS does that"
        }
        var named = SpeechClientError(.network, "\(peer): \(reason)")
        if (error.code == .timeout && b.isEmpty) || error.code == .invalidState { named = error }
        return named
    }

    // MARK: keepalive (loop thread)

    /// The first stream after an idle spell. A connection that has received nothing for a
    /// keepalive interval is probed at once: a peer gone silent while it was idle (a NAT that
    /// forgot it, a host switched off) then fails this stream within the keepalive timeout.
    /// The clock of the last receipt was set to now instead: every call on the dead connection
    /// waited for its own timeout, each reconnect attempt took the same connection again, and a
    /// PING in flight counted as answered.
    private func keepaliveResumes() {
        guard let session, settings.keepaliveIntervalMilliseconds > 0, !closed else { return }
        let now = Clock.monotonicNanos()
        let interval = UInt64(settings.keepaliveIntervalMilliseconds) * 1_000_000
        if pingSentNanos == nil && now >= lastReceiveNanos &+ interval,
           nghttp2_submit_ping(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), nil) == 0 {
            pingSentNanos = now
        }
        if keepaliveTimer == nil { armKeepalive() }
    }

    /// Arms the keepalive timer while streams are open or a PING is unanswered. Not for an idle
    /// connection: its due time, a receipt long past, was always now, and the timer fired again
    /// and again (half a core, for as long as the client waited between contexts).
    private func armKeepalive() {
        guard settings.keepaliveIntervalMilliseconds > 0, !closed else { return }
        guard !streams.isEmpty || pingSentNanos != nil else { return }
        let interval = UInt64(settings.keepaliveIntervalMilliseconds) * 1_000_000
        let timeout = UInt64(max(settings.keepaliveTimeoutMilliseconds, 1)) * 1_000_000
        let now = Clock.monotonicNanos()
        let dueNanos: UInt64
        if let sent = pingSentNanos {
            dueNanos = sent + timeout
        } else {
            dueNanos = lastReceiveNanos + interval
        }
        let ms = dueNanos > now ? Int((dueNanos - now + 999_999) / 1_000_000) : 0
        // Held strongly: the loop holds the connection anyway while it is registered, and
        // `fail` (which unregisters it) cancels this timer. A weak reference would send every
        // retain of the connection (a few per chunk) down the runtime's slow path.
        keepaliveTimer = loop.addTimer(milliseconds: ms) { [self] in self.keepaliveTick() }
    }

    private func keepaliveTick() {
        keepaliveTimer = nil
        guard let session, !closed else { return }
        let now = Clock.monotonicNanos()
        let interval = UInt64(settings.keepaliveIntervalMilliseconds) * 1_000_000
        let timeout = UInt64(max(settings.keepaliveTimeoutMilliseconds, 1)) * 1_000_000
        if let sent = pingSentNanos {
            // Answered only by its ACK (which clears it): anything else arriving was taken as
            // an answer, and a server that stopped reading the socket while it still sent (its
            // own PINGs, SETTINGS) was never found dead.
            if now >= sent + timeout {
                fail(SpeechClientError(.network, "the server \(peer) did not answer a keepalive PING within \(settings.keepaliveTimeoutMilliseconds) ms: connection considered dead"))
                return
            }
        } else if !streams.isEmpty && now >= lastReceiveNanos + interval {
            if nghttp2_submit_ping(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), nil) == 0 {
                pingSentNanos = now
                flush()
            }
        }
        armKeepalive()
    }

    // MARK: nghttp2 callbacks (loop thread, inside mem_recv / mem_send)

    fileprivate func beginHeaders(stream id: Int32) {
        if streams[id] != nil {
            pendingHeaders[id] = []
            pendingHeaderBytes[id] = 0
        }
    }

    /// Returns false when the header block grew too large (the stream is then reset).
    fileprivate func header(stream id: Int32, name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) -> Bool {
        guard pendingHeaders[id] != nil else { return true }
        let total = (pendingHeaderBytes[id] ?? 0) + name.count + value.count + 32
        pendingHeaderBytes[id] = total
        if total > HTTP2Connection.maxHeaderBlockBytes {
            pendingHeaders[id] = nil
            pendingHeaderBytes[id] = nil
            oversizedHeaders.insert(id)
            return false
        }
        pendingHeaders[id]?.append((String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self)))
        return true
    }

    fileprivate func frameReceived(_ frame: UnsafePointer<nghttp2_frame>) {
        let hd = frame.pointee.hd
        switch UInt32(hd.type) {
        case NGHTTP2_HEADERS.rawValue:
            let id = hd.stream_id
            pendingHeaderBytes[id] = nil
            guard let headers = pendingHeaders.removeValue(forKey: id), let delegate = streams[id] else { return }
            let endStream = hd.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
            delegate.http2Headers(headers, endStream: endStream)
            if endStream { streams[id]?.http2RemoteEnded() }
        case NGHTTP2_DATA.rawValue:
            if hd.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0 { streams[hd.stream_id]?.http2RemoteEnded() }
        case NGHTTP2_GOAWAY.rawValue:
            // New calls go to a new connection; streams above last-stream-id are closed by
            // nghttp2 with REFUSED_STREAM, the others may finish, and are told so they can move.
            usable.store(false, ordering: .releasing)
            let goaway = frame.pointee.goaway
            // ENHANCE_YOUR_CALM for too many pings (gRPC's keepalive, A8: its debug data says
            // "too_many_pings"). Once per connection: each such frame doubled the pool's
            // interval, and a handful on one connection made it an hour. Not for any other calm
            // (a server shedding load, limiting resets): that doubled it too, for good.
            if goaway.error_code == 11 && !calmed && Self.saysTooManyPings(goaway.opaque_data, goaway.opaque_data_len) {
                calmed = true
                onEnhanceYourCalm?()
            }
            // Its streams are told once; a later GOAWAY lowering last-stream-id closes the ones
            // above it itself (nghttp2: REFUSED_STREAM).
            guard !toldGoingAway else { break }
            toldGoingAway = true
            let last = goaway.last_stream_id
            for (id, delegate) in streams.sorted(by: { $0.key < $1.key }) where id <= last {
                delegate.http2GoingAway()
            }
        case NGHTTP2_PING.rawValue:
            if hd.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) != 0 { pingSentNanos = nil }
        case NGHTTP2_SETTINGS.rawValue:
            if hd.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0, let session {
                // Applied by nghttp2 before this callback. A limit lowered below the streams
                // open leaves those running; new ones go to another connection.
                let limit = nghttp2_session_get_remote_settings(session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
                peerStreamLimit.store(Int(limit), ordering: .releasing)
            }
            if !answered && hd.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0 {
                answered = true
                firstBytes = []
                onAnswer?(nil)
                onAnswer = nil
            }
        default:
            break
        }
    }

    fileprivate func dataReceived(stream id: Int32, _ bytes: UnsafeRawBufferPointer) {
        streams[id]?.http2Data(bytes)
    }

    fileprivate func streamClosed(stream id: Int32, errorCode: UInt32) {
        pendingHeaders[id] = nil
        pendingHeaderBytes[id] = nil
        let oversized = oversizedHeaders.remove(id) != nil
        guard let delegate = streams.removeValue(forKey: id) else { return }
        if oversized {
            delegate.http2Closed(errorCode: errorCode, connectionFailure: SpeechClientError(
                .parse, "\(peer) sent a header block over the \(HTTP2Connection.maxHeaderBlockBytes / 1024) KiB limit: the stream was reset"))
        } else {
            delegate.http2Closed(errorCode: errorCode, connectionFailure: nil)
        }
    }

    fileprivate func readBody(stream id: Int32, into buffer: UnsafeMutableRawBufferPointer,
                              flags: UnsafeMutablePointer<UInt32>) -> Int {
        guard let delegate = streams[id] else {
            flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue
            return 0
        }
        guard let (count, end) = delegate.http2ReadBody(into: buffer) else {
            return Int(NGHTTP2_ERR_DEFERRED.rawValue)
        }
        if end { flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue }
        return count
    }
}

// The C callbacks: each recovers its connection from user_data (passed unretained; the session
// only calls back while the connection drives it).

private func connection(_ userData: UnsafeMutableRawPointer?) -> HTTP2Connection? {
    guard let userData else { return nil }
    return Unmanaged<HTTP2Connection>.fromOpaque(userData).takeUnretainedValue()
}

private func onBeginHeaders(_ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?,
                            _ userData: UnsafeMutableRawPointer?) -> Int32 {
    guard let frame, let c = connection(userData) else { return 0 }
    if UInt32(frame.pointee.hd.type) == NGHTTP2_HEADERS.rawValue {
        c.beginHeaders(stream: frame.pointee.hd.stream_id)
    }
    return 0
}

private func onHeader(_ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?,
                      _ name: UnsafePointer<UInt8>?, _ nameLength: Int,
                      _ value: UnsafePointer<UInt8>?, _ valueLength: Int, _ flags: UInt8,
                      _ userData: UnsafeMutableRawPointer?) -> Int32 {
    guard let frame, let name, let value, let c = connection(userData) else { return 0 }
    let ok = c.header(stream: frame.pointee.hd.stream_id, name: UnsafeBufferPointer(start: name, count: nameLength),
                      value: UnsafeBufferPointer(start: value, count: valueLength))
    // TEMPORAL_CALLBACK_FAILURE makes nghttp2 reset just this stream (INTERNAL_ERROR).
    return ok ? 0 : NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue
}

private func onFrameRecv(_ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?,
                         _ userData: UnsafeMutableRawPointer?) -> Int32 {
    guard let frame, let c = connection(userData) else { return 0 }
    c.frameReceived(frame)
    return 0
}

private func onDataChunk(_ session: OpaquePointer?, _ flags: UInt8, _ streamID: Int32,
                         _ data: UnsafePointer<UInt8>?, _ length: Int,
                         _ userData: UnsafeMutableRawPointer?) -> Int32 {
    guard let data, let c = connection(userData) else { return 0 }
    c.dataReceived(stream: streamID, UnsafeRawBufferPointer(start: data, count: length))
    return 0
}

private func onStreamClose(_ session: OpaquePointer?, _ streamID: Int32, _ errorCode: UInt32,
                           _ userData: UnsafeMutableRawPointer?) -> Int32 {
    connection(userData)?.streamClosed(stream: streamID, errorCode: errorCode)
    return 0
}

private func onReadBody(_ session: OpaquePointer?, _ streamID: Int32, _ buffer: UnsafeMutablePointer<UInt8>?,
                        _ length: Int, _ flags: UnsafeMutablePointer<UInt32>?,
                        _ source: UnsafeMutablePointer<nghttp2_data_source>?,
                        _ userData: UnsafeMutableRawPointer?) -> Int {
    guard let buffer, let flags, let c = connection(userData) else {
        return Int(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue)
    }
    return c.readBody(stream: streamID, into: UnsafeMutableRawBufferPointer(start: buffer, count: length), flags: flags)
}
