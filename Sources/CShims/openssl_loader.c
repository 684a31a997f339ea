/* OpenSSL, loaded when a TLS connection is first made. The library does not link libssl: a
** client that speaks plaintext (a Wyoming service, grpc:// on a LAN or behind a local proxy)
** never maps OpenSSL. Linked, libssl and libcrypto were loaded and relocated at every program
** start: about 2 of the 4.5 ms between exec() and main() of a C program using the library,
** measured here (docs/performance.md, "OpenSSL opened for TLS only").
**
** As with ALSA (alsa_loader.c), each OpenSSL function the library uses is defined here under its
** own name and forwards to the system's libssl.so.3 (which brings libcrypto.so.3), opened with
** dlopen on the first call; the definitions stay local to libspeechclient (its version script
** exports spc_* only), so an application that links OpenSSL itself keeps its own, and both use
** the one copy the loader maps. The system's OpenSSL, not a copy: it gets the distribution's
** security updates and finds the system's CAs and configuration where they are.
**
** TLSContext checks speechclient_shim_openssl_unavailable() before anything else (made before the
** TCP connect), so a missing OpenSSL is an error naming the package; the forwarders' failure
** values (NULL, 0, -1, "no error") only keep a call reached some other way from jumping to
** nothing. The first attempt decides for the life of the process: libssl3 installed under a
** running program is used from its next start. */
#define _GNU_SOURCE
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "cshims.h"
#include "dl_forward.h"

static void *openssl_library;
static pthread_once_t openssl_once = PTHREAD_ONCE_INIT;
static char openssl_problem[512];

static void openssl_open(void) {
    openssl_library = dlopen("libssl.so.3", RTLD_NOW | RTLD_LOCAL);
    if (!openssl_library) {
        const char *why = dlerror();
        snprintf(openssl_problem, sizeof openssl_problem,
                 "TLS needs OpenSSL 3, which is not installed (%s): install the libssl3 package (Debian 12, "
                 "Ubuntu 22.04; libssl3t64 from Debian 13 and Ubuntu 24.04) or openssl-libs (Fedora); "
                 "plaintext servers (grpc://, wyoming://) work without it",
                 why ? why : "libssl.so.3 not found");
    }
}

const char *speechclient_shim_openssl_unavailable(void) {
    pthread_once(&openssl_once, openssl_open);
    return openssl_library ? NULL : openssl_problem;
}

/* dlsym on libssl's handle searches libssl, then what it needs (libcrypto). */
static void *openssl_symbol(const char *name) {
    pthread_once(&openssl_once, openssl_open);
    return openssl_library ? dlsym(openssl_library, name) : NULL;
}

#define SSL_FORWARD(ret, name, params, args, fail) DL_FORWARD(openssl_symbol, ret, name, params, args, fail)
#define SSL_FORWARD_VOID(name, params, args) DL_FORWARD_VOID(openssl_symbol, name, params, args)

/* Errors */
SSL_FORWARD_VOID(ERR_clear_error, (void), ())
SSL_FORWARD_VOID(ERR_error_string_n, (unsigned long e, char *buf, size_t len), (e, buf, len))
SSL_FORWARD(unsigned long, ERR_get_error, (void), (), 0)
SSL_FORWARD(int, ERR_pop_to_mark, (void), (), 0)
SSL_FORWARD(int, ERR_set_mark, (void), (), 0)
SSL_FORWARD(int, CRYPTO_get_ex_new_index,
            (int class_index, long argl, void *argp, CRYPTO_EX_new *new_func, CRYPTO_EX_dup *dup_func,
             CRYPTO_EX_free *free_func),
            (class_index, argl, argp, new_func, dup_func, free_func), -1)
SSL_FORWARD(int, OPENSSL_sk_num, (const OPENSSL_STACK *sk), (sk), 0)
SSL_FORWARD(void *, OPENSSL_sk_value, (const OPENSSL_STACK *sk, int i), (sk, i), NULL)

