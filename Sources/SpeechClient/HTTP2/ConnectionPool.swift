import Synchronization

/// The shared HTTP/2 connections to one server (host, port, TLS settings, HTTP/2 settings):
/// one, opened on first use by the first caller (others wait for that attempt and share its
/// result), replaced when it fails or receives GOAWAY; another beside it when every one has as
/// many streams open as the server allows (its SETTINGS_MAX_CONCURRENT_STREAMS: 128 behind
/// nginx, 100 behind HAProxy, by default). One pool per key for the whole process.
/// Sendable: `lock` guards the connection state below; `key` is immutable and `pools` is `Locked`.
final class ConnectionPool: @unchecked Sendable {
    private struct Key: Hashable {
        var host: String
        var port: UInt16
        var useTLS: Bool
        var tls: TLSSettings
        var settings: HTTP2Settings
    }

    private static let pools = Locked<[Key: ConnectionPool]>([:])

    static func shared(host: String, port: UInt16, useTLS: Bool, tls: TLSSettings, settings: HTTP2Settings) -> ConnectionPool {
        let key = Key(host: host, port: port, useTLS: useTLS, tls: tls, settings: settings)
        return pools.withLock { pools in
            if let p = pools[key] { return p }
            let p = ConnectionPool(key)
            pools[key] = p
            return p
        }
    }

    private let key: Key
    // Guarded by `lock`.
    private let lock = ConditionLock()
    /// Usable when last looked at, oldest first (the first with room is taken, so later ones
    /// empty and close with the server's idle timeout).
    private var connections: [HTTP2Connection] = []
    private var connecting = false
    private var attempt: UInt64 = 0
    private var lastFailure: (attempt: UInt64, error: SpeechClientError)?
    /// Doubled each time a server answers our PINGs with GOAWAY ENHANCE_YOUR_CALM (as gRPC's
    /// clients do): the keepalive interval of the next connections, up to an hour.
    private var keepaliveIntervalMilliseconds: Int

    /// The keepalive interval the next connection gets (tests: ENHANCE_YOUR_CALM doubles it).
    var nextKeepaliveIntervalMilliseconds: Int { lock.withLock { keepaliveIntervalMilliseconds } }

    private init(_ key: Key) {
        self.key = key
        keepaliveIntervalMilliseconds = key.settings.keepaliveIntervalMilliseconds
    }

