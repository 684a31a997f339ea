import Testing
@testable import SpeechClient

@Suite struct GRPCFramingTests {
    private func feed(_ deframer: inout MessageDeframer, _ bytes: [UInt8], chunk: Int) throws -> [[UInt8]] {
        var out: [[UInt8]] = []
        var i = 0
        while i < bytes.count {
            let piece = Array(bytes[i..<min(i + chunk, bytes.count)])
            try piece.withUnsafeBytes { raw in try deframer.append(raw) { out.append($0) } }
            i += chunk
        }
        return out
    }

    @Test(arguments: [1, 2, 3, 5, 7, 64, 100_000])
    func reassemblesAcrossAnySplit(chunk: Int) throws {
        let messages: [[UInt8]] = [[], [1], Array(repeating: 9, count: 300), Array(0..<200).map { UInt8($0) }]
        let wire = messages.flatMap(frame)
        var d = MessageDeframer(maxMessageBytes: 1000)
        #expect(try feed(&d, wire, chunk: chunk) == messages)
        #expect(!d.isMidMessage)
        var partial = MessageDeframer(maxMessageBytes: 1000)
        _ = try feed(&partial, Array(wire.dropLast()), chunk: chunk)
        #expect(partial.isMidMessage)
    }

    /// A message on the wire: the prefix GRPCCall writes, then the bytes.
    func frame(_ message: [UInt8]) -> [UInt8] {
        (0..<5).map { MessageDeframer.prefixByte($0, length: message.count) } + message
    }

    @Test func framePrefix() {
        #expect(frame([0xAA, 0xBB]) == [0, 0, 0, 0, 2, 0xAA, 0xBB])
        #expect(frame(Array(repeating: 0, count: 0x010203)).prefix(5) == [0, 0, 1, 2, 3])
    }

    @Test func rejectsCompressedAndOversized() {
        var d = MessageDeframer(maxMessageBytes: 10)
        #expect(throws: SpeechClientError.self) { _ = try feed(&d, [1, 0, 0, 0, 1, 7], chunk: 6) }
        var e = MessageDeframer(maxMessageBytes: 10)
        do {
            _ = try feed(&e, [0, 0xff, 0xff, 0xff, 0xff], chunk: 5)
            Issue.record("accepted a 4 GB message")
        } catch {
            #expect((error as? SpeechClientError)?.grpcStatus == 8)
        }
    }

    @Test func percentDecoding() {
        #expect(GRPCStatus.percentDecode("caf%C3%A9%20%E2%9C%93") == "caf\u{e9} \u{2713}")
        #expect(GRPCStatus.percentDecode("100%") == "100%")
        #expect(GRPCStatus.percentDecode("%zz%4") == "%zz%4")
        #expect(GRPCStatus.percentDecode("%FF") == "\u{FFFD}")
        #expect(GRPCStatus.percentDecode("plain") == "plain")
    }

    @Test func timeoutHeader() {
        #expect(GRPCStatus.timeoutHeader(milliseconds: 250) == "250m")
        #expect(GRPCStatus.timeoutHeader(milliseconds: 99_999_999) == "99999999m")
        #expect(GRPCStatus.timeoutHeader(milliseconds: 100_000_000) == "100000S")
        #expect(GRPCStatus.timeoutHeader(milliseconds: -5) == "0m")
    }

    @Test func statusMapping() {
        #expect(GRPCStatus.error(status: 0, message: "", path: "/a/b") == nil)
        #expect(GRPCStatus.error(status: 14, message: "x", path: "/a/b")?.code == .network)
        #expect(GRPCStatus.error(status: 4, message: "x", path: "/a/b")?.code == .timeout)
        let denied = GRPCStatus.error(status: 7, message: "no", path: "/a/b")
        #expect(denied?.code == .api)
        #expect(denied?.grpcStatus == 7)
        #expect(denied?.message.contains("PERMISSION_DENIED") == true)
        #expect(GRPCStatus.fromHTTPStatus(503) == 14)
        #expect(GRPCStatus.fromHTTPStatus(401) == 16)
        #expect(GRPCStatus.fromHTTP2ErrorCode(7) == 14)
    }

    /// The HTTP/2 layer reports failures without a gRPC status; the call gives them one.
    @Test func aBrokenConnectionBecomesUnavailableInTheCallLayer() {
        let closed = GRPCStatus.callError(connectionFailure: SpeechClientError(.network, "closed by the server"), path: "/a/B")
        #expect(closed.grpcStatus == GRPCStatus.unavailable)
        #expect(closed.code == .network)
        #expect(closed.message == "/a/B: closed by the server")
        let garbled = GRPCStatus.callError(connectionFailure: SpeechClientError(.parse, "header block too large"), path: "/a/B")
        #expect(garbled.grpcStatus == GRPCStatus.internal)
        let kept = GRPCStatus.callError(connectionFailure: SpeechClientError(.api, "no", grpcStatus: 8), path: "/a/B")
        #expect(kept.grpcStatus == 8)
        #expect(kept.message == "/a/B: no")
        let misuse = GRPCStatus.callError(connectionFailure: SpeechClientError(.invalidState, "from the loop"), path: "/a/B")
        #expect(misuse.grpcStatus == nil)
    }
}
