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
** SSL_CTX_set_default_verify_paths(): the file and the directory (SSL_CERT_FILE / SSL_CERT_DIR
** where set); only when the file is read changes. One difference remained: a directory holding
** an expired or re-keyed copy of a CA whose good copy is in the file alone answered with that
** copy (OpenSSL takes a same-named issuer), and verification failed where reading both would not.
** An issuer from the directory that is not valid now (expired, as a renewed CA's old copy) also
** has the file read, and the issuer looked for again: then a current copy wins, as with both
** read at once. A re-keyed copy with no key identifiers to tell it apart still answers first.
**
** OpenSSL looks in the trusted store first (X509_V_FLAG_TRUSTED_FIRST), so its first question
** is usually for the leaf's issuer, an intermediate the server sent: no store holds those, and
** a miss then is no reason to read the file. It is read only for a certificate whose issuer is
** neither in the directory nor among the certificates the server sent (a root the server sent
** counts as missing: the store must hold it).
**
** Only the issuer search is deferred. OpenSSL's other store query, lookup_certs (every certificate
** with a subject), is asked in verification only under X509_V_FLAG_PARTIAL_CHAIN, which this
** library never sets (with an abort() in a deferring lookup_certs, every TLS test passed).
**
** The file lookup is added to the store when it is made, empty: a lookup added to a store in
** use would race with verifications iterating the store's lookups on other threads. Loading
** certificates into it later goes through X509_STORE_add_cert, which takes the store's lock. */
#define _GNU_SOURCE
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* Loads a PEM file into the lookup. True when it loaded, or when there is no such file (then
   nothing is to be had from it); false on a failure worth trying again (no memory, no more file
   descriptors): the next miss retries it. */
static int load(X509_LOOKUP *file, const char *path) {
    if (X509_LOOKUP_load_file(file, path, X509_FILETYPE_PEM) > 0) return 1;
    return access(path, F_OK) != 0 && errno == ENOENT;
}

/* Reads the CA file (and the extra bundle) into the store, until once succeeds. */
static void read_the_file(X509_STORE *store) {
    struct lazy_trust *t = X509_STORE_get_ex_data(store, lazy_trust_index);
    if (!t || __atomic_load_n(&t->loaded, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&t->lock);
    if (!t->loaded) {
        /* Where SSL_CTX_set_default_verify_paths() looks (the environment ignored in setuid
           programs, as OpenSSL does). A missing file is no error: verification then fails on
           its own terms. Queued errors must not reach the handshake's. */
        const char *path = secure_getenv(X509_get_default_cert_file_env());
        if (!path) path = X509_get_default_cert_file();
        ERR_set_mark();
        int ok = load(t->file, path);
        if (t->extra_bundle) ok = load(t->file, t->extra_bundle) && ok;
        ERR_pop_to_mark();
        if (ok) __atomic_store_n(&t->loaded, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&t->lock);
}

/* Whether the certificates the server sent hold one, not self-issued, that issued `x`: an
   intermediate, which verification goes on with when the store has no issuer for `x`. */
static int sent_an_intermediate_for(X509_STORE_CTX *ctx, X509 *x) {
    STACK_OF(X509) *sent = X509_STORE_CTX_get0_untrusted(ctx);
    for (int i = 0; i < sk_X509_num(sent); i++) {
        X509 *candidate = sk_X509_value(sent, i);
        if (candidate != x && X509_check_issued(candidate, candidate) != X509_V_OK
            && X509_check_issued(candidate, x) == X509_V_OK)
            return 1;
    }
    return 0;
}

/* The state of `store`'s lazy file, NULL when it is read already (so a miss is final). Read
   before the lookup that may miss: a file that finished loading while that lookup ran must
   still get its second lookup. */
static struct lazy_trust *unread(X509_STORE_CTX *ctx) {
    struct lazy_trust *t = X509_STORE_get_ex_data(X509_STORE_CTX_get0_store(ctx), lazy_trust_index);
    return t && !__atomic_load_n(&t->loaded, __ATOMIC_ACQUIRE) ? t : NULL;
}

/* Whether `c` is valid now (its notBefore passed, its notAfter not). */
static int valid_now(X509 *c) {
    return X509_cmp_current_time(X509_get0_notBefore(c)) < 0 && X509_cmp_current_time(X509_get0_notAfter(c)) > 0;
}

static int lazy_get_issuer(X509 **issuer, X509_STORE_CTX *ctx, X509 *x) {
    struct lazy_trust *t = unread(ctx);
    int rc = X509_STORE_CTX_get1_issuer(issuer, ctx, x);
    if (rc > 0 && t && !valid_now(*issuer)) {
        /* An expired (or not yet valid) copy from the directory, the current one perhaps in the
           file alone (a renewed CA): with the file read, OpenSSL takes a copy valid now when
           there is one, as it does with both read at once; otherwise the same copy again. */
        X509 *found = *issuer;
        read_the_file(X509_STORE_CTX_get0_store(ctx));
        X509 *again = NULL;
        if (X509_STORE_CTX_get1_issuer(&again, ctx, x) > 0) {
            X509_free(found);
            *issuer = again;
        }
        return rc;
    }
    if (rc != 0 || !t || sent_an_intermediate_for(ctx, x)) return rc; /* found, an error, or no need */
    read_the_file(X509_STORE_CTX_get0_store(ctx));
    return X509_STORE_CTX_get1_issuer(issuer, ctx, x);
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
    X509_LOOKUP_add_store(uri, NULL);                       /* the same directory, as an OSSL_STORE */
    ERR_pop_to_mark();
    X509_STORE_set_get_issuer(store, lazy_get_issuer);
    return 1;
}
