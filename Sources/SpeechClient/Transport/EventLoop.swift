#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import CShims

/// Something the event loop tells about readiness of its file descriptor (on the loop thread).
protocol EventLoopHandler: AnyObject {
    /// `events` is the epoll mask (EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP).
    func handleEvents(_ events: UInt32)
}

/// The one event-loop thread of the process. It owns every socket, nghttp2 session and OpenSSL
/// object once a connection is up; other threads talk to it only through `execute` (a task
/// queue plus an eventfd wake-up). It is started lazily by `EventLoop.shared()` and lives as long
/// as the process (the library is linked `-z nodelete`, so it is never unloaded under it).
///
/// Thread-safety: `execute`, `executeAndWait` and `isInLoop` may be called from any thread;
/// everything else (`register`, `modify`, `unregister`, timers) only on the loop thread.
final class EventLoop: @unchecked Sendable {
    // Cross-thread state: the task queue, behind a mutex.
    private struct Queue {
        var tasks: [@Sendable () -> Void] = []
        var wakePending = false
    }
    private let queue = Locked(Queue())
    private let loopThreadID = Atomic<UInt>(0)
    private let epfd: Int32
    private let wakeFd: Int32
    private var thread: NativeThread?

    // Loop-thread state.
    private var handlers: [Int32: any EventLoopHandler] = [:]
    private struct Timer { var deadline: UInt64; var body: () -> Void }
    private var timers: [UInt64: Timer] = [:]
    private var nextTimerID: UInt64 = 1

    private static let instance = Locked<EventLoop?>(nil)

    /// The process-wide loop, started on first use.
    static func shared() throws(SpeechClientError) -> EventLoop {
        try instance.withLock { (slot) throws(SpeechClientError) -> EventLoop in
            if let loop = slot { return loop }
            let loop = try EventLoop()
            try loop.start()
            slot = loop
            return loop
        }
    }

    private init() throws(SpeechClientError) {
        let ep = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard ep >= 0 else { throw SpeechClientError.errno(.internal, "epoll_create1", errno) }
        let ev = eventfd(0, Int32(EFD_NONBLOCK) | Int32(EFD_CLOEXEC))
        guard ev >= 0 else {
            let e = errno
            Glibc.close(ep)
            throw SpeechClientError.errno(.internal, "eventfd", e)
        }
        epfd = ep
        wakeFd = ev
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.fd = ev
        if epoll_ctl(ep, EPOLL_CTL_ADD, ev, &event) != 0 {
            let e = errno
            Glibc.close(ep); Glibc.close(ev)
            throw SpeechClientError.errno(.internal, "epoll_ctl", e)
        }
    }

    private func start() throws(SpeechClientError) {
        thread = try NativeThread(name: "spc-eventloop") { [self] in self.run() }
    }

    var isInLoop: Bool { loopThreadID.load(ordering: .acquiring) == UInt(pthread_self()) }

    /// Runs `task` on the loop thread, after the tasks posted before it.
    func execute(_ task: @escaping @Sendable () -> Void) {
        let wake = queue.withLock { q -> Bool in
            q.tasks.append(task)
            if q.wakePending { return false }
            q.wakePending = true
            return true
        }
        if wake && !isInLoop {
            var one: UInt64 = 1
            _ = Glibc.write(wakeFd, &one, 8)
        }
    }

    /// Runs `task` on the loop thread and waits for it; inline when already on the loop thread.
    func executeAndWait<T: Sendable>(_ task: @escaping @Sendable () -> T) -> T {
        if isInLoop { return task() }
        let done = OneShot<T>()
        execute { done.set(task()) }
        return done.wait()
    }

    // MARK: loop-thread API

    func register(fd: Int32, events: UInt32, handler: any EventLoopHandler) throws(SpeechClientError) {
        var event = epoll_event()
        event.events = events
        event.data.fd = fd
        guard epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event) == 0 else {
            throw SpeechClientError.errno(.internal, "epoll_ctl(ADD)", errno)
        }
        handlers[fd] = handler
    }

    func modify(fd: Int32, events: UInt32) {
        var event = epoll_event()
        event.events = events
        event.data.fd = fd
        _ = epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &event)
    }

    func unregister(fd: Int32) {
        if handlers.removeValue(forKey: fd) != nil {
            _ = epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nil)
        }
    }

    /// Runs `body` on the loop thread after `milliseconds`; returns an id for `cancelTimer`.
    @discardableResult
    func addTimer(milliseconds: Int, _ body: @escaping () -> Void) -> UInt64 {
        let id = nextTimerID
        nextTimerID += 1
        timers[id] = Timer(deadline: Clock.monotonicNanos() + UInt64(max(milliseconds, 0)) * 1_000_000, body: body)
        return id
    }

    func cancelTimer(_ id: UInt64) { timers.removeValue(forKey: id) }

    // MARK: the loop

    private func run() {
        loopThreadID.store(UInt(pthread_self()), ordering: .releasing)
        let capacity = 256
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: capacity)
        defer { events.deallocate() }
        while true {
            runTasks()
            let timeout = runDueTimersAndComputeTimeout()
            let n = epoll_wait(epfd, events, Int32(capacity), timeout)
            if n < 0 { continue }  // EINTR
            for i in 0..<Int(n) {
                let fd = events[i].data.fd
                let mask = events[i].events
                if fd == wakeFd {
                    var value: UInt64 = 0
                    _ = Glibc.read(wakeFd, &value, 8)
                    continue
                }
                // A handler run earlier in this batch may have unregistered this fd.
                handlers[fd]?.handleEvents(mask)
            }
        }
    }

    private func runTasks() {
        // Bounded: tasks posted while these run wait for the next turn, so timers and I/O keep going.
        let batch = queue.withLock { q -> [@Sendable () -> Void] in
            q.wakePending = false
            let t = q.tasks
            q.tasks.removeAll(keepingCapacity: true)
            return t
        }
        for task in batch { task() }
    }

    /// Returns the epoll_wait timeout: 0 when tasks are waiting, else until the next timer (-1: none).
    private func runDueTimersAndComputeTimeout() -> Int32 {
        if !timers.isEmpty {
            let now = Clock.monotonicNanos()
            let due = timers.filter { $0.value.deadline <= now }.sorted { $0.value.deadline < $1.value.deadline }
            for (id, timer) in due where timers.removeValue(forKey: id) != nil {
                timer.body()
            }
        }
        if queue.withLock({ !$0.tasks.isEmpty }) { return 0 }
        guard let next = timers.values.map(\.deadline).min() else { return -1 }
        let now = Clock.monotonicNanos()
        if next <= now { return 0 }
        return Int32(min((next - now + 999_999) / 1_000_000, 60_000))
    }
}

/// A value handed from one thread to another exactly once.
final class OneShot<T: Sendable>: @unchecked Sendable {
    private let lock = ConditionLock()
    private var value: T?

    func set(_ v: T) {
        lock.withLock { value = v }
        lock.broadcast()
    }

    func wait() -> T {
        lock.withLock {
            while true {
                if let value { return value }
                lock.wait()
            }
        }
    }

    /// Returns nil when the deadline (monotonic ns) passed first.
    func wait(untilMonotonicNanos deadline: UInt64) -> T? {
        lock.withLock {
            while true {
                if let value { return value }
                if !lock.wait(untilMonotonicNanos: deadline) { return value }
            }
        }
    }
}
