/*
** speechclient-demo: transcribe a WAV file or a microphone with libspeechclient.
**
**   speechclient-demo [--url URL] [--app-id ID] (--file WAV | --mic [DEVICE]) [--json] ...
**
** Without --json it prints a live line of tentative text and one line per final segment.
**
** With --json it prints one JSON object per line. This format is STABLE (new keys may be
** added, none removed or renamed):
**   {"type":"segment", ...}   exactly as spc_segment_json() renders a segment update
**   {"type":"start","context_id":"..."}
**   {"type":"stop","context_id":"..."}
**   {"type":"error","code":"<spc_status_str>","status":N,"grpc_status":N,"message":"..."}
**
** Exit status: 0 on success, 1 when an error ended the run, 2 for a usage error.
*/
#define _POSIX_C_SOURCE 200809L
#include <speechclient.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct demo {
    int json;
    int tty;
    int failed;          /* an error event arrived */
    size_t live_len;     /* characters of the live tentative line on screen */
    char last[512];      /* the last tentative text shown: updates that only add an intent or
                         ** an entity do not repeat the line */
    pthread_mutex_t out; /* callbacks run on one library thread; main prints too */
};

static void print_json_string(const char *s) {
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", stdout); break;
        case '\\': fputs("\\\\", stdout); break;
        case '\n': fputs("\\n", stdout); break;
        case '\r': fputs("\\r", stdout); break;
        case '\t': fputs("\\t", stdout); break;
        default:
            if (*p < 0x20) printf("\\u%04x", *p);
            else putchar(*p);
        }
    }
    putchar('"');
}

static void clear_live_line(struct demo *d) {
    if (d->tty && d->live_len > 0) {
        printf("\r%*s\r", (int)d->live_len, "");
        d->live_len = 0;
    }
}

static void on_segment(spc_client *client, const spc_segment *segment, void *user_data) {
    struct demo *d = user_data;
    (void)client;
    pthread_mutex_lock(&d->out);
    if (d->json) {
        printf("%s\n", spc_segment_json(segment));
    } else if (spc_segment_is_final(segment)) {
        clear_live_line(d);
        d->last[0] = '\0';
        const char *intent = spc_segment_intent(segment);
        printf("%s", spc_segment_transcript(segment));
        if (intent[0]) printf("  [intent: %s]", intent);
        for (size_t i = 0; i < spc_segment_entity_count(segment); i++)
            printf("  [%s: %s]", spc_segment_entity_type(segment, i), spc_segment_entity_value(segment, i));
        printf("\n");
    } else if (strncmp(d->last, spc_segment_transcript(segment), sizeof d->last - 1) != 0) {
        const char *text = spc_segment_transcript(segment);
        strncpy(d->last, text, sizeof d->last - 1);
        if (d->tty) {
            clear_live_line(d);
            printf("... %s", text);
            d->live_len = strlen(text) + 4;
        } else {
            printf("... %s\n", text);
        }
    }
    fflush(stdout);
    pthread_mutex_unlock(&d->out);
}

static void on_error(spc_client *client, const spc_error *error, void *user_data) {
    struct demo *d = user_data;
    (void)client;
    pthread_mutex_lock(&d->out);
    d->failed = 1;
    if (d->json) {
        printf("{\"type\":\"error\",\"code\":");
        print_json_string(spc_status_str(spc_error_code(error)));
        printf(",\"status\":%d,\"grpc_status\":%d,\"message\":", (int)spc_error_code(error),
               (int)spc_error_grpc_status(error));
        print_json_string(spc_error_message(error));
        printf("}\n");
        fflush(stdout);
    } else {
        clear_live_line(d);
        fprintf(stderr, "speechclient-demo: %s: %s\n", spc_status_str(spc_error_code(error)),
                spc_error_message(error));
    }
    pthread_mutex_unlock(&d->out);
}

static void print_event(struct demo *d, const char *type, const char *context_id) {
    pthread_mutex_lock(&d->out);
    if (d->json) {
        printf("{\"type\":\"%s\",\"context_id\":", type);
        print_json_string(context_id);
        printf("}\n");
        fflush(stdout);
    }
    pthread_mutex_unlock(&d->out);
}

