#if canImport(Glibc)
import Glibc
#endif

/// Work queued on a pool: a client's callbacks waiting, or its worker's next turn.
protocol PoolWork: AnyObject, Sendable {
    /// Runs a bounded share of the work on the calling pool thread. True when more is ready
    /// now: it is queued again, behind the others.
    func runOnPool() -> Bool
}

/// Threads shared by clients (issue 21): `workers` run the clients' workers (a turn each time a
/// command, a stream's notice or a deadline needs one: `ClientWorker.runTurn`), `callbacks` the
/// callbacks of clients in SPC_DELIVERY_SHARED. A client is on at most one thread of a pool at a
/// time (its own flags say so), so its work and its callbacks stay in order, one at a time.
///
/// Work that blocks (a connect, a login, a microphone read) holds its thread up, and the header
/// promises that a slow callback delays only its own client, so a pool grows when it is held up:
/// clients that waited `patienceNanos` with no thread
/// free get a new thread (a watchdog on the event loop checks), and a pool thread blocked inside
/// the library (free or wait_idle called from a callback, which may wait for a callback of
/// another client) does not count, so a thread is added at once when work waits. Threads beyond
/// `baseThreads` that stay idle for `retireAfterNanos` exit. It lives as long as the process.
///
/// A client in SPC_DELIVERY_THREAD (the default) has a private pool: one thread, started with
/// the client and joined by its free (the header promises each client a callback thread of its
/// own), which never grows.
final class ThreadPool: @unchecked Sendable {  // every field below is guarded by `lock`
    static let callbacks = ThreadPool(name: "spc-cb-shared", baseThreads: 2, grows: true)
    static let workers = ThreadPool(name: "spc-worker", baseThreads: 2, grows: true)
    static let patienceNanos: UInt64 = 20_000_000
    static let retireAfterNanos: UInt64 = 30_000_000_000
    let baseThreads: Int
    private let grows: Bool
    private let name: String

    private let lock = ConditionLock()
    private let workWaiting: Condition
    private var ready = FIFO<(work: any PoolWork, since: UInt64)>()
    /// Started and not yet exited; `idle` of them wait for work, `blocked` wait in the library.
    private var threads = 0
    private var idle = 0
    private var blocked = 0
    /// The pool's threads (each adds itself when it starts), and their handles.
    private var members: Set<UInt> = []
    private var handles: [UInt: NativeThread] = [:]
    private var watchdogArmed = false

    private var stopping = false

    init(name: String, baseThreads: Int, grows: Bool) {
        self.name = name
        self.baseThreads = baseThreads
        self.grows = grows
        workWaiting = lock.makeCondition()
    }

    /// A client's own pool: its thread starts now, so a failure fails spc_client_new.
    static func privateCallbackThread() throws(SpeechClientError) -> ThreadPool {
        let pool = ThreadPool(name: "spc-callbacks", baseThreads: 1, grows: false)
        pool.threads = 1
        let thread = try NativeThread(name: "spc-callbacks") { [pool] in pool.run() }
        pool.lock.withLock { pool.handles[thread.id] = thread }
        return pool
    }

    /// A private pool's end (free): its thread finishes what is queued, then is joined.
    func shutdown() {
        let joining: [NativeThread] = lock.withLock {
            stopping = true
            workWaiting.broadcast()
            return Array(handles.values)
        }
        // Dropped by its last callback (a Swift client released inside it): that thread ends
        // by itself once this returns.
        for t in joining { if t.isCurrent { t.detach() } else { t.join() } }
    }

    /// Queues work (its owner makes sure it is queued at most once). May be called with the
    /// owner's lock held: it takes only the pool's, and never runs the event loop's work inline.
    func schedule(_ work: any PoolWork) {
        let growth: Growth = lock.withLock {
            ready.push((work, Clock.monotonicNanos()))
            return wakeOrGrowLocked()
        }
        grow(growth)
    }

    /// What to do once the lock is released (never under it: posting to the event loop may run
    /// the loop's work inline on this thread, and that work may schedule a client).
    private enum Growth { case none, wakeIdleThread, startThread, armWatchdog }

