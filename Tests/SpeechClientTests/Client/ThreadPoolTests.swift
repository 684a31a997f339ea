import Synchronization
#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import SpeechClient

/// Callbacks of SPC_DELIVERY_SHARED clients run on the shared delivery pool (issue 21): threads
/// do not grow with clients, a slow callback delays only its own client, and the header's
/// promises on order, free and calls from callbacks hold. SPC_DELIVERY_THREAD keeps a thread per
/// client.
func sharedOptions() throws -> ClientOptions {
    var o = try pushOptions()
    o.delivery = .shared
    return o
}

@Suite(.serialized) struct ThreadPoolTests {
    /// Threads of this process named `name` (what `top -H` shows).
    static func threads(named name: String) -> Int {
        guard let dir = opendir("/proc/self/task") else { return -1 }
        defer { closedir(dir) }
        var count = 0
        while let entry = readdir(dir) {
            let tid = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard tid.first?.isNumber == true, let comm = Files.read("/proc/self/task/\(tid)/comm") else { continue }
            if String(decoding: comm, as: UTF8.self).hasPrefix(name) { count += 1 }
        }
        return count
    }

    @Test func fiftyClientsShareAFewCallbackThreadsAndEachGetsItsEventsInOrder() throws {
        let logs = (0..<50).map { _ in EventLog() }
        let before = Self.threads(named: "spc-cb-shared")
        var clients: [Client] = []
        defer { for c in clients { try? c.close() } }
        for log in logs {
            clients.append(try Client(options: try sharedOptions(), service: FakeRecognitionService(), handler: log.handler))
        }
        for c in clients { try c.start() }
        for c in clients { try pushThreeChunksAndEnd(c) }
        for log in logs {
            #expect(log.lines.first?.hasPrefix("start ") == true)
            #expect(log.lines.last?.hasPrefix("stop ") == true)
            let onPool = log.onCallbackThread.load(ordering: .relaxed)
            #expect(onPool)
        }
        let after = Self.threads(named: "spc-cb-shared")
        // 50 clients in thread delivery start 50 callback threads; the pool adds at most its base.
        #expect(after - max(before, 0) <= ThreadPool.callbacks.baseThreads, "\(before) -> \(after)")
        #expect(Self.threads(named: "spc-cb-shared") == ThreadPool.callbacks.threadCount)
    }

    /// The default: every callback of a client on one thread of its own, joined by free.
    @Test func threadDeliveryGivesEachClientAThreadOfItsOwn() throws {
        let seen = (0..<3).map { _ in Locked<Set<Int32>>([]) }
        var clients: [Client] = []
        for i in 0..<3 {
            clients.append(try Client(options: try pushOptions(), service: FakeRecognitionService(), handler: { _, _ in
                seen[i].withLock { _ = $0.insert(NativeThread.currentKernelID) }
            }))
        }
        for c in clients { try c.start() }
        for c in clients { try pushThreeChunksAndEnd(c) }
        for c in clients { try c.close() }
        let threads = seen.map { $0.withLock { $0 } }
        #expect(threads.allSatisfy { $0.count == 1 })
        #expect(Set(threads.flatMap { $0 }).count == 3)
        // Joined by free: gone from the process. The join returns when the kernel clears the
        // thread's id, a moment before it takes the thread out of /proc (one run of four here
        // still listed it): a thread still there gets a second to go, a thread never joined stays.
        for tid in threads.flatMap({ $0 }) {
            let deadline = Clock.monotonicNanos() + 1_000_000_000
            while Files.read("/proc/self/task/\(tid)/comm") != nil && Clock.monotonicNanos() < deadline { usleep(1_000) }
            #expect(Files.read("/proc/self/task/\(tid)/comm") == nil, "thread \(tid) outlived free")
        }
    }

    @Test func aSlowCallbackDelaysOnlyItsOwnClient() throws {
        let release = Atomic<Bool>(false)
        let slowEntered = Atomic<Int>(0)
        // Every pool thread gets a client whose first callback blocks until released.
        let stuck = ThreadPool.callbacks.baseThreads + 1
        var slow: [Client] = []
        defer {
            release.store(true, ordering: .relaxed)
            for c in slow { try? c.close() }
        }
        for _ in 0..<stuck {
            slow.append(try Client(options: try sharedOptions(), service: FakeRecognitionService(), handler: { _, event in
                guard case .start = event else { return }
                slowEntered.add(1, ordering: .relaxed)
                while !release.load(ordering: .relaxed) { usleepMs(5) }
            }))
        }
        for c in slow { try c.start() }
        let deadline = Clock.monotonicNanos() + 5_000_000_000
        while slowEntered.load(ordering: .relaxed) < stuck && Clock.monotonicNanos() < deadline { usleepMs(5) }
        #expect(slowEntered.load(ordering: .relaxed) == stuck)
        // A client arriving now still gets its callbacks: the pool grows.
        let log = EventLog()
        let fast = try Client(options: try sharedOptions(), service: FakeRecognitionService(), handler: log.handler)
        defer { try? fast.close() }
        try fast.start()
        try pushThreeChunksAndEnd(fast)
        let lines = log.lines
        release.store(true, ordering: .relaxed)  // before any free waits for the slow callbacks
        #expect(lines.last?.hasPrefix("stop ") == true, "\(lines)")
    }

    /// free and wait_idle of one client called from another's callback, while every pool
    /// thread is inside such a callback: the waited-for callbacks still run.
    @Test func freeAndWaitIdleFromAnotherClientsCallbackDoNotDeadlock() throws {
        let pairs = ThreadPool.callbacks.baseThreads + 2
        let done = Atomic<Int>(0)
        var outer: [Client] = []
        defer { for c in outer { try? c.close() } }
        for _ in 0..<pairs {
            let innerLog = EventLog()
            // The inner client's context runs only once the outer callback holds its pool
            // thread, so every callback it waits for needs another shared thread.
            let inner = try Client(options: try sharedOptions(), service: FakeRecognitionService(), handler: innerLog.handler)
            let box = Locked<Client?>(inner)
            outer.append(try Client(options: try sharedOptions(), service: FakeRecognitionService(), handler: { _, event in
                guard case .start = event, let c = box.withLock({ $0 }) else { return }
                let samples = [Int16](repeating: 1000, count: 4800)
                guard (try? c.start()) != nil else { return }
                samples.withUnsafeBufferPointer { try? c.pushAudio($0) }
                guard (try? c.pushEnd()) != nil, (try? c.waitIdle(timeoutMilliseconds: 10_000)) == true else { return }
                try? c.close()
                box.withLock { $0 = nil }
                if innerLog.lines.last?.hasPrefix("stop ") == true { done.add(1, ordering: .relaxed) }
            }))
        }
        for c in outer { try c.start() }
        let deadline = Clock.monotonicNanos() + 15_000_000_000
        while done.load(ordering: .relaxed) < pairs && Clock.monotonicNanos() < deadline { usleepMs(10) }
        #expect(done.load(ordering: .relaxed) == pairs)
    }
}
