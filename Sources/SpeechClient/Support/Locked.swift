#if canImport(Glibc)
import Glibc
#endif

/// State behind a pthread mutex. Used instead of `Synchronization.Mutex` because
/// ThreadSanitizer understands pthread locks but not Mutex's futex, and `make sanitize` must
/// report real races only.
/// Sendable: `state` is reached only inside `withLock`, under the mutex.
public final class Locked<State>: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private var state: State

    public init(_ state: State) {
        self.state = state
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    public func withLock<R, E: Error>(_ body: (inout State) throws(E) -> R) throws(E) -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&state)
    }
}
