#if canImport(Glibc)
import Glibc
#endif
import CShims

/// A mutex with a condition variable, for the few places that must block a thread until
/// another one signals (queues, waits with a timeout). `Synchronization.Mutex` has no condition.
/// Sendable: it holds only fixed pointers to a pthread mutex and condition, which are made to be shared.
public final class ConditionLock: @unchecked Sendable {
    // The pthread objects are heap-allocated so they never move; only this class and its
    // Conditions touch them.
    fileprivate let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let cond = makeMonotonicCondition()

    public init() {
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_cond_destroy(cond)
        pthread_mutex_destroy(mutex)
        cond.deallocate()
        mutex.deallocate()
    }

    public func withLock<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Takes the lock if no one holds it; then the caller must `unlock()` it. For a path that
    /// may do work itself only when the owner is idle, and must never wait for it.
    public func tryLock() -> Bool { pthread_mutex_trylock(mutex) == 0 }
    /// For a lock held across a loop's turns (see `EventLoop`); everywhere else, `withLock`.
    public func lock() { pthread_mutex_lock(mutex) }
    public func unlock() { pthread_mutex_unlock(mutex) }
    /// Takes the lock unless the deadline (monotonic ns) passes first; true when taken (then the
    /// caller must `unlock()` it). For a caller that promises to wait at most that long.
    public func lock(untilMonotonicNanos deadline: UInt64) -> Bool {
        speechclient_shim_mutex_lock_until(mutex, deadline) == 0
    }

    /// Call with the lock held (inside `withLock`).
    public func wait() { pthread_cond_wait(cond, mutex) }

    /// Call with the lock held. Returns false when the deadline (monotonic ns) passed.
    public func wait(untilMonotonicNanos deadline: UInt64) -> Bool {
        waitUntil(cond, mutex, deadline)
    }

    public func broadcast() { pthread_cond_broadcast(cond) }

    /// A further condition on this lock's mutex, so that each kind of waiter is woken only for
    /// what it waits for.
    public func makeCondition() -> Condition { Condition(lock: self) }
}

/// A condition variable on a `ConditionLock`'s mutex (from `makeCondition()`); wait and signal
/// with that lock held.
/// Sendable: fixed pointers to a pthread condition and its lock's mutex, which are made to be shared.
public final class Condition: @unchecked Sendable {
    private let lock: ConditionLock  // kept alive: its mutex is the one waits release
    private let cond = makeMonotonicCondition()
    private var mutex: UnsafeMutablePointer<pthread_mutex_t> { lock.mutex }

    fileprivate init(lock: ConditionLock) {
        self.lock = lock
    }

    deinit {
        pthread_cond_destroy(cond)
        cond.deallocate()
    }

    public func wait() { pthread_cond_wait(cond, mutex) }

    /// Returns false when the deadline (monotonic ns) passed.
    public func wait(untilMonotonicNanos deadline: UInt64) -> Bool {
        waitUntil(cond, mutex, deadline)
    }

    public func signal() { pthread_cond_signal(cond) }
    public func broadcast() { pthread_cond_broadcast(cond) }
}

/// A heap-allocated condition variable whose timed waits use CLOCK_MONOTONIC (deadlines are
/// `Clock.monotonicNanos()` values, immune to wall-clock changes).
private func makeMonotonicCondition() -> UnsafeMutablePointer<pthread_cond_t> {
    let cond = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    var attr = pthread_condattr_t()
    pthread_condattr_init(&attr)
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
    pthread_cond_init(cond, &attr)
    pthread_condattr_destroy(&attr)
    return cond
}

/// Waits on `cond` (with `mutex` held) until signalled or `deadline`; false when it passed.
private func waitUntil(_ cond: UnsafeMutablePointer<pthread_cond_t>, _ mutex: UnsafeMutablePointer<pthread_mutex_t>,
                       _ deadline: UInt64) -> Bool {
    var ts = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
    return pthread_cond_timedwait(cond, mutex, &ts) != ETIMEDOUT
}

public enum Clock {
    /// CLOCK_MONOTONIC in nanoseconds.
    public static func monotonicNanos() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }
}

/// A joinable native thread running a closure. Library threads are always joined by their
/// owner, so none outlives the object that started it.
/// Sendable: `handle` is set once in init; `joined` only by the one owner that joins or detaches the thread.
public final class NativeThread: @unchecked Sendable {
    private final class Box {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }

    private var handle: pthread_t
    private var joined = false

    /// Starts a thread; throws when the system refuses one.
    public init(name: String, _ body: @escaping @Sendable () -> Void) throws(SpeechClientError) {
        let box = Unmanaged.passRetained(Box({
            speechclient_shim_set_thread_name(name)
            speechclient_shim_block_sigpipe_for_thread()
            body()
        })).toOpaque()
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { raw in
            guard let raw else { return nil }
            let box = Unmanaged<Box>.fromOpaque(raw).takeRetainedValue()
            box.body()
            return nil
        }, box)
        if rc != 0 {
            Unmanaged<Box>.fromOpaque(box).release()
            throw SpeechClientError.errno(.internal, "pthread_create", rc, context: "starting thread \(name)")
        }
        handle = thread
    }

    /// Waits for the thread to end. Idempotent; must not be called from the thread itself.
    public func join() {
        if joined { return }
        joined = true
        pthread_join(handle, nil)
    }

    public var isCurrent: Bool { pthread_equal(handle, pthread_self()) != 0 }

    /// The calling thread's kernel id (what /proc/self/task and `top -H` show).
    public static var currentKernelID: Int32 { speechclient_shim_thread_id() }

    /// The thread's pthread_self() value.
    public var id: UInt { UInt(handle) }

    /// For a thread nobody will join (a pool thread that retires): the system reclaims it when
    /// it ends. Then `join` does nothing.
    public func detach() {
        if joined { return }
        joined = true
        pthread_detach(handle)
    }
}

public enum WallClock {
    /// Unix time in seconds (for token expiry, which the server states in wall-clock time).
    public static func nowSeconds() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec)
    }
}
