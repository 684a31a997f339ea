#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <openssl/ssl.h>
#include "cshims.h"

void speechclient_shim_set_thread_name(const char *name) {
    char buf[16];
    strncpy(buf, name, sizeof buf - 1);
    buf[sizeof buf - 1] = '\0';
    pthread_setname_np(pthread_self(), buf);
}

int speechclient_shim_ssl_ctx_require_tls12(struct ssl_ctx_st *ctx) {
    return (int)SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
}

void speechclient_shim_ssl_ctx_set_nonblocking_modes(struct ssl_ctx_st *ctx) {
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER
                          | SSL_MODE_RELEASE_BUFFERS);
    /* A peer that goes away without close_notify is a lost connection (HTTP/2 and gRPC notice
       a truncated exchange themselves), not a TLS failure: SSL_read reports it as a close. */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
}

/* OpenSSL writes to its socket with write(2), without MSG_NOSIGNAL: writing into a connection
   the peer has reset raises SIGPIPE on the calling thread, which may be an application thread
   (a pushed chunk is sent on it), and SIGPIPE's default action ends the process. So SIGPIPE is
   blocked around each call, and one it raised is taken off the pending set before the mask is
   restored. errno is kept for SSL_get_error's callers. */
struct sigpipe_guard { sigset_t old; int was_pending; };

static void sigpipe_block(struct sigpipe_guard *g) {
    sigset_t set, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &g->old);
    sigpending(&pending);
    g->was_pending = sigismember(&pending, SIGPIPE) == 1;
}

static void sigpipe_restore(const struct sigpipe_guard *g) {
    int saved = errno;
    sigset_t pending;
    sigpending(&pending);
    if (!g->was_pending && sigismember(&pending, SIGPIPE) == 1) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGPIPE);
        struct timespec zero = {0, 0};
        while (sigtimedwait(&set, NULL, &zero) < 0 && errno == EINTR) {}
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
    errno = saved;
}

int speechclient_shim_ssl_connect(struct ssl_st *ssl) {
    struct sigpipe_guard g;
    sigpipe_block(&g);
    int rc = SSL_connect(ssl);
    sigpipe_restore(&g);
    return rc;
}

int speechclient_shim_ssl_read(struct ssl_st *ssl, void *buf, int count) {
    struct sigpipe_guard g;
    sigpipe_block(&g);
    int rc = SSL_read(ssl, buf, count);
    sigpipe_restore(&g);
    return rc;
}

int speechclient_shim_ssl_write(struct ssl_st *ssl, const void *buf, int count) {
    struct sigpipe_guard g;
    sigpipe_block(&g);
    int rc = SSL_write(ssl, buf, count);
    sigpipe_restore(&g);
    return rc;
}

int speechclient_shim_ssl_shutdown(struct ssl_st *ssl) {
    struct sigpipe_guard g;
    sigpipe_block(&g);
    int rc = SSL_shutdown(ssl);
    sigpipe_restore(&g);
    return rc;
}

int speechclient_shim_ssl_set_sni(struct ssl_st *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}
