/*
** poll-loop: transcribe a WAV file with SPC_DELIVERY_APPLICATION, from the program's own
** poll() loop.
**
**   poll-loop [--url URL] [--app-id ID] [--cache-dir DIR] [--timeout-ms N] [--io application|dispatch] FILE.wav
**
** With SPC_DELIVERY_APPLICATION no library thread runs the client's callbacks: events wait in
** the client until the application calls spc_client_dispatch(), which runs their callbacks on
** the calling thread, in order. spc_client_event_fd() is a descriptor that is
** readable while events wait, so the client is one more descriptor in a loop the program already
** has. Here that loop also watches stdin (input, such as pressing Enter, stops the context early;
** end of input is ignored) and keeps its own deadline in the poll() timeout. The callbacks need
** no locks: they run only inside spc_client_dispatch() (or the final spc_client_free()), on
** this thread.
**
** With --io application (SPC_IO_APPLICATION, since 0.3) the loop also reads the client's
** connection: spc_io_fd() is one more descriptor, and spc_io_process() does the network work that
** is ready, so a response wakes this thread only, not the library's network thread first. The
** number of times it found work is printed at the end ("io: N").
**
** --io dispatch (since 0.4) is the same with spc_io_dispatch() in place of spc_io_process(): the
** callbacks of the responses it reads run right there, without a round through the event fd
** (which still brings the start, the stop and errors). The number of callbacks run that way is
** printed too ("io: N callbacks: M").
**
** Final segments go to stdout, one line each; start, stop and errors to stderr.
** Exit status: 0 when the context stopped normally, 1 after an error event, a failed call or the
** deadline, 2 for a usage error.
*/
#define _POSIX_C_SOURCE 200809L
#include <speechclient.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct app {
    int stopped;     /* the stop callback ran: the context is over */
    int failed;      /* an error event arrived */
    int dispatching; /* inside spc_client_dispatch(): callbacks must run only then */
    int outside;     /* callbacks that ran elsewhere (would be a library bug) */
};

static void check_thread(struct app *app) {
    if (!app->dispatching) app->outside++;
}

static void on_segment(spc_client *c, const spc_segment *s, void *ud) {
    (void)c;
    check_thread(ud);
    if (spc_segment_is_final(s)) {
        printf("%s\n", spc_segment_transcript(s));
        fflush(stdout);
    }
}

static void on_error(spc_client *c, const spc_error *e, void *ud) {
    struct app *app = ud;
    (void)c;
    check_thread(app);
    app->failed = 1;
    fprintf(stderr, "error: %s: %s\n", spc_status_str(spc_error_code(e)), spc_error_message(e));
}

static void on_start(spc_client *c, const char *context_id, void *ud) {
    (void)c;
    check_thread(ud);
    fprintf(stderr, "start %s\n", context_id);
}

static void on_stop(spc_client *c, const char *context_id, void *ud) {
    struct app *app = ud;
    (void)c;
    check_thread(app);
    app->stopped = 1;
    fprintf(stderr, "stop %s\n", context_id);
}

static long long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int usage(void) {
    fprintf(stderr, "usage: poll-loop [--url URL] [--app-id ID] [--cache-dir DIR] [--timeout-ms N] "
                    "[--io application|dispatch] FILE.wav\n");
    return 2;
}

/* An options setter's status: a rejected value is a usage error. */
static int set_ok(spc_status status, const char *what) {
    if (status == SPC_OK) return 1;
    fprintf(stderr, "poll-loop: %s: %s\n", what, spc_status_str(status));
    return 0;
}

