/*
** speechclient-demo: transcribe a WAV file or a microphone with libspeechclient.
**
**   speechclient-demo [--url URL] [--app-id ID] (--file WAV | --mic [DEVICE]) [--json] ...
**
** File mode: start, wait until idle (the library stops the context at the end of the file), free,
** exit. Microphone mode: start, run until SIGINT or SIGTERM (taken with sigtimedwait on the main
** thread; no work in a signal handler), stop, wait until idle, exit. A second signal while waiting
** for the last results gives up on them.
**
** Without --json: a live line of tentative text ("... words", rewritten in place with \r on a
** terminal, one plain line per change otherwise) and one line per final segment on stdout;
** errors on stderr.
**
** With --json: one JSON object per line on stdout, flushed after each line. This format is
** STABLE: the keys and values below keep their names and meaning; new keys may be added to an
** object and new "type" values may appear, so readers should ignore what they do not know.
**
**   {"type":"segment",...}   a segment update, exactly as spc_segment_json() renders it:
**       {"type":"segment","context_id":"...","segment_id":0,"final":true,"transcript":"...",
**        "words":[{"text":"...","index":0,"start_ms":0,"end_ms":0,"final":true}],
**        "intent":{"intent":"...","final":true} or null,
**        "entities":[{"type":"...","value":"...","start":0,"end":1,"final":true}]}
**   {"type":"start","context_id":"..."}   the server opened the context
**   {"type":"stop","context_id":"..."}    the context is closed ("" if it never opened)
**   {"type":"error","code":"<spc_status_str>","status":N,"grpc_status":N,"message":"..."}
**   {"type":"listen","event":"speech"|"silence"|"activate"|"deactivate"|"timeout","position_ms":N}
**       hands-free events (--hands-free, --wakeword): position_ms counts audio since the start;
**       an activate event has "name": the wake word heard (--wakeword-url) or the phrase
**   (a segment and its words have "confidence" where the server gives one: Riva)
**   {"type":"level","dbfs":-23.5,"position_ms":N}    the level of each chunk (--levels)
**   {"type":"state","state":"connecting"|"ready"|"reconnecting"|"unavailable"|"suspended"}
**       a connection state change; "attempt" and "delay_ms" with reconnecting, "message" with
**       the reason when there is one (unavailable)
**       code: spc_status_str() of the status ("network error", "audio error", ...);
**       status: the spc_status number; grpc_status: the gRPC status (the server's, or 14 for no connection) or -1;
**       message: what failed, naming the file, device or host. Printed for error events and for
**       a failed spc_client_new() (for example a missing WAV file), which then ends the run.
** Strings are JSON-escaped (quote, backslash and control characters); text is UTF-8.
** Usage errors and failed calls other than spc_client_new() go to stderr only.
**
** Exit status: 0 on success; 1 when an error event or a failed call ended the run (also when the
** results did not arrive within --timeout-ms); 2 for a usage error (unknown option, missing or
** malformed value, no source or two sources, an option value the library rejects).
**
** The library's warnings and errors go to stderr (a WAV file cut short, segment words the server
** never confirmed, ...); --verbose passes every log line (debug level).
**
** Hands-free (--hands-free, or --wakeword PHRASE): the library's voice activity detector opens a
** context when speech begins and stops it after a pause, as often as the user speaks, until the
** end of the file or Ctrl-C; with --wakeword only what follows the phrase in a context is shown.
** With --wakeword-url URL, a Wyoming wake-word service hears the audio and --wakeword names its
** wake word (a model name or prefix, e.g. hey_jarvis; none: any): each detection opens a context
** (a file is then read at real time).
*/
#define _POSIX_C_SOURCE 200809L
#include <speechclient.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct demo {
    int json;
    int tty;
    int failed;          /* an error event arrived */
    size_t live_len;     /* characters of the live tentative line on screen */
    char last[512];      /* the last tentative text shown: updates that only add an intent or
                         ** an entity do not repeat the line */
    pthread_mutex_t out; /* callbacks run on one library thread; main prints too */
    long long progress_ms; /* when the last result or event arrived (monotonic), under out */
};

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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
            if (*p < 0x20 || *p == 0x7f) printf("\\u%04x", *p);
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
    d->progress_ms = now_ms();
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

