#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import CShims

/// Something the event loop tells about readiness of its file descriptor (inside the loop's
/// work: on the loop thread, or on the application's thread in `processApplicationIO`).
protocol EventLoopHandler: AnyObject {
    /// `events` is the epoll mask (EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP).
    func handleEvents(_ events: UInt32)
}

/// A client whose callback thread waits to be woken for events queued during one read
/// (`EventLoop.deferWake`).
protocol DeferredWake: AnyObject {
    func flushDeferredWake()
}

/// Work for the thread that served the application's set in `processApplicationIO(deliver:)`,
/// run on it once it let go of the loop: a client's callbacks, queued while it served.
protocol InlineDelivery: AnyObject {
    /// Returns how many callbacks ran.
    func deliverInline() -> Int
}

/// The one event loop of the process. It owns every socket, nghttp2 session and OpenSSL object
/// once a connection is up; other threads talk to it only through `execute`. Its state is
/// guarded by `loopLock`, which the loop thread holds except while it sleeps in epoll_wait.
/// A task posted while the loop sleeps runs at once on the posting thread, under that lock
/// (after the tasks queued before it): sending a chunk then costs no wake-up of the loop thread
/// and no two context switches. Otherwise it is queued and the loop woken (an eventfd). The
/// loop is started lazily by `EventLoop.shared()` and lives as long as the process (the library
/// is linked `-z nodelete`, so it is never unloaded under it).
///
/// Application-driven I/O (spc_io_fd / spc_io_process): sockets registered `applicationDriven`
/// go into a second epoll set, which the application polls and serves with
/// `processApplicationIO()` on its own thread, under the same lock: a response then wakes only
/// the application's thread, as a gRPC completion queue does. While the application serves the
/// set, the loop thread does not watch it; a watchdog (every `applicationPatienceMilliseconds`)
/// gives it back to the loop thread when work is waiting and the application has not called
/// `processApplicationIO()` for that long, or has not called it for `applicationAbsenceMilliseconds`
/// (a stalled or blocked application delays those connections, never breaks them; an idle one
/// costs no periodic wake-up for long). `applicationWillBlock()` gives it back at once and keeps
/// it there until the matching `applicationDidUnblock()`. Until the first call, the loop serves it.
///
/// Thread-safety: `execute`, `executeAndWait`, `isInLoop`, `processApplicationIO` and
/// `applicationWillBlock` may be called from any thread; everything else (`register`, `modify`,
/// `unregister`, timers) only inside the loop's work (`isInLoop`: on the loop thread, or inside
/// a task run inline). Tasks, and what they call, must never block waiting for another thread.
/// Sendable: loop state only under `loopLock`; `queue` is `Locked`; the rest is atomic or set before `shared()` ends.
final class EventLoop: @unchecked Sendable {
    // Cross-thread state: the task queue, behind a mutex.
    private struct Queue {
        var tasks: [@Sendable () -> Void] = []
        var wakePending = false
    }
    private let queue = Locked(Queue())
    /// Held by whoever runs the loop's work: the loop thread while awake, or a thread running a
    /// task inline. `owner` names that thread (0: no one), so that it can tell it holds it.
    private let loopLock = ConditionLock()
    private let owner = Atomic<UInt>(0)
    /// The loop thread woke up and waits for `loopLock`: no task runs inline meanwhile, so a
    /// thread pushing audio back to back cannot keep it from reading the sockets.
    private let loopWaiting = Atomic<Bool>(false)
    /// The same for a thread waiting for the lock in `processApplicationIO`.
    private let applicationWaiting = Atomic<Bool>(false)
    /// Threads blocked in the library (`applicationWillBlock` .. `applicationDidUnblock`): the
    /// loop thread keeps the application's set meanwhile, whoever else calls in.
    private let applicationBlockers = Atomic<Int>(0)
    private let loopThreadID = Atomic<UInt>(0)
    private let epfd: Int32
    private let wakeFd: Int32
    /// The application's epoll set: sockets of application-driven connections (spc_io_fd).
    let applicationFd: Int32
    private var thread: NativeThread?
    /// When the application last served its set (monotonic ns), read by the watchdog.
    private let lastApplicationIONanos = Atomic<UInt64>(0)
    /// How long the application may leave its set unserved before the loop thread takes it.
    static let applicationPatienceMilliseconds = 250
    /// With nothing waiting, how long without a call before the loop thread takes it anyway.
    static let applicationAbsenceMilliseconds = 5_000
    /// Ready sockets of the application's set that the loop thread served itself (for tests).
    let applicationSocketsServedByLoop = Atomic<Int>(0)

