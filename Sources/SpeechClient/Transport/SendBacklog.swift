import Synchronization

/// Bytes a stream accepted for sending and the network has not taken yet, with a one-shot
/// notice when they fall to a mark: a source faster than real time (a file) waits for that
/// notice instead of polling the count.
///
/// Any thread adds (a send) and subtracts (the loop, as the socket takes bytes). The notice runs
/// on the subtracting thread, with no lock held; it must only wake someone.
final class SendBacklog: Sendable {
    private let bytes = Atomic<Int>(0)
    /// A notice is armed: changed only with `notice` held, read without it on every subtract.
    private let armed = Atomic<Bool>(false)
    private let notice = Mutex<(mark: Int, body: @Sendable () -> Void)?>(nil)

    var value: Int { bytes.load(ordering: .sequentiallyConsistent) }

    /// Returns the new count.
    @discardableResult
    func add(_ n: Int) -> Int { bytes.add(n, ordering: .sequentiallyConsistent).newValue }

    func subtract(_ n: Int) {
        let now = bytes.subtract(n, ordering: .sequentiallyConsistent).newValue
        if armed.load(ordering: .sequentiallyConsistent) { fire(count: now) }
    }

    /// Everything was dropped (the stream is gone): a waiting notice runs, nothing will drain.
    func clear() {
        bytes.store(0, ordering: .sequentiallyConsistent)
        fire(count: 0)
    }

    /// Runs `body` once the count is at most `mark`. Returns false, arming nothing, when it
    /// already is. A notice armed earlier is replaced (one waiter per stream: its worker).
    func notifyWhen(atMost mark: Int, _ body: @escaping @Sendable () -> Void) -> Bool {
        notice.withLock { slot in
            slot = (mark, body)
            armed.store(true, ordering: .sequentiallyConsistent)
        }
        // Set before this check, so a subtract that lowered the count meanwhile either sees
        // the notice or is seen here.
        if value <= mark {
            let mine = notice.withLock { slot -> Bool in
                guard slot != nil else { return false }  // a subtract took it: it runs the body
                slot = nil
                armed.store(false, ordering: .sequentiallyConsistent)
                return true
            }
            if mine { return false }
        }
        return true
    }

    private func fire(count now: Int) {
        let body: (@Sendable () -> Void)? = notice.withLock { slot in
            guard let n = slot, now <= n.mark else { return nil }
            slot = nil
            armed.store(false, ordering: .sequentiallyConsistent)
            return n.body
        }
        body?()
    }
}
