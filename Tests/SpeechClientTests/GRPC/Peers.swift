import Foundation
import Synchronization
@testable import SpeechClient

/// Independent peers for the transport tests: Python scripts in Tests/peers/, started by the
/// tests and stopped by them (a peer also exits when our end of its stdin closes, so a crashed
/// test run leaves nothing behind).
enum PeerEnvironment {
    static let repoRoot: String = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<4 { url.deleteLastPathComponent() }
        return url.path
    }()

    /// SPEECHCLIENT_TEST_PYTHON, else the repo's .venv, else .venv-transport, else python3.
    static let python: String = {
        if let p = ProcessInfo.processInfo.environment["SPEECHCLIENT_TEST_PYTHON"], !p.isEmpty { return p }
        for candidate in [".venv/bin/python", ".venv-transport/bin/python"] {
            let path = repoRoot + "/" + candidate
            if FileManager.default.isExecutableFile(atPath: path) && canImportPeers(path) { return path }
        }
        return "/usr/bin/python3"
    }()

    private static func canImportPeers(_ python: String) -> Bool {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: python)
        p.arguments = ["-c", "import grpc, h2"]
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        do { try p.run() } catch { return false }
        p.waitUntilExit()
        return p.terminationStatus == 0
    }

    static func script(_ name: String) -> String { repoRoot + "/Tests/peers/" + name }
}

struct PeerError: Error, CustomStringConvertible {
    var description: String
}

/// A running peer process that printed "PORT <n>" (or "listening on HOST:<n>") when ready.
final class PeerProcess: @unchecked Sendable {
    let port: UInt16
    private let process: Process
    private let stdinPipe: Pipe
    private let stderrFile: String

    init(script: String, arguments: [String] = [], timeoutSeconds: Double = 20) throws {
        process = Process()
        process.executableURL = URL(fileURLWithPath: PeerEnvironment.python)
        process.arguments = ["-u", PeerEnvironment.script(script)] + arguments
        stdinPipe = Pipe()
        let stdoutPipe = Pipe()
        stderrFile = NSTemporaryDirectory() + "peer-\(UUID().uuidString).log"
        _ = FileManager.default.createFile(atPath: stderrFile, contents: nil)  // a failure shows as an empty log
        process.standardInput = stdinPipe
        process.standardOutput = stdoutPipe
        process.standardError = FileHandle(forWritingAtPath: stderrFile)
        try process.run()
        // Read the first line within the timeout.
        let fd = stdoutPipe.fileHandleForReading.fileDescriptor
        var line: [UInt8] = []
        let deadline = Date().addingTimeInterval(timeoutSeconds)
        while true {
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let left = Int32(max(deadline.timeIntervalSinceNow * 1000, 0))
            if left == 0 || poll(&pfd, 1, left) <= 0 {
                process.terminate()
                throw PeerError(description: "peer \(script) did not start in time: \(Self.readLog(stderrFile))")
            }
            var byte: UInt8 = 0
            if read(fd, &byte, 1) != 1 {
                throw PeerError(description: "peer \(script) exited: \(Self.readLog(stderrFile))")
            }
            if byte == 0x0a { break }
            line.append(byte)
        }
        let text = String(decoding: line, as: UTF8.self)
        // "PORT n", or "listening on HOST:n" (the reference server's and the Wyoming peer's),
        // or "listening on unix:PATH" (port 0).
        let port: UInt16? = text.hasPrefix("PORT ") ? UInt16(text.dropFirst(5))
            : text.hasPrefix("listening on unix:") ? 0
            : text.hasPrefix("listening on ") ? text.split(separator: ":").last.flatMap { UInt16($0) } : nil
        guard let port else {
            process.terminate()
            throw PeerError(description: "peer \(script) said '\(text)'")
        }
        self.port = port
    }

    private static func readLog(_ path: String) -> String {
        (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }

    var log: String { Self.readLog(stderrFile) }

    func stop() {
        if process.isRunning {
            try? stdinPipe.fileHandleForWriting.close()
            process.terminate()
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: stderrFile)
    }

    deinit { stop() }
}

/// Test certificates made with the openssl CLI in a temporary directory: a CA, a server
/// certificate for DNS:localhost only (so 127.0.0.1 is a hostname mismatch), an expired one,
/// and a second, untrusted CA.
final class TestCertificates: @unchecked Sendable {
    let directory: String
    var caFile: String { directory + "/ca.pem" }
    var otherCAFile: String { directory + "/other-ca.pem" }
    var serverCert: String { directory + "/server.pem" }
    var serverKey: String { directory + "/server.key" }
    var expiredCert: String { directory + "/expired.pem" }
    /// Names localhost in its subject's CN alone, with no subjectAltName.
    var subjectOnlyCert: String { directory + "/subject-only.pem" }

    static let shared = Locked<TestCertificates?>(nil)

    static func get() throws -> TestCertificates {
        try shared.withLock { slot in
            if let c = slot { return c }
            let c = try TestCertificates()
            slot = c
            return c
        }
    }

    private init() throws {
        directory = NSTemporaryDirectory() + "spc-certs-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        try run(["req", "-x509"] + ec + ["-keyout", "ca.key", "-out", "ca.pem", "-days", "30", "-subj", "/CN=spc test CA"])
        try run(["req", "-x509"] + ec + ["-keyout", "other-ca.key", "-out", "other-ca.pem", "-days", "30", "-subj", "/CN=spc other CA"])
        try run(["req"] + ec + ["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"])
        try "subjectAltName=DNS:localhost\n".write(toFile: directory + "/ext.cnf", atomically: true, encoding: .utf8)
        try run(["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", "server.pem", "-days", "30", "-extfile", "ext.cnf"])
        // -days -1: notAfter a day before notBefore (now), so the certificate has expired.
        try run(["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", "expired.pem", "-days", "-1", "-extfile", "ext.cnf"])
        try run(["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", "subject-only.pem", "-days", "30"])
    }

    private func run(_ arguments: [String]) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        p.arguments = arguments
        p.currentDirectoryURL = URL(fileURLWithPath: directory)
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        p.waitUntilExit()
        if p.terminationStatus != 0 { throw PeerError(description: "openssl \(arguments.joined(separator: " ")) failed") }
    }
}

/// Collects a streaming call's events for assertions.
final class EventCollector: @unchecked Sendable {
    private let lock = NSCondition()
    private(set) var messages: [[UInt8]] = []
    private(set) var closed: [SpeechClientError?] = []
    private(set) var eventsAfterClose = 0
    private(set) var goingAway = 0

    var isClosed: Bool {
        lock.lock()
        defer { lock.unlock() }
        return !closed.isEmpty
    }

    func handle(_ event: GRPCCallEvent) {
        lock.lock()
        if !closed.isEmpty { eventsAfterClose += 1 }
        switch event {
        case .message(let m): messages.append(m)
        case .closed(let e): closed.append(e)
        case .goingAway: goingAway += 1
        }
        lock.broadcast()
        lock.unlock()
    }

    /// Waits until `predicate` holds or the timeout passes; returns whether it held.
    func wait(seconds: Double = 10, until predicate: (EventCollector) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        lock.lock()
        defer { lock.unlock() }
        while !predicate(self) {
            if !lock.wait(until: deadline) { return predicate(self) }
        }
        return true
    }

    func waitClosed(seconds: Double = 10) -> SpeechClientError?? {
        guard wait(seconds: seconds, until: { !$0.closed.isEmpty }) else { return nil }
        lock.lock()
        defer { lock.unlock() }
        return .some(closed[0])
    }
}