/* One error, as a JSON line (--json) or on stderr. Called with d->out held. */
static void print_error(struct demo *d, const spc_error *error) {
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
        fflush(stdout);
        fprintf(stderr, "speechclient-demo: %s: %s\n", spc_status_str(spc_error_code(error)),
                spc_error_message(error));
    }
}

static void on_error(spc_client *client, const spc_error *error, void *user_data) {
    struct demo *d = user_data;
    (void)client;
    pthread_mutex_lock(&d->out);
    d->failed = 1;
    print_error(d, error);
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

/* Connection state changes: a JSON line, or a short stderr line (not READY after CONNECTING,
** which every run has: only what a user watching the terminal needs). */
static void on_state(spc_client *client, spc_connection_state state, int32_t attempt, int32_t delay_ms,
                     const spc_error *reason, void *user_data) {
    struct demo *d = user_data;
    static const char *names[] = {"connecting", "ready", "reconnecting", "unavailable", "suspended"};
    const char *name = (unsigned)state < 5 ? names[state] : "unknown";
    (void)client;
    pthread_mutex_lock(&d->out);
    if (d->json) {
        printf("{\"type\":\"state\",\"state\":\"%s\"", name);
        if (state == SPC_CONNECTION_RECONNECTING) printf(",\"attempt\":%d,\"delay_ms\":%d", (int)attempt, (int)delay_ms);
        if (reason) {
            printf(",\"message\":");
            print_json_string(spc_error_message(reason));
        }
        printf("}\n");
        fflush(stdout);
    } else if (state == SPC_CONNECTION_RECONNECTING || state == SPC_CONNECTION_UNAVAILABLE) {
        clear_live_line(d);
        fflush(stdout);
        if (state == SPC_CONNECTION_RECONNECTING)
            fprintf(stderr, "speechclient-demo: connection lost; reconnecting in %d ms (attempt %d)\n", (int)delay_ms, (int)attempt);
        else
            fprintf(stderr, "speechclient-demo: server unavailable%s%s\n", reason ? ": " : "",
                    reason ? spc_error_message(reason) : "");
    }
    pthread_mutex_unlock(&d->out);
}

static void on_listen(spc_client *client, spc_listen_event event, int64_t position_ms, void *user_data) {
    struct demo *d = user_data;
    static const char *names[] = {"speech", "silence", "activate", "deactivate", "timeout"};
    const char *name = (unsigned)event < 5 ? names[event] : "unknown";
    const char *heard = spc_listen_name(client);  /* what an activation heard (0.8), or NULL */
    pthread_mutex_lock(&d->out);
    if (d->json) {
        printf("{\"type\":\"listen\",\"event\":\"%s\",\"position_ms\":%lld", name, (long long)position_ms);
        if (heard) {
            printf(",\"name\":");
            print_json_string(heard);
        }
        printf("}\n");
        fflush(stdout);
    } else if (event == SPC_LISTEN_TIMEOUT) {
        clear_live_line(d);
        fflush(stdout);
        fprintf(stderr, "speechclient-demo: the utterance reached the maximum length at %.1f s\n", (double)position_ms / 1000);
    }
    pthread_mutex_unlock(&d->out);
}

static void on_level(spc_client *client, float level_dbfs, int64_t position_ms, void *user_data) {
    struct demo *d = user_data;
    (void)client;
    pthread_mutex_lock(&d->out);
    if (d->json) {
        printf("{\"type\":\"level\",\"dbfs\":%.1f,\"position_ms\":%lld}\n", (double)level_dbfs, (long long)position_ms);
        fflush(stdout);
    }
    pthread_mutex_unlock(&d->out);
}

static void on_log(spc_client *client, spc_log_level level, const char *message, void *user_data) {
    struct demo *d = user_data;
    static const char *names[] = {"none", "error", "warning", "info", "debug"};
    (void)client;
    /* A log line must not land in the middle of the live line on a terminal. */
    pthread_mutex_lock(&d->out);
    clear_live_line(d);
    fflush(stdout);
    fprintf(stderr, "speechclient [%s] %s\n", (unsigned)level < 5 ? names[level] : "?", message);
    pthread_mutex_unlock(&d->out);
}

static void usage(FILE *to) {
    fprintf(to,
        "usage: speechclient-demo [options] (--file WAV | --mic [DEVICE] | --list-devices)\n"
        "  --url URL          server: grpc://host:port or grpc+tls://host:port (Speechly),\n"
        "                     wyoming://host:port or wyoming+unix:///path (Wyoming),\n"
        "                     riva://host:port or rivas://host:port (NVIDIA Riva)\n"
        "                     (default: $SPEECHCLIENT_URL, else grpc://127.0.0.1:50051)\n"
        "  --app-id ID        application id, Speechly only (default speechclient-demo)\n"
        "  --project-id ID    project id (log in with project scope)\n"
        "  --language TAG     BCP-47 language (default en-US)\n"
        "  --model NAME       the model to ask a Wyoming or Riva server for (default: its own)\n"
        "  --header NAME=VALUE  a request header for a Speechly or Riva server (repeatable)\n"
        "  --file WAV         transcribe a WAV file, then exit; '-': standard input (a WAV stream,\n"
        "                     or raw PCM with --raw), until its end or Ctrl-C\n"
        "  --raw RATE[,CHANNELS]  with --file -: raw signed 16-bit little-endian PCM, no header\n"
        "                     (8000-192000 Hz, 1-8 channels, default 1)\n"
        "  --mic [DEVICE]     transcribe an ALSA capture device until Ctrl-C (default device: default)\n"
        "  --ca-file PEM      trust these CAs for grpc+tls servers\n"
        "  --insecure         skip TLS verification (development only)\n"
        "  --cache-dir DIR    token and device-id cache\n"
        "  --chunk-ms N       audio message duration, 20-1000 (default 100)\n"
        "  --timeout-ms N     a file: give up when no new result came for this long (default 120000;\n"
        "                     -1: no limit); the microphone: how long to wait for the last results\n"
        "  --hands-free       listen: speech opens a context, a pause closes it (until the end or Ctrl-C)\n"
        "  --wakeword PHRASE  as --hands-free, showing only contexts where PHRASE was heard\n"
        "  --wakeword-url URL a Wyoming wake-word service opens the contexts (--wakeword: its wake word)\n"
        "  --levels           with --json: the level of each chunk in dBFS\n"
        "  --reconnect N[,INITIAL_MS,MAX_MS]\n"
        "                     reconnect attempts without progress, 0-100 or 'unlimited', and the\n"
        "                     backoff (default 6,200,5000)\n"
        "  --replay-buffer-ms N  audio kept for replay after a reconnection, 1000-600000 (default 30000)\n"
        "  --context-limit-ms N  a server context (and stream) moves on at a pause after this,\n"
        "                     1000-3600000 (default 270000)\n"
        "  --stream-budget BYTES  request bytes per HTTP/2 stream, 65536-1073741824 (default 900000)\n"
        "  --drain-timeout-ms N  after GOAWAY, move a context to a new connection within this,\n"
        "                     100-600000 (default 10000)\n"
        "  --keepalive-ms INTERVAL[,TIMEOUT]  HTTP/2 PING after INTERVAL ms without traffic (0: off),\n"
        "                     dead after TIMEOUT ms without an answer (default 30000,10000)\n"
        "  --timeouts-ms CONNECT[,LOGIN[,START]]  the server must answer a connection, a login and\n"
        "                     a context's start within these, 100-600000 each (default 5000,10000,10000)\n"
        "  --json             one JSON object per line (stable format, see the source)\n"
        "  --verbose          every library log line on stderr (warnings are always there)\n"
        "  --list-devices     list the ALSA capture devices (names for --mic), then exit\n"
        "  --version, --help\n");
}

/* Reports a failed call and returns 1 (the exit status for it). */
static int failed(const char *what, spc_status status) {
    fprintf(stderr, "speechclient-demo: %s: %s\n", what, spc_status_str(status));
    return 1;
}

/* Parses a whole decimal number in [min, max] into *out; 0 when it is not one. */
static int parse_number(const char *text, long min, long max, long *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min || v > max) return 0;
    *out = v;
    return 1;
}