/* Contexts */
SSL_FORWARD(const SSL_METHOD *, TLS_client_method, (void), (), NULL)
SSL_FORWARD(SSL_CTX *, SSL_CTX_new, (const SSL_METHOD *meth), (meth), NULL)
SSL_FORWARD_VOID(SSL_CTX_free, (SSL_CTX *ctx), (ctx))
SSL_FORWARD(long, SSL_CTX_ctrl, (SSL_CTX *ctx, int cmd, long larg, void *parg), (ctx, cmd, larg, parg), 0)
SSL_FORWARD(uint64_t, SSL_CTX_set_options, (SSL_CTX *ctx, uint64_t op), (ctx, op), 0)
SSL_FORWARD(X509_STORE *, SSL_CTX_get_cert_store, (const SSL_CTX *ctx), (ctx), NULL)
SSL_FORWARD(int, SSL_CTX_load_verify_locations, (SSL_CTX *ctx, const char *CAfile, const char *CApath),
            (ctx, CAfile, CApath), 0)
SSL_FORWARD(int, SSL_CTX_set_alpn_protos, (SSL_CTX *ctx, const unsigned char *protos, unsigned int protos_len),
            (ctx, protos, protos_len), 1)  /* 0 is success here */
SSL_FORWARD_VOID(SSL_CTX_set_verify, (SSL_CTX *ctx, int mode, SSL_verify_cb callback), (ctx, mode, callback))

/* Connections */
SSL_FORWARD(SSL *, SSL_new, (SSL_CTX *ctx), (ctx), NULL)
SSL_FORWARD_VOID(SSL_free, (SSL *ssl), (ssl))
SSL_FORWARD(long, SSL_ctrl, (SSL *ssl, int cmd, long larg, void *parg), (ssl, cmd, larg, parg), 0)
SSL_FORWARD(int, SSL_set_fd, (SSL *s, int fd), (s, fd), 0)
SSL_FORWARD(int, SSL_set1_host, (SSL *s, const char *hostname), (s, hostname), 0)
SSL_FORWARD(X509_VERIFY_PARAM *, SSL_get0_param, (SSL *ssl), (ssl), NULL)
SSL_FORWARD(int, SSL_set_ex_data, (SSL *ssl, int idx, void *data), (ssl, idx, data), 0)
SSL_FORWARD(void *, SSL_get_ex_data, (const SSL *ssl, int idx), (ssl, idx), NULL)
SSL_FORWARD(int, SSL_get_ex_data_X509_STORE_CTX_idx, (void), (), -1)
SSL_FORWARD(int, SSL_connect, (SSL *ssl), (ssl), -1)
SSL_FORWARD(int, SSL_read, (SSL *ssl, void *buf, int num), (ssl, buf, num), -1)
SSL_FORWARD(int, SSL_write, (SSL *ssl, const void *buf, int num), (ssl, buf, num), -1)
SSL_FORWARD(int, SSL_shutdown, (SSL *s), (s), -1)
SSL_FORWARD(int, SSL_get_error, (const SSL *s, int ret_code), (s, ret_code), SSL_ERROR_SSL)
SSL_FORWARD(long, SSL_get_verify_result, (const SSL *ssl), (ssl), X509_V_ERR_UNSPECIFIED)
SSL_FORWARD_VOID(SSL_get0_alpn_selected, (const SSL *ssl, const unsigned char **data, unsigned int *len),
                 (ssl, data, len))

/* Verification parameters and the trust store */
SSL_FORWARD(int, X509_VERIFY_PARAM_set1_ip_asc, (X509_VERIFY_PARAM *param, const char *ipasc), (param, ipasc), 0)
SSL_FORWARD_VOID(X509_VERIFY_PARAM_set_hostflags, (X509_VERIFY_PARAM *param, unsigned int flags), (param, flags))
SSL_FORWARD(X509_LOOKUP *, X509_STORE_add_lookup, (X509_STORE *v, X509_LOOKUP_METHOD *m), (v, m), NULL)
SSL_FORWARD(X509_LOOKUP_METHOD *, X509_LOOKUP_file, (void), (), NULL)
SSL_FORWARD(X509_LOOKUP_METHOD *, X509_LOOKUP_hash_dir, (void), (), NULL)
SSL_FORWARD(X509_LOOKUP_METHOD *, X509_LOOKUP_store, (void), (), NULL)
SSL_FORWARD(int, X509_LOOKUP_ctrl, (X509_LOOKUP *ctx, int cmd, const char *argc, long argl, char **ret),
            (ctx, cmd, argc, argl, ret), 0)
