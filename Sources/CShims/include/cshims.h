/* Small C helpers for things Swift cannot import: variadic calls, macros, GNU extensions. */
#ifndef SPC_CSHIMS_H
#define SPC_CSHIMS_H

#include <stdint.h>
/* epoll and eventfd are not in Swift's Glibc module: the event loop imports them from here. */
#include <sys/epoll.h>
#include <sys/eventfd.h>

/* Names the calling thread (at most 15 bytes are kept); shows in top -H and gdb. */
void speechclient_shim_set_thread_name(const char *name);
/* The calling thread's kernel id (gettid), as /proc/self/task and top -H show it. */
int speechclient_shim_thread_id(void);
/* pthread_mutex_clocklock on CLOCK_MONOTONIC (a _GNU_SOURCE function): 0 when locked, ETIMEDOUT
** when `deadline_ns` (monotonic) passed first. The mutex is a pthread_mutex_t. */
int speechclient_shim_mutex_lock_until(void *mutex, uint64_t deadline_ns);
/* The calling thread's send cork (EventLoop.corking), NULL when it has none. */
void *speechclient_shim_cork(void);
void speechclient_shim_set_cork(void *cork);

/* OpenSSL macros (SSL_ctrl / SSL_CTX_ctrl wrappers). The types are declared opaquely so this
   header does not pull OpenSSL's headers into a second Clang module. */
struct ssl_st;
struct ssl_ctx_st;
/* SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION); returns 1 on success. */
int speechclient_shim_ssl_ctx_require_tls12(struct ssl_ctx_st *ctx);
/* SSL_CTX_set1_groups_list(ctx, groups) (key exchange groups, in order: the first gets the
   ClientHello's key share); returns 1 on success. */
int speechclient_shim_ssl_ctx_set_groups(struct ssl_ctx_st *ctx, const char *groups);
/* SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER
   | SSL_MODE_RELEASE_BUFFERS), and SSL_OP_IGNORE_UNEXPECTED_EOF. */
void speechclient_shim_ssl_ctx_set_nonblocking_modes(struct ssl_ctx_st *ctx);
/* Trusts the system's CAs as SSL_CTX_set_default_verify_paths() does (and `extra_bundle`, a PEM
   file, when not NULL), but reads the CA file only when the hashed certificate directory has no
   issuer for a certificate being verified (tls_trust.c says why). Returns 1 on success. */
int speechclient_shim_ssl_ctx_trust_system_store(struct ssl_ctx_st *ctx, const char *extra_bundle);
/* The first failure in verifying a peer's chain (tls_verify.c): the X509_V_ERR_* error, the
   depth (0: the server's certificate; -1: none recorded), the certificate's common name (or
   whole subject), its validity dates as YYYY-MM-DD, and whether the server sent it (else it
   came from the trust store). */
struct speechclient_verify_failure {
    int error;
    int depth;
    int sent_by_peer;
    char name[256];
    char not_before[16];
    char not_after[16];
};
/* SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, cb), cb recording each connection's first failure
   into the record given with speechclient_shim_ssl_record_verify_failure. */
void speechclient_shim_ssl_ctx_verify_peer(struct ssl_ctx_st *ctx);
/* Clears `failure` and records `ssl`'s first verification failure there; the record must
   outlive the SSL object. Returns 1 on success. */
int speechclient_shim_ssl_record_verify_failure(struct ssl_st *ssl, struct speechclient_verify_failure *failure);
/* SSL_set_tlsext_host_name(ssl, name) (SNI); returns 1 on success. */
int speechclient_shim_ssl_set_sni(struct ssl_st *ssl, const char *name);
/* SSL_connect / SSL_read / SSL_write / SSL_shutdown with SIGPIPE kept from the process: a write
   into a connection the peer reset raises none (see shims.c). Same results and errno. */
void speechclient_shim_block_sigpipe_for_thread(void);
int speechclient_shim_ssl_connect(struct ssl_st *ssl);
int speechclient_shim_ssl_read(struct ssl_st *ssl, void *buf, int count);
int speechclient_shim_ssl_write(struct ssl_st *ssl, const void *buf, int count);
int speechclient_shim_ssl_shutdown(struct ssl_st *ssl);

/* ALSA's own error messages (its handlers take a variadic function or a va_list, which Swift
   cannot write): formatted here and handed to `fn` with the calling thread's context, set by
   speechclient_shim_alsa_set_context, which also sets ALSA's thread-local handler for the
   thread while a context is set (the process-wide handler stays the application's). `route`
   sets `fn` (and, with an alsa-lib without thread-local handlers, the process-wide handler);
   calling it again with the same function is harmless. */
typedef void (*speechclient_alsa_message_fn)(void *context, const char *message);
void speechclient_shim_alsa_route_errors(speechclient_alsa_message_fn fn);
/* Sets this thread's context for ALSA's messages; returns the previous one. */
void *speechclient_shim_alsa_set_context(void *context);
/* Whether the loaded alsa-lib has thread-local error handlers (snd_lib_error_set_local). */
int speechclient_shim_alsa_has_local_errors(void);

/* OpenSSL is opened (dlopen of libssl.so.3) when TLS is first used, not linked
   (openssl_loader.c). NULL when it could be opened, else why not, naming the package to install. */
const char *speechclient_shim_openssl_unavailable(void);

/* ALSA is opened (dlopen of libasound.so.2) on first use, not linked (alsa_loader.c). NULL when
   it is there; otherwise why not, naming the package to install. */
const char *speechclient_shim_alsa_unavailable(void);

#endif
