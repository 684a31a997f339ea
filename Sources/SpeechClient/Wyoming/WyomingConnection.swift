#if canImport(Glibc)
import Glibc
#endif
import CShims
import Synchronization

/// One Wyoming connection once its handshake is done, driven by the shared event loop: the
/// transport under a transcription (`WyomingStream`) and under a wake-word service
/// (`WyomingWakeStream`). Bytes written from any thread are queued to the loop; events read are
/// handed to `onEvent` on the loop thread; the first failure (or the peer closing) goes to
/// `onFailure`, once, after the connection is closed. `close()` ends it quietly.
/// Sendable: `backlog` is thread-safe; the rest is set before `start` or touched only inside the loop's work.
final class WyomingConnection: EventLoopHandler, @unchecked Sendable {
    let peer: String
    let loop: EventLoop
    private let io: any ByteStream
    private let backlog = SendBacklog()
    /// Said when the peer closes: what was still expected of it ("before its transcript").
    private let closedMeans: String

    // Loop-thread state.
    var onEvent: (WyomingEvent) -> Void = { _ in }
    /// After the events of one read: what they changed may be acted on once, not per event.
    var onEventsRead: () -> Void = {}
    var onFailure: (SpeechClientError) -> Void = { _ in }
    /// The peer closed or reset the connection: true when the owner takes that as the end it
    /// expected (it has closed the connection), false to fail it as usual.
    var onPeerGone: () -> Bool = { false }
    private var reader: WyomingEventReader
    /// Reused by every read.
    private var readBuffer = [UInt8](repeating: 0, count: 16 * 1024)
    private var out: [UInt8] = []
    private var outOffset = 0
    private var wantsWritable = false
    private(set) var isClosed = false
    private var registered = false

    init(io: any ByteStream, reader: WyomingEventReader, peer: String, closedMeans: String) throws(SpeechClientError) {
        self.io = io
        self.reader = reader
        self.peer = peer
        self.closedMeans = closedMeans
        self.loop = try EventLoop.shared()
    }

    /// Hands the socket to the loop (closing it if that fails). Bytes the handshake read past
    /// its answer are handled at the first read.
    func start(applicationDriven: Bool) throws(SpeechClientError) {
        let failure = loop.executeAndWait { [self] () -> SpeechClientError? in
            do throws(SpeechClientError) {
                try loop.register(fd: io.fd, events: EPOLLIN.rawValue, handler: self, applicationDriven: applicationDriven)
                registered = true
                return nil
            } catch {
                close()  // the socket, and the owner's closures (they hold the owner)
                return error
            }
        }
        if let failure { throw failure }
    }

    /// Queues events from any thread; `then` runs on the loop after they were queued (unless the
    /// connection is closed by then).
    func send(_ events: [WyomingEvent], then: (@Sendable () -> Void)? = nil) {
        let bytes = events.flatMap { $0.encoded() }
        backlog.add(bytes.count)
        loop.execute { [self] in
            guard !isClosed else { return }
            out += bytes
            flush()
            if !isClosed { then?() }
        }
    }

    /// Bytes queued and not yet written.
    var backlogBytes: Int { backlog.value }

    /// See `SendBacklog.notifyWhen`.
    func notifyWhenBacklog(atMost bytes: Int, _ body: @escaping @Sendable () -> Void) -> Bool {
        backlog.notifyWhen(atMost: bytes, body)
    }

    // MARK: the loop's side

    func handleEvents(_ events: UInt32) {
        if isClosed { return }
        if events & (EPOLLIN.rawValue | EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 { readAvailable() }
        if !isClosed { flush() }
    }

    /// Writes an event at once (loop thread): an answer such as `pong`. Counted in the backlog
    /// like any send (`flush` takes every byte written off it: uncounted replies drove it below
    /// zero, and a stall check then waited for that much more audio), and bounded: a server that
    /// asks and never reads the answers is a failure, not memory without end.
    func reply(_ event: WyomingEvent) {
        guard !isClosed else { return }
        let bytes = event.encoded()
        guard out.count - outOffset + bytes.count <= Self.maxUnsentBytes else {
            fail(SpeechClientError(.network, "\(peer) does not read what is sent to it: over \(Self.maxUnsentBytes / 1024 / 1024) MiB wait to be written"))
            return
        }
        backlog.add(bytes.count)
        out += bytes
        flush()
    }

    /// Unsent bytes past which a reply fails the connection. Audio waits far below this: its
    /// senders stall at `LaneSupervisor.backlogLimit`.
    static let maxUnsentBytes = 8 * 1024 * 1024

    /// Reads what the socket holds, at most `EventLoop.readsPerWake` buffers: the rest waits
    /// for the next turn (the socket stays readable, so the loop comes back), and a server that
    /// floods does not keep the shared loop from its timers and other connections.
    private func readAvailable() {
        for _ in 0..<EventLoop.readsPerWake where !isClosed {
            let result = readBuffer.withUnsafeMutableBytes { io.read(into: $0) }
            switch result {
            case .bytes(let n):
                do throws(SpeechClientError) {
                    let events = try reader.feed(readBuffer[0..<n])
                    for event in events where !isClosed { onEvent(event) }
                    if !isClosed && !events.isEmpty { onEventsRead() }
                } catch {
                    var e = error
                    e.message = "from \(peer): " + e.message
                    fail(e)
                    return
                }
                if n < readBuffer.count { return }
            case .wouldBlock:
                return
            case .closed, .failed:
                lost(result)
                return
            }
        }
    }

    private func flush() {
        while outOffset < out.count && !isClosed {
            let result = out.withUnsafeBytes { io.write(UnsafeRawBufferPointer(rebasing: $0[outOffset...])) }
            switch result {
            case .bytes(let n):
                outOffset += n
                backlog.subtract(n)
            case .wouldBlock:
                setWantsWritable(true)
                return
            case .closed, .failed:
                lost(result)
                return
            }
        }
        if outOffset == out.count {
            out.removeAll(keepingCapacity: out.count <= 1 << 20)
            outOffset = 0
        }
        setWantsWritable(false)
    }

    private func setWantsWritable(_ on: Bool) {
        guard on != wantsWritable, !isClosed, registered else { return }
        wantsWritable = on
        loop.modify(fd: io.fd, events: EPOLLIN.rawValue | (on ? EPOLLOUT.rawValue : 0))
    }

    /// The transport ended (the peer closed) or failed: the connection fails, saying which.
    private func lost(_ result: IOResult) {
        if onPeerGone() { return }
        if case .failed(let error) = result {
            fail(error)
        } else {
            fail(SpeechClientError(.network, "\(peer) closed the connection \(closedMeans)"))
        }
    }

    /// Closes, then reports why (once).
    func fail(_ error: SpeechClientError) {
        if isClosed { return }
        let report = onFailure
        close()
        report(error)
    }

    /// Closes without a report (loop thread). The owner's closures are let go here: they hold
    /// it, so that the loop keeps it alive while the connection is open, as long as needed.
    func close() {
        if isClosed { return }
        isClosed = true
        onEvent = { _ in }
        onEventsRead = {}
        onFailure = { _ in }
        onPeerGone = { false }
        if registered { loop.unregister(fd: io.fd) }
        registered = false
        io.close()
        backlog.clear()
        out = []
        outOffset = 0
    }
}
