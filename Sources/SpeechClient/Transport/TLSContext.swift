#if canImport(Glibc)
import Glibc
#endif
import COpenSSL
import CShims
import Synchronization

/// An OpenSSL `SSL_CTX` for one set of TLS settings: TLS 1.2 or newer, ALPN offering only `h2`,
/// peer verification against the system CA store (or the configured CA file) unless insecure.
/// Owns the context and frees it; shared by every connection with the same settings.
/// Sendable: `ctx` is configured in init, then only passed to `SSL_new`, thread-safe on a configured context.
final class TLSContext: @unchecked Sendable {
    let ctx: OpaquePointer

    private static let cache = Locked<[TLSSettings: TLSContext]>([:])

    static func shared(for settings: TLSSettings) throws(SpeechClientError) -> TLSContext {
        try cache.withLock { (cache) throws(SpeechClientError) -> TLSContext in
            if let c = cache[settings] { return c }
            let c = try TLSContext(settings)
            cache[settings] = c
            return c
        }
    }

    private init(_ settings: TLSSettings) throws(SpeechClientError) {
        // OpenSSL is loaded now, by the first TLS connection (CShims/openssl_loader.c).
        if let why = speechclient_shim_openssl_unavailable() { throw SpeechClientError(.tls, String(cString: why)) }
        ERR_clear_error()  // what an earlier call left on this thread's queue is not this one's error
        guard let method = TLS_client_method(), let ctx = SSL_CTX_new(method) else {
            throw TLSContext.lastError(.tls, "SSL_CTX_new", context: "creating the TLS context")
        }
        self.ctx = ctx
        guard speechclient_shim_ssl_ctx_require_tls12(ctx) == 1 else {
            throw TLSContext.lastError(.tls, "SSL_CTX_set_min_proto_version", context: "requiring TLS 1.2")
        }
        speechclient_shim_ssl_ctx_set_nonblocking_modes(ctx)
        // The key share goes to P-256: a gRPC server built on the system OpenSSL (Debian's
        // libgrpc: grpc++ servers there) accepts no other group, and OpenSSL's default share
        // (X25519 alone) made each connection to it take a HelloRetryRequest: a round trip and
        // a key pair more. Servers that support X25519 as well (grpcio's BoringSSL, nginx)
        // take the P-256 share as offered; X25519 stays listed.
        guard speechclient_shim_ssl_ctx_set_groups(ctx, "P-256:X25519:P-384") == 1 else {
            throw TLSContext.lastError(.tls, "SSL_CTX_set1_groups_list", context: "offering key exchange groups")
        }
        // ALPN protocol list in wire format: length-prefixed "h2".
        let alpn: [UInt8] = [2, 0x68, 0x32]
        guard SSL_CTX_set_alpn_protos(ctx, alpn, UInt32(alpn.count)) == 0 else {
            throw TLSContext.lastError(.tls, "SSL_CTX_set_alpn_protos", context: "offering ALPN h2")
        }
        if settings.insecure {
            SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nil)
        } else {
            // Records which certificate failed, for the error (CShims/tls_verify.c).
            speechclient_shim_ssl_ctx_verify_peer(ctx)
            if let caFile = settings.caFile {
                guard SSL_CTX_load_verify_locations(ctx, caFile, nil) == 1 else {
                    throw TLSContext.lastError(.tls, "SSL_CTX_load_verify_locations",
                                               context: "cannot load CA file '\(caFile)'")
                }
            } else {
                // The system store, its CA file read only if its hashed directory lacks an
                // issuer: reading the file up front cost 47 ms per process (CShims/tls_trust.c).
                // An OpenSSL whose built-in places do not exist on this machine (a copy built
                // elsewhere) finds the distribution's bundle here (Fedora, openSUSE).
                guard speechclient_shim_ssl_ctx_trust_system_store(ctx, Self.distributionCABundle()) == 1 else {
                    throw TLSContext.lastError(.tls, "X509_STORE_add_lookup", context: "cannot use the system CA store")
                }
            }
        }
    }

    deinit { SSL_CTX_free(ctx) }

    /// The CA bundle of the system, when OpenSSL's own default places (built in, or
    /// SSL_CERT_FILE / SSL_CERT_DIR) do not exist on this machine: the paths Go and curl probe.
    static func distributionCABundle() -> String? {
        if getenv("SSL_CERT_FILE") != nil || getenv("SSL_CERT_DIR") != nil { return nil }
        let defaults = [X509_get_default_cert_file(), X509_get_default_cert_dir()].compactMap { $0.map { String(cString: $0) } }
        if defaults.contains(where: { access($0, R_OK) == 0 }) { return nil }
        return ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/ca-bundle.pem",
                "/etc/ssl/cert.pem", "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem"].first { access($0, R_OK) == 0 }
    }

    /// An error naming the OpenSSL function and the first queued OpenSSL reason; clears the queue.
    static func lastError(_ code: SpeechClientError.Code, _ function: String, context: String) -> SpeechClientError {
        let reason = drainErrorQueue()
        return SpeechClientError(code, "\(context): \(function) failed" + (reason.isEmpty ? "" : ": \(reason)"))
    }

    /// The first reason in OpenSSL's thread-local error queue (which is then cleared).
    static func drainErrorQueue() -> String {
        let first = ERR_get_error()
        while ERR_get_error() != 0 {}
        guard first != 0 else { return "" }
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(first, &buffer, buffer.count)
        return buffer.withUnsafeBufferPointer { String(cStringOrEmpty: $0.baseAddress) }
    }
}
