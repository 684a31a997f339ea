import Testing
@testable import SpeechClient

@Suite struct ProtobufTests {
    @Test func encodesRequestsAsProtocolMdSays() {
        #expect(SLURequest.stop.encoded() == [0x32, 0x00])
        #expect(SLURequest.config(SLUConfig(languageCode: "en-US")).encoded()
                == [0x0A, 0x0C, 0x10, 0x01, 0x18, 0x80, 0x7D, 0x22, 0x05] + Array("en-US".utf8))
        #expect(SLURequest.audio([1, -1]).encoded() == [0x1A, 0x04, 0x01, 0x00, 0xFF, 0xFF])
        #expect(SLURequest.rttResponse(id: 7).encoded() == [0x22, 0x02, 0x08, 0x07])
        #expect(SLURequest.start(appId: "a", options: [ContextOption(key: "k", values: ["v", "w"])]).encoded()
                == [0x2A, 0x0E, 0x0A, 0x01, 0x61, 0x12, 0x09, 0x0A, 0x01, 0x6B, 0x12, 0x01, 0x76, 0x12, 0x01, 0x77])
        #expect(LoginRequest(deviceId: "d", scope: .project(projectId: "p")).encoded()
                == [0x0A, 0x01, 0x64, 0x1A, 0x03, 0x0A, 0x01, 0x70])
    }

    @Test func negativeInt32TakesTenBytes() {
        var w = ProtobufWriter()
        w.int32(1, -1)
        #expect(w.bytes == [0x08, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01])
        var r = ProtobufReader(w.bytes)
        let v = try? r.next()?.value.int32("x")
        #expect(v == -1)
    }

    @Test func decodesResponses() throws {
        let started = try SLUResponse.decode([0x0A, 0x01, 0x63, 0x52, 0x00])
        #expect(started == SLUResponse(audioContext: "c", segmentId: 0, payload: .started))
        // transcript { word "hi" index 1 start 100 end 300 }, segment_id 2
        let word = try SLUResponse.decode([0x10, 0x02, 0x1A, 0x0B, 0x0A, 0x02, 0x68, 0x69, 0x10, 0x01, 0x18, 0x64, 0x20, 0xAC, 0x02])
        #expect(word.segmentId == 2)
        #expect(word.payload == .transcript(SLUWord(text: "hi", index: 1, startMilliseconds: 100, endMilliseconds: 300)))
        let finished = try SLUResponse.decode([0x5A, 0x07, 0x12, 0x05, 0x0A, 0x01, 0x45, 0x12, 0x00])
        #expect(finished.payload == .finished(errorCode: "E", errorMessage: ""))
        // Unknown fields (99, varint) are skipped.
        let unknown = try SLUResponse.decode([0x98, 0x06, 0x05, 0x52, 0x00])
        #expect(unknown.payload == .started)
    }

    @Test(arguments: [
        [0x0A] as [UInt8],                 // key without value
        [0x0A, 0x05, 0x61],                // length past the end
        [0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01], // 11-byte varint
        [0x0B],                            // wire type 3 (groups) unsupported
        [0x00, 0x00],                      // field 0
        [0x1A, 0x02, 0x0A, 0x09],          // nested message truncated
        [0x52, 0x01, 0x08],                // started with a truncated field inside
    ])
    func malformedInputIsAParseError(bytes: [UInt8]) {
        #expect { try SLUResponse.decode(bytes[...]) } throws: { ($0 as? SpeechClientError)?.code == .parse }
    }

    /// What a response may make is bounded as it is decoded: a 4 MiB message of empty words
    /// decoded to two million words (about 30 times its size) before the assembler's bounds
    /// looked; an audio context id is short.
    @Test func decodingRefusesMoreWordsEntitiesOrContextThanTheBounds() throws {
        func tentative(words: Int) -> [UInt8] {
            var w = ProtobufWriter()
            w.message(7) { t in for _ in 0..<words { t.message(2) { _ in } } }
            return w.bytes
        }
        let ok = try SLUResponse.decode(tentative(words: SegmentAssembler.maxWordsPerSegment)[...])
        if case .tentativeTranscript(_, let words) = ok.payload { #expect(words.count == SegmentAssembler.maxWordsPerSegment) } else { Issue.record("\(ok)") }
        #expect { try SLUResponse.decode(tentative(words: SegmentAssembler.maxWordsPerSegment + 1)[...]) } throws: {
            ($0 as? SpeechClientError)?.code == .parse && ($0 as? SpeechClientError)?.message.contains("more than 16384 words") == true
        }
        var e = ProtobufWriter()
        e.message(8) { t in for _ in 0...SegmentAssembler.maxEntitiesPerSegment { t.message(1) { _ in } } }
        #expect { try SLUResponse.decode(e.bytes[...]) } throws: { ($0 as? SpeechClientError)?.code == .parse }
        var c = ProtobufWriter()
        c.string(1, String(repeating: "c", count: SLUResponse.maxAudioContextBytes))
        #expect(try SLUResponse.decode(c.bytes[...]).audioContext.utf8.count == SLUResponse.maxAudioContextBytes)
        var long = ProtobufWriter()
        long.string(1, String(repeating: "c", count: SLUResponse.maxAudioContextBytes + 1))
        #expect { try SLUResponse.decode(long.bytes[...]) } throws: {
            ($0 as? SpeechClientError)?.code == .parse && ($0 as? SpeechClientError)?.message.contains("audio context id") == true
        }
    }

    @Test func randomBytesNeverCrash() {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let n = Int.random(in: 0..<40, using: &rng)
            let bytes = (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
            _ = try? SLUResponse.decode(bytes[...])
            _ = try? LoginResponse.decode(bytes[...])
        }
    }

    @Test func loginResponse() throws {
        var w = ProtobufWriter()
        w.string(1, "tok")
        w.uint32(2, 3600)
        w.uint64(3, 1_900_000_000)
        w.string(4, "2030-03-17T17:46:40Z")
        let r = try LoginResponse.decode(w.bytes[...])
        #expect(r.token == "tok" && r.validForSeconds == 3600 && r.expiresAtEpoch == 1_900_000_000 && r.expiresAt == "2030-03-17T17:46:40Z")
    }
}
