/* The system's trusted CAs, read as verification needs them.
**
** SSL_CTX_set_default_verify_paths() parses the whole CA file (Debian's /usr/lib/ssl/cert.pem,
** 140 certificates) when the context is made: 47 ms of CPU here, on every process that opens a
** TLS connection, before its first byte. The hashed certificate directory (/etc/ssl/certs, kept
** beside that file by update-ca-certificates) answers the same question lazily: verification
** opens only the files named by the hash of the issuer it looks for.
**
** So the directory is searched first, and the file is read, once per store, only when the
** directory has no issuer for a certificate (a system whose directory is not hashed, Fedora's;
** a CA an administrator appended to the file alone). The trusted set is the same as with
** SSL_CTX_set_default_verify_paths(): the file and the directory, and the environment's
** SSL_CERT_FILE / SSL_CERT_DIR / SSL_CERT_URI where set; only when the file is read changes.
**
** The file lookup is added to the store when it is made, empty: a lookup added to a store in
** use would race with verifications iterating the store's lookups on other threads. Loading
** certificates into it later goes through X509_STORE_add_cert, which takes the store's lock. */
#define _GNU_SOURCE
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cshims.h"

struct lazy_trust {
    pthread_mutex_t lock;
    int loaded;                /* under lock; read without it through __atomic_load_n */
    X509_LOOKUP *file;         /* owned by the store */
    char *extra_bundle;        /* a distribution's bundle, read with the file; may be NULL */
};

static int lazy_trust_index = -1;
static pthread_once_t lazy_trust_once = PTHREAD_ONCE_INIT;

static void lazy_trust_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp) {
    (void)parent; (void)ad; (void)idx; (void)argl; (void)argp;
    struct lazy_trust *t = ptr;
    if (!t) return;
    pthread_mutex_destroy(&t->lock);
    free(t->extra_bundle);
    free(t);
}

static void lazy_trust_register(void) {
    lazy_trust_index = CRYPTO_get_ex_new_index(CRYPTO_EX_INDEX_X509_STORE, 0, NULL, NULL, NULL, lazy_trust_free);
}

/* Reads the CA file (and the extra bundle) into the store, the first time only. */
static void read_the_file(X509_STORE *store) {
    struct lazy_trust *t = X509_STORE_get_ex_data(store, lazy_trust_index);
    if (!t || __atomic_load_n(&t->loaded, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&t->lock);
    if (!t->loaded) {
        /* A missing file is no error here (as in SSL_CTX_set_default_verify_paths): verification
           then fails on its own terms. Its queued errors must not reach the handshake's. */
        ERR_set_mark();
        X509_LOOKUP_load_file(t->file, NULL, X509_FILETYPE_DEFAULT);
        if (t->extra_bundle) X509_LOOKUP_load_file(t->file, t->extra_bundle, X509_FILETYPE_PEM);
        ERR_pop_to_mark();
        __atomic_store_n(&t->loaded, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&t->lock);
}

static int lazy_get_issuer(X509 **issuer, X509_STORE_CTX *ctx, X509 *x) {
    int rc = X509_STORE_CTX_get1_issuer(issuer, ctx, x);
    if (rc != 0) return rc; /* found, or an error */
    X509_STORE *store = X509_STORE_CTX_get0_store(ctx);
    struct lazy_trust *t = X509_STORE_get_ex_data(store, lazy_trust_index);
    if (!t || __atomic_load_n(&t->loaded, __ATOMIC_ACQUIRE)) return rc;
    read_the_file(store);
    return X509_STORE_CTX_get1_issuer(issuer, ctx, x);
}

static STACK_OF(X509) *lazy_lookup_certs(X509_STORE_CTX *ctx, const X509_NAME *name) {
    STACK_OF(X509) *found = X509_STORE_CTX_get1_certs(ctx, (X509_NAME *)name);
    if (found && sk_X509_num(found) > 0) return found;
    X509_STORE *store = X509_STORE_CTX_get0_store(ctx);
    struct lazy_trust *t = X509_STORE_get_ex_data(store, lazy_trust_index);
    if (!t || __atomic_load_n(&t->loaded, __ATOMIC_ACQUIRE)) return found;
    sk_X509_pop_free(found, X509_free);
    read_the_file(store);
    return X509_STORE_CTX_get1_certs(ctx, (X509_NAME *)name);
}

int speechclient_shim_ssl_ctx_trust_system_store(struct ssl_ctx_st *ctx, const char *extra_bundle) {
    pthread_once(&lazy_trust_once, lazy_trust_register);
    if (lazy_trust_index < 0) return 0;
    X509_STORE *store = SSL_CTX_get_cert_store(ctx);
    if (!store) return 0;
    struct lazy_trust *t = calloc(1, sizeof *t);
    if (!t) return 0;
    pthread_mutex_init(&t->lock, NULL);
    if (extra_bundle && !(t->extra_bundle = strdup(extra_bundle))) {
        lazy_trust_free(NULL, t, NULL, 0, 0, NULL);
        return 0;
    }
    if (!X509_STORE_set_ex_data(store, lazy_trust_index, t)) {
        lazy_trust_free(NULL, t, NULL, 0, 0, NULL);
        return 0;
    }
    /* From here the store owns t (freed with it). The lookups, in the order of
       X509_STORE_set_default_paths, the file's deferred: */
    X509_LOOKUP *dir = X509_STORE_add_lookup(store, X509_LOOKUP_hash_dir());
    X509_LOOKUP *uri = X509_STORE_add_lookup(store, X509_LOOKUP_store());
    t->file = X509_STORE_add_lookup(store, X509_LOOKUP_file());
    if (!dir || !uri || !t->file) return 0;
    ERR_set_mark();
    X509_LOOKUP_add_dir(dir, NULL, X509_FILETYPE_DEFAULT);   /* SSL_CERT_DIR, else the default */
    X509_LOOKUP_add_store(uri, NULL);                       /* SSL_CERT_URI, else the default */
    ERR_pop_to_mark();
    X509_STORE_set_get_issuer(store, lazy_get_issuer);
    X509_STORE_set_lookup_certs(store, lazy_lookup_certs);
    return 1;
}
