/*
** spc_bench: libspeechclient driven from C, for bench/run.py.
**
**   spc_bench --url URL --mode paced --streams N --warmup S --window S [--lat-out FILE]
**   spc_bench --url URL --mode file --wav FILE
**   spc_bench --url URL --mode cold --launch-ns T          (T: CLOCK_MONOTONIC before exec)
**   spc_bench --url URL --mode idle --mic DEVICE --window S
**   spc_bench --url URL --mode updates --words N    (Tests/peers/hostile_slu_server.py --scenario Grow)
**   paced: [--keep-samples 0] does not store latencies (a soak: memory of the library only)
**   paced: [--thread-delivery 1] callbacks on the library's threads (the default delivery) instead
**          of epoll + dispatch on the main thread; no latency figures then, CPU only;
**          [--thread-delivery 2] the same on the shared callback threads (SPC_DELIVERY_SHARED)
**   paced: [--io application] the clients' connections are read on the main thread too
**          (SPC_IO_APPLICATION: spc_io_fd() in the same epoll set, spc_io_process() when ready)
**   paced: [--io dispatch] the same with spc_io_dispatch() (0.4): the segments of the responses
**          it reads run right there, not through each client's event fd
**   paced: [--pace-grid-us G] wakes for pacing only at multiples of G us of CLOCK_MONOTONIC (to
**          the nanosecond) and pushes every chunk due by then: coarser pacing, fewer wake-ups,
**          chunks handed over G/2 late on average (the bench matches grpc++'s measured lateness);
**          a G below the spacing of chunks (100 ms / N) is lowered to divide it
**   paced: [--activation voice] listens hands-free instead: the chunks (a steady tone the
**          detector learns as background) go through the VAD and open no context, so the CPU
**          figure is what listening all day costs a stream (issue 8)
**   common: [--ca-file PEM] [--cache-dir DIR] [--replay-ms MS (spc_options_set_replay_buffer_ms)]
**           [--stream-budget BYTES (spc_options_set_stream_budget: streams rotate sooner)]
**
** paced: N clients in this process, each with push audio (16 kHz mono, 100 ms chunks), all
** started, then one 3,200-byte chunk per client every 100 ms on an absolute CLOCK_MONOTONIC
** schedule, phases spread over the period, pushed from one thread that also runs the callbacks
** (SPC_DELIVERY_APPLICATION: every client's event fd in one epoll set), the way a server-side
** program would. Latency of a chunk: from just before spc_client_push_audio() to the start of
** the segment callback of its tentative (the sink answers each chunk, in order, with one), minus
** the server's own time carried in the tentative's word. CPU: getrusage(RUSAGE_SELF) over the
** window (all threads of the process). Prints one JSON object on stdout.
*/
#define _GNU_SOURCE
#include <speechclient.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define CHUNK_FRAMES 1600 /* 100 ms at 16 kHz */
#define PERIOD_NS 100000000LL
#define RING 64

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static double cpu_s(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + (double)u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

/* Context switches of the whole process (all threads), voluntary and not. */
static long ctx_switches(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_nvcsw + u.ru_nivcsw;
}

static long status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') { v = atol(line + n + 1); break; }
    fclose(f);
    return v;
}

struct stream {
    spc_client *client;
    int index;
    int started, stopped, failed;
    int64_t sent[RING]; /* send times of chunks whose tentative has not arrived */
    unsigned head, tail;
    int64_t next_due;
};

/* Everything runs on the main thread (application delivery), except in cold/file/idle modes. */
static struct {
    int measuring;
    int keep_samples; /* 0 (soak): latencies are not stored, so the program's own memory stays flat */
    int64_t *added, *raw; /* ns */
    size_t n, cap;
    long tentatives, unmatched, errors, late;
    int64_t lag_ns; /* sum over the window of how late each chunk was pushed */
    int started, stopped;
    int64_t first_started_ns;
    int thread_mode; /* callbacks on library threads: count only */
} g;

