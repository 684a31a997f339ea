#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <openssl/ssl.h>
#include <stdarg.h>
#include <stdio.h>
#include <alsa/asoundlib.h>
#include "cshims.h"

int speechclient_shim_thread_id(void) {
    return (int)syscall(SYS_gettid);
}

int speechclient_shim_mutex_lock_until(void *mutex, uint64_t deadline_ns) {
    struct timespec at = { .tv_sec = (time_t)(deadline_ns / 1000000000u), .tv_nsec = (long)(deadline_ns % 1000000000u) };
    return pthread_mutex_clocklock((pthread_mutex_t *)mutex, CLOCK_MONOTONIC, &at);
}

static __thread void *send_cork;

void *speechclient_shim_cork(void) { return send_cork; }

void speechclient_shim_set_cork(void *cork) { send_cork = cork; }

void speechclient_shim_set_thread_name(const char *name) {
    char buf[16];
    strncpy(buf, name, sizeof buf - 1);
    buf[sizeof buf - 1] = '\0';
    pthread_setname_np(pthread_self(), buf);
}

int speechclient_shim_ssl_ctx_require_tls12(struct ssl_ctx_st *ctx) {
    return (int)SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
}

int speechclient_shim_ssl_ctx_set_groups(struct ssl_ctx_st *ctx, const char *groups) {
    return (int)SSL_CTX_set1_groups_list(ctx, groups);
}

void speechclient_shim_ssl_ctx_set_nonblocking_modes(struct ssl_ctx_st *ctx) {
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER
                          | SSL_MODE_RELEASE_BUFFERS);
    /* A peer that goes away without close_notify is a lost connection (HTTP/2 and gRPC notice
       a truncated exchange themselves), not a TLS failure: SSL_read reports it as a close. */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    /* HTTP/2 forbids renegotiation (RFC 9113 9.2.1): a server's request for one is refused. */
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
}

/* OpenSSL writes to its socket with write(2), without MSG_NOSIGNAL: writing into a connection
   the peer has reset raises SIGPIPE on the calling thread, which may be an application thread
   (a pushed chunk is sent on it), and SIGPIPE's default action ends the process. The library's
   own threads block SIGPIPE for good when they start (a SIGPIPE raised there stays pending and
   harmless, and their calls cost nothing more); on any other thread it is blocked around each
   call, and one the call raised (its write failed with EPIPE) is taken off the pending set
   before the thread's mask is restored. errno is kept for the callers of SSL_get_error. */
static __thread int sigpipe_blocked_for_good;

void speechclient_shim_block_sigpipe_for_thread(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    sigpipe_blocked_for_good = 1;
}

struct sigpipe_guard { sigset_t old; int active; };

static void sigpipe_block(struct sigpipe_guard *g) {
    g->active = !sigpipe_blocked_for_good;
    if (g->active) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &set, &g->old);
        /* Blocked already by the application: what it raises is the application's business. */
        if (sigismember(&g->old, SIGPIPE) == 1) {
            pthread_sigmask(SIG_SETMASK, &g->old, NULL);
            g->active = 0;
        }
    }
    errno = 0;
}

/* rc: the SSL call's result. Only a failed call (or one whose last write failed) can have
   raised SIGPIPE: only then is the pending set looked at. */
static void sigpipe_restore(const struct sigpipe_guard *g, int rc) {
    if (!g->active) return;
    int saved = errno;
    if (rc <= 0 || saved == EPIPE) {
        sigset_t set, pending;
        sigemptyset(&set);
        sigaddset(&set, SIGPIPE);
        sigpending(&pending);
        if (sigismember(&pending, SIGPIPE) == 1) {
            struct timespec zero = {0, 0};
            while (sigtimedwait(&set, NULL, &zero) < 0 && errno == EINTR) {}
        }
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
    errno = saved;
}

/* Returns `call`'s result, made with SIGPIPE kept from the process (above). */
#define WITHOUT_SIGPIPE(call)                                                                  \
    do {                                                                                       \
        struct sigpipe_guard g;                                                                \
        sigpipe_block(&g);                                                                     \
        int rc = (call);                                                                       \
        sigpipe_restore(&g, rc);                                                               \
        return rc;                                                                             \
    } while (0)

int speechclient_shim_ssl_connect(struct ssl_st *ssl) { WITHOUT_SIGPIPE(SSL_connect(ssl)); }

int speechclient_shim_ssl_read(struct ssl_st *ssl, void *buf, int count) { WITHOUT_SIGPIPE(SSL_read(ssl, buf, count)); }

int speechclient_shim_ssl_write(struct ssl_st *ssl, const void *buf, int count) { WITHOUT_SIGPIPE(SSL_write(ssl, buf, count)); }

int speechclient_shim_ssl_shutdown(struct ssl_st *ssl) { WITHOUT_SIGPIPE(SSL_shutdown(ssl)); }

int speechclient_shim_ssl_set_sni(struct ssl_st *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}

/* ALSA's messages go to whoever on this thread is calling ALSA (an ALSACapture), not to stderr:
** through ALSA's thread-local handler (snd_lib_error_set_local), set while the library calls
** ALSA on that thread. The process-wide handler stays the application's: replaced, it took the
** application's own ALSA messages too, and dropped them. (An application that installs its own
** process-wide handler gets the library's messages as well: ALSA's default handler alone asks
** the thread-local one.) An alsa-lib without thread-local handlers gets the process-wide one. */
static __thread void *alsa_context;
static __thread snd_local_error_handler_t alsa_saved_local;
static speechclient_alsa_message_fn alsa_message_fn;
static int alsa_global_handler;

static void alsa_deliver(void *context, const char *file, int line, const char *function, int err, const char *fmt, va_list ap) {
    speechclient_alsa_message_fn fn = __atomic_load_n(&alsa_message_fn, __ATOMIC_ACQUIRE);
    if (!context || !fn) return;
    char text[512], message[768];
    int n = vsnprintf(text, sizeof text, fmt, ap);
    if (n < 0) return;
    if (err)
        snprintf(message, sizeof message, "%s: %s (%s:%d, %s)", text, snd_strerror(err), file ? file : "?", line,
                 function ? function : "?");
    else
        snprintf(message, sizeof message, "%s (%s:%d, %s)", text, file ? file : "?", line, function ? function : "?");
    fn(context, message);
}

static void alsa_local_error(const char *file, int line, const char *function, int err, const char *fmt, va_list ap) {
    alsa_deliver(alsa_context, file, line, function, err, fmt, ap);
}

static void alsa_error(const char *file, int line, const char *function, int err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    alsa_deliver(alsa_context, file, line, function, err, fmt, ap);
    va_end(ap);
}

void speechclient_shim_alsa_route_errors(speechclient_alsa_message_fn fn) {
    __atomic_store_n(&alsa_message_fn, fn, __ATOMIC_RELEASE);
    if (!speechclient_shim_alsa_has_local_errors()) {
        __atomic_store_n(&alsa_global_handler, 1, __ATOMIC_RELEASE);
        snd_lib_error_set_handler(alsa_error);
    }
}

void *speechclient_shim_alsa_set_context(void *context) {
    void *previous = alsa_context;
    alsa_context = context;
    if (!__atomic_load_n(&alsa_global_handler, __ATOMIC_ACQUIRE)) {
        /* The thread's own local handler (the application's, on its thread) comes back after. */
        if (context && !previous) alsa_saved_local = snd_lib_error_set_local(alsa_local_error);
        else if (!context && previous) snd_lib_error_set_local(alsa_saved_local);
    }
    return previous;
}
