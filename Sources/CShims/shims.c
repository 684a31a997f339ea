#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
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
}

int speechclient_shim_ssl_set_sni(struct ssl_st *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}