/* --list-devices: what spc_audio_devices() lists, as `arecord -L` shows it (the name, then
** the description indented), or one JSON object per device. */
static int print_devices(int json) {
    spc_devices *devices = NULL;
    spc_status s = spc_audio_devices(&devices);
    if (s != SPC_OK) {
        fprintf(stderr, "speechclient-demo: cannot list the capture devices: %s (is ALSA, the libasound2 package, installed?)\n", spc_status_str(s));
        return 1;
    }
    for (size_t i = 0; i < spc_devices_count(devices); i++) {
        const char *name = spc_devices_name(devices, i), *desc = spc_devices_description(devices, i);
        if (json) {
            printf("{\"type\":\"device\",\"name\":");
            print_json_string(name);
            printf(",\"description\":");
            print_json_string(desc);
            printf("}\n");
        } else {
            printf("%s\n    ", name);
            for (const char *p = desc; *p; p++) {
                putchar(*p);
                if (*p == '\n') fputs("    ", stdout);
            }
            putchar('\n');
        }
    }
    spc_devices_free(devices);
    return 0;
}

static int usage_error(const char *message, const char *value) {
    fprintf(stderr, "speechclient-demo: %s%s%s\n", message, value ? " " : "", value ? value : "");
    usage(stderr);
    return 2;
}

