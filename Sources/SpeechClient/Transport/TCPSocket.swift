#if canImport(Glibc)
import Glibc
#endif

/// A connected, non-blocking stream socket, owns its file descriptor: TCP (with TCP_NODELAY),
/// or a Unix socket (`connectUnix`, for a Wyoming service on the same machine).
/// Sendable: `fd` has one owner at a time (the connecting thread, then the event loop), never two at once.
public final class TCPSocket: @unchecked Sendable {
    public private(set) var fd: Int32

    private init(fd: Int32) { self.fd = fd }

    deinit { close() }

    public func close() {
        if fd >= 0 { Glibc.close(fd); fd = -1 }
    }

    /// Resolves host (IPv4 and IPv6) and tries each address in turn until one connects within
    /// what is left of `timeoutMilliseconds`. Errors name the host and the reason.
    /// A cancelled `cancellation` ends the wait within 50 ms (name resolution itself cannot be
    /// interrupted). `whileConnecting` runs while a connection attempt waits for its answer (once
    /// per attempt that waits: it must do its work once): work that would otherwise follow the
    /// round trip; what it throws ends the connect.
    public static func connect(host: String, port: UInt16, timeoutMilliseconds: Int,
                               cancellation: Cancellation? = nil,
                               whileConnecting: (() throws(SpeechClientError) -> Void)? = nil) throws(SpeechClientError) -> TCPSocket {
        let deadline = Clock.monotonicNanos() + UInt64(max(timeoutMilliseconds, 1)) * 1_000_000
        let addresses = try SocketAddress.resolve(host: host, port: port)
        return try connect(to: addresses, host: host, port: port, deadline: deadline, cancellation: cancellation,
                           whileConnecting: whileConnecting)
    }

    /// Tries `addresses` in order until one connects before `deadline`. An address that does not
    /// answer gets its share of the time left, not all of it, so the next address of a host with
    /// several (replicas, IPv6 and IPv4) is still tried. The error is the last address's.
    public static func connect(to addresses: [SocketAddress], host: String, port: UInt16, deadline: UInt64,
                               cancellation: Cancellation? = nil,
                               whileConnecting: (() throws(SpeechClientError) -> Void)? = nil) throws(SpeechClientError) -> TCPSocket {
        var lastError = SpeechClientError(.network, "no address for host '\(host)'")
        // What `whileConnecting` throws ends the connect: no other address would help.
        var hookFailed = false
        for (index, address) in addresses.enumerated() {
            let now = Clock.monotonicNanos()
            let left = UInt64(addresses.count - index)
            let share = deadline > now ? now + (deadline - now) / left : deadline
            do throws(SpeechClientError) {
                try cancellation?.check()
                return try connectOne(address, host: host, port: port, deadline: share, cancellation: cancellation,
                                      whileConnecting: whileConnecting, hookFailed: &hookFailed)
            } catch {
                if hookFailed { throw error }
                lastError = error
                if cancellation?.isCancelled == true || Clock.monotonicNanos() >= deadline { break }
            }
        }
        throw lastError
    }