/* The latency samples of a whole run, reserved and written before the clients start, so that
** the RSS this program reports can leave them out: stored as they come, they grew with the
** window (2 x 8 bytes per chunk: 3.2 MB, 3 KB per stream, after 20 s of 1,000 streams) and read
** as the client's memory. Returns the KB reserved, 0 when samples are not kept. */
static long reserve_samples(size_t cap) {
    if (!g.keep_samples || cap == 0) return 0;
    g.added = malloc(cap * sizeof *g.added);
    g.raw = malloc(cap * sizeof *g.raw);
    if (!g.added || !g.raw) { fprintf(stderr, "spc_bench: out of memory\n"); exit(1); }
    /* Resident now, not as the samples arrive. Not zeros: the compiler turns malloc and a
    ** memset of zeros into calloc, which leaves fresh pages untouched. */
    memset(g.added, 0xff, cap * sizeof *g.added);
    memset(g.raw, 0xff, cap * sizeof *g.raw);
    g.cap = cap;
    return (long)(2 * cap * sizeof *g.added / 1024);
}

static void on_segment(spc_client *c, const spc_segment *s, void *ud) {
    struct stream *st = ud;
    int64_t t = now_ns();
    (void)c;
    if (g.thread_mode) { __atomic_add_fetch(&g.tentatives, 1, __ATOMIC_RELAXED); return; }
    g.tentatives++;
    if (st->head == st->tail) { g.unmatched++; return; }
    int64_t sent = st->sent[st->tail++ % RING];
    if (!g.measuring || !g.keep_samples) return;
    const char *w = spc_segment_word_text(s, 0);
    int64_t server = w ? atoll(w) : 0;
    if (g.n == g.cap) {
        g.cap = g.cap ? g.cap * 2 : 65536;
        g.added = realloc(g.added, g.cap * sizeof *g.added);
        g.raw = realloc(g.raw, g.cap * sizeof *g.raw);
        if (!g.added || !g.raw) { fprintf(stderr, "spc_bench: out of memory\n"); exit(1); }
    }
    g.raw[g.n] = t - sent;
    g.added[g.n] = t - sent - server;
    g.n++;
}

static void on_start(spc_client *c, const char *id, void *ud) {
    struct stream *st = ud;
    (void)c; (void)id;
    if (!g.first_started_ns) g.first_started_ns = now_ns();
    st->started = 1;
    __atomic_add_fetch(&g.started, 1, __ATOMIC_RELEASE);
}

static void on_stop(spc_client *c, const char *id, void *ud) {
    struct stream *st = ud;
    (void)c; (void)id;
    st->stopped = 1;
    __atomic_add_fetch(&g.stopped, 1, __ATOMIC_RELEASE);
}

static void on_error(spc_client *c, const spc_error *e, void *ud) {
    struct stream *st = ud;
    (void)c;
    if (g.errors++ < 5) fprintf(stderr, "spc_bench: stream %d: %s\n", st ? st->index : -1, spc_error_message(e));
    if (st) st->failed = 1;
}

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct(int64_t *v, size_t n, double p) {
    if (!n) return -1;
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i] / 1e6;
}

struct args {
    const char *url, *mode, *wav, *ca_file, *cache_dir, *lat_out, *mic;
    int streams, thread_delivery, replay_ms, voice, app_io, grid_us, words;
    long stream_budget;
    double warmup, window;
    int64_t launch_ns;
};

static spc_options *make_options(const struct args *a, struct stream *st, int push) {
    spc_options *o = spc_options_new();
    spc_options_set_server_url(o, a->url);
    spc_options_set_app_id(o, "bench");
    spc_options_set_device_id(o, "00000000-0000-4000-8000-000000000001");
    if (a->cache_dir) spc_options_set_cache_dir(o, a->cache_dir);
    if (a->ca_file) spc_options_set_ca_file(o, a->ca_file);
    if (push) spc_options_set_audio_push(o, 16000, 1);
    spc_options_set_chunk_ms(o, 100);
    if (a->replay_ms) spc_options_set_replay_buffer_ms(o, (uint32_t)a->replay_ms);
    if (a->stream_budget) spc_options_set_stream_budget(o, (uint32_t)a->stream_budget);
    if (a->voice) spc_options_set_activation(o, SPC_ACTIVATION_VOICE);
    spc_options_set_segment_cb(o, on_segment, st);
    spc_options_set_start_cb(o, on_start, st);
    spc_options_set_stop_cb(o, on_stop, st);
    spc_options_set_error_cb(o, on_error, st);
    spc_options_set_delivery(o, a->thread_delivery == 2 ? SPC_DELIVERY_SHARED
                                : a->thread_delivery ? SPC_DELIVERY_THREAD : SPC_DELIVERY_APPLICATION);
    if (a->app_io) spc_options_set_io(o, SPC_IO_APPLICATION);
    return o;
}