/* Applies the options; 0 on success, otherwise the exit status (2: a value the library rejects,
** which is a usage error; 1: an unexpected failure). */
struct settings {
    const char *url, *app_id, *project_id, *language, *model, *file, *mic, *ca_file, *cache_dir;
    const char *wakeword;
    const char *wakeword_url;
    const char *headers[32];  /* --header NAME=VALUE, as given */
    int header_count;
    int insecure, verbose, hands_free, levels;
    long chunk_ms;
    /* -1: not given (the library's default). */
    long reconnect_attempts, reconnect_initial_ms, reconnect_max_ms;
    long replay_buffer_ms, context_limit_ms, stream_budget, drain_timeout_ms;
    long keepalive_ms, keepalive_timeout_ms;
    long timeouts_ms[3];
    long raw[2];  /* --raw RATE,CHANNELS; 0: a WAV stream */
};

/* Parses "A" or "A,B" or "A,B,C" (whole numbers; the first in [min, max], or 'unlimited', read
** as -2, when allow_unlimited) into out[0..count-1]; returns how many were given, 0 when bad. */
static int parse_list(const char *text, long min, long max, int allow_unlimited, long *out, int count) {
    char part[32];
    int n = 0;
    const char *p = text;
    while (n < count) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0 || len >= sizeof part) return 0;
        memcpy(part, p, len);
        part[len] = '\0';
        if (n == 0 && allow_unlimited && !strcmp(part, "unlimited")) out[n] = -2;
        else if (!parse_number(part, n == 0 ? min : 0, n == 0 ? max : INT32_MAX, &out[n])) return 0;
        n++;
        if (!comma) return n;
        p = comma + 1;
    }
    return 0;  /* more values than expected */
}

