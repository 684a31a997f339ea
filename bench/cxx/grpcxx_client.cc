// grpcxx_client: the grpc++ peer of bench/spc_bench.c (same modes, same JSON output).
//
// N bidirectional SLU/Stream calls on one channel, driven by one thread through one completion
// queue (the async API, the cheapest way to run many streams with grpc++): that thread also
// paces the audio (absolute CLOCK_MONOTONIC schedule, phases spread over 100 ms). Latency: just
// before Write() of a chunk -> its tentative dequeued from the completion queue, minus the
// server's own time carried in the tentative's word.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <string>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <vector>

#include "speechly/identity/v2/identity.grpc.pb.h"
#include "speechly/slu/v1/slu.grpc.pb.h"

using namespace speechly::slu::v1;
using grpc::ClientAsyncReaderWriter;

static int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
static double cpu_s() {
    rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}
// Context switches of the whole process (all threads), voluntary and not.
static long ctx_switches() {
    rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_nvcsw + u.ru_nivcsw;
}
static long rss_kb() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmRSS:", 0) == 0) return atol(line.c_str() + 6);
    return -1;
}

enum Op { OP_START = 0, OP_READ = 1, OP_WRITE = 2, OP_FINISH = 3 };
static const int64_t PERIOD = 100000000;

struct Stream {
    int index = 0;
    grpc::ClientContext ctx;
    std::unique_ptr<ClientAsyncReaderWriter<SLURequest, SLUResponse>> rw;
    SLUResponse resp;
    grpc::Status status;
    std::deque<const SLURequest *> out;  // nullptr = WritesDone
    bool writing = false, started = false, finished = false, done = false;
    std::deque<int64_t> sent;
    int64_t next_due = 0;
    void *tag(Op op) { return reinterpret_cast<void *>(reinterpret_cast<uintptr_t>(this) | op); }
};

static struct {
    bool measuring = false;
    std::vector<int64_t> added, raw;
    long tentatives = 0, unmatched = 0, late = 0, errors = 0;
    int started = 0, finished = 0;
    int64_t first_started = 0;
} g;

static SLURequest g_config, g_start, g_stop, g_audio;

// File mode reads the file as it sends it: one request, refilled with the next 100 ms when its
// write completes (one write is in flight at a time), and the stop after the last.
static struct {
    FILE *f = nullptr;
    SLURequest chunk;
    char buf[3200];
} g_file;

static void write(Stream *s, const SLURequest *m) {
    if (s->writing) { s->out.push_back(m); return; }
    s->writing = true;
    if (m) s->rw->Write(*m, s->tag(OP_WRITE));
    else s->rw->WritesDone(s->tag(OP_WRITE));
}

static void handle(Stream *s, Op op, bool ok) {
    switch (op) {
    case OP_START:
        if (!ok) { g.errors++; s->done = true; return; }
        write(s, &g_config);
        write(s, &g_start);
        s->rw->Read(&s->resp, s->tag(OP_READ));
        break;
    case OP_READ: {
        if (!ok) { s->rw->Finish(&s->status, s->tag(OP_FINISH)); return; }
        int64_t t = now_ns();
        switch (s->resp.streaming_response_case()) {
        case SLUResponse::kStarted:
            s->started = true;
            if (!g.first_started) g.first_started = t;
            g.started++;
            break;
        case SLUResponse::kFinished:
            s->finished = true;
            g.finished++;
            write(s, nullptr);
            break;
        case SLUResponse::kTentativeTranscript: {
            g.tentatives++;
            if (s->sent.empty()) { g.unmatched++; break; }
            int64_t sent = s->sent.front();
            s->sent.pop_front();
            if (!g.measuring) break;
            const auto &tt = s->resp.tentative_transcript();
            int64_t server = tt.tentative_words_size() ? atoll(tt.tentative_words(0).word().c_str()) : 0;
            g.raw.push_back(t - sent);
            g.added.push_back(t - sent - server);
            break;
        }
        default: break;
        }
        s->rw->Read(&s->resp, s->tag(OP_READ));
        break;
    }
    case OP_WRITE:
        s->writing = false;
        if (!ok) { s->out.clear(); return; }
        if (!s->out.empty()) {
            const SLURequest *m = s->out.front();
            s->out.pop_front();
            write(s, m);
        } else if (g_file.f) {
            size_t n = fread(g_file.buf, 1, sizeof g_file.buf, g_file.f);
            if (n > 0) {
                g_file.chunk.set_audio(g_file.buf, n);
                s->sent.push_back(now_ns());
                write(s, &g_file.chunk);
            } else {
                fclose(g_file.f);
                g_file.f = nullptr;
                write(s, &g_stop);
            }
        }
        break;
    case OP_FINISH:
        s->done = true;
        if (!s->status.ok() && g.errors++ < 5) fprintf(stderr, "grpcxx_client: %s\n", s->status.error_message().c_str());
        break;
    }
}

