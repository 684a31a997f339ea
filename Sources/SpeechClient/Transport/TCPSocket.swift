#if canImport(Glibc)
import Glibc
#endif

/// A connected, non-blocking TCP socket with TCP_NODELAY; owns its file descriptor.
public final class TCPSocket: @unchecked Sendable {
    // The descriptor is owned by one thread at a time (the connecting thread, then the event loop).
    public private(set) var fd: Int32

    private init(fd: Int32) { self.fd = fd }

    deinit { close() }

    public func close() {
        if fd >= 0 { Glibc.close(fd); fd = -1 }
    }

    /// Resolves host (IPv4 and IPv6) and tries each address in turn until one connects within
    /// what is left of `timeoutMilliseconds`. Errors name the host and the reason.
    /// A cancelled `cancellation` ends the wait within 50 ms (name resolution itself cannot be
    /// interrupted).
    public static func connect(host: String, port: UInt16, timeoutMilliseconds: Int,
                               cancellation: Cancellation? = nil) throws(SpeechClientError) -> TCPSocket {
        let deadline = Clock.monotonicNanos() + UInt64(max(timeoutMilliseconds, 1)) * 1_000_000
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_ADDRCONFIG | AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &list)
        guard rc == 0, let first = list else {
            let reason = String(cString: gai_strerror(rc))
            throw SpeechClientError(.network, "cannot resolve host '\(host)': \(reason)")
        }
        defer { freeaddrinfo(first) }
        var lastError = SpeechClientError(.network, "no address for host '\(host)'")
        var left = 0
        var counted: UnsafeMutablePointer<addrinfo>? = first
        while let ai = counted { left += 1; counted = ai.pointee.ai_next }
        var entry: UnsafeMutablePointer<addrinfo>? = first
        while let ai = entry {
            entry = ai.pointee.ai_next
            // An address that does not answer gets its share of the time left, not all of it:
            // the next address of a host with several (replicas, IPv6 and IPv4) is tried.
            let now = Clock.monotonicNanos()
            let share = deadline > now ? now + (deadline - now) / UInt64(max(left, 1)) : deadline
            left -= 1
            do throws(SpeechClientError) {
                try cancellation?.check()
                return try connectOne(ai.pointee, host: host, port: port, deadline: share, cancellation: cancellation)
            } catch {
                lastError = error
                if cancellation?.isCancelled == true || Clock.monotonicNanos() >= deadline { break }
            }
        }
        throw lastError
    }

    private static func connectOne(_ ai: addrinfo, host: String, port: UInt16, deadline: UInt64,
                                   cancellation: Cancellation?) throws(SpeechClientError) -> TCPSocket {
        let fd = socket(ai.ai_family, ai.ai_socktype | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), ai.ai_protocol)
        guard fd >= 0 else { throw SpeechClientError.errno(.network, "socket", errno, context: "\(host):\(port)") }
        let sock = TCPSocket(fd: fd)
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        if Glibc.connect(fd, ai.ai_addr, ai.ai_addrlen) == 0 { return sock }
        guard errno == EINPROGRESS else {
            throw SpeechClientError.errno(.network, "connect", errno, context: "cannot connect to \(host):\(port)")
        }
        while true {
            let now = Clock.monotonicNanos()
            guard now < deadline else {
                throw SpeechClientError(.timeout, "cannot connect to \(host):\(port): no answer within the connect timeout")
            }
            try cancellation?.check()
            var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            let wait = Int32(min((deadline - now) / 1_000_000 + 1, 50))
            let n = poll(&pfd, 1, wait)
            if n < 0 {
                if errno == EINTR { continue }
                throw SpeechClientError.errno(.network, "poll", errno, context: "\(host):\(port)")
            }
            if n == 0 { continue }
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