SSL_FORWARD(void *, X509_STORE_get_ex_data, (const X509_STORE *ctx, int idx), (ctx, idx), NULL)
SSL_FORWARD(int, X509_STORE_set_ex_data, (X509_STORE *ctx, int idx, void *data), (ctx, idx, data), 0)
SSL_FORWARD_VOID(X509_STORE_set_get_issuer, (X509_STORE *ctx, X509_STORE_CTX_get_issuer_fn get_issuer),
                 (ctx, get_issuer))
SSL_FORWARD(X509 *, X509_STORE_CTX_get0_cert, (const X509_STORE_CTX *ctx), (ctx), NULL)
SSL_FORWARD(X509_STORE *, X509_STORE_CTX_get0_store, (const X509_STORE_CTX *ctx), (ctx), NULL)
SSL_FORWARD(STACK_OF(X509) *, X509_STORE_CTX_get0_untrusted, (const X509_STORE_CTX *ctx), (ctx), NULL)
SSL_FORWARD(int, X509_STORE_CTX_get1_issuer, (X509 **issuer, X509_STORE_CTX *ctx, X509 *x), (issuer, ctx, x), -1)
SSL_FORWARD(X509 *, X509_STORE_CTX_get_current_cert, (const X509_STORE_CTX *ctx), (ctx), NULL)
SSL_FORWARD(int, X509_STORE_CTX_get_error, (const X509_STORE_CTX *ctx), (ctx), X509_V_ERR_UNSPECIFIED)
SSL_FORWARD(int, X509_STORE_CTX_get_error_depth, (const X509_STORE_CTX *ctx), (ctx), -1)
SSL_FORWARD(void *, X509_STORE_CTX_get_ex_data, (const X509_STORE_CTX *ctx, int idx), (ctx, idx), NULL)

/* Certificates */
SSL_FORWARD_VOID(X509_free, (X509 *a), (a))
SSL_FORWARD(int, X509_check_issued, (X509 *issuer, X509 *subject), (issuer, subject), X509_V_ERR_UNSPECIFIED)
SSL_FORWARD(int, X509_cmp, (const X509 *a, const X509 *b), (a, b), -1)
SSL_FORWARD(int, X509_cmp_current_time, (const ASN1_TIME *s), (s), 0)
SSL_FORWARD(const ASN1_TIME *, X509_get0_notBefore, (const X509 *x), (x), NULL)
SSL_FORWARD(const ASN1_TIME *, X509_get0_notAfter, (const X509 *x), (x), NULL)
SSL_FORWARD(int, ASN1_TIME_to_tm, (const ASN1_TIME *s, struct tm *tm), (s, tm), 0)
SSL_FORWARD(X509_NAME *, X509_get_subject_name, (const X509 *a), (a), NULL)
SSL_FORWARD(int, X509_NAME_get_text_by_NID, (const X509_NAME *name, int nid, char *buf, int len),
            (name, nid, buf, len), -1)
SSL_FORWARD(char *, X509_NAME_oneline, (const X509_NAME *a, char *buf, int size), (a, buf, size), NULL)
SSL_FORWARD(const char *, X509_verify_cert_error_string, (long n), (n), "OpenSSL is not installed")
SSL_FORWARD(const char *, X509_get_default_cert_file, (void), (), NULL)
SSL_FORWARD(const char *, X509_get_default_cert_dir, (void), (), NULL)
SSL_FORWARD(const char *, X509_get_default_cert_file_env, (void), (), "SSL_CERT_FILE")