static spc_client *new_client(spc_options *o) {
    spc_client *c = NULL;
    spc_error *e = NULL;
    if (spc_client_new(o, &c, &e) != SPC_OK) {
        fprintf(stderr, "spc_bench: spc_client_new: %s\n", e ? spc_error_message(e) : "?");
        exit(1);
    }
    spc_options_free(o);
    return c;
}

static int io_dispatch; /* --io dispatch */

/* Runs callbacks of the clients whose event fd is ready, for at most until `until` (ns). */
static void pump(int ep, int64_t until, int precise) {
    struct epoll_event ev[256];
    int64_t now = now_ns();
    int n;
    if (precise) { /* to the nanosecond (--pace-grid-us) */
        int64_t d = until > now ? until - now : 0;
        struct timespec ts = {d / 1000000000, d % 1000000000};
        n = epoll_pwait2(ep, ev, 256, &ts, NULL);
    } else { /* whole milliseconds, rounded up, as a plain poll loop does */
        int ms = until > now ? (int)((until - now + 999999) / 1000000) : 0;
        n = epoll_wait(ep, ev, 256, ms);
    }
    for (int i = 0; i < n; i++) {
        struct stream *st = ev[i].data.ptr;
        if (st) spc_client_dispatch(st->client, 0, NULL);
        else if (io_dispatch) spc_io_dispatch(NULL, NULL); /* the work and its callbacks */
        else spc_io_process(NULL); /* spc_io_fd(): the network work of SPC_IO_APPLICATION */
    }
}

