import Glibc
import Testing
@testable import SpeechClient

/// A host with several addresses (replicas behind one name, IPv6 and IPv4): when one address
/// refuses or never answers, the next is tried within the same connect timeout. The resolver here
/// gives one address per loopback name, so the lists are built from real listening sockets.
@Suite struct TCPSocketTests {
    /// A listening socket on 127.0.0.1 with an ephemeral port; `backlog` 0 and one connection
    /// queued make a port whose SYNs are dropped: an address that never answers.
    final class Listener {
        let fd: Int32
        let port: UInt16
        private var open = true

        init(backlog: Int32 = 16) throws {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_addr.s_addr = inet_addr("127.0.0.1")
            var len = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) }
            }
            try #require(fd >= 0 && bound == 0 && listen(fd, backlog) == 0)
            _ = withUnsafeMutablePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
            }
            self.fd = fd
            port = UInt16(bigEndian: addr.sin_port)
        }

        /// Closes the socket once. Closing twice (here, then in `deinit`) would close whatever
        /// another test running in parallel had meanwhile been given the same descriptor number.
        func shut() {
            if open { close(fd) }
            open = false
        }

        deinit { shut() }
    }

    func address(_ port: UInt16) throws -> SocketAddress {
        try #require(try SocketAddress.resolve(host: "127.0.0.1", port: port).first)
    }

    func deadline(milliseconds: UInt64) -> UInt64 { Clock.monotonicNanos() + milliseconds * 1_000_000 }

    /// Addresses written out skip the resolver; names still go through it.
    @Test func literalAddressesAndNamesBothResolve() throws {
        #expect(SocketAddress.isNumeric("127.0.0.1") && SocketAddress.isNumeric("::1"))
        #expect(!SocketAddress.isNumeric("localhost") && !SocketAddress.isNumeric("1.2.3") && !SocketAddress.isNumeric(""))
        let v4 = try SocketAddress.resolve(host: "127.0.0.1", port: 80)
        #expect(v4.count == 1 && v4.first?.family == AF_INET)
        let v6 = try SocketAddress.resolve(host: "::1", port: 80)
        #expect(v6.count == 1 && v6.first?.family == AF_INET6)
        #expect(try !SocketAddress.resolve(host: "localhost", port: 80).isEmpty)
    }

    @Test func aRefusedAddressIsFollowedByTheNextOne() throws {
        let good = try Listener()
        let refused = try Listener()
        let refusedPort = refused.port
        refused.shut()  // nothing listens there any more: ECONNREFUSED
        let socket = try TCPSocket.connect(to: [try address(refusedPort), try address(good.port)], host: "replicas",
                                           port: good.port, deadline: deadline(milliseconds: 2000))
        #expect(socket.fd >= 0)
    }

    @Test func anAddressThatNeverAnswersGetsOnlyItsShareOfTheTimeout() throws {
        let full = try Listener(backlog: 0)
        // Linux queues backlog + 1 connections; the next SYNs are dropped, so connect() hangs.
        let queued = try TCPSocket.connect(to: [try address(full.port)], host: "full", port: full.port,
                                           deadline: deadline(milliseconds: 2000))
        _ = queued
        let good = try Listener()
        let began = Clock.monotonicNanos()
        let socket = try TCPSocket.connect(to: [try address(full.port), try address(good.port)], host: "replicas",
                                           port: good.port, deadline: deadline(milliseconds: 4000))
        let tookMs = (Clock.monotonicNanos() - began) / 1_000_000
        #expect(socket.fd >= 0)
        // The stuck address had half of the 4 s; the whole timeout would have left nothing.
        #expect(tookMs >= 1500 && tookMs < 3900, "took \(tookMs) ms")

        let stuck = [try address(full.port)]
        var thrown: SpeechClientError?
        do throws(SpeechClientError) {
            _ = try TCPSocket.connect(to: stuck, host: "full", port: full.port, deadline: deadline(milliseconds: 300))
        } catch { thrown = error }
        #expect(thrown?.code == .timeout)
        #expect(thrown?.message.contains("cannot connect to full:") == true)
    }

    @Test func theLastAddressesErrorIsTheOneReported() throws {
        let gone = try Listener()
        let port = gone.port
        gone.shut()
        let refused = [try address(port), try address(port)]
        var thrown: SpeechClientError?
        do throws(SpeechClientError) {
            _ = try TCPSocket.connect(to: refused, host: "gone", port: port, deadline: deadline(milliseconds: 1000))
        } catch { thrown = error }
        #expect(thrown?.code == .network)
        #expect(thrown?.message.contains("cannot connect to gone:\(port)") == true)
        var none: SpeechClientError?
        do throws(SpeechClientError) {
            _ = try TCPSocket.connect(to: [], host: "nowhere", port: 1, deadline: deadline(milliseconds: 100))
        } catch { none = error }
        #expect(none?.message == "no address for host 'nowhere'")
    }
}
