/*
** The strict C suite: every function of speechclient.h, with misuse (NULL handles, bad values,
** wrong states), against the installed library. Compiled as C11 and as C++17 with
** -Wall -Wextra -Werror -pedantic. No server is needed: the client is pointed at a closed port,
** which gives the documented network error, at a missing or malformed WAV file, and at a "silent
** server" (a socket that listens but never accepts) that keeps a context STARTING for as long as a
** test needs it, so that the state rules are checked without races.
**
** Each CHECK counts; a failure prints file:line and the condition. Callbacks only record what
** they saw; the main thread checks it.
*/
#define _POSIX_C_SOURCE 200809L
#include <speechclient.h>

#include "checks.h"

#include <poll.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

static const char *UNREACHABLE = "grpc://127.0.0.1:1";

/* ---- callbacks that record what happened ---- */

struct record {
    pthread_mutex_t lock;
    pthread_t main_thread;
    char events[16][32];
    int count;
    int on_main_thread;       /* a callback ran on the caller's thread */
    spc_status free_from_cb;   /* what spc_client_free returned inside a callback */
    spc_status wait_from_cb;   /* what spc_client_wait_idle returned inside a callback */
    spc_status dispatch_from_cb; /* what spc_client_dispatch returned inside a callback */
    spc_status start_from_cb;  /* a start from inside the stop callback */
    int restart;               /* 1: call start from the first stop callback */
    spc_status error_code;
    int error_grpc;
    char error_message[256];
    spc_client *client;        /* the handle callbacks must receive (NULL: not checked) */
    int wrong_client;          /* a callback got another client pointer */
    pthread_t callback_thread; /* the first callback's thread */
    int thread_seen;
    int threads_differ;        /* two callbacks of one client ran on different threads */
    int copy_mismatch;         /* spc_error_copy() gave NULL or a different error */
    int stop_in_error;         /* 1: call stop from the error callback */
    spc_status stop_from_cb;   /* what that stop returned */
    int suspend_in_stop;       /* 1: suspend then resume from the last stop callback */
    spc_status suspend_from_cb, resume_from_cb;
};

static void add_event(struct record *r, const char *what) {
    pthread_mutex_lock(&r->lock);
    if (pthread_equal(pthread_self(), r->main_thread)) r->on_main_thread = 1;
    if (!r->thread_seen) {
        r->thread_seen = 1;
        r->callback_thread = pthread_self();
    } else if (!pthread_equal(pthread_self(), r->callback_thread)) {
        r->threads_differ = 1;
    }
    if (r->count < 16) {
        strncpy(r->events[r->count], what, sizeof r->events[0] - 1);
        r->events[r->count][sizeof r->events[0] - 1] = '\0';
        r->count++;
    }
    pthread_mutex_unlock(&r->lock);
}

static void on_error(spc_client *c, const spc_error *e, void *ud) {
    struct record *r = (struct record *)ud;
    if (r->client && c != r->client) r->wrong_client = 1;
    r->error_code = spc_error_code(e);
    r->error_grpc = spc_error_grpc_status(e);
    strncpy(r->error_message, spc_error_message(e), sizeof r->error_message - 1);
    /* A copy outlives the callback. */
    spc_error *copy = spc_error_copy(e);
    if (copy == NULL || spc_error_code(copy) != spc_error_code(e) ||
        spc_error_grpc_status(copy) != spc_error_grpc_status(e) ||
        strcmp(spc_error_message(copy), spc_error_message(e)) != 0) r->copy_mismatch = 1;
    spc_error_free(copy);
    /* A stop from inside a callback must not deadlock; the context may already be over. */
    if (r->stop_in_error) r->stop_from_cb = spc_client_stop(c);
    add_event(r, "error");
}

static void on_stop(spc_client *c, const char *context_id, void *ud) {
    struct record *r = (struct record *)ud;
    char line[32];
    if (r->client && c != r->client) r->wrong_client = 1;
    snprintf(line, sizeof line, "stop:%s", context_id);
    add_event(r, line);
    r->free_from_cb = spc_client_free(c);
    r->wait_from_cb = spc_client_wait_idle(c, 0);
    r->dispatch_from_cb = spc_client_dispatch(c, 0, NULL);
    if (r->restart) {
        r->restart = 0;
        r->start_from_cb = spc_client_start(c);
    } else if (r->suspend_in_stop) {
        r->suspend_in_stop = 0;
        r->suspend_from_cb = spc_client_suspend(c);
        r->resume_from_cb = spc_client_resume(c);
    }
}

static void on_start(spc_client *c, const char *context_id, void *ud) {
    struct record *r = (struct record *)ud;
    if (r->client && c != r->client) r->wrong_client = 1;
    (void)context_id;
    add_event(r, "start");
}

static void on_segment(spc_client *c, const spc_segment *s, void *ud) {
    struct record *r = (struct record *)ud;
    if (r->client && c != r->client) r->wrong_client = 1;
    (void)s;
    add_event(r, "segment");
}

/* Log lines are not events: they only count, and must come from the same callback thread. */
static void on_log(spc_client *c, spc_log_level level, const char *message, void *ud) {
    struct record *r = (struct record *)ud;
    (void)level;
    pthread_mutex_lock(&r->lock);
    if (r->client && c != r->client) r->wrong_client = 1;
    if (message == NULL) r->wrong_client = 1;
    if (pthread_equal(pthread_self(), r->main_thread)) r->on_main_thread = 1;
    pthread_mutex_unlock(&r->lock);
}

