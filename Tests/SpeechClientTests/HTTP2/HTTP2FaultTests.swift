import Foundation
import Synchronization
import Testing
@testable import SpeechClient

/// One scripted `h2` fault server (h2c), shared by this suite.
private let sharedFaultServer = Locked<PeerProcess?>(nil)

private func faultServer() throws -> PeerProcess {
    try sharedFaultServer.withLock { slot in
        if let s = slot { return s }
        let s = try PeerProcess(script: "h2_fault_server.py")
        slot = s
        return s
    }
}

private func channel(configuration: GRPCChannel.Configuration = .init()) throws -> GRPCChannel {
    GRPCChannel.shared(server: try ServerURL(parsing: "grpc://127.0.0.1:\(try faultServer().port)"), tls: TLSSettings(),
                       connectTimeoutMilliseconds: 5000, configuration: configuration)
}

private func unaryError(_ name: String, timeout: Int? = 5000, channel ch: GRPCChannel? = nil) throws -> SpeechClientError? {
    let ch = try ch ?? channel()
    do {
        _ = try ch.unary(path: "/fault.Fault/\(name)", metadata: [], request: [1, 2, 3], timeoutMilliseconds: timeout)
        return nil
    } catch {
        return error
    }
}

/// Runs a streaming call that only receives; returns its messages and final error.
private func stream(_ name: String, channel ch: GRPCChannel? = nil, halfClose: Bool = true) throws -> ([[UInt8]], SpeechClientError??) {
    let ch = try ch ?? channel()
    let events = EventCollector()
    let call = try ch.openStreamingCall(path: "/fault.Fault/\(name)", metadata: []) { events.handle($0) }
    if halfClose { call.halfClose() }
    let closed = events.waitClosed()
    #expect(events.eventsAfterClose == 0)
    return (events.messages, closed)
}