// Waits for one completion until the CLOCK_MONOTONIC time `until`; false on timeout.
static bool next_event(grpc::CompletionQueue &cq, int64_t until) {
    void *tag;
    bool ok;
    auto deadline = std::chrono::system_clock::now() + std::chrono::nanoseconds(std::max<int64_t>(0, until - now_ns()));
    auto r = cq.AsyncNext(&tag, &ok, deadline);
    if (r != grpc::CompletionQueue::GOT_EVENT) return false;
    uintptr_t p = reinterpret_cast<uintptr_t>(tag);
    handle(reinterpret_cast<Stream *>(p & ~uintptr_t(7)), Op(p & 7), ok);
    return true;
}

static double pct(std::vector<int64_t> &v, double p) {
    if (v.empty()) return -1;
    return v[size_t(p * (v.size() - 1) + 0.5)] / 1e6;
}

// The whole file in one string (the CA certificates), read at its size.
static std::string read_file(const char *path) {
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    std::string s(size_t(std::max<std::streamoff>(0, f.tellg())), '\0');
    f.seekg(0);
    f.read(s.data(), std::streamsize(s.size()));
    s.resize(size_t(std::max<std::streamsize>(0, f.gcount())));
    return s;
}

int main(int argc, char **argv) {
    std::string target = "127.0.0.1:50051", mode = "paced";
    const char *ca = nullptr, *wav = nullptr, *lat_out = nullptr;
    int system_roots = 0;
    int n = 1;
    double warmup = 2, window = 5;
    int64_t launch = 0, grid_us = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string k = argv[i];
        const char *v = argv[i + 1];
        if (k == "--target") target = v;
        else if (k == "--mode") mode = v;
        else if (k == "--streams") n = atoi(v);
        else if (k == "--warmup") warmup = atof(v);
        else if (k == "--window") window = atof(v);
        else if (k == "--ca-file") ca = v;
        else if (k == "--system-roots") system_roots = atoi(v);
        else if (k == "--wav") wav = v;
        else if (k == "--lat-out") lat_out = v;
        else if (k == "--launch-ns") launch = atoll(v);
        else if (k == "--pace-grid-us") grid_us = atoll(v);
        else { fprintf(stderr, "grpcxx_client: unknown option %s\n", k.c_str()); return 2; }
    }
    std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
    if (ca) {
        grpc::SslCredentialsOptions o;
        o.pem_root_certs = read_file(ca);
        creds = grpc::SslCredentials(o);
    } else if (system_roots) {  // gRPC's default roots (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH when set)
        creds = grpc::SslCredentials(grpc::SslCredentialsOptions());
    }
    auto channel = grpc::CreateChannel(target, creds);
    {   // Login, as the library does before its first stream.
        auto id = speechly::identity::v2::IdentityAPI::NewStub(channel);
        grpc::ClientContext c;
        speechly::identity::v2::LoginRequest req;
        speechly::identity::v2::LoginResponse resp;
        req.set_device_id("00000000-0000-4000-8000-000000000002");
        req.mutable_application()->set_app_id("bench");
        auto st = id->Login(&c, req, &resp);
        if (!st.ok()) { fprintf(stderr, "grpcxx_client: login: %s\n", st.error_message().c_str()); return 1; }
        g_config.mutable_config()->set_channels(1);
        g_config.mutable_config()->set_sample_rate_hertz(16000);
        g_config.mutable_config()->set_language_code("en-US");
        g_start.mutable_start();
        g_stop.mutable_stop();
        std::string token = resp.token();
        auto stub = SLU::NewStub(channel);
        grpc::CompletionQueue cq;
        int count = mode == "paced" ? n : 1;
        std::vector<std::unique_ptr<Stream>> streams;
        auto open_stream = [&](int i) {
            auto s = std::make_unique<Stream>();
            s->index = i;
            s->ctx.AddMetadata("authorization", "Bearer " + token);
            s->rw = stub->PrepareAsyncStream(&s->ctx, &cq);
            s->rw->StartCall(s->tag(OP_START));
            streams.push_back(std::move(s));
        };
        if (mode == "file") {
            // The clock starts where spc_bench's does (spc_client_start on a client connected and
            // logged in): before the file is opened and the stream too. The audio follows config
            // and start at once, without waiting for `started`, as the library sends it.
            int64_t t0 = now_ns();
            double c0 = cpu_s();
            g_file.f = fopen(wav, "rb");
            if (!g_file.f || fseek(g_file.f, 44, SEEK_SET) != 0) { fprintf(stderr, "grpcxx_client: cannot read %s\n", wav); return 1; }
            open_stream(0);  // config and start are written when it opens, then the file
            Stream *s = streams[0].get();
            while (!s->done) next_event(cq, now_ns() + 1000000000);
            int64_t t1 = now_ns();
            printf("{\"client\":\"grpcxx\",\"mode\":\"file\",\"seconds\":%.4f,\"cpu_s\":%.4f,\"tentatives\":%ld,\"ok\":%d}\n",
                   (t1 - t0) / 1e9, cpu_s() - c0, g.tentatives, s->finished ? 1 : 0);
            fflush(stdout);
            _exit(0);
        }
        for (int i = 0; i < count; i++) open_stream(i);
        int64_t limit = now_ns() + 60000000000LL;
        while (g.started < count && now_ns() < limit) next_event(cq, now_ns() + 10000000);
        if (g.started < count) { fprintf(stderr, "grpcxx_client: %d of %d started\n", g.started, count); return 1; }
        if (mode == "cold") {
            printf("{\"client\":\"grpcxx\",\"mode\":\"cold\",\"started_ms\":%.3f,\"ok\":1}\n", (g.first_started - launch) / 1e6);
            fflush(stdout);
            _exit(0);  // not tearing down the calls: the figure is taken
        }
        int64_t t0 = now_ns() + 20000000;
        int64_t grid = grid_us * 1000;  // as spc_bench's --pace-grid-us
        if (grid > 0) {
            int64_t spacing = PERIOD / n;
            if (grid < spacing) grid = spacing / ((spacing + grid - 1) / grid);  // divides the spacing
            t0 = (t0 + grid - 1) / grid * grid + std::min(spacing, grid) / 2;
        }
        for (int i = 0; i < n; i++) streams[i]->next_due = t0 + PERIOD * i / n;
        // The window's latency samples, reserved and written now so that the RSS below can leave
        // them out (as spc_bench does): pushed as they come they grew with the window, 16 bytes
        // a chunk, and read as the client's memory.
        size_t cap = size_t(n) * size_t((warmup + window + 1) * 1e9 / PERIOD);
        g.added.resize(cap);
        g.raw.resize(cap);
        g.added.clear();  // the capacity, and its pages, stay
        g.raw.clear();
        long samples_kb = long(2 * cap * sizeof(int64_t) / 1024);
        int64_t win_start = t0 + int64_t(warmup * 1e9), win_end = win_start + int64_t(window * 1e9);
        double c0 = -1, c1 = 0;
        long rss = 0, chunks = 0, x0 = 0, x1 = 0;
        int64_t lag = 0;  // sum over the window of how late each chunk was written
        int next = 0;
        g_audio.set_audio(std::string(3200, '\x01'));
        for (;;) {
            int64_t now = now_ns();
            if (c0 < 0 && now >= win_start) { c0 = cpu_s(); x0 = ctx_switches(); g.measuring = true; }
            if (now >= win_end) { c1 = cpu_s(); x1 = ctx_switches(); g.measuring = false; rss = rss_kb() - samples_kb; break; }
            Stream *s = streams[next].get();
            int64_t go = grid > 0 ? (s->next_due + grid - 1) / grid * grid : s->next_due;  // written from then on
            if (go <= now) {
                if (g.measuring && now - s->next_due > 10000000) g.late++;
                if (g.measuring) lag += now - s->next_due;
                s->sent.push_back(now_ns());
                write(s, &g_audio);
                if (g.measuring) chunks++;
                s->next_due += PERIOD;
                next = (next + 1) % n;
                continue;
            }
            next_event(cq, go);
        }
        for (auto &s : streams) write(s.get(), &g_stop);
        limit = now_ns() + 20000000000LL;
        auto all_done = [&] { for (auto &s : streams) if (!s->done) return false; return true; };
        while (!all_done() && now_ns() < limit) next_event(cq, now_ns() + 10000000);
        if (lat_out) {
            FILE *f = fopen(lat_out, "w");
            for (size_t i = 0; f && i < g.added.size(); i++) fprintf(f, "%.1f %.1f\n", g.added[i] / 1e3, g.raw[i] / 1e3);
            if (f) fclose(f);
        }
        std::sort(g.added.begin(), g.added.end());
        std::sort(g.raw.begin(), g.raw.end());
        printf("{\"client\":\"grpcxx\",\"mode\":\"paced\",\"streams\":%d,\"window_s\":%.3f,\"cpu_s\":%.4f,\"ctx_switches\":%ld,"
               "\"rss_kb\":%ld,\"samples_kb\":%ld,\"chunks\":%ld,\"samples\":%zu,\"late\":%ld,\"errors\":%ld,\"unmatched\":%ld,"
               "\"lag_mean_ms\":%.4f,\"added_p50_ms\":%.4f,\"added_p99_ms\":%.4f,\"raw_p50_ms\":%.4f,\"raw_p99_ms\":%.4f}\n",
               n, window, c1 - c0, x1 - x0, rss, samples_kb, chunks, g.added.size(), g.late, g.errors, g.unmatched,
               chunks ? lag / 1e6 / double(chunks) : -1.0, pct(g.added, 0.5), pct(g.added, 0.99), pct(g.raw, 0.5), pct(g.raw, 0.99));
        fflush(stdout);
        for (auto &s : streams) s->ctx.TryCancel();
        cq.Shutdown();
        void *tag;
        bool ok;
        while (cq.Next(&tag, &ok)) {}
    }
    return 0;
}