static void on_start(spc_client *client, const char *context_id, void *user_data) {
    (void)client;
    print_event(user_data, "start", context_id);
}

static void on_stop(spc_client *client, const char *context_id, void *user_data) {
    (void)client;
    print_event(user_data, "stop", context_id);
}

static void on_log(spc_client *client, spc_log_level level, const char *message, void *user_data) {
    (void)client;
    (void)user_data;
    static const char *names[] = {"none", "error", "warning", "info", "debug"};
    fprintf(stderr, "speechclient [%s] %s\n", (unsigned)level < 5 ? names[level] : "?", message);
}

static void usage(FILE *to) {
    fprintf(to,
        "usage: speechclient-demo [options] (--file WAV | --mic [DEVICE])\n"
        "  --url URL          server, grpc://host:port or grpc+tls://host:port\n"
        "                     (default: $SPEECHCLIENT_URL, else grpc://127.0.0.1:50051)\n"
        "  --app-id ID        application id (default speechclient-demo)\n"
        "  --project-id ID    project id (log in with project scope)\n"
        "  --language TAG     BCP-47 language (default en-US)\n"
        "  --file WAV         transcribe a WAV file, then exit\n"
        "  --mic [DEVICE]     transcribe an ALSA capture device until Ctrl-C (default device: default)\n"
        "  --ca-file PEM      trust these CAs for grpc+tls servers\n"
        "  --insecure         skip TLS verification (development only)\n"
        "  --cache-dir DIR    token and device-id cache\n"
        "  --chunk-ms N       audio message duration, 20-1000 (default 100)\n"
        "  --timeout-ms N     how long to wait for the results of a file (default 120000)\n"
        "  --json             one JSON object per line (stable format, see the source)\n"
        "  --verbose          library log lines on stderr\n"
        "  --version, --help\n");
}

/* Reports a failed setter or call and returns 1. */
static int failed(const char *what, spc_status status) {
    fprintf(stderr, "speechclient-demo: %s: %s\n", what, spc_status_str(status));
    return 1;
}