static int run_paced(const struct args *a) {
    int n = a->streams;
    struct stream *s = calloc((size_t)n, sizeof *s);
    int16_t chunk[CHUNK_FRAMES];
    for (int i = 0; i < CHUNK_FRAMES; i++) chunk[i] = (int16_t)((i * 37) % 2000 - 1000);
    struct args b = *a;
    g.thread_mode = a->thread_delivery;
    int ep = a->thread_delivery ? -1 : epoll_create1(0); /* without: callbacks on library threads */
    if (ep >= 0 && a->app_io) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        epoll_ctl(ep, EPOLL_CTL_ADD, spc_io_fd(), &ev);
    }
    for (int i = 0; i < n; i++) {
        s[i].index = i;
        s[i].client = new_client(make_options(&b, &s[i], 1));
        if (ep >= 0) {
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s[i]};
            epoll_ctl(ep, EPOLL_CTL_ADD, spc_client_event_fd(s[i].client), &ev);
        }
    }
    long samples_kb = reserve_samples((size_t)n * (size_t)((a->warmup + a->window + 1) * 1e9 / PERIOD_NS));
    long rss_idle = status_kb("VmRSS") - samples_kb;
    for (int i = 0; i < n; i++) spc_client_start(s[i].client);
    int64_t deadline = now_ns() + 60LL * 1000000000;
    while (__atomic_load_n(&g.started, __ATOMIC_ACQUIRE) < n && now_ns() < deadline) {
        if (ep >= 0) pump(ep, now_ns() + 10000000, 0);
        else usleep(10000);
        if (a->voice) { /* listening has no start callback: count the clients that listen */
            int listening = 0;
            for (int i = 0; i < n; i++) {
                spc_state st = SPC_STATE_IDLE;
                if (spc_client_get_state(s[i].client, &st) == SPC_OK && st == SPC_STATE_LISTENING) listening++;
            }
            g.started = listening;
        }
    }
    if (g.started < n) { fprintf(stderr, "spc_bench: only %d of %d streams started\n", g.started, n); return 1; }
    int64_t t0 = now_ns() + 20000000;
    int64_t grid = a->grid_us * 1000LL; /* wake-ups only on this grid of CLOCK_MONOTONIC, if set */
    if (grid > 0) {
        /* Chunks due half a spacing (or half a grid step) into a grid step, so that they wait
        ** grid/2 on average, whatever the phase of this run's clock. */
        int64_t spacing = PERIOD_NS / n;
        if (grid < spacing) grid = spacing / ((spacing + grid - 1) / grid); /* divides the spacing */
        t0 = (t0 + grid - 1) / grid * grid + (spacing < grid ? spacing : grid) / 2;
    }
    for (int i = 0; i < n; i++) s[i].next_due = t0 + PERIOD_NS * i / n;
    int64_t win_start = t0 + (int64_t)(a->warmup * 1e9), win_end = win_start + (int64_t)(a->window * 1e9);
    double cpu0 = 0, cpu1 = 0;
    long rss = 0, chunks = 0, ctx0 = 0, ctx1 = 0, threads = 0;
    int next = 0; /* streams are due in index order within each period */
    for (;;) {
        int64_t now = now_ns();
        if (!g.measuring && now >= win_start && cpu0 == 0) { cpu0 = cpu_s(); ctx0 = ctx_switches(); g.measuring = 1; }
        if (now >= win_end) { cpu1 = cpu_s(); ctx1 = ctx_switches(); g.measuring = 0; rss = status_kb("VmRSS") - samples_kb; threads = status_kb("Threads"); break; }
        int64_t due = s[next].next_due;
        int64_t go = grid > 0 ? (due + grid - 1) / grid * grid : due; /* pushed from then on */
        if (go <= now) {
            struct stream *st = &s[next];
            if (g.measuring && now - due > 10000000) g.late++;
            if (g.measuring) g.lag_ns += now - due;
            st->sent[st->head++ % RING] = now_ns();
            if (spc_client_push_audio(st->client, chunk, CHUNK_FRAMES) != SPC_OK) g.errors++;
            if (g.measuring) chunks++;
            st->next_due += PERIOD_NS;
            next = (next + 1) % n;
            continue;
        }
        if (ep >= 0) pump(ep, go, grid > 0);
        else {
            struct timespec ts = {go / 1000000000, go % 1000000000};
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        }
    }
    for (int i = 0; i < n; i++) spc_client_stop(s[i].client);
    deadline = now_ns() + 20LL * 1000000000;
    while (!a->voice && __atomic_load_n(&g.stopped, __ATOMIC_ACQUIRE) < n && now_ns() < deadline) {
        if (ep >= 0) pump(ep, now_ns() + 10000000, 0);
        else usleep(10000);
    }
    for (int i = 0; i < n; i++) spc_client_free(s[i].client);
    if (a->lat_out) {
        FILE *f = fopen(a->lat_out, "w");
        for (size_t i = 0; f && i < g.n; i++) fprintf(f, "%.1f %.1f\n", g.added[i] / 1e3, g.raw[i] / 1e3);
        if (f) fclose(f);
    }
    size_t m = g.n;
    qsort(g.added, m, sizeof *g.added, cmp64);
    qsort(g.raw, m, sizeof *g.raw, cmp64);
    printf("{\"client\":\"ours\",\"mode\":\"paced\",\"streams\":%d,\"window_s\":%.3f,\"cpu_s\":%.4f,\"ctx_switches\":%ld,"
           "\"rss_kb\":%ld,\"rss_idle_kb\":%ld,\"samples_kb\":%ld,\"threads\":%ld,\"chunks\":%ld,\"samples\":%zu,\"late\":%ld,\"errors\":%ld,"
           "\"unmatched\":%ld,\"lag_mean_ms\":%.4f,\"added_p50_ms\":%.4f,\"added_p99_ms\":%.4f,\"raw_p50_ms\":%.4f,\"raw_p99_ms\":%.4f}\n",
           n, a->window, cpu1 - cpu0, ctx1 - ctx0, rss, rss_idle, samples_kb, threads, chunks, m, g.late, g.errors, g.unmatched,
           chunks ? g.lag_ns / 1e6 / (double)chunks : -1, pct(g.added, m, 0.5), pct(g.added, m, 0.99), pct(g.raw, m, 0.5), pct(g.raw, m, 0.99));
    return 0;
}

