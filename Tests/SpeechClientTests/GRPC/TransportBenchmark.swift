import Foundation
import Testing
@testable import SpeechClient

/// Not a test: the round-trip micro-benchmark of issue 3, run only with SPEECHCLIENT_BENCH=1
/// (`SPEECHCLIENT_BENCH=1 swift test --filter TransportBenchmark`). One bidi stream to the
/// grpcio echo server, a 3,200-byte message and its echo, one at a time; this library and a
/// grpcio Python client interleaved in the same run, against the same server.
@Suite(.enabled(if: ProcessInfo.processInfo.environment["SPEECHCLIENT_BENCH"] == "1"))
struct TransportBenchmark {
    private static func cpuMicros() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e6 + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec)
    }

    private func ours(port: UInt16, count: Int) throws -> String {
        let ch = GRPCChannel.shared(server: try ServerURL(parsing: "grpc://127.0.0.1:\(port)"), tls: TLSSettings(),
                                    connectTimeoutMilliseconds: 5000)
        let events = EventCollector()
        let call = try ch.openStreamingCall(path: "/test.Echo/Bidi", metadata: []) { events.handle($0) }
        let payload = [UInt8](repeating: 0, count: 3200)
        func roundTrip(_ i: Int) {
            call.send(payload)
            _ = events.wait { $0.messages.count >= i }
        }
        for i in 1...50 { roundTrip(i) }
        var samples: [Double] = []
        let cpu0 = Self.cpuMicros()
        for i in 51...(50 + count) {
            let t0 = Clock.monotonicNanos()
            roundTrip(i)
            samples.append(Double(Clock.monotonicNanos() - t0) / 1e6)
        }
        let cpu = Self.cpuMicros() - cpu0
        call.halfClose()
        samples.sort()
        return String(format: "libspeechclient messages=%d p50_ms=%.3f p95_ms=%.3f cpu_us_per_msg=%.1f",
                      count, samples[count / 2], samples[count * 95 / 100], cpu / Double(count))
    }

    private func grpcio(port: UInt16, count: Int) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: PeerEnvironment.python)
        p.arguments = [PeerEnvironment.script("grpc_bench_client.py"), String(port), String(count)]
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test func roundTrip3200Bytes() throws {
        let server = try PeerProcess(script: "grpc_echo_server.py")
        defer { server.stop() }
        let count = 2000
        for round in 1...2 {
            print("round \(round): \(try ours(port: server.port, count: count))")
            print("round \(round): \(try grpcio(port: server.port, count: count))")
        }
    }
}
