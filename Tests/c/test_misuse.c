/*
** The misuse table (issue 5): every client entry point, with valid and invalid arguments, in
** every client state, against what include/speechclient.h promises. Each cell gets a fresh
** client brought into the state, makes one call, and checks the status, the state after it and
** that the client still works (get_state, free). Compiled as C11 and C++17, strict.
**
** States: IDLE; STARTING and STOPPING on a "silent server" (a socket that listens and never
** accepts: the login never gets an answer, so the state holds for as long as the cell needs);
** STOPPING with a start queued; SUSPENDED; LISTENING on the reference server, whose URL is
** argv[1] (run.sh starts it), and LISTENING hands-free there (SPC_ACTIVATION_VOICE, no context
** open). Without argv[1] those columns fail: they are not optional.
*/
#define _POSIX_C_SOURCE 200809L
#include <speechclient.h>

#include "checks.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static void sleep_ms(int ms) {
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

enum column { IDLE, STARTING, LISTENING, STOPPING, STOPPING_QUEUED, SUSPENDED, HANDS_FREE, COLUMNS };
static const char *const column_names[COLUMNS] = {
    "IDLE", "STARTING", "LISTENING", "STOPPING", "STOPPING+queued start", "SUSPENDED", "LISTENING hands-free"};
/* The spc_state each column is in. */
static const spc_state column_state[COLUMNS] = {
    SPC_STATE_IDLE, SPC_STATE_STARTING, SPC_STATE_LISTENING, SPC_STATE_STOPPING, SPC_STATE_STOPPING,
    SPC_STATE_SUSPENDED, SPC_STATE_LISTENING};

/* ---- the silent server ---- */

static int silent_fd = -1;
static char silent_url[64];