static int run_cold(const struct args *a) {
    struct args b = *a;
    b.thread_delivery = 1;
    struct stream st = {0};
    spc_client *c = new_client(make_options(&b, &st, 1));
    spc_client_start(c);
    while (!__atomic_load_n(&st.started, __ATOMIC_ACQUIRE) && !st.failed) usleep(100);
    int64_t t = g.first_started_ns;
    printf("{\"client\":\"ours\",\"mode\":\"cold\",\"started_ms\":%.3f,\"ok\":%d}\n", (t - a->launch_ns) / 1e6, !st.failed);
    fflush(stdout);
    spc_client_free(c);
    return st.failed;
}

static int run_file(const struct args *a) {
    struct args b = *a;
    b.thread_delivery = 1;
    struct stream st = {0};
    spc_options *o = make_options(&b, &st, 0);
    spc_options_set_audio_file(o, a->wav);
    spc_options_set_prepare_on_init(o, 1); /* connected and logged in before the clock starts */
    spc_client *c = new_client(o);
    int64_t t0 = now_ns();
    double c0 = cpu_s();
    spc_client_start(c);
    spc_status s = spc_client_wait_idle(c, 600000);
    int64_t t1 = now_ns();
    double c1 = cpu_s();
    printf("{\"client\":\"ours\",\"mode\":\"file\",\"seconds\":%.4f,\"cpu_s\":%.4f,\"tentatives\":%ld,\"ok\":%d}\n",
           (t1 - t0) / 1e9, c1 - c0, g.tentatives, s == SPC_OK && !st.failed);
    spc_client_free(c);
    return 0;
}

static int run_idle(const struct args *a) {
    struct args b = *a;
    b.thread_delivery = 1;
    struct stream st = {0};
    spc_options *o = make_options(&b, &st, 0);
    spc_options_set_audio_microphone(o, a->mic);
    spc_options_set_prepare_on_init(o, 1); /* opens the microphone and connects, no context */
    spc_client *c = new_client(o);
    usleep(500000);
    double c0 = cpu_s();
    int64_t t0 = now_ns();
    usleep((useconds_t)(a->window * 1e6));
    double c1 = cpu_s();
    int64_t t1 = now_ns();
    long rss = status_kb("VmRSS");
    /* Then the same microphone listening (the library paces the clockless file device). */
    spc_client_start(c);
    usleep(500000);
    double c2 = cpu_s();
    int64_t t2 = now_ns();
    usleep((useconds_t)(a->window * 1e6));
    double c3 = cpu_s();
    int64_t t3 = now_ns();
    spc_client_stop(c);
    spc_client_wait_idle(c, 5000);
    printf("{\"client\":\"ours\",\"mode\":\"idle\",\"idle_cpu_s\":%.4f,\"idle_window_s\":%.3f,\"listen_cpu_s\":%.4f,"
           "\"listen_window_s\":%.3f,\"tentatives\":%ld,\"rss_kb\":%ld,\"ok\":%d}\n",
           c1 - c0, (t1 - t0) / 1e9, c3 - c2, (t3 - t2) / 1e9, g.tentatives, rss, !st.failed);
    spc_client_free(c);
    return 0;
}

