// bench sink server: Speechly Login + SLU/Stream that recognises nothing (grpc++ callback API).
//
//   sink_server --port P [--tls-cert F --tls-key F]
//
// Per stream: config (ignored), start -> `started`, each audio chunk -> one tentative_transcript
// whose single tentative word is the server's own time for that chunk in nanoseconds (from the
// read completing in this process to the response being handed to gRPC), stop -> `finished`.
// Half-close -> finish with OK. Login answers a JWT the client may decode (never verified here).
// The first stdout line is "listening on 127.0.0.1:PORT". SIGTERM/SIGINT stop it.
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <time.h>
#include <unistd.h>

#include "speechly/identity/v2/identity.grpc.pb.h"
#include "speechly/slu/v1/slu.grpc.pb.h"

using speechly::slu::v1::SLURequest;
using speechly::slu::v1::SLUResponse;

static int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

static std::string b64url(const std::string &in) {
    static const char *t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    std::string out;
    size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        unsigned v = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8 | (unsigned char)in[i + 2];
        out += t[v >> 18]; out += t[(v >> 12) & 63]; out += t[(v >> 6) & 63]; out += t[v & 63];
    }
    if (in.size() - i == 1) {
        unsigned v = (unsigned char)in[i] << 16;
        out += t[v >> 18]; out += t[(v >> 12) & 63];
    } else if (in.size() - i == 2) {
        unsigned v = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8;
        out += t[v >> 18]; out += t[(v >> 12) & 63]; out += t[(v >> 6) & 63];
    }
    return out;
}

class Identity final : public speechly::identity::v2::IdentityAPI::CallbackService {
    grpc::ServerUnaryReactor *Login(grpc::CallbackServerContext *ctx, const speechly::identity::v2::LoginRequest *req,
                                    speechly::identity::v2::LoginResponse *resp) override {
        long exp = (long)time(nullptr) + 3600;
        std::string app = req->has_application() ? req->application().app_id() : std::string();
        std::string payload = "{\"appId\":\"" + app + "\",\"deviceId\":\"" + req->device_id() +
                              "\",\"scope\":\"slu\",\"exp\":" + std::to_string(exp) + "}";
        resp->set_token(b64url("{\"alg\":\"HS256\",\"typ\":\"JWT\"}") + "." + b64url(payload) + "." +
                        b64url("bench-sink-not-signed"));
        resp->set_valid_for_s(3600);
        resp->set_expires_at_epoch(exp);
        resp->set_expires_at("2099-01-01T00:00:00Z");
        auto *r = ctx->DefaultReactor();
        r->Finish(grpc::Status::OK);
        return r;
    }
};

static std::atomic<long> g_streams{0}, g_chunks{0};

class StreamReactor final : public grpc::ServerBidiReactor<SLURequest, SLUResponse> {
public:
    explicit StreamReactor(long id) : id_(id) {
        g_streams++;
        StartRead(&req_);
    }
    void OnReadDone(bool ok) override {
        int64_t t0 = now_ns();
        if (!ok) {  // half-close (or cancel): finish once the writes drained
            bool fin;
            {
                std::lock_guard<std::mutex> lk(mu_);
                reading_ = false;
                fin = !writing_ && !finished_;
                finished_ = finished_ || fin;
            }
            if (fin) Finish(grpc::Status::OK);  // OnDone may delete this: touch nothing after
            return;
        }
        std::unique_lock<std::mutex> lk(mu_);
        switch (req_.streaming_request_case()) {
        case SLURequest::kStart: {
            ++contexts_;
            ctx_ = "ctx-" + std::to_string(id_) + "-" + std::to_string(contexts_);
            SLUResponse r;
            r.set_audio_context(ctx_);
            r.mutable_started();
            Queue(std::move(r), 0);
            break;
        }
        case SLURequest::kAudio: {
            g_chunks++;
            SLUResponse r;
            r.set_audio_context(ctx_);
            r.mutable_tentative_transcript()->add_tentative_words();  // the server time, set in Queue
            Queue(std::move(r), t0);
            break;
        }
        case SLURequest::kStop: {
            SLUResponse r;
            r.set_audio_context(ctx_);
            r.mutable_finished();
            Queue(std::move(r), 0);
            break;
        }
        default: break;  // config, rtt_response
        }
        lk.unlock();
        StartRead(&req_);
    }
    void OnWriteDone(bool ok) override {
        bool fin;
        {
            std::lock_guard<std::mutex> lk(mu_);
            writing_ = false;
            if (!ok) pending_.clear();
            if (!pending_.empty()) { StartNext(); return; }
            fin = !reading_ && !finished_;
            finished_ = finished_ || fin;
        }
        if (fin) Finish(grpc::Status::OK);
    }
    void OnDone() override {
        g_streams--;
        delete this;
    }

private:
    struct Out { SLUResponse msg; int64_t t0; };
    void Queue(SLUResponse &&r, int64_t t0) {
        pending_.push_back(Out{std::move(r), t0});
        if (!writing_) StartNext();
    }
    void StartNext() {
        out_ = std::move(pending_.front().msg);
        int64_t t0 = pending_.front().t0;
        pending_.pop_front();
        if (t0) {
            // The time this process held the chunk before handing its answer to gRPC. An answer
            // queued behind a write in progress includes that wait.
            out_.mutable_tentative_transcript()->mutable_tentative_words(0)->set_word(std::to_string(now_ns() - t0));
        }
        writing_ = true;
        StartWrite(&out_);
    }
    long id_;
    long contexts_ = 0;
    std::mutex mu_;
    SLURequest req_;
    SLUResponse out_;
    std::deque<Out> pending_;
    std::string ctx_;
    bool writing_ = false, reading_ = true, finished_ = false;
};

class SLU final : public speechly::slu::v1::SLU::CallbackService {
    grpc::ServerBidiReactor<SLURequest, SLUResponse> *Stream(grpc::CallbackServerContext *) override {
        return new StreamReactor(next_++);
    }
    std::atomic<long> next_{0};
};

static std::string slurp(const char *path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

int main(int argc, char **argv) {
    int port = 0;
    const char *cert = nullptr, *key = nullptr;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc) port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tls-cert") && i + 1 < argc) cert = argv[++i];
        else if (!strcmp(argv[i], "--tls-key") && i + 1 < argc) key = argv[++i];
        else { fprintf(stderr, "usage: sink_server --port P [--tls-cert F --tls-key F]\n"); return 2; }
    }
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);  // before gRPC starts its threads

    Identity identity;
    SLU slu;
    grpc::ServerBuilder b;
    std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
    if (cert && key) {
        grpc::SslServerCredentialsOptions o;
        o.pem_key_cert_pairs.push_back({slurp(key), slurp(cert)});
        creds = grpc::SslServerCredentials(o);
    }
    int bound = 0;
    b.AddListeningPort("127.0.0.1:" + std::to_string(port), creds, &bound);
    b.RegisterService(&identity);
    b.RegisterService(&slu);
    b.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 100000);
    std::unique_ptr<grpc::Server> server = b.BuildAndStart();
    if (!server || !bound) { fprintf(stderr, "sink_server: cannot listen on port %d\n", port); return 1; }
    printf("listening on 127.0.0.1:%d\n", bound);
    fflush(stdout);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "sink_server: %ld chunks answered\n", g_chunks.load());
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    return 0;
}
