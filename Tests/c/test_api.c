/*
** The strict C suite: every function of speechclient.h, with misuse (NULL handles, bad values,
** wrong states), against the installed library. Compiled as C11 and as C++17 with
** -Wall -Wextra -Werror -pedantic. No server is needed: the client is pointed at a closed port,
** which gives the documented network error, and at a missing or malformed WAV file.
*/
#define _POSIX_C_SOURCE 200809L
#include <speechclient.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int failures = 0;
static int checks = 0;

#define CHECK(cond)                                                                 \
    do {                                                                            \
        checks++;                                                                   \
        if (!(cond)) {                                                              \
            failures++;                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                           \
    } while (0)

#define CHECK_STATUS(expr, expected) CHECK((expr) == (expected))

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
    spc_status start_from_cb;  /* a start from inside the stop callback */
    int restart;               /* 1: call start from the first stop callback */
    spc_status error_code;
    int error_grpc;
    char error_message[256];
};

static void add_event(struct record *r, const char *what) {
    pthread_mutex_lock(&r->lock);
    if (pthread_equal(pthread_self(), r->main_thread)) r->on_main_thread = 1;
    if (r->count < 16) {
        strncpy(r->events[r->count], what, sizeof r->events[0] - 1);
        r->events[r->count][sizeof r->events[0] - 1] = '\0';
        r->count++;
    }
    pthread_mutex_unlock(&r->lock);
}

static void on_error(spc_client *c, const spc_error *e, void *ud) {
    struct record *r = (struct record *)ud;
    (void)c;
    r->error_code = spc_error_code(e);
    r->error_grpc = spc_error_grpc_status(e);
    strncpy(r->error_message, spc_error_message(e), sizeof r->error_message - 1);
    /* A copy outlives the callback. */
    spc_error *copy = spc_error_copy(e);
    if (copy == NULL || spc_error_code(copy) != spc_error_code(e) ||
        strcmp(spc_error_message(copy), spc_error_message(e)) != 0) failures++;
    spc_error_free(copy);
    add_event(r, "error");
}

static void on_stop(spc_client *c, const char *context_id, void *ud) {
    struct record *r = (struct record *)ud;
    char line[32];
    snprintf(line, sizeof line, "stop:%s", context_id);
    add_event(r, line);
    r->free_from_cb = spc_client_free(c);
    r->wait_from_cb = spc_client_wait_idle(c, 0);
    if (r->restart) {
        r->restart = 0;
        r->start_from_cb = spc_client_start(c);
    }
}

static void on_start(spc_client *c, const char *context_id, void *ud) {
    (void)c;
    (void)context_id;
    add_event((struct record *)ud, "start");
}

static void on_segment(spc_client *c, const spc_segment *s, void *ud) {
    (void)c;
    (void)s;
    add_event((struct record *)ud, "segment");
}

static void on_log(spc_client *c, spc_log_level level, const char *message, void *ud) {
    (void)c;
    (void)level;
    (void)message;
    (void)ud;
}

