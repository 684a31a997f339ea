/// Lets one thread interrupt another's blocking network work (connect, TLS handshake, login):
/// `spc_client_suspend()` and `spc_client_free()` must not wait out a server that never answers.
///
/// Sticky: once cancelled, every blocking operation that checks it fails at once, until its
/// owner (the client's worker) calls `reset()` after handling the request that cancelled it.
/// Sendable: all its mutable state is in `state`, a `Locked`.
public final class Cancellation: @unchecked Sendable {
    private struct State {
        var cancelled = false
        var nextId = 0
        var handlers: [Int: @Sendable () -> Void] = [:]
    }
    private let state = Locked(State())

    public init() {}

    public var isCancelled: Bool { state.withLock { $0.cancelled } }

    /// Marks the work cancelled and runs the registered handlers (on this thread, after the
    /// internal lock is released, so a handler may take other locks).
    public func cancel() {
        let handlers = state.withLock { s -> [@Sendable () -> Void] in
            if s.cancelled { return [] }
            s.cancelled = true
            let h = Array(s.handlers.values)
            s.handlers = [:]
            return h
        }
        for h in handlers { h() }
    }

    public func reset() { state.withLock { $0.cancelled = false } }

    /// Registers `handler` to run on cancellation. Returns nil, without registering, when
    /// already cancelled: the caller must then give up by itself.
    public func onCancel(_ handler: @escaping @Sendable () -> Void) -> Int? {
        state.withLock { s -> Int? in
            if s.cancelled { return nil }
            s.nextId += 1
            s.handlers[s.nextId] = handler
            return s.nextId
        }
    }

    public func remove(_ id: Int?) {
        guard let id else { return }
        _ = state.withLock { $0.handlers.removeValue(forKey: id) }
    }

    /// The error blocking operations throw when cancelled. The worker never reports it: it
    /// knows it asked for it.
    public static let error = SpeechClientError(.invalidState, "cancelled: the client was suspended or freed")

    public func check() throws(SpeechClientError) {
        if isCancelled { throw Self.error }
    }
}
