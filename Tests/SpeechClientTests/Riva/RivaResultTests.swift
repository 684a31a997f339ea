import Testing
@testable import SpeechClient

/// Riva's StreamingRecognizeResponse as the backend reads it (field numbers from NVIDIA's
/// riva_asr.proto): interim results without words become words without times, final ones keep
/// Riva's offsets, a 0 offset (absent on the wire in proto3) is 0, not unknown.
@Suite struct RivaResultTests {
    func response(_ build: (inout ProtobufWriter) -> Void) -> [UInt8] {
        var w = ProtobufWriter()
        build(&w)
        return w.bytes
    }

    @Test func interimAndFinalResults() throws {
        let bytes = response { r in
            r.message(1) { result in                 // results
                result.message(1) { alt in alt.string(1, "turn on the") }   // alternatives.transcript
                result.int32(5, 1)                   // channel_tag
            }
            r.message(1) { result in
                result.message(1) { alt in
                    alt.string(1, "Turn on the lights.")
                    for (i, word) in ["Turn", "on", "the", "lights."].enumerated() {
                        alt.message(3) { w in
                            if i > 0 { w.int32(1, Int32(i * 300)) }   // start_time (0 left out)
                            w.int32(2, Int32(i * 300 + 250))         // end_time
                            w.string(3, word)
                        }
                    }
                }
                result.int32(2, 1)                   // is_final
            }
            r.message(100) { id in id.string(1, "request-1") }      // id: not used
        }
        let results = try RivaResult.decodeResponse(bytes[...])
        #expect(results.count == 2)
        #expect(!results[0].isFinal && results[0].words.map(\.text) == ["turn", "on", "the"])
        #expect(results[0].words.allSatisfy { $0.startMilliseconds == -1 && $0.endMilliseconds == -1 })
        #expect(results[1].isFinal)
        #expect(results[1].words.map(\.text) == ["Turn", "on", "the", "lights."])
        #expect(results[1].words.map(\.startMilliseconds) == [0, 300, 600, 900])
        #expect(results[1].words.map(\.endMilliseconds) == [250, 550, 850, 1150])
        #expect(results[1].words.map(\.index) == [0, 1, 2, 3])
    }

    @Test func malformedResponsesAreParseErrors() {
        for bad: [UInt8] in [[0x0A, 0x05, 0x01], [0x0A, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]] {
            #expect(throws: SpeechClientError.self) { _ = try RivaResult.decodeResponse(bad[...]) }
        }
    }
}