static int configure(spc_options *o, const struct settings *a, struct demo *d) {
    struct { spc_status status; const char *what; const char *value; } checks[] = {
        {spc_options_set_server_url(o, a->url), "bad --url", a->url},
        {spc_options_set_app_id(o, a->app_id), "bad --app-id", a->app_id},
        {a->project_id ? spc_options_set_project_id(o, a->project_id) : SPC_OK, "bad --project-id", a->project_id},
        {a->language ? spc_options_set_language(o, a->language) : SPC_OK, "bad --language", a->language},
        {a->model ? spc_options_set_model(o, a->model) : SPC_OK, "bad --model", a->model},
        {a->ca_file ? spc_options_set_ca_file(o, a->ca_file) : SPC_OK, "bad --ca-file", a->ca_file},
        {a->cache_dir ? spc_options_set_cache_dir(o, a->cache_dir) : SPC_OK, "bad --cache-dir", a->cache_dir},
        {a->chunk_ms ? spc_options_set_chunk_ms(o, (uint32_t)a->chunk_ms) : SPC_OK, "bad --chunk-ms (20-1000)", NULL},
        {!a->file ? spc_options_set_audio_microphone(o, a->mic)
         : strcmp(a->file, "-") ? spc_options_set_audio_file(o, a->file)
         : spc_options_set_audio_fd(o, STDIN_FILENO, (uint32_t)a->raw[0], (uint32_t)a->raw[1]),
         a->file ? "bad --file" : "bad --mic device", a->file ? a->file : a->mic},
    };
    /* Every setter above has run (in no particular order); the first rejected one is reported. */
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++)
        if (checks[i].status != SPC_OK) return usage_error(checks[i].what, checks[i].value);
    for (int i = 0; i < a->header_count; i++) {
        char name[257];
        const char *eq = strchr(a->headers[i], '=');
        size_t len = eq ? (size_t)(eq - a->headers[i]) : 0;
        if (!eq || len == 0 || len >= sizeof name) return usage_error("bad --header (NAME=VALUE)", a->headers[i]);
        memcpy(name, a->headers[i], len);
        name[len] = '\0';
        if (spc_options_add_header(o, name, eq + 1) != SPC_OK) return usage_error("bad --header", a->headers[i]);
    }
    spc_status s = SPC_OK;
    if (a->insecure && (s = spc_options_set_insecure_tls(o, 1)) != SPC_OK) return failed("spc_options_set_insecure_tls", s);
    /* Warnings always: a newcomer must not need --verbose to learn that words were lost. */
    if ((s = spc_options_set_log_cb(o, on_log, d)) != SPC_OK) return failed("spc_options_set_log_cb", s);
    if (a->verbose) {
        if ((s = spc_options_set_log_level(o, SPC_LOG_DEBUG)) != SPC_OK) return failed("spc_options_set_log_level", s);
    }
    if ((s = spc_options_set_segment_cb(o, on_segment, d)) != SPC_OK) return failed("spc_options_set_segment_cb", s);
    if ((s = spc_options_set_error_cb(o, on_error, d)) != SPC_OK) return failed("spc_options_set_error_cb", s);
    if ((s = spc_options_set_start_cb(o, on_start, d)) != SPC_OK) return failed("spc_options_set_start_cb", s);
    if ((s = spc_options_set_stop_cb(o, on_stop, d)) != SPC_OK) return failed("spc_options_set_stop_cb", s);
    if ((s = spc_options_set_state_cb(o, on_state, d)) != SPC_OK) return failed("spc_options_set_state_cb", s);
    if (a->wakeword_url) {
        if (spc_options_set_wakeword_url(o, a->wakeword_url, a->wakeword) != SPC_OK) {
            return usage_error("bad --wakeword-url or --wakeword (a wyoming:// URL; a wake word name)", a->wakeword_url);
        }
        if ((s = spc_options_set_activation(o, SPC_ACTIVATION_WAKEWORD)) != SPC_OK) return failed("spc_options_set_activation", s);
    } else if (a->wakeword) {
        if (spc_options_set_wakeword(o, a->wakeword) != SPC_OK) return usage_error("bad --wakeword (1-8 words)", a->wakeword);
        if ((s = spc_options_set_activation(o, SPC_ACTIVATION_WAKEWORD)) != SPC_OK) return failed("spc_options_set_activation", s);
    } else if (a->hands_free && (s = spc_options_set_activation(o, SPC_ACTIVATION_VOICE)) != SPC_OK) {
        return failed("spc_options_set_activation", s);
    }
    if (a->reconnect_attempts != -1 &&
        spc_options_set_reconnect(o, a->reconnect_attempts == -2 ? SPC_RECONNECT_UNLIMITED : (uint32_t)a->reconnect_attempts,
                                  (uint32_t)a->reconnect_initial_ms, (uint32_t)a->reconnect_max_ms) != SPC_OK)
        return usage_error("bad --reconnect (attempts 0-100 or unlimited, initial 1-60000 ms, max initial-600000 ms)", NULL);
    if (a->replay_buffer_ms >= 0 && spc_options_set_replay_buffer_ms(o, (uint32_t)a->replay_buffer_ms) != SPC_OK)
        return usage_error("bad --replay-buffer-ms (1000-600000)", NULL);
    if (a->context_limit_ms >= 0 && spc_options_set_context_limit_ms(o, (uint32_t)a->context_limit_ms) != SPC_OK)
        return usage_error("bad --context-limit-ms (1000-3600000)", NULL);
    if (a->stream_budget >= 0 && spc_options_set_stream_budget(o, (uint32_t)a->stream_budget) != SPC_OK)
        return usage_error("bad --stream-budget (65536-1073741824 bytes)", NULL);
    if (a->drain_timeout_ms >= 0 && spc_options_set_drain_timeout_ms(o, (uint32_t)a->drain_timeout_ms) != SPC_OK)
        return usage_error("bad --drain-timeout-ms (100-600000)", NULL);
    if (a->keepalive_ms >= 0 && spc_options_set_keepalive(o, (uint32_t)a->keepalive_ms, (uint32_t)a->keepalive_timeout_ms) != SPC_OK)
        return usage_error("bad --keepalive-ms (interval 0 or 1000-3600000, timeout 100-600000)", NULL);
    if (a->timeouts_ms[0] >= 0 && spc_options_set_timeouts(o, (uint32_t)a->timeouts_ms[0], (uint32_t)a->timeouts_ms[1],
                                                           (uint32_t)a->timeouts_ms[2]) != SPC_OK)
        return usage_error("bad --timeouts-ms (100-600000 each)", spc_options_last_error(o));
    if ((s = spc_options_set_listen_cb(o, on_listen, d)) != SPC_OK) return failed("spc_options_set_listen_cb", s);
    if (a->levels && (s = spc_options_set_level_cb(o, on_level, d)) != SPC_OK) return failed("spc_options_set_level_cb", s);
    return 0;
}

