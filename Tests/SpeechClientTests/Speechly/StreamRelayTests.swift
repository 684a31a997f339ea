import Synchronization
import Testing
@testable import SpeechClient

/// The Speechly stream's relay and its gRPC call hold each other (the relay cancels the call,
/// the call's handler delivers to the relay). Once the stream has closed, both must be freed:
/// kept, every rotated or finished stream stayed in memory for the life of the process.
@Suite struct StreamRelayTests {
    /// Keeps its handler, as the real call does until it is freed.
    final class HandlerKeepingCall: GRPCStreamingCall, @unchecked Sendable {
        let handler: @Sendable (GRPCCallEvent) -> Void
        init(handler: @escaping @Sendable (GRPCCallEvent) -> Void) { self.handler = handler }
        func send(_ message: [UInt8]) {}
        func halfClose() {}
        func cancel() {}
        var queuedSendBytes: Int { 0 }
        func notifyWhenQueued(atMost bytes: Int, _ body: @escaping @Sendable () -> Void) -> Bool { false }
    }

    final class Channel: GRPCCalling, @unchecked Sendable {
        let login = FakeIdentityChannel()
        struct Weak { weak var call: HandlerKeepingCall? }
        let last = Mutex(Weak())
        func unary(path: String, metadata: [(String, String)], request: [UInt8], timeoutMilliseconds: Int?,
                   cancellation: Cancellation?) throws(SpeechClientError) -> [UInt8] {
            try login.unary(path: path, metadata: metadata, request: request, timeoutMilliseconds: timeoutMilliseconds, cancellation: cancellation)
        }
        func openStreamingCall(path: String, metadata: [(String, String)], cancellation: Cancellation?,
                               handler: @escaping @Sendable (GRPCCallEvent) -> Void) throws(SpeechClientError) -> any GRPCStreamingCall {
            let call = HandlerKeepingCall(handler: handler)
            last.withLock { $0.call = call }
            return call
        }
    }

    func service(_ channel: Channel) throws -> SpeechlyService {
        let identity = IdentityClient(channel: channel, cache: TokenCache(directory: temporaryDirectory() + "/cache"), deviceId: "d", appId: "a", projectId: nil)
        return SpeechlyService(channel: channel, identity: identity, log: { _, _ in })
    }

    @Test(arguments: [GRPCCallEvent.closed(nil), .closed(SpeechClientError(.network, "reset")), .message([0xff])])
    func aClosedStreamIsFreedWithItsCall(ending: GRPCCallEvent) throws {
        let channel = Channel()
        let closed = Atomic<Int>(0)
        var stream: (any RecognitionStream)? = try service(channel).openStream(config: SLUConfig(languageCode: "en-US"), cancellation: nil) { event in
            if case .closed = event { closed.add(1, ordering: .relaxed) }
        }
        do {
            let call = try #require(channel.last.withLock { $0.call })
            call.handler(ending)  // a message that does not decode ends the stream too
        }
        #expect(closed.load(ordering: .relaxed) == 1)
        stream = nil
        _ = stream
        #expect(channel.last.withLock { $0.call } == nil, "the call (and its relay) outlived the stream")
    }

    @Test func anOpenStreamKeepsItsCall() throws {
        let channel = Channel()
        let stream = try service(channel).openStream(config: SLUConfig(languageCode: "en-US"), cancellation: nil) { _ in }
        #expect(channel.last.withLock { $0.call } != nil)
        _ = stream
    }
}
