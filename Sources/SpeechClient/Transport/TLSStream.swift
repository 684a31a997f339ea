#if canImport(Glibc)
import Glibc
#endif
import COpenSSL
import CShims

/// A TLS client connection over a non-blocking TCP socket: owns the `SSL` object and the socket.
/// The handshake runs on the connecting thread (bounded by the connect deadline); afterwards the
/// event loop owns the stream. Not thread-safe: one owner thread at a time.
final class TLSStream: ByteStream {
    private let socket: TCPSocket
    private let ssl: OpaquePointer
    private let context: TLSContext   // keeps the SSL_CTX alive as long as the SSL
    private let host: String
    private let peer: String
    /// The first certificate that failed verification, recorded by the verify callback; owned
    /// here and freed after the SSL object that points to it.
    private let verifyFailure = UnsafeMutablePointer<speechclient_verify_failure>.allocate(capacity: 1)

    init(socket: TCPSocket, context: TLSContext, host: String, port: UInt16, insecure: Bool) throws(SpeechClientError) {
        self.socket = socket
        self.context = context
        self.host = host
        self.peer = "\(host):\(port)"
        // Errors an earlier call left on this thread's queue (the application's own OpenSSL
        // use among them) were reported in place of this connection's.
        ERR_clear_error()
        verifyFailure.initialize(to: speechclient_verify_failure())
        verifyFailure.pointee.depth = -1
        guard let ssl = SSL_new(context.ctx) else {
            verifyFailure.deallocate()
            throw TLSContext.lastError(.tls, "SSL_new", context: "TLS with \(host):\(port)")
        }
        self.ssl = ssl
        _ = speechclient_shim_ssl_record_verify_failure(ssl, verifyFailure)
        guard SSL_set_fd(ssl, socket.fd) == 1 else {
            throw TLSContext.lastError(.tls, "SSL_set_fd", context: "TLS with \(peer)")
        }
        // The name as certificates and SNI carry it: without the trailing dot of a fully
        // qualified name ("api.example.com."), which matched no certificate; an IPv6 address
        // without its zone ("%eth0"), which made it read as a host name.
        let name = TLSStream.certificateName(host)
        let isIPAddress = TLSStream.isIPLiteral(name)
        // SNI carries host names only (RFC 6066).
        if !isIPAddress && speechclient_shim_ssl_set_sni(ssl, name) != 1 {
            throw TLSContext.lastError(.tls, "SSL_set_tlsext_host_name", context: "TLS with \(peer)")
        }
        if !insecure {
            let ok: Int32
            if isIPAddress {
                ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name)
            } else {
                // The subjectAltName only: a certificate naming the host in its subject's CN
                // alone is refused (RFC 6125; OpenSSL fell back to the CN).
                X509_VERIFY_PARAM_set_hostflags(SSL_get0_param(ssl),
                                                UInt32(X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS | X509_CHECK_FLAG_NEVER_CHECK_SUBJECT))
                ok = SSL_set1_host(ssl, name)
            }
            guard ok == 1 else {
                throw TLSContext.lastError(.tls, "SSL_set1_host", context: "TLS with \(peer)")
            }
        }
    }

    deinit {
        SSL_free(ssl)
        verifyFailure.deallocate()
        socket.close()
    }

    var fd: Int32 { socket.fd }
    var shortReadMeansDrained: Bool { false }

    func close() {
        // A best-effort close_notify; the socket is non-blocking so this never waits.
        if socket.fd >= 0 {
            _ = speechclient_shim_ssl_shutdown(ssl)
            socket.close()
        }
        ERR_clear_error()
    }

    /// `host` as a certificate names it: one trailing dot dropped, an IPv6 zone dropped.
    static func certificateName(_ host: String) -> String {
        var name = Substring(host)
        if name.count > 1, name.hasSuffix(".") { name = name.dropLast() }
        if name.contains(":"), let zone = name.firstIndex(of: "%") { name = name[..<zone] }
        return String(name)
    }

    private static func isIPLiteral(_ host: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
    }

    /// Runs the handshake to the end, waiting with poll until `deadline` (monotonic ns); then
    /// checks that the server chose HTTP/2 through ALPN.
    func handshake(deadline: UInt64, cancellation: Cancellation? = nil) throws(SpeechClientError) {
        ERR_clear_error()
        while true {
            let rc = speechclient_shim_ssl_connect(ssl)
            if rc == 1 { break }
            let err = SSL_get_error(ssl, rc)
            let events: Int16
            switch err {
            case SSL_ERROR_WANT_READ: events = Int16(POLLIN)
            case SSL_ERROR_WANT_WRITE: events = Int16(POLLOUT)
            default: throw handshakeError(sslError: err)
            }
            ERR_clear_error()
            while true {
                let now = Clock.monotonicNanos()
                guard now < deadline else {
                    throw SpeechClientError(.timeout, "TLS handshake with \(peer) did not finish within the connect timeout")
                }
                try cancellation?.check()
                var pfd = pollfd(fd: socket.fd, events: events, revents: 0)
                // In 50 ms slices, so that a cancellation is seen promptly.
                let n = poll(&pfd, 1, Int32(min((deadline - now) / 1_000_000 + 1, 50)))
                if n > 0 { break }
                if n < 0 && errno != EINTR {
                    throw SpeechClientError.errno(.network, "poll", errno, context: "TLS handshake with \(peer)")
                }
            }
        }
        var proto: UnsafePointer<UInt8>?
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &proto, &length)
        let selected = proto.map { String(decoding: UnsafeBufferPointer(start: $0, count: Int(length)), as: UTF8.self) } ?? ""
        guard selected == "h2" else {
            throw SpeechClientError(.tls, "\(peer) does not speak HTTP/2 over TLS: ALPN 'h2' was not agreed"
                                    + (selected.isEmpty ? " (the server chose no protocol)" : " (the server chose '\(selected)')"))
        }
    }

    /// Which certificate is out of its dates: the server's own, one it sent, or a certificate
    /// authority of the trust store its chain led to (the renewed CA's old copy): "the
    /// certificate of HOST has expired" sent the user after the server in that last case.
    private func validityMessage(expired: Bool) -> String {
        let f = verifyFailure.pointee
        let name = withUnsafeBytes(of: f.name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let date = withUnsafeBytes(of: expired ? f.not_after : f.not_before) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let when = date.isEmpty ? "" : (expired ? " on \(date)" : " until \(date)")
        let what = expired ? "expired\(when)" : "is not valid\(when) (check the clock)"
        guard f.depth > 0 else {
            return expired ? "the certificate of \(peer) has expired\(date.isEmpty ? "" : " (on \(date))")"
                           : "the certificate of \(peer) is not valid yet\(date.isEmpty ? "" : " (until \(date))") (check the clock)"
        }
        let shown = name.shownFromServer(limit: 128)
        if f.sent_by_peer != 0 {
            return "the certificate '\(shown)' that \(peer) sent in its chain \(what): the server's chain needs renewing"
        }
        return "the certificate authority '\(shown)' in the trust store, which the certificate of \(peer) chains to, \(what)"
            + (expired ? ": update the CA certificates (the ca-certificates package, or the file given to spc_options_set_ca_file())" : "")
    }

    private func handshakeError(sslError: Int32) -> SpeechClientError {
        let verify = SSL_get_verify_result(ssl)
        if verify != X509_V_OK {
            let reason = String(cStringOrEmpty: X509_verify_cert_error_string(verify))
            ERR_clear_error()
            switch Int32(verify) {
            case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT, X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN,
                 X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT,
                 X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE, X509_V_ERR_CERT_UNTRUSTED:
                return SpeechClientError(.tls, "the certificate of \(peer) is not signed by a trusted certificate authority (unknown CA: \(reason))")
            case X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH:
                return SpeechClientError(.tls, "the certificate of \(peer) does not match the host name '\(host)' (hostname mismatch)")
            case X509_V_ERR_CERT_HAS_EXPIRED:
                return SpeechClientError(.tls, validityMessage(expired: true))
            case X509_V_ERR_CERT_NOT_YET_VALID:
                return SpeechClientError(.tls, validityMessage(expired: false))
            default:
                return SpeechClientError(.tls, "the certificate of \(peer) failed verification: \(reason)")
            }
        }
        let reason = TLSContext.drainErrorQueue()
        if sslError == SSL_ERROR_SYSCALL || sslError == SSL_ERROR_ZERO_RETURN {
            return SpeechClientError(.tls, "TLS handshake with \(peer) failed: the server closed the connection"
                                     + (reason.isEmpty ? "" : " (\(reason))"))
        }
        // What OpenSSL says when the answer is not a TLS record at all (issue 19 item 1).
        if reason.contains("wrong version number") || reason.contains("packet length too long") || reason.contains("http request") {
            return SpeechClientError(.tls, "TLS handshake with \(peer) failed: the server does not speak TLS (\(reason)); dial it without TLS (grpc://, riva://)")
        }
        return SpeechClientError(.tls, "TLS handshake with \(peer) failed" + (reason.isEmpty ? "" : ": \(reason)"))
    }

    // Each call starts with an empty error queue (it is per thread, and this may run on an
    // application thread that left something there): SSL_get_error needs that.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> IOResult {
        ERR_clear_error()
        let n = speechclient_shim_ssl_read(ssl, buffer.baseAddress, Int32(min(buffer.count, Int(Int32.max))))
        if n > 0 { return .bytes(Int(n)) }
        return ioError(SSL_get_error(ssl, n), function: "SSL_read")
    }

    func write(_ bytes: UnsafeRawBufferPointer) -> IOResult {
        if bytes.isEmpty { return .bytes(0) }
        ERR_clear_error()
        let n = speechclient_shim_ssl_write(ssl, bytes.baseAddress, Int32(min(bytes.count, Int(Int32.max))))
        if n > 0 { return .bytes(Int(n)) }
        return ioError(SSL_get_error(ssl, n), function: "SSL_write")
    }

    private func ioError(_ err: Int32, function: String) -> IOResult {
        let saved = errno
        switch err {
        case SSL_ERROR_WANT_READ: return .wouldBlock(wantRead: true)
        case SSL_ERROR_WANT_WRITE: return .wouldBlock(wantRead: false)
        case SSL_ERROR_ZERO_RETURN: return .closed
        case SSL_ERROR_SYSCALL:
            ERR_clear_error()
            if saved == 0 || saved == ECONNRESET || saved == EPIPE { return .closed }
            return .failed(.errno(.network, function, saved, context: "TLS connection to \(peer)"))
        default:
            return .failed(TLSContext.lastError(.tls, function, context: "TLS connection to \(peer)"))
        }
    }
}