static int silent_open(void) {
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    silent_fd = socket(AF_INET, SOCK_STREAM, 0);
    if (silent_fd < 0) return -1;
    if (bind(silent_fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(silent_fd, 64) != 0 ||
        getsockname(silent_fd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    snprintf(silent_url, sizeof silent_url, "grpc://127.0.0.1:%u", (unsigned)ntohs(a.sin_port));
    return 0;
}

/* ---- clients in a given state ---- */

static const char *reference_url = NULL;
static char cache_dir[64];

static int stops_seen = 0; /* only touched by dispatch on the main thread */
static void count_stop(spc_client *client, const char *context_id, void *user_data) {
    (void)client;
    (void)context_id;
    if (user_data) stops_seen++;
}

/* Contexts started, counted by the start callback of library-delivered clients: a test waits
** for LISTENING on it (the state is set before the callback runs), not by polling the state. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int count;
} starts = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };

static void count_start(spc_client *client, const char *context_id, void *user_data) {
    (void)client;
    (void)context_id;
    (void)user_data;
    pthread_mutex_lock(&starts.lock);
    starts.count++;
    pthread_cond_broadcast(&starts.changed);
    pthread_mutex_unlock(&starts.lock);
}

static int starts_so_far(void) {
    pthread_mutex_lock(&starts.lock);
    int n = starts.count;
    pthread_mutex_unlock(&starts.lock);
    return n;
}

/* Waits up to `ms` for a start callback after the `before`th; 1 when one came. */
static int wait_for_start(int before, int ms) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += ms / 1000;
    deadline.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&starts.lock);
    int rc = 0;
    while (starts.count <= before && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&starts.changed, &starts.lock, &deadline);
    int came = starts.count > before;
    pthread_mutex_unlock(&starts.lock);
    return came;
}

static spc_client *make_client(const char *url, spc_delivery delivery, spc_activation activation) {
    spc_options *o = spc_options_new();
    spc_client *c = NULL;
    if (!o) return NULL;
    if (delivery == SPC_DELIVERY_APPLICATION) spc_options_set_stop_cb(o, count_stop, &stops_seen);
    else spc_options_set_start_cb(o, count_start, NULL);
    if (spc_options_set_server_url(o, url) == SPC_OK && spc_options_set_app_id(o, "misuse") == SPC_OK &&
        spc_options_set_cache_dir(o, cache_dir) == SPC_OK && spc_options_set_audio_push(o, 16000, 1) == SPC_OK &&
        spc_options_set_delivery(o, delivery) == SPC_OK && spc_options_set_activation(o, activation) == SPC_OK) {
        if (spc_client_new(o, &c, NULL) != SPC_OK) c = NULL;
    }
    spc_options_free(o);
    return c;
}

static spc_state state_of(spc_client *c) {
    spc_state s = (spc_state)-1;
    if (spc_client_get_state(c, &s) != SPC_OK) return (spc_state)-1;
    return s;
}

/* Hands-free listening begins with no callback (no context opens until speech is heard): the
** state is the only sign, so it is looked at every 10 ms. */
static int wait_for_state(spc_client *c, spc_state want, int ms) {
    for (int waited = 0; waited <= ms; waited += 10) {
        if (state_of(c) == want) return 1;
        sleep_ms(10);
    }
    return 0;
}

/* A client in the column's state, or NULL (reported) when it could not be brought there. */
static spc_client *client_in(enum column col) {
    const char *url = col == LISTENING || col == HANDS_FREE ? reference_url : silent_url;
    if (!url) return NULL;
    spc_client *c = make_client(url, SPC_DELIVERY_THREAD, col == HANDS_FREE ? SPC_ACTIVATION_VOICE : SPC_ACTIVATION_MANUAL);
    if (!c) return NULL;
    int ok = 1;
    switch (col) {
    case IDLE:
        break;
    case STARTING:
        ok = spc_client_start(c) == SPC_OK;
        break;
    case LISTENING: {
        int before = starts_so_far();
        ok = spc_client_start(c) == SPC_OK && wait_for_start(before, 10000);
        break;
    }
    case HANDS_FREE:
        ok = spc_client_start(c) == SPC_OK && wait_for_state(c, SPC_STATE_LISTENING, 10000);
        break;
    case STOPPING:
        ok = spc_client_start(c) == SPC_OK && spc_client_stop(c) == SPC_OK;
        break;
    case STOPPING_QUEUED:
        ok = spc_client_start(c) == SPC_OK && spc_client_stop(c) == SPC_OK && spc_client_start(c) == SPC_OK;
        break;
    case SUSPENDED:
        ok = spc_client_suspend(c) == SPC_OK && spc_client_wait_idle(c, 5000) == SPC_OK;
        break;
    case COLUMNS:
        ok = 0;
        break;
    }
    if (!ok || state_of(c) != column_state[col]) {
        fprintf(stderr, "test_misuse: could not bring a client to %s\n", column_names[col]);
        spc_client_free(c);
        return NULL;
    }
    return c;
}

/* ---- the table ---- */

static int16_t pcm[1600];

typedef spc_status (*call_fn)(spc_client *);
static spc_status call_start(spc_client *c) { return spc_client_start(c); }
static spc_status call_stop(spc_client *c) { return spc_client_stop(c); }
static spc_status call_suspend(spc_client *c) { return spc_client_suspend(c); }
static spc_status call_resume(spc_client *c) { return spc_client_resume(c); }
static spc_status call_push(spc_client *c) { return spc_client_push_audio(c, pcm, 1600); }
static spc_status call_push_empty(spc_client *c) { return spc_client_push_audio(c, NULL, 0); }
static spc_status call_push_null(spc_client *c) { return spc_client_push_audio(c, NULL, 5); }
/* A count past what any buffer holds (a negative count cast to size_t): refused, not a crash. */
static spc_status call_push_huge(spc_client *c) { return spc_client_push_audio(c, pcm, SIZE_MAX); }
static spc_status call_push_end(spc_client *c) { return spc_client_push_end(c); }
static spc_status call_get_state_null(spc_client *c) { return spc_client_get_state(c, NULL); }
static spc_status call_wait_zero(spc_client *c) { return spc_client_wait_idle(c, 0); }
static spc_status call_dispatch(spc_client *c) {
    uint32_t n = 7;
    spc_status s = spc_client_dispatch(c, 0, &n);
    return s;
}

#define OK SPC_OK
#define BAD SPC_ERROR_INVALID_ARGUMENT
#define NO SPC_ERROR_INVALID_STATE
#define TO SPC_ERROR_TIMEOUT
/* The state after the call; SAME: unchanged; ENDING: STOPPING, or already IDLE when the server
** answered the stop before the state was read (a context with no audio ends at once). */
#define SAME ((spc_state)-2)
#define ENDING ((spc_state)-3)

struct row {
    const char *name;
    call_fn call;
    spc_status expect[COLUMNS];
    spc_state after[COLUMNS];
};

/* Columns: IDLE, STARTING, LISTENING, STOPPING, STOPPING+queued start, SUSPENDED, LISTENING
** hands-free (a stop there ends listening; with no context open the client is idle at once). */
static const struct row table[] = {
    {"start", call_start, {OK, NO, NO, OK, NO, NO, NO},
     {SPC_STATE_STARTING, SAME, SAME, SPC_STATE_STOPPING, SAME, SAME, SAME}},
    {"stop", call_stop, {NO, OK, OK, NO, OK, NO, OK},
     {SAME, SPC_STATE_STOPPING, ENDING, SAME, SPC_STATE_STOPPING, SAME, ENDING}},
    {"suspend", call_suspend, {OK, OK, OK, OK, OK, NO, OK},
     {SPC_STATE_SUSPENDED, SPC_STATE_SUSPENDED, SPC_STATE_SUSPENDED, SPC_STATE_SUSPENDED, SPC_STATE_SUSPENDED, SAME,
      SPC_STATE_SUSPENDED}},
    {"resume", call_resume, {NO, NO, NO, NO, NO, OK, NO}, {SAME, SAME, SAME, SAME, SAME, SPC_STATE_IDLE, SAME}},
    {"push_audio(1600 frames)", call_push, {OK, OK, OK, OK, OK, OK, OK}, {SAME, SAME, SAME, SAME, SAME, SAME, SAME}},
    {"push_audio(NULL, 0)", call_push_empty, {OK, OK, OK, OK, OK, OK, OK}, {SAME, SAME, SAME, SAME, SAME, SAME, SAME}},
    {"push_audio(NULL, 5)", call_push_null, {BAD, BAD, BAD, BAD, BAD, BAD, BAD}, {SAME, SAME, SAME, SAME, SAME, SAME, SAME}},
    {"push_audio(SIZE_MAX frames)", call_push_huge, {BAD, BAD, BAD, BAD, BAD, BAD, BAD}, {SAME, SAME, SAME, SAME, SAME, SAME, SAME}},
    /* With a start queued behind the pending stop it ends that start's context (since 0.11). */
    {"push_end", call_push_end, {NO, OK, OK, NO, OK, NO, OK},
     {SAME, SPC_STATE_STOPPING, ENDING, SAME, SAME, SAME, ENDING}},
    {"get_state(NULL)", call_get_state_null, {BAD, BAD, BAD, BAD, BAD, BAD, BAD}, {SAME, SAME, SAME, SAME, SAME, SAME, SAME}},
    {"wait_idle(0)", call_wait_zero, {OK, TO, TO, TO, TO, OK, TO}, {SAME, SAME, SAME, SAME, SAME, SAME, SAME}},
    {"dispatch (thread delivery)", call_dispatch, {NO, NO, NO, NO, NO, NO, NO}, {SAME, SAME, SAME, SAME, SAME, SAME, SAME}},
};

static void run_table(void) {
    for (size_t r = 0; r < sizeof table / sizeof table[0]; r++) {
        for (int col = 0; col < COLUMNS; col++) {
            spc_client *c = client_in((enum column)col);
            CHECKF(c != NULL, "%s: no client in state %s", table[r].name, column_names[col]);
            if (!c) continue;
            spc_status got = table[r].call(c);
            CHECKF(got == table[r].expect[col], "%s in %s returned %s, expected %s", table[r].name,
                   column_names[col], spc_status_str(got), spc_status_str(table[r].expect[col]));
            spc_state want = table[r].after[col] == SAME ? column_state[col] : table[r].after[col];
            spc_state now = state_of(c);
            if (want == ENDING) {
                CHECKF(now == SPC_STATE_STOPPING || now == SPC_STATE_IDLE, "%s in %s left state %d, expected STOPPING or IDLE",
                       table[r].name, column_names[col], (int)now);
            } else {
                CHECKF(now == want, "%s in %s left state %d, expected %d", table[r].name, column_names[col],
                       (int)now, (int)want);
            }
            /* Still a working client: the calls that never depend on the state. */
            CHECKF(spc_client_event_fd(c) == -1, "%s in %s: event_fd", table[r].name, column_names[col]);
            CHECKF(spc_client_free(c) == SPC_OK, "%s in %s: free", table[r].name, column_names[col]);
        }
    }
}

/* Application delivery: the same entry points on a client whose callbacks run in dispatch. */
static void run_application_delivery(void) {
    spc_client *c = make_client(silent_url, SPC_DELIVERY_APPLICATION, SPC_ACTIVATION_MANUAL);
    CHECKF(c != NULL, "application-delivery client");
    if (!c) return;
    uint32_t n = 99;
    CHECKF(spc_client_event_fd(c) >= 0, "event fd");
    CHECKF(spc_client_dispatch(c, 0, &n) == SPC_OK && n == 0, "dispatch with nothing pending ran %u", n);
    CHECKF(spc_client_dispatch(c, 1, NULL) == SPC_OK, "dispatch with NULL count");
    CHECKF(spc_client_start(c) == SPC_OK, "start");
    CHECKF(spc_client_suspend(c) == SPC_OK, "suspend while starting");
    /* The abandoned context's stop is pending until dispatched; wait_idle does not wait for it. */
    CHECKF(spc_client_wait_idle(c, 5000) == SPC_OK, "wait_idle after suspend");
    stops_seen = 0;
    /* As an application's loop would: poll the event fd, dispatch when it is readable. */
    struct pollfd p = { spc_client_event_fd(c), POLLIN, 0 };
    for (int i = 0; i < 100 && stops_seen == 0; i++) {
        if (poll(&p, 1, 1000) < 0) break;
        if (spc_client_dispatch(c, 0, &n) != SPC_OK) break;
    }
    CHECKF(stops_seen == 1, "the stop of the abandoned context was dispatched once (%d)", stops_seen);
    CHECKF(spc_client_free(c) == SPC_OK, "free");
}

int main(int argc, char **argv) {
    reference_url = argc > 1 ? argv[1] : NULL;
    if (!reference_url) fprintf(stderr, "test_misuse: no reference server URL: the LISTENING column fails\n");
    snprintf(cache_dir, sizeof cache_dir, "/tmp/spc-misuse-%ld", (long)getpid());
    if (silent_open() != 0) {
        fprintf(stderr, "test_misuse: cannot open a loopback socket\n");
        return 1;
    }
    for (size_t i = 0; i < sizeof pcm / sizeof pcm[0]; i++) pcm[i] = (int16_t)((i * 37) % 2000 - 1000);
    run_table();
    run_application_delivery();
    close(silent_fd);
    if (failures) {
        fprintf(stderr, "test_misuse: %d of %d checks FAILED\n", failures, checks);
        return 1;
    }
    printf("test_misuse: all %d checks passed (%d cells)\n", checks,
           (int)(sizeof table / sizeof table[0]) * COLUMNS);
    return 0;
}