/* Microphone mode: until SIGINT/SIGTERM or until the context ends by itself (an error stopped
** it), then stop and wait for the last results. Returns the exit status of this part. */
static int run_microphone(spc_client *client, const sigset_t *signals, long timeout_ms) {
    struct timespec tick = {0, 100 * 1000 * 1000};
    spc_state state = SPC_STATE_STARTING;
    spc_status s;
    for (;;) {
        if (sigtimedwait(signals, NULL, &tick) >= 0) break;          /* a signal: stop */
        if (errno != EAGAIN && errno != EINTR) return failed("sigtimedwait", SPC_ERROR_INTERNAL);
        if ((s = spc_client_get_state(client, &state)) != SPC_OK) return failed("spc_client_get_state", s);
        if (state == SPC_STATE_IDLE) return 0;                        /* ended by itself */
    }
    s = spc_client_stop(client);
    /* INVALID_STATE: the context ended on its own meanwhile (or is already stopping). */
    if (s != SPC_OK && s != SPC_ERROR_INVALID_STATE) return failed("spc_client_stop", s);
    /* Wait for the last results in slices, so that a second signal can cut the wait short. */
    long waited = 0;
    for (;;) {
        s = spc_client_wait_idle(client, 100);
        if (s == SPC_OK) return 0;
        if (s != SPC_ERROR_TIMEOUT) return failed("spc_client_wait_idle", s);
        waited += 100;
        if (timeout_ms >= 0 && waited >= timeout_ms) return failed("waiting for the last results", s);
        struct timespec none = {0, 0};
        if (sigtimedwait(signals, NULL, &none) >= 0) {
            fprintf(stderr, "speechclient-demo: interrupted again: not waiting for the last results\n");
            return 1;
        }
    }
}