    private func grow(_ growth: Growth) {
        switch growth {
        case .none: break
        // Signalled after the lock is released: a thread woken while the scheduler still held
        // it ran into that lock and slept again (a file's 2,400 s run: 74k switches -> 54k).
        case .wakeIdleThread: workWaiting.signal()
        case .startThread: startThread()
        case .armWatchdog: armWatchdog()
        }
    }

    /// How many threads the pool has now (for tests and the bench).
    var threadCount: Int { lock.withLock { threads } }

    /// Runs `body`, which waits inside the library. On a pool thread, the thread is not counted
    /// meanwhile, so the callbacks it may wait for get another one.
    func blocking<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        let me = UInt(pthread_self())
        let (member, growth): (Bool, Growth) = lock.withLock {
            guard members.contains(me) else { return (false, .none) }
            blocked += 1
            return (true, ready.isEmpty ? .none : wakeOrGrowLocked())
        }
        grow(growth)
        defer { if member { lock.withLock { blocked -= 1 } } }
        return try body()
    }

    /// Work is queued: wakes an idle thread, or says a thread must be started (counted already),
    /// or leaves it to the watchdog.
    private func wakeOrGrowLocked() -> Growth {
        if idle > 0 { return .wakeIdleThread }
        if threads - blocked < baseThreads {
            threads += 1
            return .startThread
        }
        return grows ? needsWatchdogLocked() : .none
    }

    private func startThread() {
        do throws(SpeechClientError) {
            let thread = try NativeThread(name: name) { [self] in self.run() }
            lock.withLock { handles[thread.id] = thread }
        } catch {
            // Out of threads: the watchdog tries again while work waits.
            let growth: Growth = lock.withLock {
                threads -= 1
                return ready.isEmpty ? .none : needsWatchdogLocked()
            }
            grow(growth)
        }
    }

    private func needsWatchdogLocked() -> Growth {
        if watchdogArmed { return .none }
        watchdogArmed = true
        return .armWatchdog
    }

    private func armWatchdog() {
        guard let loop = try? EventLoop.shared() else {
            lock.withLock { watchdogArmed = false }
            return
        }
        loop.post { [self] in
            loop.addTimer(milliseconds: Int(Self.patienceNanos / 1_000_000)) { [self] in self.watchdog() }
        }
    }

    /// Every thread is held up (slow callbacks) while clients wait: one more thread, and
    /// another check while they still wait.
    private func watchdog() {
        let (spawn, again): (Bool, Bool) = lock.withLock {
            watchdogArmed = false
            guard let head = ready.first else { return (false, false) }
            var spawn = false
            if idle == 0 && Clock.monotonicNanos() &- head.since >= Self.patienceNanos {
                threads += 1
                spawn = true
            }
            watchdogArmed = true
            return (spawn, true)
        }
        if spawn { startThread() }
        if again { armWatchdog() }
    }

    private func run() {
        let me = UInt(pthread_self())
        lock.withLock { _ = members.insert(me) }
        while true {
            let (next, growth): ((any PoolWork)?, Growth) = lock.withLock {
                while ready.isEmpty {
                    if stopping { return (nil, .none) }
                    idle += 1
                    let woken = workWaiting.wait(untilMonotonicNanos: Clock.monotonicNanos() + Self.retireAfterNanos)
                    idle -= 1
                    if !woken && ready.isEmpty && threads - blocked > baseThreads { return (nil, .none) }
                }
                let work = ready.pop()?.work
                // Others still wait and no thread is free (this one may be held up next): the
                // watchdog looks after them.
                return (work, !ready.isEmpty && idle == 0 && grows ? needsWatchdogLocked() : .none)
            }
            grow(growth)
            guard let work = next else { break }
            if work.runOnPool() {
                lock.withLock { _ = ready.push((work, Clock.monotonicNanos())) }
            }
        }
        // Retired: nobody joins a shared pool's thread, so it lets the system reclaim it. A
        // private pool's thread is joined by `shutdown`.
        let thread: NativeThread? = lock.withLock {
            threads -= 1
            members.remove(me)
            return stopping ? nil : handles.removeValue(forKey: me)
        }
        thread?.detach()
    }
}