int main(int argc, char **argv) {
    const char *url = getenv("SPEECHCLIENT_URL");
    const char *app_id = "speechclient-demo", *project_id = NULL, *language = NULL;
    const char *file = NULL, *mic = NULL, *ca_file = NULL, *cache_dir = NULL;
    int insecure = 0, verbose = 0;
    long chunk_ms = 0, timeout_ms = 120000;
    struct demo d;
    memset(&d, 0, sizeof d);
    pthread_mutex_init(&d.out, NULL);
    if (!url || !url[0]) url = "grpc://127.0.0.1:50051";

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE() do { if (!next) { fprintf(stderr, "speechclient-demo: %s needs a value\n", a); usage(stderr); return 2; } i++; } while (0)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--version")) { printf("speechclient-demo %s (library %s)\n", SPC_VERSION_STRING, spc_version()); return 0; }
        else if (!strcmp(a, "--url")) { NEED_VALUE(); url = next; }
        else if (!strcmp(a, "--app-id")) { NEED_VALUE(); app_id = next; }
        else if (!strcmp(a, "--project-id")) { NEED_VALUE(); project_id = next; }
        else if (!strcmp(a, "--language")) { NEED_VALUE(); language = next; }
        else if (!strcmp(a, "--file")) { NEED_VALUE(); file = next; }
        else if (!strcmp(a, "--mic")) { if (next && next[0] != '-') { mic = next; i++; } else mic = "default"; }
        else if (!strcmp(a, "--ca-file")) { NEED_VALUE(); ca_file = next; }
        else if (!strcmp(a, "--insecure")) insecure = 1;
        else if (!strcmp(a, "--cache-dir")) { NEED_VALUE(); cache_dir = next; }
        else if (!strcmp(a, "--chunk-ms")) { NEED_VALUE(); chunk_ms = strtol(next, NULL, 10); }
        else if (!strcmp(a, "--timeout-ms")) { NEED_VALUE(); timeout_ms = strtol(next, NULL, 10); }
        else if (!strcmp(a, "--json")) d.json = 1;
        else if (!strcmp(a, "--verbose")) verbose = 1;
        else { fprintf(stderr, "speechclient-demo: unknown option %s\n", a); usage(stderr); return 2; }
#undef NEED_VALUE
    }
    if ((file == NULL) == (mic == NULL)) {
        fprintf(stderr, "speechclient-demo: give exactly one of --file WAV or --mic [DEVICE]\n");
        usage(stderr);
        return 2;
    }
    d.tty = !d.json && isatty(STDOUT_FILENO);

    /* Signals are taken by sigwait on the main thread, so block them before any library thread
    ** starts (threads inherit the mask). */
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    if (mic) pthread_sigmask(SIG_BLOCK, &signals, NULL);

    spc_options *o = spc_options_new();
    if (!o) return failed("spc_options_new", SPC_ERROR_NO_MEMORY);
    spc_status s;
    if ((s = spc_options_set_server_url(o, url)) != SPC_OK) { fprintf(stderr, "speechclient-demo: bad --url '%s'\n", url); spc_options_free(o); return 2; }
    if ((s = spc_options_set_app_id(o, app_id)) != SPC_OK) { spc_options_free(o); return failed("--app-id", s) + 1; }
    if (project_id && (s = spc_options_set_project_id(o, project_id)) != SPC_OK) { spc_options_free(o); return failed("--project-id", s) + 1; }
    if (language && (s = spc_options_set_language(o, language)) != SPC_OK) { spc_options_free(o); return failed("--language", s) + 1; }
    if (ca_file && (s = spc_options_set_ca_file(o, ca_file)) != SPC_OK) { spc_options_free(o); return failed("--ca-file", s) + 1; }
    if (cache_dir && (s = spc_options_set_cache_dir(o, cache_dir)) != SPC_OK) { spc_options_free(o); return failed("--cache-dir", s) + 1; }
    if (insecure && (s = spc_options_set_insecure_tls(o, 1)) != SPC_OK) { spc_options_free(o); return failed("--insecure", s); }
    if (chunk_ms && (s = spc_options_set_chunk_ms(o, (uint32_t)chunk_ms)) != SPC_OK) { spc_options_free(o); return failed("--chunk-ms (20-1000)", s) + 1; }
    s = file ? spc_options_set_audio_file(o, file) : spc_options_set_audio_microphone(o, mic);
    if (s != SPC_OK) { spc_options_free(o); return failed("audio source", s); }
    if (verbose) {
        spc_options_set_log_level(o, SPC_LOG_DEBUG);
        spc_options_set_log_cb(o, on_log, &d);
    }
    spc_options_set_segment_cb(o, on_segment, &d);
    spc_options_set_error_cb(o, on_error, &d);
    spc_options_set_start_cb(o, on_start, &d);
    spc_options_set_stop_cb(o, on_stop, &d);

    spc_client *client = NULL;
    spc_error *error = NULL;
    s = spc_client_new(o, &client, &error);
    spc_options_free(o);
    if (s != SPC_OK) {
        fprintf(stderr, "speechclient-demo: %s: %s\n", spc_status_str(s), spc_error_message(error));
        spc_error_free(error);
        return 1;
    }

    int status = 0;
    if ((s = spc_client_start(client)) != SPC_OK) {
        status = failed("spc_client_start", s);
    } else if (file) {
        s = spc_client_wait_idle(client, (int32_t)timeout_ms);
        if (s != SPC_OK) status = failed("waiting for the results", s);
    } else {
        /* Until Ctrl-C, or until the context ends by itself (an error stopped it). */
        struct timespec tick = {0, 200 * 1000 * 1000};
        spc_state state = SPC_STATE_STARTING;
        while (sigtimedwait(&signals, NULL, &tick) < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (spc_client_get_state(client, &state) != SPC_OK || state == SPC_STATE_IDLE) break;
        }
        if (state != SPC_STATE_IDLE) spc_client_stop(client);
        s = spc_client_wait_idle(client, (int32_t)timeout_ms);
        if (s != SPC_OK) status = failed("waiting for the last results", s);
    }
    spc_client_free(client);
    pthread_mutex_lock(&d.out);
    clear_live_line(&d);
    if (d.failed) status = 1;
    pthread_mutex_unlock(&d.out);
    pthread_mutex_destroy(&d.out);
    return status;
}
