import Glibc
import Synchronization
import Testing
@testable import SpeechClient

/// A server that never stops sending, as fast as it is read: `prefix`, then `repeating` again
/// and again, for as long as `flooding` holds. Its reader cannot stop at a short read (every read
/// fills the buffer, and for HTTP/2 the stream says, like TLS, that it may hold bytes the socket
/// does not show). Its fd is one end of a socketpair with a byte waiting: the loop always sees it
/// readable, as it would a flooded socket.
private final class FloodingStream: ByteStream, @unchecked Sendable {  // read on the loop thread only
    private let ends: [Int32]
    private let prefix: [UInt8]
    private let repeating: [UInt8]
    let flooding = Atomic<Bool>(true)
    let reads = Atomic<Int>(0)
    private var position = 0

    init(prefix: [UInt8], repeating: [UInt8]) throws {
        self.prefix = prefix
        self.repeating = repeating
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
            throw SpeechClientError.errno(.internal, "socketpair", errno)
        }
        ends = fds
        var byte: UInt8 = 1
        _ = Glibc.write(fds[1], &byte, 1)
    }

    var fd: Int32 { ends[0] }
    var shortReadMeansDrained: Bool { false }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> IOResult {
        guard flooding.load(ordering: .relaxed) else { return .wouldBlock(wantRead: true) }
        reads.add(1, ordering: .relaxed)
        var filled = 0
        while filled < buffer.count {
            let source = position < prefix.count ? prefix : repeating
            let offset = position < prefix.count ? position : (position - prefix.count) % repeating.count
            let n = min(source.count - offset, buffer.count - filled)
            source.withUnsafeBytes { from in
                UnsafeMutableRawBufferPointer(rebasing: buffer[filled..<(filled + n)])
                    .copyMemory(from: UnsafeRawBufferPointer(rebasing: from[offset..<(offset + n)]))
            }
            filled += n
            position += n
        }
        return .bytes(filled)
    }

    func write(_ bytes: UnsafeRawBufferPointer) -> IOResult { .bytes(bytes.count) }

    /// Whether reading goes on past one wake's budget: more than two budgets read within 3 s.
    func readsGoOn() -> Bool {
        let deadline = Clock.monotonicNanos() + 3_000_000_000
        while Clock.monotonicNanos() < deadline {
            if reads.load(ordering: .relaxed) > 2 * EventLoop.readsPerWake { return true }
            usleep(1000)
        }
        return false
    }

    func close() { for fd in ends { Glibc.close(fd) } }
}

/// Waits up to 3 s for a timer 20 ms away on the shared loop.
private func aTimerFires(on loop: EventLoop) -> Bool {
    let fired = OneShot<Bool>()
    loop.execute { _ = loop.addTimer(milliseconds: 20) { fired.set(true) } }
    return fired.wait(untilMonotonicNanos: Clock.monotonicNanos() + 3_000_000_000) == true
}

/// An HTTP/2 connection on the shared loop to a server that floods it: its SETTINGS, then
/// extension frames of an unknown type, which HTTP/2 says to ignore (they cost the server
/// nothing): 1,024 bytes each (length 1,015, type 0xfa, no flags, stream 0).
private func floodedHTTP2Connection(on loop: EventLoop) throws -> (HTTP2Connection, FloodingStream) {
    let settings: [UInt8] = [0, 0, 0, 0x4, 0, 0, 0, 0, 0]
    let unknownFrame: [UInt8] = [0, 0x03, 0xf7, 0xfa, 0, 0, 0, 0, 0] + [UInt8](repeating: 0x55, count: 1015)
    let io = try FloodingStream(prefix: settings, repeating: unknownFrame)
    let connection = HTTP2Connection(io: io, loop: loop, peer: "flooding server", settings: HTTP2Settings())
    let started = loop.executeAndWait { () -> String? in
        do throws(SpeechClientError) { try connection.start(); return nil } catch { return error.message }
    }
    try #require(started == nil, "\(started ?? "")")
    return (connection, io)
}

/// A connection reads a bounded amount per wake and continues on a later turn: a flooding
/// server's connection keeps being read, and the shared loop still runs timers meanwhile.
@Suite(.serialized, .timeLimit(.minutes(1))) struct ReadBudgetTests {
    @Test func anHTTP2ServerThatNeverStopsSendingDoesNotKeepTheLoopFromItsTimers() throws {
        let loop = try EventLoop.shared()
        let (connection, io) = try floodedHTTP2Connection(on: loop)
        let onTime = aTimerFires(on: loop)
        let readsWhileFlooding = io.readsGoOn()
        // Let go of the loop (a loop kept by the old code comes back here), then end the connection.
        io.flooding.store(false, ordering: .relaxed)
        let stillUp = loop.executeAndWait { () -> Bool in
            let up = connection.isUsable
            connection.fail(SpeechClientError(.network, "test over"))
            return up
        }
        #expect(onTime, "a timer 20 ms away had not fired after 3 s of flooding")
        #expect(readsWhileFlooding, "reading stopped after \(io.reads.load(ordering: .relaxed)) reads")
        #expect(stillUp, "the connection failed on frames HTTP/2 says to ignore")
    }

    /// A flood that goes on: the loop's turns stay short. Each read that used its budget posted
    /// a continuation, while the socket's readiness read it too: n readers at turn n, so turns
    /// (and a timer's lateness) grew with the flood's length (72 ms after 6 s here).
    @Test func anHTTP2FloodThatGoesOnKeepsTheLoopsTurnsShort() throws {
        let loop = try EventLoop.shared()
        let (connection, io) = try floodedHTTP2Connection(on: loop)
        usleep(6_000_000)
        // Three timers 20 ms away, one after the other: the latest of them.
        var latest: UInt64 = 0
        for _ in 0..<3 {
            let fired = OneShot<UInt64>()
            let asked = Clock.monotonicNanos()
            loop.execute { _ = loop.addTimer(milliseconds: 20) { fired.set(Clock.monotonicNanos()) } }
            let at = fired.wait(untilMonotonicNanos: asked + 3_000_000_000) ?? (asked + 3_000_000_000)
            latest = max(latest, at - asked - 20_000_000)
        }
        io.flooding.store(false, ordering: .relaxed)
        loop.executeAndWait { connection.fail(SpeechClientError(.network, "test over")) }
        // 0 ms late here, 72 ms before the fix (growing with the flood).
        #expect(latest < 30_000_000, "a timer fired \(latest / 1_000_000) ms late after 6 s of flooding")
    }

    @Test func aWyomingServerThatNeverStopsSendingDoesNotKeepTheLoopFromItsTimers() throws {
        let loop = try EventLoop.shared()
        let io = try FloodingStream(prefix: [], repeating: WyomingEvent(type: "ping").encoded())
        let connection = try WyomingConnection(io: io, reader: WyomingEventReader(), peer: "flooding server",
                                               closedMeans: "before its transcript")
        let failure = Locked<String?>(nil)
        connection.onFailure = { error in failure.withLock { $0 = error.message } }
        try connection.start(applicationDriven: false)
        let onTime = aTimerFires(on: loop)
        let readsWhileFlooding = io.readsGoOn()
        io.flooding.store(false, ordering: .relaxed)
        loop.executeAndWait { connection.close() }
        #expect(onTime, "a timer 20 ms away had not fired after 3 s of flooding")
        #expect(readsWhileFlooding, "reading stopped after \(io.reads.load(ordering: .relaxed)) reads")
        #expect(failure.withLock { $0 } == nil)
    }
}