    /// A usable connection, opening one (on this thread, within the timeout) when needed.
    /// Waiting for another caller's attempt, and this caller's own connect, end early (with
    /// `Cancellation.error`) when `cancellation` is cancelled; a cancelled attempt is not
    /// reported to the other waiters as a failure: one of them connects afresh.
    func connection(loop: EventLoop, timeoutMilliseconds: Int, cancellation: Cancellation? = nil) throws(SpeechClientError) -> HTTP2Connection {
        let deadline = Clock.monotonicNanos() + UInt64(max(timeoutMilliseconds, 1)) * 1_000_000
        enum Next { case use(HTTP2Connection), connect(UInt64) }
        let next = try lock.withLock { () throws(SpeechClientError) -> Next in
            var waitedFor: UInt64?
            while true {
                connections.removeAll { !$0.isUsable }
                closeIdleExtraConnectionsLocked(loop: loop)
                if let c = connections.first(where: { $0.hasRoomForStream }) { return .use(c) }
                if let w = waitedFor, let failure = lastFailure, failure.attempt == w { throw failure.error }
                if !connecting {
                    connecting = true
                    attempt += 1
                    return .connect(attempt)
                }
                waitedFor = attempt
                try cancellation?.check()
                let now = Clock.monotonicNanos()
                if now >= deadline {
                    throw SpeechClientError(.timeout, "cannot connect to \(key.host):\(key.port): no connection within the connect timeout")
                }
                // In slices, so that a cancellation is seen within 50 ms.
                _ = lock.wait(untilMonotonicNanos: min(deadline, now + 50_000_000))
            }
        }
        let myAttempt: UInt64
        switch next {
        case .use(let c): return c
        case .connect(let a): myAttempt = a
        }
        var opened: HTTP2Connection?
        do throws(SpeechClientError) {
            let io = try Connector.open(host: key.host, port: key.port, useTLS: key.useTLS, tls: key.tls,
                                        timeoutMilliseconds: timeoutMilliseconds, cancellation: cancellation)
            var settings = key.settings
            settings.keepaliveIntervalMilliseconds = lock.withLock { keepaliveIntervalMilliseconds }
            let connection = HTTP2Connection(io: io, loop: loop, peer: "\(key.host):\(key.port)", settings: settings)
            opened = connection
            connection.onEnhanceYourCalm = { [weak self] in
                guard let self else { return }
                self.lock.withLock {
                    if self.keepaliveIntervalMilliseconds > 0 {
                        self.keepaliveIntervalMilliseconds = min(self.keepaliveIntervalMilliseconds * 2, 3_600_000)
                    }
                }
            }
            // Ready only once the server answered with its SETTINGS (a server that accepts the
            // connection and never answers, or speaks another protocol, is found here, within
            // what is left of the connect timeout: issue 19 item 1).
            let answer = OneShot<SpeechClientError?>()
            let startError = loop.executeAndWait { () -> SpeechClientError? in
                connection.onAnswer = { answer.set($0) }
                do throws(SpeechClientError) { try connection.start(); return nil } catch { return error }
            }
            if let startError { throw startError }
            if let error = try Self.awaitAnswer(answer, deadline: deadline, cancellation: cancellation,
                                                peer: "\(key.host):\(key.port)", timeoutMilliseconds: timeoutMilliseconds) {
                throw error
            }
            if !connection.isUsable {
                throw SpeechClientError(.network, "the connection to \(key.host):\(key.port) closed as it opened")
            }
            if !connection.hasRoomForStream {
                // SETTINGS_MAX_CONCURRENT_STREAMS 0 (a server refusing work, as the RFC allows
                // under load): no stream can open on it, and opening more would only pile up.
                throw SpeechClientError(.network, "\(key.host):\(key.port) allows no streams on a new connection (SETTINGS_MAX_CONCURRENT_STREAMS 0)",
                                        grpcStatus: GRPCStatus.unavailable)
            }
            lock.withLock {
                connections.append(connection)
                connecting = false
            }
            lock.broadcast()
            return connection
        } catch {
            if let connection = opened {
                loop.execute { connection.fail(error) }
            }
            let cancelled = cancellation?.isCancelled == true
            lock.withLock {
                if !cancelled { lastFailure = (myAttempt, error) }
                connecting = false
            }
            lock.broadcast()
            throw error
        }
    }

    /// Connections opened beside the first for a burst past the server's stream limit are closed
    /// once idle for `idleExtraNanos`: the first stays (a client's next context), the others held
    /// sockets for good (servers such as grpc-go and Riva close no idle connection by default).
    private func closeIdleExtraConnectionsLocked(loop: EventLoop) {
        guard connections.count > 1 else { return }
        let now = Clock.monotonicNanos()
        var kept: [HTTP2Connection] = [connections[0]]
        for c in connections.dropFirst() {
            let idle = c.idleSince
            if idle != 0 && now &- idle > Self.idleExtraNanos {
                // Posted, never run here: this holds the pool's lock, and loop work run inline
                // (a connection's ENHANCE_YOUR_CALM) may take it.
                loop.post { c.closeIfIdle() }
            } else {
                kept.append(c)
            }
        }
        connections = kept
    }

    static let idleExtraNanos: UInt64 = 30_000_000_000

    /// Waits for the server's answer until the connect deadline, in slices so that a
    /// cancellation is seen within 50 ms. nil: the server answered.
    private static func awaitAnswer(_ answer: OneShot<SpeechClientError?>, deadline: UInt64, cancellation: Cancellation?,
                                    peer: String, timeoutMilliseconds: Int) throws(SpeechClientError) -> SpeechClientError? {
        while true {
            try cancellation?.check()
            let now = Clock.monotonicNanos()
            if let result = answer.wait(untilMonotonicNanos: min(deadline, now + 50_000_000)) { return result }
            if Clock.monotonicNanos() >= deadline {
                return SpeechClientError(.timeout, "\(peer): no answer within \(timeoutMilliseconds) ms: the server accepted the connection but sent no HTTP/2 settings (a hung server, or not an HTTP/2 server)")
            }
        }
    }
}