int main(int argc, char **argv) {
    struct settings a;
    memset(&a, 0, sizeof a);
    a.url = getenv("SPEECHCLIENT_URL");
    if (!a.url || !a.url[0]) a.url = "grpc://127.0.0.1:50051";
    a.app_id = "speechclient-demo";
    a.reconnect_attempts = a.replay_buffer_ms = a.context_limit_ms = a.stream_budget = -1;
    a.drain_timeout_ms = a.keepalive_ms = -1;
    a.timeouts_ms[0] = -1;
    long timeout_ms = 120000;
    int list_devices = 0;
    struct demo d;
    memset(&d, 0, sizeof d);

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
#define VALUE() do { if (!next) return usage_error("a value is needed after", arg); i++; } while (0)
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(arg, "--version")) {
            printf("speechclient-demo %s (library %s)\n", SPC_VERSION_STRING, spc_version());
            return 0;
        }
        else if (!strcmp(arg, "--list-devices")) list_devices = 1;
        else if (!strcmp(arg, "--url")) { VALUE(); a.url = next; }
        else if (!strcmp(arg, "--app-id")) { VALUE(); a.app_id = next; }
        else if (!strcmp(arg, "--project-id")) { VALUE(); a.project_id = next; }
        else if (!strcmp(arg, "--language")) { VALUE(); a.language = next; }
        else if (!strcmp(arg, "--model")) { VALUE(); a.model = next; }
        else if (!strcmp(arg, "--header")) {
            VALUE();
            if (a.header_count == (int)(sizeof a.headers / sizeof a.headers[0])) return usage_error("too many --header", NULL);
            a.headers[a.header_count++] = next;
        }
        else if (!strcmp(arg, "--file")) { VALUE(); if (a.file) return usage_error("--file given twice", NULL); a.file = next; }
        else if (!strcmp(arg, "--raw")) {
            VALUE();
            a.raw[1] = 1;
            if (parse_list(next, 8000, 192000, 0, a.raw, 2) == 0 || a.raw[1] < 1 || a.raw[1] > 8)
                return usage_error("--raw needs RATE[,CHANNELS] (8000-192000 Hz, 1-8 channels), not", next);
        }
        else if (!strcmp(arg, "--mic")) {
            if (a.mic) return usage_error("--mic given twice", NULL);
            if (next && next[0] != '-') { a.mic = next; i++; } else a.mic = "default";
        }
        else if (!strcmp(arg, "--ca-file")) { VALUE(); a.ca_file = next; }
        else if (!strcmp(arg, "--insecure")) a.insecure = 1;
        else if (!strcmp(arg, "--cache-dir")) { VALUE(); a.cache_dir = next; }
        else if (!strcmp(arg, "--chunk-ms")) {
            VALUE();
            if (!parse_number(next, 20, 1000, &a.chunk_ms)) return usage_error("--chunk-ms needs a number from 20 to 1000, not", next);
        }
        else if (!strcmp(arg, "--timeout-ms")) {
            VALUE();
            if (!parse_number(next, -1, INT32_MAX, &timeout_ms)) return usage_error("--timeout-ms needs a number of milliseconds (-1: no limit), not", next);
        }
        else if (!strcmp(arg, "--hands-free")) a.hands_free = 1;
        else if (!strcmp(arg, "--wakeword")) { VALUE(); a.wakeword = next; }
        else if (!strcmp(arg, "--wakeword-url")) { VALUE(); a.wakeword_url = next; }
        else if (!strcmp(arg, "--levels")) a.levels = 1;
        else if (!strcmp(arg, "--reconnect")) {
            VALUE();
            long v[3] = {0, 200, 5000};
            int n = parse_list(next, 0, 100, 1, v, 3);
            if (n == 0 || n == 2) return usage_error("--reconnect needs ATTEMPTS (0-100 or unlimited) or ATTEMPTS,INITIAL_MS,MAX_MS, not", next);
            a.reconnect_attempts = v[0];
            a.reconnect_initial_ms = v[1];
            a.reconnect_max_ms = v[2];
        }
        else if (!strcmp(arg, "--replay-buffer-ms")) {
            VALUE();
            if (!parse_number(next, 0, INT32_MAX, &a.replay_buffer_ms)) return usage_error("--replay-buffer-ms needs a number of milliseconds, not", next);
        }
        else if (!strcmp(arg, "--context-limit-ms")) {
            VALUE();
            if (!parse_number(next, 0, INT32_MAX, &a.context_limit_ms)) return usage_error("--context-limit-ms needs a number of milliseconds, not", next);
        }
        else if (!strcmp(arg, "--stream-budget")) {
            VALUE();
            if (!parse_number(next, 0, INT32_MAX, &a.stream_budget)) return usage_error("--stream-budget needs a number of bytes, not", next);
        }
        else if (!strcmp(arg, "--drain-timeout-ms")) {
            VALUE();
            if (!parse_number(next, 0, INT32_MAX, &a.drain_timeout_ms)) return usage_error("--drain-timeout-ms needs a number of milliseconds, not", next);
        }
        else if (!strcmp(arg, "--keepalive-ms")) {
            VALUE();
            long v[2] = {0, 10000};
            if (parse_list(next, 0, INT32_MAX, 0, v, 2) == 0) return usage_error("--keepalive-ms needs INTERVAL or INTERVAL,TIMEOUT in milliseconds, not", next);
            a.keepalive_ms = v[0];
            a.keepalive_timeout_ms = v[1];
        }
        else if (!strcmp(arg, "--timeouts-ms")) {
            VALUE();
            a.timeouts_ms[0] = 5000, a.timeouts_ms[1] = 10000, a.timeouts_ms[2] = 10000;
            if (parse_list(next, 0, INT32_MAX, 0, a.timeouts_ms, 3) == 0) return usage_error("--timeouts-ms needs CONNECT[,LOGIN[,START]] in milliseconds, not", next);
        }
        else if (!strcmp(arg, "--json")) d.json = 1;
        else if (!strcmp(arg, "--verbose")) a.verbose = 1;
        else return usage_error("unknown option", arg);