int main(int argc, char **argv) {
    const char *url = "grpc://127.0.0.1:50051", *app_id = "poll-loop", *cache_dir = NULL, *file = NULL;
    long timeout_ms = 60000;
    int app_io = 0, io_dispatch = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if (!strcmp(a, "--url") && has_value) url = argv[++i];
        else if (!strcmp(a, "--app-id") && has_value) app_id = argv[++i];
        else if (!strcmp(a, "--cache-dir") && has_value) cache_dir = argv[++i];
        else if (!strcmp(a, "--io") && has_value) {
            const char *v = argv[++i];
            if (strcmp(v, "application") && strcmp(v, "dispatch") && strcmp(v, "library")) return usage();
            app_io = strcmp(v, "library") != 0;
            io_dispatch = !strcmp(v, "dispatch");
        }
        else if (!strcmp(a, "--timeout-ms") && has_value) {
            char *end = NULL;
            errno = 0;
            timeout_ms = strtol(argv[++i], &end, 10);
            if (errno || *end || timeout_ms <= 0) return usage();
        } else if (a[0] == '-' || file) return usage();
        else file = a;
    }
    if (!file) return usage();

    struct app app = {0, 0, 0, 0};
    spc_options *o = spc_options_new();
    if (!o) {
        fprintf(stderr, "poll-loop: out of memory\n");
        return 1;
    }
    int ok = set_ok(spc_options_set_server_url(o, url), "--url") &&
             set_ok(spc_options_set_app_id(o, app_id), "--app-id") &&
             (!cache_dir || set_ok(spc_options_set_cache_dir(o, cache_dir), "--cache-dir")) &&
             set_ok(spc_options_set_audio_file(o, file), "file") &&
             set_ok(spc_options_set_delivery(o, SPC_DELIVERY_APPLICATION), "delivery") &&
             set_ok(spc_options_set_io(o, app_io ? SPC_IO_APPLICATION : SPC_IO_LIBRARY), "--io") &&
             set_ok(spc_options_set_segment_cb(o, on_segment, &app), "segment callback") &&
             set_ok(spc_options_set_error_cb(o, on_error, &app), "error callback") &&
             set_ok(spc_options_set_start_cb(o, on_start, &app), "start callback") &&
             set_ok(spc_options_set_stop_cb(o, on_stop, &app), "stop callback");
    if (!ok) {
        spc_options_free(o);
        return 2;
    }
    spc_client *client = NULL;
    spc_error *err = NULL;
    spc_status status = spc_client_new(o, &client, &err);
    spc_options_free(o);
    if (status != SPC_OK) {
        fprintf(stderr, "poll-loop: %s: %s\n", spc_status_str(status), err ? spc_error_message(err) : "");
        spc_error_free(err);
        return 1;
    }

    int events = spc_client_event_fd(client);
    if (events < 0 || (status = spc_client_start(client)) != SPC_OK) {
        fprintf(stderr, "poll-loop: %s\n", events < 0 ? "no event fd" : spc_status_str(status));
        spc_client_free(client);
        return 1;
    }

    /* The network descriptor: one per process, shared by all SPC_IO_APPLICATION clients. */
    int io = app_io ? spc_io_fd() : -1;
    if (app_io && io < 0) {
        fprintf(stderr, "poll-loop: no io fd\n");
        spc_client_free(client);
        return 1;
    }
    struct pollfd fds[3] = {{events, POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}, {io, POLLIN, 0}};
    long long deadline = now_ms() + timeout_ms;
    int timed_out = 0, failed_call = 0;
    unsigned long io_served = 0, io_callbacks = 0;
    while (!app.stopped) {
        long long left = deadline - now_ms();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        /* Wake at least once a second: a real program would run its timers here. */
        int ready = poll(fds, 3, left < 1000 ? (int)left : 1000);
        if (ready < 0) {
            if (errno == EINTR) continue;
            perror("poll-loop: poll");
            failed_call = 1;
            break;
        }
        if (fds[1].revents) {
            char line[256];
            ssize_t n = read(STDIN_FILENO, line, sizeof line);
            if (n < 0 && errno == EINTR) continue;
            fds[1].fd = -1; /* watched no more: poll() skips negative descriptors */
            if (n > 0) {
                /* Input: stop early. The results so far still arrive, then the stop event.
                ** INVALID_STATE: the context is stopping already (the file has ended). */
                spc_status s = spc_client_stop(client);
                if (s != SPC_OK && s != SPC_ERROR_INVALID_STATE) {
                    fprintf(stderr, "poll-loop: stop: %s\n", spc_status_str(s));
                    failed_call = 1;
                    break;
                }
                fprintf(stderr, "stopping\n");
            }
        }
        if (fds[2].revents & POLLIN) {
            /* Network work first: the events it produces make fds[0] readable (or, with
            ** spc_io_dispatch, run their callbacks here). */
            uint32_t n = 0, ran = 0;
            app.dispatching = 1;
            status = io_dispatch ? spc_io_dispatch(&n, &ran) : spc_io_process(&n);
            app.dispatching = 0;
            if (status != SPC_OK) {
                fprintf(stderr, "poll-loop: io: %s\n", spc_status_str(status));
                failed_call = 1;
                break;
            }
            io_served += n;
            io_callbacks += ran;
        }
        if (fds[0].revents & POLLIN) {
            app.dispatching = 1;
            status = spc_client_dispatch(client, 0, NULL);
            app.dispatching = 0;
            if (status != SPC_OK) {
                fprintf(stderr, "poll-loop: dispatch: %s\n", spc_status_str(status));
                failed_call = 1;
                break;
            }
        }
    }
    if (timed_out) fprintf(stderr, "poll-loop: no stop within %ld ms\n", timeout_ms);
    if (io_dispatch) fprintf(stderr, "io: %lu callbacks: %lu\n", io_served, io_callbacks);
    else if (app_io) fprintf(stderr, "io: %lu\n", io_served);

    /* Free runs the callbacks still pending, on this thread, before it returns. */
    app.dispatching = 1;
    status = spc_client_free(client);
    app.dispatching = 0;
    if (status != SPC_OK) {
        fprintf(stderr, "poll-loop: free: %s\n", spc_status_str(status));
        failed_call = 1;
    }
    if (app.outside) {
        fprintf(stderr, "poll-loop: %d callbacks ran outside spc_client_dispatch()\n", app.outside);
        failed_call = 1;
    }
    return app.failed || timed_out || failed_call ? 1 : 0;
}