@Suite(.timeLimit(.minutes(2))) struct HTTP2FaultTests {
    @Test func trailersOnlyStatusWithPercentDecodedMessage() throws {
        let e = try unaryError("TrailersOnly")
        #expect(e?.code == .api)
        #expect(e?.grpcStatus == 5)
        #expect(e?.message.contains("not found: caf\u{e9} \u{2713} 100%") == true, "\(String(describing: e))")
    }

    /// A status past 16 is none of gRPC's: UNKNOWN (2), as gRPC's clients take it; passed on as
    /// it came, spc_error_grpc_status() gave 99 where the header promises 0-16.
    @Test func aStatusGRPCDoesNotDefineIsUnknown() throws {
        let e = try unaryError("StatusOutOfRange")
        #expect(e?.code == .api)
        #expect(e?.grpcStatus == 2, "\(String(describing: e))")
        #expect(e?.message.contains("no such code") == true, "\(String(describing: e))")
    }

    @Test func oneByteDataFramesAreReassembled() throws {
        let (messages, closed) = try stream("OneByteFrames")
        #expect(closed == .some(nil))
        #expect(messages == [Array("hello, one byte at a time".utf8), [], Array("second".utf8)])
    }

    @Test func truncatedMessageThenOKIsInternal() throws {
        let (messages, closed) = try stream("Truncated")
        #expect(messages.isEmpty)
        let e = closed ?? nil
        #expect(e?.grpcStatus == 13)
        #expect(e?.message.contains("middle of a message") == true)
    }

    @Test func unavailableAfterOneMessage() throws {
        let (messages, closed) = try stream("UnavailableAfterOne")
        #expect(messages == [Array("first".utf8)])
        let e = closed ?? nil
        #expect(e?.code == .network)
        #expect(e?.grpcStatus == 14)
        #expect(e?.message.contains("going away") == true)
    }

    /// The server may end the call while the client is still sending: the status arrives at
    /// once, without waiting for the client to half-close.
    @Test func statusArrivesWhileTheClientIsStillSending() throws {
        let (messages, closed) = try stream("UnavailableAfterOne", halfClose: false)
        #expect(messages == [Array("first".utf8)])
        #expect((closed ?? nil)?.grpcStatus == 14)
        let (_, noStatus) = try stream("NoStatus", halfClose: false)
        #expect((noStatus ?? nil)?.message.contains("without a grpc-status") == true)
        let (_, trailersOnly) = try stream("TrailersOnly", halfClose: false)
        #expect((trailersOnly ?? nil)?.grpcStatus == 5)
    }

    @Test func rstStreamFailsTheCall() throws {
        let e = try unaryError("Reset")
        #expect(e?.code == .network)  // the transport broke the call: retried mid-context
        #expect(e?.grpcStatus == 13)
        #expect(e?.message.contains("reset the stream") == true)
    }

    @Test func compressedMessageIsRejected() throws {
        let e = try unaryError("Compressed")
        #expect(e?.code == .parse)
        #expect(e?.message.contains("compressed") == true)
    }

    @Test func oversizedMessageIsRejectedBeforeBuffering() throws {
        let e = try unaryError("Oversized")
        #expect(e?.code == .parse)
        #expect(e?.grpcStatus == 8)
    }

    @Test func missingStatusIsInternal() throws {
        let e = try unaryError("NoStatus")
        #expect(e?.grpcStatus == 13)
        // A stream broken in transit (a proxy whose backend died): retried, not a protocol error.
        #expect(e?.code == .network)
        #expect(e?.message.contains("without a grpc-status") == true)
    }

    @Test func httpErrorStatusIsMapped() throws {
        let e = try unaryError("HTTP503")
        #expect(e?.code == .network)
        #expect(e?.grpcStatus == 14)
    }

    @Test func requestTooLargeForAProxyNamesTheStreamBudget() throws {
        // nginx's answer to a body over client_max_body_size: not retried (it would fail again),
        // and the error says which option to lower.
        let e = try unaryError("HTTP413")
        #expect(e?.code == .api)
        #expect(e?.message.contains("HTTP status 413") == true)
        #expect(e?.message.contains("spc_options_set_stream_budget") == true, "\(String(describing: e))")
    }

    /// ENHANCE_YOUR_CALM doubles the keepalive interval of the next connections, once per
    /// connection: three such frames on one connection doubled it three times (a handful made
    /// it an hour, and a dead peer then went unnoticed that long).
    @Test(arguments: [("GoAwayCalm", 29_014), ("GoAwayCalmThrice", 29_015)])
    func enhanceYourCalmDoublesTheKeepaliveOfTheNextConnectionsOnce(scenario: String, interval: Int) throws {
        let settings = HTTP2Settings(keepaliveIntervalMilliseconds: interval)
        let ch = try channel(configuration: .init(http2: settings))
        let reply = try ch.unary(path: "/fault.Fault/\(scenario)", metadata: [], request: [], timeoutMilliseconds: 5000)
        #expect(reply == Array("ok".utf8))
        let pool = ConnectionPool.shared(host: "127.0.0.1", port: UInt16(try faultServer().port), useTLS: false,
                                         tls: TLSSettings(), settings: settings)
        #expect(pool.nextKeepaliveIntervalMilliseconds == 2 * interval)
    }

    /// ENHANCE_YOUR_CALM for another reason than pings (a server shedding load, limiting
    /// resets) leaves the keepalive as it is: it doubled it too, for the rest of the process.
    @Test func enhanceYourCalmForAnotherReasonKeepsTheKeepalive() throws {
        let settings = HTTP2Settings(keepaliveIntervalMilliseconds: 29_016)
        let ch = try channel(configuration: .init(http2: settings))
        let reply = try ch.unary(path: "/fault.Fault/GoAwayCalmForLoad", metadata: [], request: [], timeoutMilliseconds: 5000)
        #expect(reply == Array("ok".utf8))
        let pool = ConnectionPool.shared(host: "127.0.0.1", port: UInt16(try faultServer().port), useTLS: false,
                                         tls: TLSSettings(), settings: settings)
        #expect(pool.nextKeepaliveIntervalMilliseconds == 29_016)
    }

    /// A GOAWAY repeated 10,000 times is said to the call once, and the call still ends OK.
    @Test func aRepeatedGoAwayIsSaidOnce() throws {
        let settings = HTTP2Settings(keepaliveIntervalMilliseconds: 29_017)  // a connection of its own
        let ch = try channel(configuration: .init(http2: settings))
        let events = EventCollector()
        let call = try ch.openStreamingCall(path: "/fault.Fault/GoAwayRepeated", metadata: []) { events.handle($0) }
        call.halfClose()
        let closed = events.waitClosed()
        #expect(closed == .some(nil))
        #expect(events.goingAway == 1)
    }

    /// A grpc-status in the response's headers is not the call's: cut after them (the stream
    /// ended by a DATA frame, no trailers), the call was broken in transit, and is retried.
    /// Read from the headers, it ended OK, and Riva took that for the finish.
    @Test func aStatusInTheResponseHeadersIsNotTheCalls() throws {
        let (messages, closed) = try stream("StatusInHeaders")
        #expect(messages == [Array("message".utf8)])
        let e = closed ?? nil
        #expect(e?.code == .network)
        #expect(e?.message.contains("without a grpc-status") == true, "\(String(describing: e))")
    }

    @Test func wrongContentTypeIsRejected() throws {
        let e = try unaryError("WrongContentType")
        #expect(e?.code == .parse)
        #expect(e?.message.contains("text/html") == true)
    }

    /// Issue 23 item 3: the reset is named for what it was (it read "content-type ''").
    @Test(arguments: ["HugeHeaders", "HugeTrailers"]) func oversizedHeaderBlockResetsTheStream(scenario: String) throws {
        let e = try unaryError(scenario)
        #expect(e?.grpcStatus == 13, "\(String(describing: e))")
        #expect(e?.message.contains("sent a header block over the 64 KiB limit") == true, "\(String(describing: e))")
    }

    /// CVE-2024-28182: a header block continued without end made the HTTP/2 library decode for as
    /// long as the server sent. Debian's libnghttp2 fixed it in 1.52.0-1+deb12u2 (the package
    /// depends on 1.52.0-1+deb12u3): the connection fails at once, not at the call's deadline.
    @Test func aHeaderBlockThatNeverEndsFailsTheConnectionAtOnce() throws {
        let ch = try channel(configuration: .init(http2: HTTP2Settings(keepaliveIntervalMilliseconds: 29_005)))
        let start = Clock.monotonicNanos()
        let e = try unaryError("ContinuationFlood", timeout: 8000, channel: ch)
        let took = (Clock.monotonicNanos() - start) / 1_000_000
        // nghttp2's own words: an unpatched library ends only at the deadline (`.timeout`).
        #expect(e?.message.contains("Too many CONTINUATION frames") == true, "\(String(describing: e))")
        #expect(took < 4000, "\(took) ms: \(String(describing: e))")
    }

    @Test func unaryWithTwoResponsesIsInternal() throws {
        let e = try unaryError("TwoMessages")
        #expect(e?.code == .parse)
        #expect(e?.message.contains("2 response messages") == true)
    }

    @Test func deadlineFiresWhenServerNeverAnswers() throws {
        let start = Clock.monotonicNanos()
        let e = try unaryError("Silent", timeout: 300)
        #expect(e?.code == .timeout)
        #expect(e?.grpcStatus == 4)
        #expect((Clock.monotonicNanos() - start) / 1_000_000 < 2000)
    }

    @Test func goawayRefusedUnaryIsRetriedOnANewConnection() throws {
        // Own connection (distinct settings), so other tests' streams are not caught in it.
        let ch = try channel(configuration: .init(http2: HTTP2Settings(keepaliveIntervalMilliseconds: 29_001)))
        let reply = try ch.unary(path: "/fault.Fault/GoAwayOnce", metadata: [], request: [], timeoutMilliseconds: 5000)
        #expect(reply == Array("ok".utf8))
    }

    @Test func goawayRefusedStreamIsUnavailable() throws {
        let ch = try channel(configuration: .init(http2: HTTP2Settings(keepaliveIntervalMilliseconds: 29_002)))
        let (_, closed) = try stream("GoAwayRefuseAll", channel: ch)
        let e = closed ?? nil
        #expect(e?.code == .network)
        #expect(e?.grpcStatus == 14)
        // New calls go to a new connection.
        let reply = try ch.unary(path: "/fault.Fault/Ok", metadata: [], request: [], timeoutMilliseconds: 5000)
        #expect(reply == Array("ok".utf8))
    }

    @Test func gracefulGoawayLetsTheStreamFinish() throws {
        let ch = try channel(configuration: .init(http2: HTTP2Settings(keepaliveIntervalMilliseconds: 29_003)))
        let (messages, closed) = try stream("GoAwayGraceful", channel: ch)
        #expect(closed == .some(nil))
        #expect(messages == [Array("ok".utf8)])
        let reply = try ch.unary(path: "/fault.Fault/Ok", metadata: [], request: [], timeoutMilliseconds: 5000)
        #expect(reply == Array("ok".utf8))
    }

    @Test func gracefulGoawayTellsTheStreamItCovers() throws {
        // The stream may finish, but hears that its connection is going away (so a context can
        // move to a new connection at its next pause: issue 18).
        let ch = try channel(configuration: .init(http2: HTTP2Settings(keepaliveIntervalMilliseconds: 29_013)))
        let events = EventCollector()
        let call = try ch.openStreamingCall(path: "/fault.Fault/GoAwayGraceful", metadata: []) { events.handle($0) }
        call.halfClose()
        #expect(events.waitClosed() == .some(nil))
        #expect(events.goingAway == 1)
    }

    /// Status OK while the client's request still queues behind flow control (the server
    /// ended the call early): the call says so (`endedWithRequestQueued`), so that a
    /// recognizer's relay takes it as audio never heard (Riva's). A call whose request all
    /// went out does not.
    @Test func anOKEndWithTheRequestStillQueuedSaysSo() throws {
        // A connection of its own: the scenario stops acknowledging DATA on its connection.
        let ch = try channel(configuration: .init(http2: HTTP2Settings(keepaliveIntervalMilliseconds: 29_006)))
        let events = EventCollector()
        let call = try ch.openStreamingCall(path: "/fault.Fault/OkWhileStillReceiving", metadata: []) { events.handle($0) }
        for _ in 0..<40 { call.send([UInt8](repeating: 7, count: 3200)) }  // 128 KB: past the 64 KiB window
        call.halfClose()
        #expect(events.waitClosed() == .some(nil))
        #expect(call.endedWithRequestQueued)
        // Nothing queued (the scenario answers at the request's headers: a message sent after
        // them might still be queued then, so none is sent).
        let whole = EventCollector()
        let done = try channel().openStreamingCall(path: "/fault.Fault/Anything", metadata: []) { whole.handle($0) }
        done.halfClose()
        #expect(whole.waitClosed() == .some(nil))
        #expect(!done.endedWithRequestQueued)
    }

    @Test func serverThatStopsReadingFailsTheCallWithBoundedMemory() throws {
        let limit = 64 * 1024
        let ch = try channel(configuration: .init(http2: HTTP2Settings(keepaliveIntervalMilliseconds: 29_004),
                                                  maxQueuedSendBytes: limit))
        let events = EventCollector()
        let call = try ch.openStreamingCall(path: "/fault.Fault/StopReading", metadata: []) { events.handle($0) }
        let chunk = [UInt8](repeating: 7, count: 3200)
        // 65,535 bytes fit the server's window; then at most `limit` more may queue.
        var sent = 0
        while !events.isClosed && sent < 1000 {
            call.send(chunk)
            sent += 1
            if sent % 10 == 0 { Thread.sleep(forTimeInterval: 0.005) }
        }
        let closed = events.waitClosed()
        let e = closed ?? nil
        #expect(e?.code == .network)
        #expect(e?.message.contains("stopped reading") == true, "\(String(describing: e))")
        #expect(sent * 3205 < 65_535 + limit + 20 * 3205, "the call failed late: after \(sent) chunks")
    }

    /// A server that stopped reading closed the connection's flow-control window too: the call
    /// that found it retires the connection, and the next call on the channel goes to a new one.
    /// Kept in the pool, the next call was stuck behind the same window.
    @Test func aConnectionWhoseWindowAServerNeverReopensTakesNoNewCall() throws {
        let limit = 64 * 1024
        let ch = try channel(configuration: .init(http2: HTTP2Settings(keepaliveIntervalMilliseconds: 29_018),
                                                  maxQueuedSendBytes: limit))
        let events = EventCollector()
        let call = try ch.openStreamingCall(path: "/fault.Fault/StopReading", metadata: []) { events.handle($0) }
        let chunk = [UInt8](repeating: 7, count: 3200)
        // The server's 65,535-byte windows filled first (the loop given time to send them), so
        // that the overflow finds the connection's window shut.
        for _ in 0..<21 { call.send(chunk) }
        Thread.sleep(forTimeInterval: 0.3)
        var sent = 21
        while !events.isClosed && sent < 1000 {
            call.send(chunk)
            sent += 1
            if sent % 10 == 0 { Thread.sleep(forTimeInterval: 0.005) }
        }
        #expect((events.waitClosed() ?? nil)?.message.contains("stopped reading") == true)
        let next = EventCollector()
        let second = try ch.openStreamingCall(path: "/fault.Fault/AnswerAfterMessage", metadata: []) { next.handle($0) }
        second.send([1, 2, 3])
        second.halfClose()
        let closed = next.waitClosed(seconds: 3)
        #expect(closed == .some(nil), "\(String(describing: closed))")
        #expect(next.messages == [Array("ok".utf8)])
        second.cancel()
    }

    /// A peer that stopped reading the socket and, after the client's keepalive PING went out,
    /// sends again (its own PINGs) without answering it: the connection fails within the
    /// keepalive timeout. Anything that arrived was taken as the answer, and it was never found
    /// dead. (A peer that never falls silent for an interval is not probed: as gRPC's own
    /// clients, reads count as life; the streams' own timeouts retire such a connection.)
    @Test func aPeerStillSendingButNotReadingFailsTheKeepalive() throws {
        // The PING goes out at 1 s, is due by 3 s; the peer talks from 1.5 s on.
        let ch = try channel(configuration: .init(http2: HTTP2Settings(keepaliveIntervalMilliseconds: 1_000,
                                                                       keepaliveTimeoutMilliseconds: 2_000)))
        let events = EventCollector()
        _ = try ch.openStreamingCall(path: "/fault.Fault/DeafButTalking", metadata: []) { events.handle($0) }
        let closed = events.waitClosed(seconds: 6)
        let e = closed ?? nil
        #expect(e?.code == .network)
        #expect(e?.message.contains("PING") == true, "\(String(describing: e))")
    }

    /// A connection that went silent while idle (no reset: a NAT that forgot it) is probed
    /// when the next call opens on it, and fails within the keepalive timeout. The clock of
    /// the last receipt was reset by the open, so each call waited a whole interval more (in
    /// real settings past its own start timeout, attempt after attempt on the same connection).
    @Test func aConnectionSilentSinceItWasIdleIsProbedWhenACallOpensOnIt() throws {
        let ch = try channel(configuration: .init(http2: HTTP2Settings(keepaliveIntervalMilliseconds: 2_000,
                                                                       keepaliveTimeoutMilliseconds: 300)))
        #expect(try unaryError("OkThenBlackhole", channel: ch) == nil)
        usleepMs(2_200)  // idle past the keepalive interval (and nothing received)
        let events = EventCollector()
        _ = try ch.openStreamingCall(path: "/fault.Fault/Silent", metadata: []) { events.handle($0) }
        let closed = events.waitClosed(seconds: 1.5)  // before: at 2.3 s (the interval, then the timeout)
        let e = closed ?? nil
        #expect(e?.code == .network)
        #expect(e?.message.contains("PING") == true, "\(String(describing: e))")
    }

    /// A 103 Early Hints before the response is not the response: the call goes on. It failed
    /// as "HTTP status 103 instead of 200".
    @Test func anInformationalAnswerBeforeTheResponseIsSkipped() throws {
        let e = try unaryError("EarlyHints")
        #expect(e == nil, "\(String(describing: e))")
    }

    @Test func keepalivePingTimeoutDetectsADeadPeer() throws {
        let ch = try channel(configuration: .init(http2: HTTP2Settings(keepaliveIntervalMilliseconds: 200,
                                                                       keepaliveTimeoutMilliseconds: 300)))
        let events = EventCollector()
        let start = Clock.monotonicNanos()
        _ = try ch.openStreamingCall(path: "/fault.Fault/Blackhole", metadata: []) { events.handle($0) }
        let closed = events.waitClosed(seconds: 5)
        let e = closed ?? nil
        #expect(e?.code == .network)
        #expect(e?.message.contains("PING") == true, "\(String(describing: e))")
        #expect((Clock.monotonicNanos() - start) / 1_000_000 < 3000)
    }
}