    /// Connects to the Unix stream socket at `path` before `deadline`. A listener whose backlog
    /// is full answers EAGAIN: that is retried every 20 ms until the deadline.
    public static func connectUnix(path: String, deadline: UInt64, cancellation: Cancellation? = nil) throws(SpeechClientError) -> TCPSocket {
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: addr.sun_path)
        guard bytes.count < capacity, !bytes.contains(0) else {
            throw SpeechClientError(.invalidArgument, "Unix socket path '\(path)' is longer than \(capacity - 1) bytes")
        }
        withUnsafeMutableBytes(of: &addr.sun_path) { $0.copyBytes(from: bytes) }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SpeechClientError.errno(.network, "socket", errno, context: path) }
        let sock = TCPSocket(fd: fd)
        let length = socklen_t(MemoryLayout<sockaddr_un>.size)
        while true {
            try cancellation?.check()
            let rc = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, length) }
            }
            if rc == 0 { return sock }
            let e = errno
            if e == EINTR { continue }
            guard e == EAGAIN, Clock.monotonicNanos() < deadline else {
                if e == EAGAIN {
                    throw SpeechClientError(.timeout, "cannot connect to \(path): its listener stayed full for the connect timeout")
                }
                throw SpeechClientError.errno(.network, "connect", e, context: "cannot connect to \(path)")
            }
            var pause = timespec(tv_sec: 0, tv_nsec: 20_000_000)
            nanosleep(&pause, nil)
        }
    }

    private static func connectOne(_ address: SocketAddress, host: String, port: UInt16, deadline: UInt64,
                                   cancellation: Cancellation?,
                                   whileConnecting: (() throws(SpeechClientError) -> Void)?,
                                   hookFailed: inout Bool) throws(SpeechClientError) -> TCPSocket {
        let fd = socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SpeechClientError.errno(.network, "socket", errno, context: "\(host):\(port)") }
        let sock = TCPSocket(fd: fd)
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        var storage = address.storage
        let rc = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, address.length) }
        }
        if rc == 0 { return sock }
        guard errno == EINPROGRESS else {
            throw SpeechClientError.errno(.network, "connect", errno, context: "cannot connect to \(host):\(port)")
        }
        do throws(SpeechClientError) {
            try whileConnecting?()
        } catch {
            hookFailed = true
            throw error
        }
        while true {
            try cancellation?.check()
            // Polled once more past the deadline (at once): `whileConnecting` may have taken the
            // time the answer came in.
            let now = Clock.monotonicNanos()
            var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            let wait = now < deadline ? Int32(min((deadline - now) / 1_000_000 + 1, 50)) : 0
            let n = poll(&pfd, 1, wait)
            if n < 0 {
                if errno == EINTR { continue }
                throw SpeechClientError.errno(.network, "poll", errno, context: "\(host):\(port)")
            }
            if n == 0 {
                guard Clock.monotonicNanos() < deadline else {
                    throw SpeechClientError(.timeout, "cannot connect to \(host):\(port): no answer within the connect timeout")
                }
                continue
            }
            var err: Int32 = 0
            var len = socklen_t(MemoryLayout<Int32>.size)
            _ = getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len)
            if err != 0 {
                throw SpeechClientError.errno(.network, "connect", err, context: "cannot connect to \(host):\(port)")
            }
            return sock
        }
    }
}

/// One address of a host, copied out of getaddrinfo's list (which is freed at once).
public struct SocketAddress {
    public let family: Int32
    let storage: sockaddr_storage
    let length: socklen_t

    /// Every TCP address of `host` (IPv4 and IPv6, as configured here), in the resolver's order.
    public static func resolve(host: String, port: UInt16) throws(SpeechClientError) -> [SocketAddress] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        // An address written out (127.0.0.1, ::1) needs no resolver: without this, glibc asks
        // the kernel for the machine's addresses (AI_ADDRCONFIG) and tries nscd first, about
        // 0.1 ms of every connection attempt.
        hints.ai_flags = isNumeric(host) ? AI_NUMERICHOST | AI_NUMERICSERV : AI_ADDRCONFIG | AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &list)
        guard rc == 0, let first = list else {
            let reason = String(cString: gai_strerror(rc))
            throw SpeechClientError(.network, "cannot resolve host '\(host)': \(reason)")
        }
        defer { freeaddrinfo(first) }
        var addresses: [SocketAddress] = []
        var entry: UnsafeMutablePointer<addrinfo>? = first
        while let ai = entry {
            entry = ai.pointee.ai_next
            guard let sa = ai.pointee.ai_addr, Int(ai.pointee.ai_addrlen) <= MemoryLayout<sockaddr_storage>.size else { continue }
            var storage = sockaddr_storage()
            withUnsafeMutableBytes(of: &storage) { dst in
                dst.copyMemory(from: UnsafeRawBufferPointer(start: sa, count: Int(ai.pointee.ai_addrlen)))
            }
            addresses.append(SocketAddress(family: ai.pointee.ai_family, storage: storage, length: ai.pointee.ai_addrlen))
        }
        return addresses
    }

    static func isNumeric(_ host: String) -> Bool {
        var v6 = in6_addr()
        return inet_pton(AF_INET, host, &v6) == 1 || inet_pton(AF_INET6, host, &v6) == 1
    }
}