    // Loop state (under `loopLock`).
    /// Each registered fd's handler, and the epoll set it is in (`epfd` or `applicationFd`).
    private var handlers: [Int32: (handler: any EventLoopHandler, set: Int32)] = [:]
    /// The loop thread watches the application set (the application does not serve it now).
    private var loopServesApplicationSet = true
    private var watchdog: UInt64?
    /// Inside `processApplicationIO(deliver: true)`: what to deliver on that thread afterwards.
    private var inlineDeliveries: [any InlineDelivery]?
    /// Inside `batchingWakes`: the clients whose callback threads are woken at its end.
    private var deferredWakes: [any DeferredWake]?
    private var timers = DeadlineQueue<() -> Void>()

    private static let instance = Locked<EventLoop?>(nil)

    /// Buffers a connection reads in one wake before it yields the loop to timers and the
    /// other connections (and continues on the next turn).
    static let readsPerWake = 16

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
        let app = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard app >= 0 else {
            let e = errno
            Glibc.close(ep); Glibc.close(ev)
            throw SpeechClientError.errno(.internal, "epoll_create1", e)
        }
        epfd = ep
        wakeFd = ev
        applicationFd = app
        for fd in [ev, app] {
            var event = epoll_event()
            event.events = EPOLLIN.rawValue
            event.data.fd = fd
            if epoll_ctl(ep, EPOLL_CTL_ADD, fd, &event) != 0 {
                let e = errno
                Glibc.close(ep); Glibc.close(ev); Glibc.close(app)
                throw SpeechClientError.errno(.internal, "epoll_ctl", e)
            }
        }
    }

    private func start() throws(SpeechClientError) {
        thread = try NativeThread(name: "spc-eventloop") { [self] in self.run() }
    }

    /// True inside the loop's work: on the loop thread while awake, or in a task run inline.
    var isInLoop: Bool { owner.load(ordering: .relaxed) == UInt(pthread_self()) }

    private var isLoopThread: Bool { loopThreadID.load(ordering: .relaxed) == UInt(pthread_self()) }

    /// Tasks given to `execute` on a thread inside `corking`, run together at its end.
    private final class Cork {
        var tasks: [@Sendable () -> Void] = []
    }

    private static var currentCork: Cork? {
        speechclient_shim_cork().map { Unmanaged<Cork>.fromOpaque($0).takeUnretainedValue() }
    }

    /// Runs `body` (a worker's turn: a file's chunks, tens of them) with the tasks it gives
    /// `execute` held and run together at its end, in order: their frames then leave in one
    /// write instead of one system call per chunk (a tenth of a file transcription's time).
    /// `uncorkNow` hands them over earlier, before the thread may block. The process has one
    /// loop (`shared()`), so every task held is this loop's.
    func corking<T>(_ body: () -> T) -> T {
        if speechclient_shim_cork() != nil { return body() }
        let cork = Unmanaged.passRetained(Cork())
        speechclient_shim_set_cork(cork.toOpaque())
        let result = body()
        speechclient_shim_set_cork(nil)
        let tasks = cork.takeUnretainedValue().tasks
        cork.release()
        run(held: tasks)
        return result
    }

    /// Hands over what the calling thread's cork holds (it may block next: a microphone read,
    /// a connect); nothing without a cork.
    func uncorkNow() {
        run(held: Self.takeHeld())
    }

    /// What the calling thread's cork holds, taken out of it (nothing without a cork).
    private static func takeHeld() -> [@Sendable () -> Void] {
        guard let cork = currentCork, !cork.tasks.isEmpty else { return [] }
        defer { cork.tasks = [] }
        return cork.tasks
    }

    private func run(held tasks: [@Sendable () -> Void]) {
        guard !tasks.isEmpty else { return }
        executeNow { for task in tasks { task() } }
    }

    /// Runs `task` inside the loop's work, after the tasks posted before it: at once on this
    /// thread when the loop is asleep with nothing queued, else queued (never waits for it).
    /// Inside `corking` (and not in the loop's work), held until the cork's end.
    func execute(_ task: @escaping @Sendable () -> Void) {
        if let cork = Self.currentCork, !isInLoop {
            cork.tasks.append(task)
            return
        }
        executeNow(task)
    }

    /// `execute`, cork or not.
    private func executeNow(_ task: @escaping @Sendable () -> Void) {
        if !isInLoop, !loopWaiting.load(ordering: .relaxed), !applicationWaiting.load(ordering: .relaxed),
           queue.withLock({ $0.tasks.isEmpty }), loopLock.tryLock() {
            owner.store(UInt(pthread_self()), ordering: .relaxed)
            _ = runTasks()  // posted before this one since the check: they go first
            task()
            finishInlineWork()
            return
        }
        post(task)
    }

    /// Queues `task` for the loop thread, never running it on this one: for a caller holding
    /// a lock that the loop's work may take.
    func post(_ task: @escaping @Sendable () -> Void) {
        // After what the thread's cork holds (queued too, not run here: the caller may hold a lock).
        let held = Self.takeHeld()
        let wake = queue.withLock { q -> Bool in
            q.tasks.append(contentsOf: held)
            q.tasks.append(task)
            if q.wakePending { return false }
            q.wakePending = true
            return true
        }
        // Inside the loop's work, whoever runs it drains the queue before it lets go.
        if wake && !isInLoop { wakeUp() }
    }

    /// Runs `task` inside the loop's work and waits for it; inline when already inside it.
    func executeAndWait<T: Sendable>(_ task: @escaping @Sendable () -> T) -> T {
        if isInLoop { return task() }
        uncorkNow()  // what the thread gave before goes first, and it is about to wait
        let done = OneShot<T>()
        executeNow { done.set(task()) }
        return done.wait()
    }

    private func wakeUp() {
        var one: UInt64 = 1
        _ = Glibc.write(wakeFd, &one, 8)
    }

    // MARK: loop-thread API

    /// `applicationDriven`: into the application's set (see the type's comment).
    func register(fd: Int32, events: UInt32, handler: any EventLoopHandler, applicationDriven: Bool = false) throws(SpeechClientError) {
        var event = epoll_event()
        event.events = events
        event.data.fd = fd
        let set = applicationDriven ? applicationFd : epfd
        guard epoll_ctl(set, EPOLL_CTL_ADD, fd, &event) == 0 else {
            throw SpeechClientError.errno(.internal, "epoll_ctl(ADD)", errno)
        }
        handlers[fd] = (handler, set)
    }

    func modify(fd: Int32, events: UInt32) {
        var event = epoll_event()
        event.events = events
        event.data.fd = fd
        guard let set = handlers[fd]?.set else { return }
        _ = epoll_ctl(set, EPOLL_CTL_MOD, fd, &event)
    }

    func unregister(fd: Int32) {
        if let removed = handlers.removeValue(forKey: fd) {
            _ = epoll_ctl(removed.set, EPOLL_CTL_DEL, fd, nil)
        }
    }

    // MARK: application-driven I/O (any thread)

    /// Serves the application's set on this thread without waiting for input (spc_io_process):
    /// the ready sockets' handlers, and the tasks they post. Returns how many sockets were ready.
    /// From inside the loop's work (a handler or task): 0, nothing done.
    /// `deliver` (spc_io_dispatch): events that the work queues for clients in application
    /// delivery are delivered on this thread afterwards (`InlineDelivery`), not through their
    /// event fds. Returns how many sockets were ready and how many callbacks ran. `alsoDoing`
    /// runs inside the work, after the sockets (tests: a response's events without a server).
    func processApplicationIO(deliver: Bool = false, alsoDoing: (() -> Void)? = nil) -> (ready: Int, callbacks: Int) {
        if isInLoop { return (0, 0) }
        // Seen by `execute`: pushing threads queue their tasks instead of taking the lock
        // before this thread (it runs them once it has the lock).
        applicationWaiting.store(true, ordering: .relaxed)
        loopLock.lock()
        applicationWaiting.store(false, ordering: .relaxed)
        let me = UInt(pthread_self())
        owner.store(me, ordering: .relaxed)
        lastApplicationIONanos.store(Clock.monotonicNanos(), ordering: .relaxed)
        if loopServesApplicationSet && applicationBlockers.load(ordering: .acquiring) == 0 {
            // The application serves its set from now on; the watchdog checks that it goes on.
            loopServesApplicationSet = false
            _ = epoll_ctl(epfd, EPOLL_CTL_DEL, applicationFd, nil)
            armWatchdog(milliseconds: EventLoop.applicationPatienceMilliseconds)
        }
        if deliver { inlineDeliveries = [] }
        _ = runTasks()
        let ready = serveApplicationSet()
        alsoDoing?()
        let deliveries = finishInlineWork()
        var callbacks = 0
        for d in deliveries { callbacks += d.deliverInline() }
        return (ready, callbacks)
    }

    /// True when the calling thread is doing the loop's work inside
    /// `processApplicationIO(deliver: true)`, which calls `d.deliverInline()` once it is done;
    /// `d` is noted unless `noted` (a call for it is due already: it delivers what is queued).
    func deliverAfterServing(_ d: any InlineDelivery, noted: Bool) -> Bool {
        guard isInLoop, inlineDeliveries != nil else { return false }
        if !noted { inlineDeliveries?.append(d) }
        return true
    }

    /// Runs `body` (the handling of one read: many responses, often several for one client)
    /// with the callback threads' wakes it causes made once each at its end, instead of once
    /// per response: a file's answers woke its callback thread ten times as often, and each
    /// wake is two context switches on a shared core. A read is at most 64 KB, so no client's
    /// callbacks wait for more than that read's handling. Inside the loop's work only.
    func batchingWakes(_ body: () -> Void) {
        if deferredWakes != nil { return body() }
        deferredWakes = []
        body()
        let wakes = deferredWakes ?? []
        deferredWakes = nil
        for w in wakes { w.flushDeferredWake() }
    }

    /// True (and `w` noted unless `noted`) when the calling thread handles a read inside
    /// `batchingWakes`: the caller defers its wake to the end of it.
    func deferWake(_ w: any DeferredWake, noted: Bool) -> Bool {
        guard isInLoop, deferredWakes != nil else { return false }
        if !noted { deferredWakes?.append(w) }
        return true
    }

    /// Ends loop work done on another thread than the loop's: runs what it posted (a flush),
    /// and what that posted, a few rounds, then leaves the rest to the loop thread (woken: a
    /// post made inside the work wrote no wake-up), and lets go of the loop.
    @discardableResult
    private func finishInlineWork() -> [any InlineDelivery] {
        var rounds = 0
        while runTasks() {
            rounds += 1
            if rounds == 4 { wakeUp(); break }
        }
        let deliveries = inlineDeliveries ?? []
        inlineDeliveries = nil
        owner.store(0, ordering: .relaxed)
        loopLock.unlock()
        return deliveries
    }

    /// A thread (maybe the one that serves the application's set) is about to block in the
    /// library (waiting for a client to go idle, freeing one, connecting): the loop thread
    /// serves the set at once, and keeps it until every such thread called
    /// `applicationDidUnblock()` (a call to `processApplicationIO` meanwhile serves, but does
    /// not take it back).
    func applicationWillBlock() {
        applicationBlockers.add(1, ordering: .releasing)
        execute { [self] in self.loopTakesApplicationSet() }
    }

    func applicationDidUnblock() {
        applicationBlockers.subtract(1, ordering: .releasing)
    }

    /// Whether the loop thread serves the application's set now (for tests).
    var loopServesApplicationSetNow: Bool { executeAndWait { self.loopServesApplicationSet } }

    private func loopTakesApplicationSet() {
        if loopServesApplicationSet { return }
        loopServesApplicationSet = true
        if let w = watchdog { cancelTimer(w) }
        watchdog = nil
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.fd = applicationFd
        _ = epoll_ctl(epfd, EPOLL_CTL_ADD, applicationFd, &event)
    }

    private func armWatchdog(milliseconds: Int) {
        watchdog = addTimer(milliseconds: milliseconds) { [unowned self] in
            self.watchdog = nil
            let verdict = EventLoop.watchdogVerdict(nowNanos: Clock.monotonicNanos(),
                                                    lastCallNanos: self.lastApplicationIONanos.load(ordering: .relaxed),
                                                    workWaiting: { self.applicationSetIsReady })
            switch verdict {
            case .takeOver: self.loopTakesApplicationSet()
            case .wait(let ms): self.armWatchdog(milliseconds: ms)
            }
        }
    }

    enum WatchdogVerdict: Equatable { case wait(milliseconds: Int), takeOver }

    /// The watchdog's rule: the application is late when its last call is `patience` old; then
    /// the loop takes the set if work waits, or once the application has been gone `absence`.
    /// Nothing waiting: the application may simply have nothing to do (it keeps the set, so
    /// sparse responses still wake one thread only).
    static func watchdogVerdict(nowNanos now: UInt64, lastCallNanos last: UInt64,
                                workWaiting: () -> Bool) -> WatchdogVerdict {
        let patience = UInt64(applicationPatienceMilliseconds) * 1_000_000
        let absence = UInt64(applicationAbsenceMilliseconds) * 1_000_000
        if now < last + patience { return .wait(milliseconds: Int((last + patience - now + 999_999) / 1_000_000)) }
        if now >= last + absence || workWaiting() { return .takeOver }
        return .wait(milliseconds: applicationPatienceMilliseconds)
    }

    private var applicationSetIsReady: Bool {
        var event = epoll_event()
        return epoll_wait(applicationFd, &event, 1, 0) > 0
    }

    /// Runs the handlers of the application set's ready sockets (inside the loop's work).
    private func serveApplicationSet() -> Int {
        let capacity = 64
        return withUnsafeTemporaryAllocation(of: epoll_event.self, capacity: capacity) { events -> Int in
            guard let base = events.baseAddress else { return 0 }
            let n = epoll_wait(applicationFd, base, Int32(capacity), 0)
            if n <= 0 { return 0 }
            for i in 0..<Int(n) {
                handlers[events[i].data.fd]?.handler.handleEvents(events[i].events)
            }
            return Int(n)
        }
    }

    /// Runs `body` on the loop thread after `milliseconds`; returns an id for `cancelTimer`.
    @discardableResult
    func addTimer(milliseconds: Int, _ body: @escaping () -> Void) -> UInt64 {
        let id = timers.add(deadline: Clock.monotonicNanos() + UInt64(max(milliseconds, 0)) * 1_000_000, body)
        // Added inline while the loop thread sleeps: it must compute its timeout again.
        if !isLoopThread { wakeUp() }
        return id
    }

    func cancelTimer(_ id: UInt64) { timers.cancel(id) }

    // MARK: the loop

    private func run() {
        let me = UInt(pthread_self())
        loopThreadID.store(me, ordering: .releasing)
        let capacity = 256
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: capacity)
        defer { events.deallocate() }
        loopLock.lock()
        owner.store(me, ordering: .relaxed)
        while true {
            _ = runTasks()
            let timeout = runDueTimersAndComputeTimeout()
            // Asleep: other threads may run tasks inline meanwhile.
            owner.store(0, ordering: .relaxed)
            loopLock.unlock()
            let n = epoll_wait(epfd, events, Int32(capacity), timeout)
            loopWaiting.store(true, ordering: .relaxed)
            loopLock.lock()
            loopWaiting.store(false, ordering: .relaxed)
            owner.store(me, ordering: .relaxed)
            if n < 0 { continue }  // EINTR
            for i in 0..<Int(n) {
                let fd = events[i].data.fd
                let mask = events[i].events
                if fd == wakeFd {
                    var value: UInt64 = 0
                    _ = Glibc.read(wakeFd, &value, 8)
                    continue
                }
                if fd == applicationFd {
                    // Only while the loop serves it (a stale readiness finds nothing ready).
                    if loopServesApplicationSet {
                        applicationSocketsServedByLoop.add(serveApplicationSet(), ordering: .relaxed)
                    }
                    continue
                }
                // A handler run earlier in this batch (or a task run inline while the loop
                // slept) may have unregistered this fd; a stale readiness for a reused fd only
                // makes its handler try a read that would block.
                handlers[fd]?.handler.handleEvents(mask)
            }
        }
    }

    /// Runs the tasks queued so far; returns whether more were posted meanwhile.
    private func runTasks() -> Bool {
        // Bounded: tasks posted while these run wait for the next turn, so timers and I/O keep going.
        let batch = queue.withLock { q -> [@Sendable () -> Void] in
            q.wakePending = false
            let t = q.tasks
            q.tasks.removeAll(keepingCapacity: true)
            return t
        }
        if batch.isEmpty { return false }
        for task in batch { task() }
        return queue.withLock { !$0.tasks.isEmpty }
    }

    /// Returns the epoll_wait timeout: 0 when tasks are waiting, else until the next timer (-1: none).
    private func runDueTimersAndComputeTimeout() -> Int32 {
        if !timers.isEmpty {
            // Those due now, earliest first; one a body adds waits for the next turn.
            let now = Clock.monotonicNanos(), addedBefore = timers.nextTimerID
            while let body = timers.takeDue(now: now, addedBefore: addedBefore) { body() }
        }
        if queue.withLock({ !$0.tasks.isEmpty }) { return 0 }
        guard let next = timers.nextDeadline() else { return -1 }
        let now = Clock.monotonicNanos()
        if next <= now { return 0 }
        return Int32(min((next - now + 999_999) / 1_000_000, 60_000))
    }
}

/// A value handed from one thread to another exactly once.
/// Sendable: `lock` guards `value`.
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