#undef VALUE
    }
    if (list_devices) return print_devices(d.json);
    if ((a.file == NULL) == (a.mic == NULL)) return usage_error("give exactly one of --file WAV or --mic [DEVICE]", NULL);
    /* Standard input is live audio as far as the demo knows: it runs until its end or Ctrl-C. */
    int live = a.mic != NULL || !strcmp(a.file, "-");
    if (a.raw[0] && !(a.file && !strcmp(a.file, "-"))) return usage_error("--raw goes with --file - (standard input)", NULL);
    d.tty = !d.json && isatty(STDOUT_FILENO);
    if (pthread_mutex_init(&d.out, NULL) != 0) return failed("pthread_mutex_init", SPC_ERROR_NO_MEMORY);

    /* SIGINT and SIGTERM are taken with sigtimedwait() on this thread: block them before any
    ** library thread starts (threads inherit the mask), so no thread is interrupted by them. */
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    if (live && pthread_sigmask(SIG_BLOCK, &signals, NULL) != 0) return failed("pthread_sigmask", SPC_ERROR_INTERNAL);

    spc_options *o = spc_options_new();
    if (!o) return failed("spc_options_new", SPC_ERROR_NO_MEMORY);
    int status = configure(o, &a, &d);
    if (status != 0) {
        spc_options_free(o);
        return status;
    }
    spc_client *client = NULL;
    spc_error *error = NULL;
    spc_status s = spc_client_new(o, &client, &error);
    spc_options_free(o);
    if (s != SPC_OK) {
        pthread_mutex_lock(&d.out);
        if (error) print_error(&d, error);
        else failed("spc_client_new", s);
        if (d.json) fprintf(stderr, "speechclient-demo: %s: %s\n", spc_status_str(s), spc_error_message(error));
        pthread_mutex_unlock(&d.out);
        spc_error_free(error);
        return 1;
    }

    if ((s = spc_client_start(client)) != SPC_OK) {
        status = failed("spc_client_start", s);
    } else if (!live) {
        /* A wait for progress, not a fixed total a long file could not meet: it gives up only
        ** when no result came for timeout_ms. spc_client_free() then delivers the words of
        ** segments the server never ended, as a final update. */
        pthread_mutex_lock(&d.out);
        d.progress_ms = now_ms();
        pthread_mutex_unlock(&d.out);
        while ((s = spc_client_wait_idle(client, 200)) == SPC_ERROR_TIMEOUT) {
            pthread_mutex_lock(&d.out);
            long long quiet = now_ms() - d.progress_ms;
            pthread_mutex_unlock(&d.out);
            if (timeout_ms >= 0 && quiet >= timeout_ms) break;
        }
        if (s != SPC_OK) status = failed("waiting for the results (no new result within --timeout-ms)", s);
    } else {
        status = run_microphone(client, &signals, timeout_ms);
    }
    if ((s = spc_client_free(client)) != SPC_OK) status = failed("spc_client_free", s);
    pthread_mutex_lock(&d.out);
    clear_live_line(&d);
    fflush(stdout);
    if (d.failed) status = 1;
    pthread_mutex_unlock(&d.out);
    pthread_mutex_destroy(&d.out);
    return status;
}