static void record_init(struct record *r) {
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->lock, NULL);
    r->main_thread = pthread_self();
    r->free_from_cb = SPC_OK;
    r->wait_from_cb = SPC_OK;
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
    CHECK(strcmp(spc_status_str((spc_status)999), "unknown status") == 0);
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
    CHECK_STATUS(spc_options_set_device_id(NULL, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_cache_dir(NULL, "/tmp"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_ca_file(NULL, "/tmp/ca.pem"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_insecure_tls(NULL, 1), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_audio_microphone(NULL, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_audio_file(NULL, "x.wav"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_audio_push(NULL, 16000, 1), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_chunk_ms(NULL, 100), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_prepare_on_init(NULL, 1), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_add_context_option(NULL, "k", "v"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_clear_context_options(NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_log_level(NULL, SPC_LOG_DEBUG), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_reconnect(NULL, 6, 200, 5000), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_replay_buffer_ms(NULL, 30000), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_context_limit_ms(NULL, 270000), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_segment_cb(NULL, on_segment, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_error_cb(NULL, on_error, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_start_cb(NULL, on_start, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_stop_cb(NULL, on_stop, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_log_cb(NULL, on_log, NULL), SPC_ERROR_INVALID_ARGUMENT);
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
    static const char *bad_urls[] = {"", "ftp://host", "grpc://", "grpc://host:0", "grpc://host:70000",
                                     "grpc://host/path", "grpc://user@host", "host:50051", "grpc://[::1"};
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
    CHECK_STATUS(spc_options_set_language(o, "fi-FI"), SPC_OK);
    CHECK_STATUS(spc_options_set_device_id(o, "not-a-uuid"), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_device_id(o, "12345678-1234-4234-8234-12345678"), SPC_ERROR_INVALID_ARGUMENT);
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
    CHECK_STATUS(spc_options_set_log_level(o, (spc_log_level)99), SPC_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(spc_options_set_log_level(o, SPC_LOG_NONE), SPC_OK);
    CHECK_STATUS(spc_options_set_segment_cb(o, NULL, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_error_cb(o, NULL, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_start_cb(o, NULL, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_stop_cb(o, NULL, NULL), SPC_OK);
    CHECK_STATUS(spc_options_set_log_cb(o, NULL, NULL), SPC_OK);
    spc_options_free(o);
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
    /* No server URL. */
    CHECK_STATUS(spc_client_new(o, &c, &e), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(e != NULL && strstr(spc_error_message(e), "server URL") != NULL);
    spc_error_free(e);
    /* No app id or project id; out_error may be NULL. */
    CHECK_STATUS(spc_options_set_server_url(o, UNREACHABLE), SPC_OK);
    CHECK_STATUS(spc_client_new(o, &c, NULL), SPC_ERROR_INVALID_ARGUMENT);
    CHECK(c == NULL);
    CHECK_STATUS(spc_options_set_app_id(o, "c-suite"), SPC_OK);
    /* A missing WAV file names its path. */
    CHECK_STATUS(spc_options_set_audio_file(o, "/nonexistent/speech.wav"), SPC_OK);
    CHECK_STATUS(spc_client_new(o, &c, &e), SPC_ERROR_AUDIO);
    CHECK(e != NULL && strstr(spc_error_message(e), "/nonexistent/speech.wav") != NULL);
    CHECK(spc_error_grpc_status(e) == -1);
    spc_error_free(e);
    /* A file that is not WAV. */
    char path[] = "/tmp/spc-c-suite-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, "this is not a wave file at all", 30) == 30);
    close(fd);
    CHECK_STATUS(spc_options_set_audio_file(o, path), SPC_OK);
    CHECK_STATUS(spc_client_new(o, &c, &e), SPC_ERROR_AUDIO);
    CHECK(e != NULL && strstr(spc_error_message(e), "not a RIFF file") != NULL);
    spc_error_free(e);
    unlink(path);
    /* Prepare-on-init against a closed port fails in the constructor with a network error. */
    CHECK_STATUS(spc_options_set_audio_push(o, 16000, 1), SPC_OK);
    CHECK_STATUS(spc_options_set_prepare_on_init(o, 1), SPC_OK);
    CHECK_STATUS(spc_client_new(o, &c, &e), SPC_ERROR_NETWORK);
    CHECK(c == NULL);
    spc_error_free(e);
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

static void test_unreachable_server_flow(void) {
    struct record r;
    record_init(&r);
    r.restart = 1;
    spc_options *o = push_options(&r);
    CHECK_STATUS(spc_options_set_log_level(o, SPC_LOG_DEBUG), SPC_OK);
    spc_client *c = NULL;
    spc_error *e = NULL;
    CHECK_STATUS(spc_client_new(o, &c, &e), SPC_OK);
    CHECK(e == NULL);
    spc_options_free(o);
    CHECK_STATUS(spc_client_start(c), SPC_OK);
    /* The stop callback starts again once (from inside the callback), so two error/stop pairs. */
    CHECK_STATUS(spc_client_wait_idle(c, 20000), SPC_OK);
    for (int i = 0; i < 200 && r.count < 4; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
        spc_client_wait_idle(c, 1000);
    }
    CHECK_STATUS(spc_client_wait_idle(c, 20000), SPC_OK);
    pthread_mutex_lock(&r.lock);
    CHECK(r.count == 4);
    CHECK(strcmp(r.events[0], "error") == 0);
    CHECK(strcmp(r.events[1], "stop:") == 0);
    CHECK(strcmp(r.events[2], "error") == 0);
    CHECK(strcmp(r.events[3], "stop:") == 0);
    CHECK(r.on_main_thread == 0);
    CHECK(r.error_code == SPC_ERROR_NETWORK);
    CHECK(r.error_grpc == -1);
    CHECK(strstr(r.error_message, "127.0.0.1") != NULL);
    CHECK(r.free_from_cb == SPC_ERROR_INVALID_STATE);
    CHECK(r.wait_from_cb == SPC_ERROR_INVALID_STATE);
    CHECK(r.start_from_cb == SPC_OK);
    pthread_mutex_unlock(&r.lock);
    spc_state state = SPC_STATE_STARTING;
    CHECK_STATUS(spc_client_get_state(c, &state), SPC_OK);
    CHECK(state == SPC_STATE_IDLE);
    CHECK_STATUS(spc_client_free(c), SPC_OK);
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

int main(void) {
    test_version_and_status();
    test_null_handles();
    test_option_values();
    test_client_new_failures();
    test_wrong_states();
    test_unreachable_server_flow();
    test_wait_timeout_and_free_while_starting();
    if (failures) {
        fprintf(stderr, "test_api: %d of %d checks FAILED\n", failures, checks);
        return 1;
    }
    printf("test_api: all %d checks passed\n", checks);
    return 0;
}