/* updates: one context on a server that grows segment 0 by one final word per message (issue
** 23). The CPU of the whole process from the start to the N-th segment callback, per update: flat
** when an update costs what changed, growing with N when each update copies the segment. The
** callback reads nothing (an application that reads every word pays for that itself). */
static int run_updates(const struct args *a) {
    struct args b = *a;
    b.thread_delivery = 1;
    g.thread_mode = 1; /* the callbacks only count, atomically */
    if (a->words < 1) { fprintf(stderr, "spc_bench: --mode updates needs --words N (N >= 1)\n"); return 2; }
    struct stream st = {0};
    spc_options *o = make_options(&b, &st, 1);
    spc_options_set_prepare_on_init(o, 1);
    spc_client *c = new_client(o);
    double c0 = cpu_s();
    int64_t t0 = now_ns();
    spc_client_start(c);
    while (__atomic_load_n(&g.tentatives, __ATOMIC_RELAXED) < a->words && now_ns() - t0 < 120 * 1000000000LL && !st.failed)
        usleep(1000);
    double c1 = cpu_s();
    int64_t t1 = now_ns();
    long got = __atomic_load_n(&g.tentatives, __ATOMIC_RELAXED);
    spc_client_stop(c);
    spc_status s = spc_client_wait_idle(c, 30000);
    printf("{\"client\":\"ours\",\"mode\":\"updates\",\"words\":%d,\"updates\":%ld,\"seconds\":%.4f,\"cpu_s\":%.4f,"
           "\"cpu_us_per_update\":%.2f,\"peak_rss_kb\":%ld,\"ok\":%d}\n",
           a->words, got, (t1 - t0) / 1e9, c1 - c0, got ? (c1 - c0) * 1e6 / (double)got : -1.0, status_kb("VmHWM"),
           s == SPC_OK && !st.failed && got >= a->words);
    spc_client_free(c);
    return 0;
}

int main(int argc, char **argv) {
    g.keep_samples = 1;
    struct args a = {.url = "grpc://127.0.0.1:50051", .mode = "paced", .streams = 1, .warmup = 2, .window = 5};
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "spc_bench: %s needs a value\n", k); return 2; }
        i++;
        if (!strcmp(k, "--url")) a.url = v;
        else if (!strcmp(k, "--mode")) a.mode = v;
        else if (!strcmp(k, "--streams")) a.streams = atoi(v);
        else if (!strcmp(k, "--warmup")) a.warmup = atof(v);
        else if (!strcmp(k, "--window")) a.window = atof(v);
        else if (!strcmp(k, "--wav")) a.wav = v;
        else if (!strcmp(k, "--ca-file")) a.ca_file = v;
        else if (!strcmp(k, "--cache-dir")) a.cache_dir = v;
        else if (!strcmp(k, "--lat-out")) a.lat_out = v;
        else if (!strcmp(k, "--mic")) a.mic = v;
        else if (!strcmp(k, "--replay-ms")) a.replay_ms = atoi(v);
        else if (!strcmp(k, "--stream-budget")) a.stream_budget = atol(v);
        else if (!strcmp(k, "--activation")) a.voice = v && !strcmp(v, "voice");
        else if (!strcmp(k, "--pace-grid-us")) a.grid_us = atoi(v);
        else if (!strcmp(k, "--io")) {
            a.app_io = !strcmp(v, "application") || !strcmp(v, "dispatch");
            io_dispatch = !strcmp(v, "dispatch");
        }
        else if (!strcmp(k, "--thread-delivery")) a.thread_delivery = v ? atoi(v) : 0;
        else if (!strcmp(k, "--launch-ns")) a.launch_ns = atoll(v);
        else if (!strcmp(k, "--keep-samples")) g.keep_samples = atoi(v);
        else if (!strcmp(k, "--words")) a.words = atoi(v);
        else { fprintf(stderr, "spc_bench: unknown option %s\n", k); return 2; }
    }
    if (a.streams < 1) return 2;
    if (!strcmp(a.mode, "paced")) return run_paced(&a);
    if (!strcmp(a.mode, "cold")) return run_cold(&a);
    if (!strcmp(a.mode, "file")) return run_file(&a);
    if (!strcmp(a.mode, "idle")) return run_idle(&a);
    if (!strcmp(a.mode, "updates")) return run_updates(&a);
    fprintf(stderr, "spc_bench: unknown mode %s\n", a.mode);
    return 2;
}
