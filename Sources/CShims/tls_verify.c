/* What failed first in the verification of a peer's chain, and on which certificate.
**
** SSL_get_verify_result() gives only the error: "certificate has expired" read as the server's
** certificate having expired, when it was a root in the trust store (a renewed CA's old copy)
** or an intermediate the server sent. The verify callback records the first failure's depth,
** the certificate's name and dates, and whether the server sent it, into a record the
** connection's owner (TLSStream) holds and frees after the SSL object. */
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cshims.h"

static int failure_index = -1;
static pthread_once_t failure_once = PTHREAD_ONCE_INIT;

static void failure_register(void) {
    failure_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

/* "2026-11-28", or "" when the time cannot be read. */
static void date_of(const ASN1_TIME *t, char *out, size_t size) {
    struct tm tm;
    out[0] = 0;
    if (t && ASN1_TIME_to_tm(t, &tm) == 1) strftime(out, size, "%Y-%m-%d", &tm);
}

/* Whether the server sent `c` (its own certificate or one of its chain). */
static int sent_by_peer(X509_STORE_CTX *store, X509 *c) {
    if (c == X509_STORE_CTX_get0_cert(store)) return 1;
    STACK_OF(X509) *sent = X509_STORE_CTX_get0_untrusted(store);
    for (int i = 0; i < sk_X509_num(sent); i++)
        if (X509_cmp(sk_X509_value(sent, i), c) == 0) return 1;
    return 0;
}

static int record_failure(int ok, X509_STORE_CTX *store) {
    if (ok || failure_index < 0) return ok;
    SSL *ssl = X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx());
    struct speechclient_verify_failure *f = ssl ? SSL_get_ex_data(ssl, failure_index) : NULL;
    if (!f || f->depth >= 0) return ok;
    f->error = X509_STORE_CTX_get_error(store);
    f->depth = X509_STORE_CTX_get_error_depth(store);
    X509 *c = X509_STORE_CTX_get_current_cert(store);
    if (c) {
        X509_NAME *name = X509_get_subject_name(c);
        if (X509_NAME_get_text_by_NID(name, NID_commonName, f->name, (int)sizeof f->name) <= 0)
            X509_NAME_oneline(name, f->name, (int)sizeof f->name);
        date_of(X509_get0_notBefore(c), f->not_before, sizeof f->not_before);
        date_of(X509_get0_notAfter(c), f->not_after, sizeof f->not_after);
        f->sent_by_peer = sent_by_peer(store, c);
    }
    return ok;
}

void speechclient_shim_ssl_ctx_verify_peer(struct ssl_ctx_st *ctx) {
    pthread_once(&failure_once, failure_register);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, record_failure);
}

int speechclient_shim_ssl_record_verify_failure(struct ssl_st *ssl, struct speechclient_verify_failure *failure) {
    pthread_once(&failure_once, failure_register);
    if (failure_index < 0) return 0;
    memset(failure, 0, sizeof *failure);
    failure->depth = -1;
    return SSL_set_ex_data(ssl, failure_index, failure);
}