static void sleep_ms(long ms) {
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int event_count(struct record *r) {
    pthread_mutex_lock(&r->lock);
    int n = r->count;
    pthread_mutex_unlock(&r->lock);
    return n;
}

/* A "silent server": a loopback socket that listens and never accepts. The kernel completes the
** TCP handshake, so the client connects and then waits for an answer that never comes: its
** context stays STARTING (until the library's own login deadline, 10 s). Closing the socket
** resets the connection, which ends the context with an error at once. */
struct silent {
    int fd;
    int conn; /* the client's connection, once accepted by silent_wait_request() */
    char url[64];
};

static int silent_open(struct silent *s) {
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    s->conn = -1;
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (s->fd < 0) return -1;
    if (bind(s->fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(s->fd, 16) != 0 ||
        getsockname(s->fd, (struct sockaddr *)&a, &len) != 0) {
        close(s->fd);
        return -1;
    }
    snprintf(s->url, sizeof s->url, "grpc://127.0.0.1:%u", (unsigned)ntohs(a.sin_port));
    return 0;
}

/* Waits (up to 10 s) until a client has connected and sent its first bytes: from then on it
** waits for an answer that never comes. An event to wait on, where a sleep would only guess. */
static int silent_wait_request(struct silent *s) {
    struct pollfd p = { s->fd, POLLIN, 0 };
    if (poll(&p, 1, 10000) != 1) return -1;
    s->conn = accept(s->fd, NULL, NULL);
    if (s->conn < 0) return -1;
    struct pollfd q = { s->conn, POLLIN, 0 };
    return poll(&q, 1, 10000) == 1 ? 0 : -1;
}

static void silent_close(struct silent *s) {
    if (s->conn >= 0) close(s->conn);
    if (s->fd >= 0) close(s->fd);
    s->fd = s->conn = -1;
}

static void record_init(struct record *r) {
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->lock, NULL);
    r->main_thread = pthread_self();
    r->free_from_cb = SPC_OK;
    r->wait_from_cb = SPC_OK;
    r->dispatch_from_cb = SPC_OK;
}

static spc_options *push_options(struct record *r) {
    spc_options *o = spc_options_new();
    CHECK(o != NULL);
    CHECK_STATUS(spc_options_set_server_url(o, UNREACHABLE), SPC_OK);
    CHECK_STATUS(spc_options_set_app_id(o, "c-suite"), SPC_OK);
    CHECK_STATUS(spc_options_set_device_id(o, "12345678-1234-4234-8234-123456789abc"), SPC_OK);
    CHECK_STATUS(spc_options_set_audio_push(o, 16000, 1), SPC_OK);
    if (r) {
        CHECK_STATUS(spc_options_set_error_cb(o, on_error, r), SPC_OK);
        CHECK_STATUS(spc_options_set_stop_cb(o, on_stop, r), SPC_OK);
        CHECK_STATUS(spc_options_set_start_cb(o, on_start, r), SPC_OK);
        CHECK_STATUS(spc_options_set_segment_cb(o, on_segment, r), SPC_OK);
        CHECK_STATUS(spc_options_set_log_cb(o, on_log, r), SPC_OK);
    }
    return o;
}

/* ---- the tests ---- */

static void test_version_and_status(void) {
    CHECK(strcmp(spc_version(), SPC_VERSION_STRING) == 0);
    CHECK(spc_version_number() == SPC_VERSION_NUMBER);
    CHECK(SPC_VERSION_NUMBER == SPC_VERSION_MAJOR * 1000000 + SPC_VERSION_MINOR * 1000 + SPC_VERSION_PATCH);
    static const struct { spc_status s; const char *text; } table[] = {
        {SPC_OK, "ok"}, {SPC_ERROR_INVALID_ARGUMENT, "invalid argument"},
        {SPC_ERROR_INVALID_STATE, "invalid state"}, {SPC_ERROR_NO_MEMORY, "out of memory"},
        {SPC_ERROR_NETWORK, "network error"}, {SPC_ERROR_TLS, "TLS error"},
        {SPC_ERROR_TIMEOUT, "timeout"}, {SPC_ERROR_AUTH, "authentication error"},
        {SPC_ERROR_API, "server error"}, {SPC_ERROR_PARSE, "malformed response"},
        {SPC_ERROR_AUDIO, "audio error"}, {SPC_ERROR_INTERNAL, "internal error"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        CHECK(table[i].s == (spc_status)i);  /* values are written out and never renumbered */
        CHECK(strcmp(spc_status_str(table[i].s), table[i].text) == 0);
    }
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        for (size_t j = i + 1; j < sizeof table / sizeof table[0]; j++)
            CHECK(strcmp(spc_status_str(table[i].s), spc_status_str(table[j].s)) != 0);
    CHECK(strcmp(spc_status_str((spc_status)999), "unknown status") == 0);
    CHECK(strcmp(spc_status_str((spc_status)12), "unknown status") == 0);
    CHECK(strcmp(spc_status_str((spc_status)-1), "unknown status") == 0);
}

static void test_null_handles(void) {
    /* Destructors accept NULL. */
    spc_options_free(NULL);
    spc_error_free(NULL);
    spc_segment_free(NULL);
    CHECK_STATUS(spc_client_free(NULL), SPC_OK);
    /* Error accessors. */
    CHECK_STATUS(spc_error_code(NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(strcmp(spc_error_message(NULL), "") == 0);
    CHECK(spc_error_grpc_status(NULL) == -1);
    CHECK(spc_error_copy(NULL) == NULL);
    /* Every options setter with a NULL handle. */
    CHECK_STATUS(spc_options_set_server_url(NULL, UNREACHABLE), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_identity_url(NULL, UNREACHABLE), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_app_id(NULL, "a"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_project_id(NULL, "p"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_language(NULL, "en-US"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_model(NULL, "tiny-int8"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_add_header(NULL, "a", "b"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_clear_headers(NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_device_id(NULL, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_cache_dir(NULL, "/tmp"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_ca_file(NULL, "/tmp/ca.pem"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_insecure_tls(NULL, 1), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_audio_microphone(NULL, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_audio_file(NULL, "x.wav"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_audio_push(NULL, 16000, 1), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_audio_fd(NULL, 0, 0, 0), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_chunk_ms(NULL, 100), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_prepare_on_init(NULL, 1), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_add_context_option(NULL, "k", "v"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_clear_context_options(NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_log_level(NULL, SPC_LOG_DEBUG), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_reconnect(NULL, 6, 200, 5000), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_replay_buffer_ms(NULL, 30000), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_context_limit_ms(NULL, 270000), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_stream_budget(NULL, 900000), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_drain_timeout_ms(NULL, 10000), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_keepalive(NULL, 30000, 10000), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_push_wait_ms(NULL, 0), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_segment_cb(NULL, on_segment, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_error_cb(NULL, on_error, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_start_cb(NULL, on_start, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_stop_cb(NULL, on_stop, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_log_cb(NULL, on_log, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_state_cb(NULL, NULL, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_delivery(NULL, SPC_DELIVERY_APPLICATION), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_activation(NULL, SPC_ACTIVATION_VOICE), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_wakeword(NULL, "hey"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_wakeword_url(NULL, "wyoming://127.0.0.1:10400", "hey_jarvis"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_timeouts(NULL, 5000, 10000, 10000), SPC_ERROR_INVALID_ARGUMENT);
    /* 0.8: the capture devices; ALSA's null device is always among them. */
    {
        CHECK_STATUS(spc_audio_devices(NULL), SPC_ERROR_INVALID_ARGUMENT);
        spc_devices *devices = NULL;
        CHECK_STATUS(spc_audio_devices(&devices), SPC_OK);
        CHECK(devices != NULL);
        int null_seen = 0;
        for (size_t i = 0; i < spc_devices_count(devices); i++) {
            CHECK(spc_devices_name(devices, i) != NULL && spc_devices_description(devices, i) != NULL);
            if (strcmp(spc_devices_name(devices, i), "null") == 0) null_seen = 1;
        }
        CHECK(null_seen);
        CHECK(spc_devices_name(devices, spc_devices_count(devices)) == NULL);
        CHECK(spc_devices_description(devices, (size_t)-1) == NULL);
        spc_devices_free(devices);
        CHECK(spc_devices_count(NULL) == 0 && spc_devices_name(NULL, 0) == NULL);
        spc_devices_free(NULL);
    }
    /* 0.8 accessors: NULL gives "none". */
    CHECK(spc_segment_word_confidence(NULL, 0) == -1.0f);
    CHECK(spc_segment_confidence(NULL) == -1.0f);
    CHECK(spc_listen_name(NULL) == NULL);
    CHECK_STATUS(spc_options_set_vad(NULL, SPC_VAD_SNR_DB, 9), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_endpointing(NULL, 300, 1000, 500, 15000), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_listen_cb(NULL, NULL, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_level_cb(NULL, NULL, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_idle_cb(NULL, NULL, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_io(NULL, SPC_IO_APPLICATION), SPC_ERROR_INVALID_ARGUMENT);
    /* Every client function with a NULL handle. */
    spc_state state = SPC_STATE_IDLE;
    int16_t pcm[4] = {0, 0, 0, 0};
    CHECK_STATUS(spc_client_start(NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_client_stop(NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_client_suspend(NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_client_resume(NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_client_get_state(NULL, &state), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_client_push_audio(NULL, pcm, 4), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_client_push_end(NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_client_wait_idle(NULL, 0), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(spc_client_event_fd(NULL) == -1);
    uint32_t ran = 7;
    CHECK_STATUS(spc_client_dispatch(NULL, 0, &ran), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(ran == 0);
    /* Segment accessors with NULL. */
    CHECK(strcmp(spc_segment_context_id(NULL), "") == 0);
    CHECK(spc_segment_id(NULL) == -1);
    CHECK(spc_segment_is_final(NULL) == 0);
    CHECK(strcmp(spc_segment_transcript(NULL), "") == 0);
    CHECK(spc_segment_word_count(NULL) == 0);
    CHECK(spc_segment_word_text(NULL, 0) == NULL);
    CHECK(spc_segment_word_index(NULL, 0) == -1);
    CHECK(spc_segment_word_start_ms(NULL, 0) == -1);
    CHECK(spc_segment_word_end_ms(NULL, 0) == -1);
    CHECK(spc_segment_word_is_final(NULL, 0) == 0);
    CHECK(strcmp(spc_segment_intent(NULL), "") == 0);
    CHECK(spc_segment_intent_is_final(NULL) == 0);
    CHECK(spc_segment_entity_count(NULL) == 0);
    CHECK(spc_segment_entity_type(NULL, 0) == NULL);
    CHECK(spc_segment_entity_value(NULL, 0) == NULL);
    CHECK(spc_segment_entity_start(NULL, 0) == -1);
    CHECK(spc_segment_entity_end(NULL, 0) == -1);
    CHECK(spc_segment_entity_is_final(NULL, 0) == 0);
    CHECK(strcmp(spc_segment_json(NULL), "") == 0);
    CHECK(spc_segment_copy(NULL) == NULL);
}

static void test_option_values(void) {
    spc_options *o = spc_options_new();
    CHECK(o != NULL);
    static const char *bad_urls[] = {
        "",                        /* empty */
        "ftp://host",              /* schemes */
        "ws://host:80",
        "grpc:/host",
        "host:50051",
        "grpc://",                 /* no host */
        "grpc://:50051",
        "grpc+tls://",
        "grpc://host:0",           /* ports */
        "grpc://host:65536",
        "grpc://host:70000",
        "grpc://host:-1",
        "grpc://host:abc",
        "grpc://host/path",        /* paths, users, queries, fragments */
        "grpc://host:50051/path",
        "grpc://user@host",
        "grpc://user:pw@host:1",
        "grpc://host?query=1",
        "grpc://host#fragment",
        "grpc://[::1",             /* IPv6 without its closing bracket */
        "grpc://ho st",            /* a space in the host */
    };
    for (size_t i = 0; i < sizeof bad_urls / sizeof bad_urls[0]; i++)
        CHECK_STATUS(spc_options_set_server_url(o, bad_urls[i]), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_server_url(o, NULL), SPC_ERROR_INVALID_ARGUMENT);
    static const char *good_urls[] = {"grpc://127.0.0.1:50051", "grpc+tls://example.com", "https://example.com:8443",
                                      "http://localhost", "grpc://[::1]:50051"};
    for (size_t i = 0; i < sizeof good_urls / sizeof good_urls[0]; i++)
        CHECK_STATUS(spc_options_set_server_url(o, good_urls[i]), SPC_OK);
    CHECK_STATUS(spc_options_set_identity_url(o, "nope"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_identity_url(o, "grpc://127.0.0.1:2"), SPC_OK);
    CHECK_STATUS(spc_options_set_identity_url(o, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_app_id(o, ""), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_app_id(o, "has space"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_app_id(o, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_project_id(o, "project-1"), SPC_OK);
    CHECK_STATUS(spc_options_set_project_id(o, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_language(o, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_language(o, "x"), SPC_ERROR_INVALID_ARGUMENT);
    /* 0.6: the model asked for (Wyoming); NULL clears it. */
    CHECK_STATUS(spc_options_set_model(o, "two words"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(spc_options_last_error(o), "spc_options_set_model") != NULL);
    CHECK_STATUS(spc_options_set_model(o, ""), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_model(o, "tiny-int8"), SPC_OK);
    CHECK_STATUS(spc_options_set_model(o, NULL), SPC_OK);
    /* 0.6: request headers. */
    CHECK_STATUS(spc_options_add_header(o, "Function-ID", "abc-123"), SPC_OK);
    CHECK_STATUS(spc_options_add_header(o, "bad name", "x"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(spc_options_last_error(o), "spc_options_add_header") != NULL);
    CHECK_STATUS(spc_options_add_header(o, "content-type", "x"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_add_header(o, "grpc-timeout", "1S"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_add_header(o, "x-key", "line\r\nbreak"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_add_header(o, "x-key", NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_clear_headers(o), SPC_OK);
    CHECK_STATUS(spc_options_set_language(o, "fi-FI"), SPC_OK);
    CHECK_STATUS(spc_options_set_device_id(o, "not-a-uuid"), SPC_ERROR_INVALID_ARGUMENT);
    static const char *bad_device_ids[] = {
        "", "not-a-uuid", "12345678-1234-4234-8234-12345678", "12345678-1234-4234-8234-123456789abcd",
        "g2345678-1234-4234-8234-123456789abc", "123456781234423482341234567890ab",
        "12345678_1234_4234_8234_123456789abc", "{12345678-1234-4234-8234-123456789abc}",
    };
    for (size_t i = 0; i < sizeof bad_device_ids / sizeof bad_device_ids[0]; i++)
        CHECK_STATUS(spc_options_set_device_id(o, bad_device_ids[i]), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_device_id(o, "12345678-1234-4234-8234-123456789ABC"), SPC_OK);
    CHECK_STATUS(spc_options_set_device_id(o, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_cache_dir(o, ""), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_cache_dir(o, "/tmp/spc-c-suite"), SPC_OK);
    CHECK_STATUS(spc_options_set_cache_dir(o, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_ca_file(o, ""), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_ca_file(o, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_insecure_tls(o, 1), SPC_OK);
    CHECK_STATUS(spc_options_set_insecure_tls(o, 0), SPC_OK);
    CHECK_STATUS(spc_options_set_audio_microphone(o, ""), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_audio_microphone(o, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_audio_microphone(o, "hw:0,0"), SPC_OK);
    CHECK_STATUS(spc_options_set_audio_file(o, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_audio_file(o, ""), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_audio_push(o, 7999, 1), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_audio_push(o, 192001, 1), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_audio_push(o, 16000, 0), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_audio_push(o, 16000, 9), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_audio_push(o, 48000, 2), SPC_OK);
    /* 0.9: a descriptor: WAV (rate 0, channels 0) or raw PCM in the push ranges. */
    CHECK_STATUS(spc_options_set_audio_fd(o, -1, 0, 0), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(spc_options_last_error(o), "spc_options_set_audio_fd: audio descriptor -1 is negative") != NULL);
    CHECK_STATUS(spc_options_set_audio_fd(o, 0, 0, 1), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(spc_options_last_error(o), "channels must be 0 when the sample rate is 0") != NULL);
    CHECK_STATUS(spc_options_set_audio_fd(o, 0, 7999, 1), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_audio_fd(o, 0, 16000, 9), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_audio_fd(o, 0, 16000, 1), SPC_OK);
    CHECK_STATUS(spc_options_set_audio_fd(o, 0, 0, 0), SPC_OK);
    CHECK_STATUS(spc_options_set_audio_push(o, 48000, 2), SPC_OK);
    static const uint32_t bad_chunks[] = {0, 19, 1001, 4000000000u};
    for (size_t i = 0; i < sizeof bad_chunks / sizeof bad_chunks[0]; i++)
        CHECK_STATUS(spc_options_set_chunk_ms(o, bad_chunks[i]), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_chunk_ms(o, 20), SPC_OK);
    CHECK_STATUS(spc_options_set_chunk_ms(o, 1000), SPC_OK);
    CHECK_STATUS(spc_options_set_prepare_on_init(o, 0), SPC_OK);
    CHECK_STATUS(spc_options_add_context_option(o, NULL, "v"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_add_context_option(o, "k", NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_add_context_option(o, "", "v"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_add_context_option(o, "vocabulary", "kitchen"), SPC_OK);
    CHECK_STATUS(spc_options_add_context_option(o, "vocabulary", "bedroom"), SPC_OK);
    CHECK_STATUS(spc_options_clear_context_options(o), SPC_OK);
    CHECK_STATUS(spc_options_set_reconnect(o, 101, 200, 5000), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_reconnect(o, 6, 0, 5000), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_reconnect(o, 6, 300, 200), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_reconnect(o, 6, 200, 600001), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_reconnect(o, 0, 1, 1), SPC_OK);
    CHECK_STATUS(spc_options_set_replay_buffer_ms(o, 999), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_replay_buffer_ms(o, 600001), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_replay_buffer_ms(o, 1000), SPC_OK);
    CHECK_STATUS(spc_options_set_context_limit_ms(o, 999), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_context_limit_ms(o, 3600001), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_context_limit_ms(o, 270000), SPC_OK);
    /* 0.5: bounded streams, drain timeout, keepalive, unlimited reconnection. */
    CHECK_STATUS(spc_options_set_reconnect(o, SPC_RECONNECT_UNLIMITED, 200, 5000), SPC_OK);
    CHECK_STATUS(spc_options_set_reconnect(o, SPC_RECONNECT_UNLIMITED - 1, 200, 5000), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_stream_budget(o, 65535), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_stream_budget(o, 1073741825u), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_stream_budget(o, 65536), SPC_OK);
    CHECK_STATUS(spc_options_set_stream_budget(o, 900000), SPC_OK);
    CHECK_STATUS(spc_options_set_drain_timeout_ms(o, 99), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_drain_timeout_ms(o, 600001), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_drain_timeout_ms(o, 10000), SPC_OK);
    CHECK_STATUS(spc_options_set_keepalive(o, 999, 10000), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_keepalive(o, 30000, 99), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_keepalive(o, 0, 10000), SPC_OK);
    CHECK_STATUS(spc_options_set_keepalive(o, 30000, 10000), SPC_OK);
    CHECK_STATUS(spc_options_set_push_wait_ms(o, 3600001), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_push_wait_ms(o, 0), SPC_OK);
    CHECK_STATUS(spc_options_set_push_wait_ms(o, 5000), SPC_OK);
    /* 0.8: connect, login and start timeouts, each 100-600000 ms, named when out of range. */
    CHECK_STATUS(spc_options_set_timeouts(o, 99, 10000, 10000), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(spc_options_last_error(o), "spc_options_set_timeouts: connect timeout 99 ms") != NULL);
    CHECK_STATUS(spc_options_set_timeouts(o, 5000, 600001, 10000), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(spc_options_last_error(o), "login timeout") != NULL);
    CHECK_STATUS(spc_options_set_timeouts(o, 5000, 10000, 0), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(spc_options_last_error(o), "start timeout") != NULL);
    CHECK_STATUS(spc_options_set_timeouts(o, 100, 600000, 10000), SPC_OK);
    /* 0.5: a setter's failure says why; success clears it. */
    CHECK(strcmp(spc_options_last_error(NULL), "") == 0);
    CHECK_STATUS(spc_options_set_drain_timeout_ms(o, 99), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(spc_options_last_error(o), "spc_options_set_drain_timeout_ms") != NULL);
    CHECK(strstr(spc_options_last_error(o), "100-600000") != NULL);
    CHECK_STATUS(spc_options_set_drain_timeout_ms(o, 10000), SPC_OK);
    CHECK(strcmp(spc_options_last_error(o), "") == 0);
    /* Strings are UTF-8: invalid bytes are refused, named, not repaired (a Latin-1 path was
    ** opened as "caf\uFFFD.wav", a name never given). Since 0.11. */
    CHECK_STATUS(spc_options_set_audio_file(o, "/tmp/caf\xE9.wav"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(spc_options_last_error(o), "not valid UTF-8 (byte 8 is 0xe9)") != NULL);
    CHECK_STATUS(spc_options_set_cache_dir(o, "/tmp/\xff"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_app_id(o, "caf\xC3\xA9"), SPC_OK); /* valid UTF-8 is taken */
    /* So do the callback setters (they left the last failure's message). */
    CHECK_STATUS(spc_options_set_drain_timeout_ms(o, 99), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_segment_cb(o, NULL, NULL), SPC_OK);
    CHECK(strcmp(spc_options_last_error(o), "") == 0);
    CHECK_STATUS(spc_options_set_log_level(o, (spc_log_level)99), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_log_level(o, (spc_log_level)5), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_log_level(o, (spc_log_level)-1), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_log_level(o, SPC_LOG_DEBUG), SPC_OK);
    CHECK_STATUS(spc_options_set_log_level(o, SPC_LOG_NONE), SPC_OK);
    CHECK_STATUS(spc_options_set_segment_cb(o, NULL, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_error_cb(o, NULL, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_start_cb(o, NULL, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_stop_cb(o, NULL, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_log_cb(o, NULL, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_state_cb(o, NULL, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_delivery(o, (spc_delivery)3), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_delivery(o, SPC_DELIVERY_SHARED), SPC_OK);
    CHECK_STATUS(spc_options_set_delivery(o, SPC_DELIVERY_THREAD), SPC_OK);
    /* Application-driven I/O (0.3). */
    CHECK_STATUS(spc_options_set_io(o, (spc_io)2), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_io(o, SPC_IO_APPLICATION), SPC_OK);
    CHECK_STATUS(spc_options_set_io(o, SPC_IO_LIBRARY), SPC_OK);
    /* Hands-free options (0.2): enums, ranges, phrases. */
    CHECK_STATUS(spc_options_set_activation(o, (spc_activation)3), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_activation(o, SPC_ACTIVATION_WAKEWORD), SPC_OK);
    CHECK_STATUS(spc_options_set_wakeword(o, ""), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_wakeword(o, " ?! "), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_wakeword(o, "one two three four five six seven eight nine"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_wakeword(o, "Hey, Robot"), SPC_OK);
    CHECK_STATUS(spc_options_set_wakeword(o, NULL), SPC_OK);
    /* A wake-word service (0.7): a Wyoming URL, a model name or prefix (or NULL: any). */
    CHECK_STATUS(spc_options_set_wakeword_url(o, "grpc://127.0.0.1:10400", "hey_jarvis"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(spc_options_last_error(o), "wyoming://") != NULL);
    CHECK_STATUS(spc_options_set_wakeword_url(o, "wyoming://127.0.0.1:10400", "hey jarvis"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_wakeword_url(o, "wyoming://127.0.0.1:10400", ""), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_wakeword_url(o, "wyoming+unix:///run/wake.sock", NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_wakeword_url(o, "wyoming://127.0.0.1:10400", "hey_jarvis"), SPC_OK);
    CHECK_STATUS(spc_options_set_wakeword_url(o, NULL, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_vad(o, (spc_vad_param)7, 1), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_vad(o, SPC_VAD_SNR_DB, -1), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_vad(o, SPC_VAD_SNR_DB, NAN), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_vad(o, SPC_VAD_RELEASE_RATIO, 0.8), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_vad(o, SPC_VAD_WINDOW_FRAMES, 2.5), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_vad(o, SPC_VAD_WINDOW_FRAMES, 8), SPC_OK);
    CHECK_STATUS(spc_options_set_vad(o, SPC_VAD_SNR_DB, 12), SPC_OK);
    CHECK_STATUS(spc_options_set_vad(o, SPC_VAD_HOLD_MS, 300), SPC_OK);
    CHECK_STATUS(spc_options_set_endpointing(o, 300, 50, 500, 15000), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_endpointing(o, 300, 1000, 20000, 15000), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_endpointing(o, 6000, 1000, 500, 15000), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_endpointing(o, 0, 1000, 0, 500), SPC_OK);
    CHECK_STATUS(spc_options_set_listen_cb(o, NULL, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_level_cb(o, NULL, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_idle_cb(o, NULL, NULL), SPC_OK);
    spc_options_free(o);
}

/* Entries of a /proc directory (threads of /proc/self/task, descriptors of /proc/self/fd). */
static int entries_in(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static void test_client_new_failures(void) {
    spc_client *c = (spc_client *)&c; /* must be set to NULL on failure */
    spc_error *e = NULL;
    CHECK_STATUS(spc_client_new(NULL, &c, &e), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(c == NULL);
    CHECK(e != NULL && spc_error_code(e) == SPC_ERROR_INVALID_ARGUMENT);
    spc_error_free(e);

    spc_options *o = spc_options_new();
    CHECK_STATUS(spc_client_new(o, NULL, NULL), SPC_ERROR_INVALID_ARGUMENT);
    e = NULL;
    CHECK_STATUS(spc_client_new(o, NULL, &e), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(e != NULL && spc_error_code(e) == SPC_ERROR_INVALID_ARGUMENT);
    spc_error_free(e);
    /* No server URL. */
    c = (spc_client *)&c;
    CHECK_STATUS(spc_client_new(o, &c, &e), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(c == NULL);
    CHECK(e != NULL && strstr(spc_error_message(e), "server URL") != NULL);
    CHECK(spc_error_grpc_status(e) == -1);
    spc_error_free(e);
    /* A URL with a typo: the setter says why, and spc_client_new() names it beside "no server URL". */
    CHECK_STATUS(spc_options_set_server_url(o, "grcp://127.0.0.1:1"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(spc_options_last_error(o), "spc_options_set_server_url") != NULL);
    CHECK(strstr(spc_options_last_error(o), "grcp") != NULL);
    c = (spc_client *)&c;
    CHECK_STATUS(spc_client_new(o, &c, &e), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(e != NULL && strstr(spc_error_message(e), "server URL") != NULL);
    CHECK(e != NULL && strstr(spc_error_message(e), "rejected earlier: spc_options_set_server_url") != NULL);
    spc_error_free(e);
    /* Wakeword activation without a phrase. */
    CHECK_STATUS(spc_options_set_server_url(o, UNREACHABLE), SPC_OK);
    CHECK_STATUS(spc_options_set_app_id(o, "test"), SPC_OK);
    CHECK_STATUS(spc_options_set_activation(o, SPC_ACTIVATION_WAKEWORD), SPC_OK);
    c = (spc_client *)&c;
    CHECK_STATUS(spc_client_new(o, &c, &e), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(c == NULL);
    CHECK(e != NULL && strstr(spc_error_message(e), "wakeword") != NULL);
    spc_error_free(e);
    e = NULL;
    CHECK_STATUS(spc_options_set_activation(o, SPC_ACTIVATION_MANUAL), SPC_OK);
    CHECK_STATUS(spc_options_set_app_id(o, NULL), SPC_OK);
    /* No app id or project id; out_error may be NULL. */
    c = (spc_client *)&c;
    CHECK_STATUS(spc_client_new(o, &c, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(c == NULL);
    /* An app id cleared again (NULL) is missing too. */
    CHECK_STATUS(spc_options_set_app_id(o, "c-suite"), SPC_OK);
    CHECK_STATUS(spc_options_set_app_id(o, NULL), SPC_OK);
    CHECK_STATUS(spc_client_new(o, &c, &e), SPC_ERROR_INVALID_ARGUMENT);
    spc_error_free(e);
    /* A project id alone is not enough: each start of a project-scoped login names the app. */
    CHECK_STATUS(spc_options_set_project_id(o, "c-suite-project"), SPC_OK);
    CHECK_STATUS(spc_options_set_audio_push(o, 16000, 1), SPC_OK);
    CHECK_STATUS(spc_client_new(o, &c, &e), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(c == NULL);
    CHECK(e != NULL && strstr(spc_error_message(e), "app id") != NULL);
    spc_error_free(e);
    /* Both: project-scoped login, the app named in each start. */
    CHECK_STATUS(spc_options_set_app_id(o, "c-suite"), SPC_OK);
    CHECK_STATUS(spc_client_new(o, &c, NULL), SPC_OK);
    CHECK(c != NULL);
    CHECK_STATUS(spc_client_free(c), SPC_OK);
    CHECK_STATUS(spc_options_set_project_id(o, NULL), SPC_OK);
    /* A missing WAV file names its path. */
    CHECK_STATUS(spc_options_set_audio_file(o, "/nonexistent/speech.wav"), SPC_OK);
    c = (spc_client *)&c;
    CHECK_STATUS(spc_client_new(o, &c, &e), SPC_ERROR_AUDIO);
    CHECK(c == NULL);
    CHECK(e != NULL && strstr(spc_error_message(e), "/nonexistent/speech.wav") != NULL);
    CHECK(spc_error_grpc_status(e) == -1);
    spc_error_free(e);
    /* A failed constructor lets go of what it made: its callback thread (thread delivery) and
    ** its event fd (application delivery). It kept them: one thread or descriptor per failure. */
    for (int delivery = 0; delivery < 2; delivery++) {
        CHECK_STATUS(spc_options_set_delivery(o, delivery ? SPC_DELIVERY_APPLICATION : SPC_DELIVERY_THREAD), SPC_OK);
        CHECK_STATUS(spc_client_new(o, &c, NULL), SPC_ERROR_AUDIO); /* the library's own threads start */
        int threads = entries_in("/proc/self/task"), fds = entries_in("/proc/self/fd");
        for (int i = 0; i < 20; i++) CHECK_STATUS(spc_client_new(o, &c, NULL), SPC_ERROR_AUDIO);
        int threads_after = entries_in("/proc/self/task"), fds_after = entries_in("/proc/self/fd");
        CHECKF(threads_after <= threads + 2, "20 failed spc_client_new: %d threads before, %d after", threads, threads_after);
        CHECKF(fds_after <= fds + 2, "20 failed spc_client_new: %d descriptors before, %d after", fds, fds_after);
    }
    CHECK_STATUS(spc_options_set_delivery(o, SPC_DELIVERY_THREAD), SPC_OK);
    /* A file that is not WAV. */
    char path[] = "/tmp/spc-c-suite-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, "this is not a wave file at all", 30) == 30);
    close(fd);
    CHECK_STATUS(spc_options_set_audio_file(o, path), SPC_OK);
    c = (spc_client *)&c;
    CHECK_STATUS(spc_client_new(o, &c, &e), SPC_ERROR_AUDIO);
    CHECK(c == NULL);
    CHECK(e != NULL && strstr(spc_error_message(e), "not a RIFF file") != NULL);
    CHECK(e != NULL && strstr(spc_error_message(e), path) != NULL); /* names the file */
    spc_error_free(e);
    /* Without out_error, the same failure. */
    CHECK_STATUS(spc_client_new(o, &c, NULL), SPC_ERROR_AUDIO);
    CHECK(c == NULL);
    /* An empty file and a directory are not WAV either. */
    fd = open(path, O_WRONLY | O_TRUNC);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    CHECK_STATUS(spc_client_new(o, &c, NULL), SPC_ERROR_AUDIO);
    unlink(path);
    CHECK_STATUS(spc_options_set_audio_file(o, "/tmp"), SPC_OK);
    CHECK_STATUS(spc_client_new(o, &c, NULL), SPC_ERROR_AUDIO);
    CHECK(c == NULL);
    /* Prepare-on-init against a closed port fails in the constructor with a network error. */
    CHECK_STATUS(spc_options_set_audio_push(o, 16000, 1), SPC_OK);
    CHECK_STATUS(spc_options_set_prepare_on_init(o, 1), SPC_OK);
    CHECK_STATUS(spc_client_new(o, &c, &e), SPC_ERROR_NETWORK);
    CHECK(c == NULL);
    CHECK(e != NULL && strstr(spc_error_message(e), "127.0.0.1") != NULL);
    spc_error_free(e);
    /* When the constructor fails, the callbacks it was given are never called. */
    struct record r;
    record_init(&r);
    CHECK_STATUS(spc_options_set_error_cb(o, on_error, &r), SPC_OK);
    CHECK_STATUS(spc_options_set_stop_cb(o, on_stop, &r), SPC_OK);
    CHECK_STATUS(spc_options_set_start_cb(o, on_start, &r), SPC_OK);
    CHECK_STATUS(spc_options_set_log_cb(o, on_log, &r), SPC_OK);
    CHECK_STATUS(spc_client_new(o, &c, NULL), SPC_ERROR_NETWORK);
    sleep_ms(100);
    CHECK(event_count(&r) == 0);
    /* On success *out_error is set to NULL. */
    CHECK_STATUS(spc_options_set_prepare_on_init(o, 0), SPC_OK);
    e = (spc_error *)&e;
    CHECK_STATUS(spc_client_new(o, &c, &e), SPC_OK);
    CHECK(e == NULL);
    CHECK_STATUS(spc_client_free(c), SPC_OK);
    CHECK(event_count(&r) == 0);
    spc_options_free(o);
}

static void test_wrong_states(void) {
    spc_options *o = push_options(NULL);
    spc_client *c = NULL;
    CHECK_STATUS(spc_client_new(o, &c, NULL), SPC_OK);
    spc_options_free(o); /* the client keeps its own copy */
    spc_state state = SPC_STATE_SUSPENDED;
    CHECK_STATUS(spc_client_get_state(c, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_client_get_state(c, &state), SPC_OK);
    CHECK(state == SPC_STATE_IDLE);
    /* 0.8: the connection state on demand; nothing opened yet. */
    spc_connection_state connection = SPC_CONNECTION_READY;
    CHECK_STATUS(spc_client_get_connection_state(NULL, &connection), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_client_get_connection_state(c, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_client_get_connection_state(c, &connection), SPC_OK);
    CHECK(connection == SPC_CONNECTION_IDLE);
    CHECK_STATUS(spc_client_stop(c), SPC_ERROR_INVALID_STATE);
    CHECK_STATUS(spc_client_resume(c), SPC_ERROR_INVALID_STATE);
    CHECK_STATUS(spc_client_push_end(c), SPC_ERROR_INVALID_STATE);
    int16_t pcm[320];
    memset(pcm, 0, sizeof pcm);
    CHECK_STATUS(spc_client_push_audio(c, pcm, 320), SPC_OK);  /* outside a context: dropped */
    CHECK_STATUS(spc_client_push_audio(c, NULL, 0), SPC_OK);
    CHECK_STATUS(spc_client_push_audio(c, NULL, 10), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_client_suspend(c), SPC_OK);
    CHECK_STATUS(spc_client_get_state(c, &state), SPC_OK);
    CHECK(state == SPC_STATE_SUSPENDED);
    CHECK_STATUS(spc_client_suspend(c), SPC_ERROR_INVALID_STATE);
    CHECK_STATUS(spc_client_start(c), SPC_ERROR_INVALID_STATE);
    CHECK_STATUS(spc_client_resume(c), SPC_OK);
    CHECK_STATUS(spc_client_wait_idle(c, 5000), SPC_OK);
    CHECK(spc_client_event_fd(c) == -1);
    CHECK_STATUS(spc_client_dispatch(c, 0, NULL), SPC_ERROR_INVALID_STATE);
    CHECK_STATUS(spc_client_free(c), SPC_OK);

    /* A microphone client rejects pushed audio. */
    o = spc_options_new();
    CHECK_STATUS(spc_options_set_server_url(o, UNREACHABLE), SPC_OK);
    CHECK_STATUS(spc_options_set_app_id(o, "c-suite"), SPC_OK);
    CHECK_STATUS(spc_client_new(o, &c, NULL), SPC_OK);
    spc_options_free(o);
    CHECK_STATUS(spc_client_push_audio(c, pcm, 320), SPC_ERROR_INVALID_STATE);
    CHECK_STATUS(spc_client_push_end(c), SPC_ERROR_INVALID_STATE);
    CHECK_STATUS(spc_client_free(c), SPC_OK);
}

static int listen_events;
static void on_listen_count(spc_client *c, spc_listen_event e, int64_t position_ms, void *ud) {
    (void)c; (void)e; (void)position_ms; (void)ud;
    __atomic_add_fetch(&listen_events, 1, __ATOMIC_RELAXED);
}

/* Hands-free listening that cannot begin (no server): the start fails like a manual one, with
** the error and then the stop callback (context ""), and the client is idle again. */
static void test_hands_free_without_a_server(void) {
    struct record r;
    record_init(&r);
    spc_options *o = push_options(&r);
    CHECK_STATUS(spc_options_set_activation(o, SPC_ACTIVATION_VOICE), SPC_OK);
    CHECK_STATUS(spc_options_set_listen_cb(o, on_listen_count, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_endpointing(o, 300, 800, 300, 10000), SPC_OK);
    spc_client *c = NULL;
    CHECK_STATUS(spc_client_new(o, &c, NULL), SPC_OK);
    spc_options_free(o);
    CHECK_STATUS(spc_client_start(c), SPC_OK);
    int16_t pcm[1600];
    for (int i = 0; i < 1600; i++) pcm[i] = (int16_t)((i % 40 < 20) ? 8000 : -8000);
    for (int k = 0; k < 10; k++) {
        spc_status s = spc_client_push_audio(c, pcm, 1600);
        CHECK(s == SPC_OK);
    }
    CHECK_STATUS(spc_client_wait_idle(c, 20000), SPC_OK);
    spc_state state = SPC_STATE_LISTENING;
    CHECK_STATUS(spc_client_get_state(c, &state), SPC_OK);
    CHECK(state == SPC_STATE_IDLE);
    pthread_mutex_lock(&r.lock);
    CHECK(r.count == 2);
    CHECK(r.count >= 2 && strcmp(r.events[0], "error") == 0 && strcmp(r.events[1], "stop:") == 0);
    CHECK(r.error_code == SPC_ERROR_NETWORK);
    pthread_mutex_unlock(&r.lock);
    CHECK(__atomic_load_n(&listen_events, __ATOMIC_RELAXED) == 0);
    CHECK_STATUS(spc_client_stop(c), SPC_ERROR_INVALID_STATE);
    CHECK_STATUS(spc_client_free(c), SPC_OK);
}

/* Thread delivery, or the shared callback threads (0.10): the same callbacks, in the same order,
** the same refusals from inside them. */
static void test_unreachable_server_flow(spc_delivery delivery) {
    struct record r;
    record_init(&r);
    r.restart = 1;
    r.stop_in_error = 1;
    r.suspend_in_stop = 1;
    r.stop_from_cb = SPC_ERROR_INTERNAL;
    spc_options *o = push_options(&r);
    CHECK_STATUS(spc_options_set_log_level(o, SPC_LOG_DEBUG), SPC_OK);
    CHECK_STATUS(spc_options_set_delivery(o, delivery), SPC_OK);
    spc_client *c = NULL;
    spc_error *e = NULL;
    CHECK_STATUS(spc_client_new(o, &c, &e), SPC_OK);
    CHECK(e == NULL);
    spc_options_free(o);
    pthread_mutex_lock(&r.lock);
    r.client = c;
    pthread_mutex_unlock(&r.lock);
    CHECK_STATUS(spc_client_start(c), SPC_OK);
    /* The first stop callback starts again (from inside the callback), so two error/stop pairs;
    ** the second suspends and resumes. wait_idle returns only when every callback for the events
    ** so far has returned, and the restart is one of them: all four are in by then. */
    double t0 = now_s();
    CHECK_STATUS(spc_client_wait_idle(c, 20000), SPC_OK);
    CHECK(now_s() - t0 < 15.0);
    pthread_mutex_lock(&r.lock);
    CHECK(r.count == 4);
    CHECK(strcmp(r.events[0], "error") == 0);
    CHECK(strcmp(r.events[1], "stop:") == 0);
    CHECK(strcmp(r.events[2], "error") == 0);
    CHECK(strcmp(r.events[3], "stop:") == 0);
    CHECK(r.on_main_thread == 0);
    CHECK(r.error_code == SPC_ERROR_NETWORK);
    CHECK(r.error_grpc == 14); /* UNAVAILABLE: the connection was refused */
    CHECK(strstr(r.error_message, "127.0.0.1") != NULL);
    CHECK(r.free_from_cb == SPC_ERROR_INVALID_STATE);
    CHECK(r.wait_from_cb == SPC_ERROR_INVALID_STATE);
    CHECK(r.start_from_cb == SPC_OK);
    CHECK(r.stop_from_cb == SPC_OK || r.stop_from_cb == SPC_ERROR_INVALID_STATE);
    CHECK(r.suspend_from_cb == SPC_OK);
    CHECK(r.resume_from_cb == SPC_OK);
    /* One thread of its own; shared threads may take turns. */
    if (delivery == SPC_DELIVERY_THREAD) CHECK(r.threads_differ == 0);
    CHECK(r.wrong_client == 0);
    CHECK(r.copy_mismatch == 0);
    pthread_mutex_unlock(&r.lock);
    spc_state state = SPC_STATE_STARTING;
    CHECK_STATUS(spc_client_get_state(c, &state), SPC_OK);
    CHECK(state == SPC_STATE_IDLE);
    CHECK_STATUS(spc_client_wait_idle(c, -1), SPC_OK);
    CHECK_STATUS(spc_client_free(c), SPC_OK);
    /* Nothing runs after free. */
    sleep_ms(100);
    CHECK(event_count(&r) == 4);
}

static void test_wait_timeout_and_free_while_starting(void) {
    /* A push client in a context that never ends: wait_idle times out; free still returns. */
    spc_options *o = push_options(NULL);
    /* 10.255.255.1 is unroutable: the connect hangs until the library's connect timeout. */
    CHECK_STATUS(spc_options_set_server_url(o, "grpc://10.255.255.1:50051"), SPC_OK);
    spc_client *c = NULL;
    CHECK_STATUS(spc_client_new(o, &c, NULL), SPC_OK);
    spc_options_free(o);
    CHECK_STATUS(spc_client_start(c), SPC_OK);
    spc_status s = spc_client_wait_idle(c, 50);
    CHECK(s == SPC_ERROR_TIMEOUT || s == SPC_OK);
    CHECK_STATUS(spc_client_free(c), SPC_OK);
}

/* ---- application delivery: the client driven from a poll() loop ---- */

struct states {
    int count;
    spc_connection_state seen[16];
    spc_status reason;
    pthread_t thread;
    int off_thread;
};

static void on_state(spc_client *c, spc_connection_state state, int32_t attempt, int32_t delay_ms,
                     const spc_error *reason, void *ud) {
    struct states *st = (struct states *)ud;
    (void)c;
    (void)attempt;
    (void)delay_ms;
    if (!pthread_equal(pthread_self(), st->thread)) st->off_thread = 1;
    if (st->count < 16) st->seen[st->count++] = state;
    if (reason) st->reason = spc_error_code(reason);
}

/* app_io: the loop also serves the process-wide descriptor of application-driven I/O (0.3). */
static void test_poll_loop_delivery(int app_io) {
    struct record r;
    record_init(&r);
    struct states st;
    memset(&st, 0, sizeof st);
    st.thread = pthread_self();
    spc_options *o = push_options(&r);
    CHECK_STATUS(spc_options_set_delivery(o, SPC_DELIVERY_APPLICATION), SPC_OK);
    CHECK_STATUS(spc_options_set_state_cb(o, on_state, &st), SPC_OK);
    if (app_io) CHECK_STATUS(spc_options_set_io(o, SPC_IO_APPLICATION), SPC_OK);
    spc_client *c = NULL;
    CHECK_STATUS(spc_client_new(o, &c, NULL), SPC_OK);
    spc_options_free(o);
    int fd = spc_client_event_fd(c);
    CHECK(fd >= 0);
    int io = spc_io_fd();
    CHECK(io >= 0 && io != fd && spc_io_fd() == io); /* one descriptor for the whole process */
    uint32_t ready = 99;
    CHECK_STATUS(spc_io_process(&ready), SPC_OK);
    CHECK(ready == 0); /* no connection of this process is application-driven yet */
    CHECK_STATUS(spc_io_process(NULL), SPC_OK);
    uint32_t ran_inline = 99;
    ready = 99;
    CHECK_STATUS(spc_io_dispatch(&ready, &ran_inline), SPC_OK);
    CHECK(ready == 0 && ran_inline == 0);
    CHECK_STATUS(spc_io_dispatch(NULL, NULL), SPC_OK);
    CHECK_STATUS(spc_client_start(c), SPC_OK);
    /* A plain poll loop until the stop arrives; callbacks run here, on the main thread. */
    struct pollfd p[2];
    p[0].fd = fd;
    p[0].events = POLLIN;
    p[0].revents = 0;
    p[1].fd = app_io ? io : -1;
    p[1].events = POLLIN;
    p[1].revents = 0;
    for (int i = 0; i < 200 && r.count < 2; i++) {
        if (poll(p, 2, 100) > 0) {
            if (p[1].revents & POLLIN) CHECK_STATUS(spc_io_process(NULL), SPC_OK);
            if (p[0].revents & POLLIN) {
                uint32_t ran = 0;
                CHECK_STATUS(spc_client_dispatch(c, 0, &ran), SPC_OK);
                CHECK(ran > 0);
            }
        }
    }
    CHECK(r.count == 2);
    CHECK(strcmp(r.events[0], "error") == 0 && strcmp(r.events[1], "stop:") == 0);
    CHECK(st.off_thread == 0);
    CHECK(st.count == 2 && st.seen[0] == SPC_CONNECTION_CONNECTING && st.seen[1] == SPC_CONNECTION_UNAVAILABLE);
    CHECK(st.reason == SPC_ERROR_NETWORK);
    /* free, wait_idle and dispatch from inside dispatch were refused (on_stop tries them). */
    CHECK(r.free_from_cb == SPC_ERROR_INVALID_STATE);
    CHECK(r.wait_from_cb == SPC_ERROR_INVALID_STATE);
    CHECK(r.dispatch_from_cb == SPC_ERROR_INVALID_STATE);
    /* Nothing pending: the descriptor is quiet. */
    p[0].revents = 0;
    CHECK(poll(p, 1, 0) == 0);
    CHECK_STATUS(spc_client_free(c), SPC_OK);
}

/* ---- the idle event (0.11): the end of the work, announced instead of polled ---- */

struct idle_seen {
    struct record *r;
    pthread_cond_t cond;
    spc_state state;      /* the client's state inside the idle callback */
    spc_status wait;      /* spc_client_wait_idle() from inside it */
};

static void on_idle(spc_client *c, void *ud) {
    struct idle_seen *seen = (struct idle_seen *)ud;
    CHECK_STATUS(spc_client_get_state(c, &seen->state), SPC_OK);
    seen->wait = spc_client_wait_idle(c, 0);
    add_event(seen->r, "idle");
    pthread_mutex_lock(&seen->r->lock);
    pthread_cond_signal(&seen->cond);
    pthread_mutex_unlock(&seen->r->lock);
}

/* The application waits on its own condition variable (thread delivery) or its poll loop
** (application delivery), never on spc_client_wait_idle(): the idle callback comes once, after
** the error and the stop, with the client IDLE. */
static void test_idle_event(spc_delivery delivery) {
    struct record r;
    record_init(&r);
    struct idle_seen seen;
    memset(&seen, 0, sizeof seen);
    seen.r = &r;
    seen.state = SPC_STATE_STARTING;
    pthread_cond_init(&seen.cond, NULL);
    spc_options *o = push_options(&r);
    CHECK_STATUS(spc_options_set_delivery(o, delivery), SPC_OK);
    CHECK_STATUS(spc_options_set_idle_cb(o, on_idle, &seen), SPC_OK);
    spc_client *c = NULL;
    CHECK_STATUS(spc_client_new(o, &c, NULL), SPC_OK);
    spc_options_free(o);
    CHECK_STATUS(spc_client_start(c), SPC_OK);
    if (delivery == SPC_DELIVERY_APPLICATION) {
        struct pollfd p = {spc_client_event_fd(c), POLLIN, 0};
        for (int i = 0; i < 200 && event_count(&r) < 3; i++)
            if (poll(&p, 1, 100) > 0) CHECK_STATUS(spc_client_dispatch(c, 0, NULL), SPC_OK);
        p.revents = 0;
        CHECK(poll(&p, 1, 0) == 0); /* nothing more is pending after the idle event */
    } else {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += 20;
        pthread_mutex_lock(&r.lock);
        while (r.count < 3 && pthread_cond_timedwait(&seen.cond, &r.lock, &deadline) == 0) {}
        pthread_mutex_unlock(&r.lock);
    }
    CHECK(event_count(&r) == 3);
    pthread_mutex_lock(&r.lock);
    CHECK(strcmp(r.events[0], "error") == 0);
    CHECK(strcmp(r.events[1], "stop:") == 0);
    CHECK(strcmp(r.events[2], "idle") == 0);
    pthread_mutex_unlock(&r.lock);
    CHECK(seen.state == SPC_STATE_IDLE);
    CHECK(seen.wait == SPC_ERROR_INVALID_STATE); /* from inside a callback, as always */
    CHECK_STATUS(spc_client_free(c), SPC_OK);
    CHECK(event_count(&r) == 3); /* once */
    pthread_cond_destroy(&seen.cond);
}

/* The state rules, on a client whose context stays STARTING (the silent server). */
static void test_states_on_a_silent_server(void) {
    struct silent srv;
    CHECK(silent_open(&srv) == 0);
    struct record r;
    record_init(&r);
    spc_options *o = push_options(&r);
    CHECK_STATUS(spc_options_set_server_url(o, srv.url), SPC_OK);
    spc_client *c = NULL;
    CHECK_STATUS(spc_client_new(o, &c, NULL), SPC_OK);
    spc_options_free(o);
    spc_state state = SPC_STATE_IDLE;
    int16_t pcm[320];
    memset(pcm, 0, sizeof pcm);

    CHECK_STATUS(spc_client_start(c), SPC_OK);
    CHECK_STATUS(spc_client_get_state(c, &state), SPC_OK);
    CHECK(state == SPC_STATE_STARTING);
    CHECK_STATUS(spc_client_start(c), SPC_ERROR_INVALID_STATE);   /* double start */
    CHECK_STATUS(spc_client_resume(c), SPC_ERROR_INVALID_STATE);  /* not suspended */
    CHECK_STATUS(spc_client_push_audio(c, pcm, 320), SPC_OK);
    CHECK_STATUS(spc_client_push_audio(c, pcm, 0), SPC_OK);
    CHECK_STATUS(spc_client_push_audio(c, NULL, 0), SPC_OK);
    CHECK_STATUS(spc_client_push_audio(c, NULL, 1), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(silent_wait_request(&srv) == 0); /* the worker now waits for the server's answer */
    CHECK_STATUS(spc_client_stop(c), SPC_OK);
    CHECK_STATUS(spc_client_get_state(c, &state), SPC_OK);
    CHECK(state == SPC_STATE_STOPPING);
    CHECK_STATUS(spc_client_stop(c), SPC_ERROR_INVALID_STATE);    /* nothing left to stop */
    CHECK_STATUS(spc_client_start(c), SPC_OK);                    /* queued behind the stop */
    CHECK_STATUS(spc_client_start(c), SPC_ERROR_INVALID_STATE);   /* one queued start only */
    CHECK_STATUS(spc_client_stop(c), SPC_OK);                     /* cancels the queued start */
    CHECK_STATUS(spc_client_stop(c), SPC_ERROR_INVALID_STATE);
    CHECK_STATUS(spc_client_get_state(c, &state), SPC_OK);
    CHECK(state == SPC_STATE_STOPPING);
    CHECK_STATUS(spc_client_wait_idle(c, 0), SPC_ERROR_TIMEOUT);
    double t0 = now_s();
    CHECK_STATUS(spc_client_wait_idle(c, 300), SPC_ERROR_TIMEOUT);
    CHECK(now_s() - t0 >= 0.25 && now_s() - t0 < 5.0);
    CHECK(event_count(&r) == 0);
    /* The server goes away: the connection is reset, the context ends with an error and a stop,
    ** and the cancelled start does not happen. */
    silent_close(&srv);
    CHECK_STATUS(spc_client_wait_idle(c, 20000), SPC_OK);
    pthread_mutex_lock(&r.lock);
    CHECK(r.count == 2);
    CHECK(strcmp(r.events[0], "error") == 0);
    CHECK(strcmp(r.events[1], "stop:") == 0);
    CHECK(r.on_main_thread == 0);
    pthread_mutex_unlock(&r.lock);
    CHECK_STATUS(spc_client_get_state(c, &state), SPC_OK);
    CHECK(state == SPC_STATE_IDLE);
    CHECK_STATUS(spc_client_free(c), SPC_OK);

    /* Suspend while STARTING; start while suspended; suspend twice; resume. */
    CHECK(silent_open(&srv) == 0);
    record_init(&r);
    o = push_options(&r);
    CHECK_STATUS(spc_options_set_server_url(o, srv.url), SPC_OK);
    CHECK_STATUS(spc_client_new(o, &c, NULL), SPC_OK);
    spc_options_free(o);
    CHECK_STATUS(spc_client_start(c), SPC_OK);
    CHECK(silent_wait_request(&srv) == 0);
    CHECK_STATUS(spc_client_suspend(c), SPC_OK);
    CHECK_STATUS(spc_client_get_state(c, &state), SPC_OK);
    CHECK(state == SPC_STATE_SUSPENDED);
    CHECK_STATUS(spc_client_start(c), SPC_ERROR_INVALID_STATE);   /* start while suspended */
    CHECK_STATUS(spc_client_suspend(c), SPC_ERROR_INVALID_STATE);
    CHECK_STATUS(spc_client_push_end(c), SPC_ERROR_INVALID_STATE);
    /* The suspend abandoned the login in flight: idle at once, the context ended with its stop
    ** callback alone (no error: the application asked for it). */
    CHECK_STATUS(spc_client_wait_idle(c, 3000), SPC_OK);
    pthread_mutex_lock(&r.lock);
    CHECK(r.count == 1);
    CHECK(r.count >= 1 && strcmp(r.events[0], "stop:") == 0);
    pthread_mutex_unlock(&r.lock);
    silent_close(&srv);
    CHECK_STATUS(spc_client_resume(c), SPC_OK);
    CHECK_STATUS(spc_client_resume(c), SPC_ERROR_INVALID_STATE);
    CHECK_STATUS(spc_client_wait_idle(c, 20000), SPC_OK);
    CHECK_STATUS(spc_client_get_state(c, &state), SPC_OK);
    CHECK(state == SPC_STATE_IDLE);
    CHECK_STATUS(spc_client_free(c), SPC_OK);
}

/* "In STOPPING: the start is queued and happens after the pending stop completes." Here the
** pending stop completes because the connection broke (an error): the queued start must still
** happen, and with the server gone it fails too: error, stop, error, stop. */
static void test_queued_start_after_a_failed_context(void) {
    struct silent srv;
    CHECK(silent_open(&srv) == 0);
    struct record r;
    record_init(&r);
    spc_options *o = push_options(&r);
    CHECK_STATUS(spc_options_set_server_url(o, srv.url), SPC_OK);
    spc_client *c = NULL;
    CHECK_STATUS(spc_client_new(o, &c, NULL), SPC_OK);
    spc_options_free(o);
    CHECK_STATUS(spc_client_start(c), SPC_OK);
    CHECK(silent_wait_request(&srv) == 0);
    CHECK_STATUS(spc_client_stop(c), SPC_OK);
    CHECK_STATUS(spc_client_start(c), SPC_OK);
    silent_close(&srv);
    CHECK_STATUS(spc_client_wait_idle(c, 20000), SPC_OK);
    CHECK(event_count(&r) == 4);
    CHECK_STATUS(spc_client_free(c), SPC_OK);
}

/* spc_client_free() with a context open: it is abandoned (no stop callback), and nothing runs
** after free returns. */
static void test_free_with_an_open_context(void) {
    struct silent srv;
    CHECK(silent_open(&srv) == 0);
    struct record r;
    record_init(&r);
    spc_options *o = push_options(&r);
    CHECK_STATUS(spc_options_set_server_url(o, srv.url), SPC_OK);
    spc_client *c = NULL;
    CHECK_STATUS(spc_client_new(o, &c, NULL), SPC_OK);
    spc_options_free(o);
    CHECK_STATUS(spc_client_start(c), SPC_OK);
    CHECK(silent_wait_request(&srv) == 0);
    /* The login in flight is abandoned: free does not wait for its 10 s deadline. */
    double t0 = now_s();
    CHECK_STATUS(spc_client_free(c), SPC_OK);
    double took = now_s() - t0;
    CHECK(took < 3.0);
    sleep_ms(100);
    CHECK(event_count(&r) == 0);
    silent_close(&srv);
}

/* Many clients at once, created and freed from several threads: no crash, no deadlock. */
static void *client_thread(void *arg) {
    int *bad = (int *)arg;
    for (int i = 0; i < 5; i++) {
        /* No CHECK here: the counters belong to the main thread. */
        spc_options *o = spc_options_new();
        spc_client *c = NULL;
        if (spc_options_set_server_url(o, UNREACHABLE) != SPC_OK) (*bad)++;
        if (spc_options_set_app_id(o, "c-suite") != SPC_OK) (*bad)++;
        if (spc_options_set_audio_push(o, 8000 + 1000 * (uint32_t)i, 2) != SPC_OK) (*bad)++;
        if (i % 3 == 1 && spc_options_set_delivery(o, SPC_DELIVERY_SHARED) != SPC_OK) (*bad)++;
        if (spc_client_new(o, &c, NULL) != SPC_OK) (*bad)++;
        spc_options_free(o);
        if (spc_client_start(c) != SPC_OK) (*bad)++;
        if (i % 2 == 0 && spc_client_wait_idle(c, 20000) != SPC_OK) (*bad)++;
        if (spc_client_free(c) != SPC_OK) (*bad)++;
    }
    return NULL;
}

static void test_clients_on_many_threads(void) {
    pthread_t threads[4];
    int bad[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) CHECK(pthread_create(&threads[i], NULL, client_thread, &bad[i]) == 0);
    for (int i = 0; i < 4; i++) {
        CHECK(pthread_join(threads[i], NULL) == 0);
        CHECK(bad[i] == 0);
    }
}

/* The network thread cannot start (no file descriptor left for its epoll sets): spc_io_fd() is -1
** and spc_io_process() and spc_io_dispatch() SPC_ERROR_INTERNAL. In a child forked before anything started the loop
** (it is process-wide and lives once started): this runs first. */
static void test_io_when_the_network_thread_cannot_start(void) {
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit only_stdio;
        only_stdio.rlim_cur = only_stdio.rlim_max = 3;
        if (setrlimit(RLIMIT_NOFILE, &only_stdio) != 0) _exit(3);
        uint32_t ready = 7, ran = 7, ready2 = 7;
        int fd = spc_io_fd();
        spc_status s = spc_io_process(&ready);
        spc_status s2 = spc_io_dispatch(&ready2, &ran);
        _exit(fd == -1 ? (s == SPC_ERROR_INTERNAL && ready == 0 && s2 == SPC_ERROR_INTERNAL && ready2 == 0 && ran == 0 ? 0 : 2) : 1);
    }
    int status = -1;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void) {
    test_io_when_the_network_thread_cannot_start();
    test_version_and_status();
    test_null_handles();
    test_option_values();
    test_hands_free_without_a_server();
    test_client_new_failures();
    test_wrong_states();
    test_unreachable_server_flow(SPC_DELIVERY_THREAD);
    test_unreachable_server_flow(SPC_DELIVERY_SHARED);
    test_states_on_a_silent_server();
    test_queued_start_after_a_failed_context();
    test_free_with_an_open_context();
    test_clients_on_many_threads();
    test_wait_timeout_and_free_while_starting();
    test_poll_loop_delivery(0);
    test_poll_loop_delivery(1);
    test_idle_event(SPC_DELIVERY_THREAD);
    test_idle_event(SPC_DELIVERY_SHARED);
    test_idle_event(SPC_DELIVERY_APPLICATION);
    if (failures) {
        fprintf(stderr, "test_api: %d of %d checks FAILED\n", failures, checks);
        return 1;
    }
    printf("test_api: all %d checks passed\n", checks);
    return 0;
}
