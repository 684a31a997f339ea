#if canImport(Glibc)
import Glibc
#endif

/// What a non-blocking read or write did.
enum IOResult {
    case bytes(Int)
    /// Nothing now; wait until the socket is readable (`wantRead`) or writable.
    case wouldBlock(wantRead: Bool)
    /// The peer closed the connection cleanly.
    case closed
    case failed(SpeechClientError)
}

/// A connected, non-blocking byte stream (plain TCP or TLS) owned by the event loop once handed
/// to an HTTP2Connection. Not thread-safe: one owner thread at a time.
protocol ByteStream: AnyObject {
    var fd: Int32 { get }
    /// True when a read shorter than the buffer means nothing is left (plain sockets); TLS may
    /// hold decrypted bytes back, so its reader keeps going until `wouldBlock`.
    var shortReadMeansDrained: Bool { get }
    func read(into buffer: UnsafeMutableRawBufferPointer) -> IOResult
    func write(_ bytes: UnsafeRawBufferPointer) -> IOResult
    func close()
}

/// Plain TCP (h2c with prior knowledge).
final class PlainStream: ByteStream {
    private let socket: TCPSocket
    private let peer: String

    init(socket: TCPSocket, peer: String) {
        self.socket = socket
        self.peer = peer
    }

    var fd: Int32 { socket.fd }
    var shortReadMeansDrained: Bool { true }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> IOResult {
        while true {
            let n = Glibc.recv(socket.fd, buffer.baseAddress, buffer.count, 0)
            if n > 0 { return .bytes(n) }
            if n == 0 { return .closed }
            let e = errno
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { return .wouldBlock(wantRead: true) }
            return .failed(.errno(.network, "recv", e, context: "connection to \(peer)"))
        }
    }

    func write(_ bytes: UnsafeRawBufferPointer) -> IOResult {
        while true {
            let n = Glibc.send(socket.fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
            if n >= 0 { return .bytes(n) }
            let e = errno
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { return .wouldBlock(wantRead: false) }
            return .failed(.errno(.network, "send", e, context: "connection to \(peer)"))
        }
    }

    func close() { socket.close() }
}

/// Opens the byte stream for a server: resolves, connects (each address in turn) and, for TLS,
/// handshakes, all on the calling thread and all within `timeoutMilliseconds`. The result is
/// then handed to the event loop, which owns it from there on.
enum Connector {
    static func open(host: String, port: UInt16, useTLS: Bool, tls: TLSSettings,
                     timeoutMilliseconds: Int, cancellation: Cancellation? = nil) throws(SpeechClientError) -> any ByteStream {
        let deadline = Clock.monotonicNanos() + UInt64(max(timeoutMilliseconds, 1)) * 1_000_000
        // The TLS context is made while the TCP handshake waits for its answer: the first one
        // opens OpenSSL and initialises it (2-5 ms here), which a server a round trip away then
        // no longer adds. A connect that fails makes it too: without OpenSSL, the error naming
        // the package, not network errors retried while the server is away.
        var context: TLSContext?
        func makeContext() throws(SpeechClientError) {
            if useTLS && context == nil { context = try TLSContext.shared(for: tls) }
        }
        let socket: TCPSocket
        do throws(SpeechClientError) {
            socket = try TCPSocket.connect(host: host, port: port, timeoutMilliseconds: timeoutMilliseconds,
                                           cancellation: cancellation, whileConnecting: useTLS ? makeContext : nil)
        } catch {
            try makeContext()
            throw error
        }
        try makeContext()  // connected at once
        let peer = "\(host):\(port)"
        guard let context else { return PlainStream(socket: socket, peer: peer) }
        let stream = try TLSStream(socket: socket, context: context, host: host, port: port, insecure: tls.insecure)
        try stream.handshake(deadline: deadline, cancellation: cancellation)
        return stream
    }
}
