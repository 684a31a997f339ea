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

    /// What the relay hands the worker: "segment <id> tentative|final <words>", "finished",
    /// "closed" or "closed <code>".
    final class Relayed: @unchecked Sendable {
        let lines = Locked<[String]>([])
        lazy var relay = RivaRelay(contextId: "c") { [lines] event in
            let line: String
            switch event {
            case .response(let r):
                switch r.payload {
                case .tentativeTranscript(_, let words): line = "segment \(r.segmentId) tentative \(words.map(\.text).joined(separator: " "))"
                case .finalTranscript(let words, _): line = "segment \(r.segmentId) final \(words.map(\.text).joined(separator: " "))"
                case .finished: line = "finished"
                default: line = "other"
                }
            case .closed(let error): line = error.map { "closed \($0.code)" } ?? "closed"
            case .goingAway: line = "goingAway"
            case .endpointed: line = "endpointed"
            case .ignoredAfterEndpoint: line = "ignoredAfterEndpoint"
            }
            lines.withLock { $0.append(line) }
        }
    }

    /// One result: its transcript, final or not.
    func result(_ text: String, final: Bool) -> [UInt8] {
        response { r in
            r.message(1) { result in
                result.message(1) { alt in if !text.isEmpty { alt.string(1, text) } }
                if final { result.int32(2, 1) }
            }
        }
    }

    /// Riva takes words back: an interim "uh", then a final with no words. The segment ends
    /// empty, and the next utterance is the next segment. Before, the empty final was skipped
    /// (taking an id), "uh" stayed open and came back as a final segment when the stream
    /// finished, after later segments. An empty result for no open segment is skipped.
    @Test func wordsTakenBackEndTheirSegmentEmpty() {
        let r = Relayed()
        for (text, final) in [("", false), ("", true), ("uh", false), ("", false), ("", true), ("lights on", false), ("lights on", true)] {
            r.relay.deliver(.message(result(text, final: final)))
        }
        #expect(r.lines.withLock { $0 } == ["segment 0 tentative uh", "segment 0 tentative ", "segment 0 final ",
                                             "segment 1 tentative lights on", "segment 1 final lights on"])
    }

    /// Riva sends a hypothesis as two interim results of one response, its stable start and its
    /// unstable rest (NVIDIA's clients join them). Taken one by one, the rest replaced the
    /// start: "kitchen lights" only. A final and the interim after it stay apart.
    @Test func interimResultsOfOneResponseAreJoined() {
        let r = Relayed()
        let two = response { w in
            for piece in ["turn on the kit", "chen lights"] {
                w.message(1) { result in result.message(1) { alt in alt.string(1, piece) } }
            }
        }
        r.relay.deliver(.message(two))
        let finalThenInterim = response { w in
            w.message(1) { result in
                result.message(1) { alt in alt.string(1, "turn on the kitchen lights") }
                result.int32(2, 1)
            }
            w.message(1) { result in result.message(1) { alt in alt.string(1, "and") } }
            w.message(1) { result in result.message(1) { alt in alt.string(1, " the radio") } }
        }
        r.relay.deliver(.message(finalThenInterim))
        #expect(r.lines.withLock { $0 } == ["segment 0 tentative turn on the kitchen lights",
                                             "segment 0 final turn on the kitchen lights",
                                             "segment 1 tentative and the radio"])
    }

    /// Interim pieces with word times keep them, numbered on; a final between two runs ends the
    /// first.
    @Test func joinedInterimsKeepTheirWordTimes() {
        func word(_ text: String, _ index: Int32, _ start: Int32) -> SLUWord {
            SLUWord(text: text, index: index, startMilliseconds: start, endMilliseconds: start + 100)
        }
        let a = RivaResult(isFinal: false, transcript: "turn on", words: [word("turn", 0, 0), word("on", 1, 200)], confidence: 0.5)
        let b = RivaResult(isFinal: false, transcript: " lights", words: [word("lights", 0, 400)], confidence: 0.9)
        let f = RivaResult(isFinal: true, transcript: "ok", words: [word("ok", 0, 600)], confidence: 0.8)
        let joined = RivaResult.joiningInterims([a, b, f, a])
        #expect(joined.count == 3)
        #expect(joined[0].transcript == "turn on lights" && joined[0].confidence == -1)
        #expect(joined[0].words == [word("turn", 0, 0), word("on", 1, 200), word("lights", 2, 400)])
        #expect(joined[1] == f && joined[2] == a)
    }

    /// Status OK is the server's finish only after the client's half-close (the end of its
    /// audio). Before it, the call ended under the audio: a loss (replayed), not a finish.
    /// Before, it was taken as the finish: the user's context ended, no error, every later
    /// word unsent.
    @Test func anOKEndBeforeTheEndOfTheAudioIsALoss() {
        let early = Relayed()
        early.relay.started()
        early.relay.deliver(.closed(nil))
        #expect(early.lines.withLock { $0 } == ["other", "closed network"])
        let done = Relayed()
        done.relay.started()
        done.relay.halfClosed.store(true, ordering: .releasing)
        done.relay.deliver(.closed(nil))
        #expect(done.lines.withLock { $0 } == ["other", "finished", "closed"])
        // After the half-close, with audio still queued behind flow control (the server ended
        // the call early: GRPCCall says so): a loss, not the finish. A file's last chunks were
        // lost so, with no error.
        final class EndedEarly: GRPCStreamingCall, @unchecked Sendable {
            func send(_ message: [UInt8]) {}
            func halfClose() {}
            func cancel() {}
            var queuedSendBytes: Int { 0 }
            func notifyWhenQueued(atMost bytes: Int, _ body: @escaping @Sendable () -> Void) -> Bool { false }
            var endedWithRequestQueued: Bool { true }
        }
        let cut = Relayed()
        let call = EndedEarly()
        cut.relay.attach(call)
        cut.relay.started()
        cut.relay.halfClosed.store(true, ordering: .releasing)
        cut.relay.deliver(.closed(nil))
        #expect(cut.lines.withLock { $0 } == ["other", "closed network"])
        // A call that carried no context yet (a prepared stream a proxy let go): its end only,
        // no `finished` (which ended the context of a worker that had just taken the stream:
        // no error, no more audio), and no `started` after it.
        let idle = Relayed()
        idle.relay.deliver(.closed(nil))
        idle.relay.started()
        #expect(idle.lines.withLock { $0 } == ["closed"])
    }

    /// A final without word offsets carries what the server had heard (`audio_processed`, ms)
    /// for the worker's pause search; Int32.max when the server did not say; nothing on a timed
    /// final or an interim. A negative or NaN `audio_processed` is not taken.
    @Test func untimedFinalsSayHowMuchTheServerHadHeard() throws {
        func result(_ text: String, final: Bool, timed: Bool = false, processed: Float?) -> [UInt8] {
            response { r in
                r.message(1) { result in
                    result.message(1) { alt in
                        alt.string(1, text)
                        if timed { alt.message(3) { w in w.int32(1, 100); w.int32(2, 400); w.string(3, text) } }
                    }
                    if final { result.int32(2, 1) }
                    if let processed { result.float(6, processed) }
                }
            }
        }
        let heard = Locked<[Int32?]>([])
        let relay = RivaRelay(contextId: "c") { event in
            if case .response(let r) = event, case .finalTranscript = r.payload { heard.withLock { $0.append(r.heardMilliseconds) } }
            if case .response(let r) = event, case .tentativeTranscript = r.payload { heard.withLock { $0.append(r.heardMilliseconds ?? -7) } }
        }
        relay.started()
        relay.deliver(.message(result("one", final: false, processed: 1.0)))
        relay.deliver(.message(result("one", final: true, processed: 1.25)))
        relay.deliver(.message(result("two", final: true, processed: nil)))
        relay.deliver(.message(result("three", final: true, timed: true, processed: 3.0)))
        relay.deliver(.message(result("four", final: true, processed: -1)))
        relay.deliver(.message(result("five", final: true, processed: .nan)))
        #expect(heard.withLock { $0 } == [-7, 1_250, .max, nil, .max, .max])
        #expect(try RivaResult.decodeResponse(result("x", final: true, processed: 2.5)[...]).first?.audioProcessedMilliseconds == 2_500)
    }

    /// Words all taken back by the last interim and no final before the end: the segment ends
    /// empty at the finish (the application saw it; left open, it had no final at all).
    @Test func aSegmentEmptiedAndNeverFinalisedEndsEmptyAtTheFinish() {
        let r = Relayed()
        r.relay.started()
        for (text, final) in [("uh", false), ("", false)] { r.relay.deliver(.message(result(text, final: final))) }
        r.relay.halfClosed.store(true, ordering: .releasing)
        r.relay.deliver(.closed(nil))
        #expect(r.lines.withLock { $0 } == ["other", "segment 0 tentative uh", "segment 0 tentative ", "segment 0 final ", "finished", "closed"])
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

    /// Confidences (0.8): each word's and the alternative's, carried as 0...1; absent (proto3's
    /// 0), NaN or out of range as none (-1); interim results have none.
    @Test func confidencesOfWordsAndTheTranscript() throws {
        let bytes = response { r in
            r.message(1) { result in
                result.message(1) { alt in alt.string(1, "play some") }
            }
            r.message(1) { result in
                result.message(1) { alt in
                    alt.string(1, "play some jazz now")
                    alt.float(2, 0.75)                                      // confidence
                    for (word, c) in [("play", Float(0.5)), ("some", 0), ("jazz", Float.nan), ("now", 1.5)] {
                        alt.message(3) { w in
                            w.int32(2, 100)
                            w.string(3, word)
                            w.float(4, c)                                    // word confidence
                        }
                    }
                }
                result.int32(2, 1)
            }
        }
        let results = try RivaResult.decodeResponse(bytes[...])
        #expect(results[0].confidence == -1 && results[0].words.allSatisfy { $0.confidence == -1 })
        #expect(results[1].confidence == 0.75)
        #expect(results[1].words.map(\.confidence) == [0.5, -1, -1, -1])
        // Through the assembler to the snapshot and its JSON line.
        var assembler = SegmentAssembler()
        let applied = assembler.apply(SLUResponse(audioContext: "c", segmentId: 0,
                                                  payload: .finalTranscript(results[1].words, confidence: results[1].confidence)))
        let segment = try #require(applied)
        #expect(segment.isFinal && segment.confidence == 0.75)
        #expect(segment.words.map(\.confidence) == [0.5, -1, -1, -1])
        #expect(segment.json.contains("\"transcript\":\"play some jazz now\",\"confidence\":0.75,\"words\""))
        #expect(segment.json.contains("\"text\":\"play\",\"index\":0,\"start_ms\":0,\"end_ms\":100,\"final\":true,\"confidence\":0.5}"))
        #expect(segment.json.contains("\"text\":\"some\",\"index\":1,\"start_ms\":0,\"end_ms\":100,\"final\":true}"))
        // A server without confidences: the JSON line is as before 0.8.
        let appliedPlain = assembler.apply(SLUResponse(audioContext: "c", segmentId: 1,
                                                       payload: .finalTranscript([SLUWord(text: "a", index: 0, startMilliseconds: 0, endMilliseconds: 5)], confidence: -1)))
        let plain = try #require(appliedPlain)
        #expect(plain.confidence == -1 && !plain.json.contains("confidence"))
    }

    /// Bounded as decoded: words in a result, results in a response.
    @Test func decodingRefusesMoreWordsOrResultsThanTheBounds() {
        let words = response { r in
            r.message(1) { result in
                result.message(1) { alt in for _ in 0...SegmentAssembler.maxWordsPerSegment { alt.message(3) { w in w.string(3, "a") } } }
            }
        }
        #expect { try RivaResult.decodeResponse(words[...]) } throws: { ($0 as? SpeechClientError)?.code == .parse }
        // Words counted in the text too: an interim result's transcript, a word holding many.
        let oneLetter = String(repeating: "a ", count: 2 << 20)  // 4 MiB
        let transcript = response { r in r.message(1) { result in result.message(1) { alt in alt.string(1, oneLetter) } } }
        #expect { try RivaResult.decodeResponse(transcript[...]) } throws: {
            ($0 as? SpeechClientError)?.message.contains("more than \(SegmentAssembler.maxWordsPerSegment) words") == true
        }
        let phrases = response { r in
            r.message(1) { result in
                result.message(1) { alt in for _ in 0..<3 { alt.message(3) { w in w.string(3, String(repeating: "a ", count: 6_000)) } } }
            }
        }
        #expect { try RivaResult.decodeResponse(phrases[...]) } throws: { ($0 as? SpeechClientError)?.code == .parse }
        let twoPhrases = response { r in
            r.message(1) { result in
                result.message(1) { alt in for _ in 0..<2 { alt.message(3) { w in w.string(3, String(repeating: "a ", count: 6_000)) } } }
            }
        }
        #expect((try? RivaResult.decodeResponse(twoPhrases[...]))?.first?.words.last?.index == 11_999)
        // The bound is the response's: 128 results of 16,384 words each are refused too.
        let perResult = String(repeating: "a ", count: SegmentAssembler.maxWordsPerSegment)
        let manyResults = response { r in for _ in 0..<128 { r.message(1) { result in result.message(1) { alt in alt.string(1, perResult) } } } }
        #expect { try RivaResult.decodeResponse(manyResults[...]) } throws: {
            ($0 as? SpeechClientError)?.message.contains("a response of more than") == true
        }
        let shared = response { r in for _ in 0..<2 { r.message(1) { result in result.message(1) { alt in alt.string(1, String(repeating: "a ", count: 8_192)) } } } }
        #expect((try? RivaResult.decodeResponse(shared[...]))?.map(\.words.count) == [8_192, 8_192])
        let results = response { r in for _ in 0...SegmentAssembler.maxOpenSegments { r.message(1) { _ in } } }
        #expect { try RivaResult.decodeResponse(results[...]) } throws: { ($0 as? SpeechClientError)?.code == .parse }
        let fine = response { r in for _ in 0..<SegmentAssembler.maxOpenSegments { r.message(1) { result in result.message(1) { _ in } } } }
        #expect((try? RivaResult.decodeResponse(fine[...]))?.count == SegmentAssembler.maxOpenSegments)
    }

    /// The models a server lists: a model or language it does not have is refused before READY,
    /// naming what it offers; a listing that says nothing of languages judges none.
    @Test func theServersModelListJudgesTheModelAndLanguage() throws {
        func config(_ models: [(String, String?)]) -> [UInt8] {
            response { r in
                for (name, language) in models {
                    r.message(1) { m in
                        m.string(1, name)
                        m.message(2) { e in e.string(1, "type"); e.string(2, "online") }
                        if let language { m.message(2) { e in e.string(1, "language_code"); e.string(2, language) } }
                    }
                }
            }
        }
        let listed = try RivaModel.decodeConfigResponse(config([("en-model", "en-US"), ("de-model", "de-DE")])[...])
        #expect(listed.map(\.name) == ["en-model", "de-model"] && listed[1].parameters == ["type": "online", "language_code": "de-DE"])
        #expect(RivaModel.refusal(of: listed, model: nil, language: "en-US", peer: "p") == nil)
        #expect(RivaModel.refusal(of: listed, model: nil, language: "en-GB", peer: "p") == nil)  // the server decides
        #expect(RivaModel.refusal(of: listed, model: "de-model", language: "de-DE", peer: "p") == nil)
        let noModel = try #require(RivaModel.refusal(of: listed, model: "fr-model", language: "fr-FR", peer: "p"))
        #expect(noModel.code == .invalidArgument && noModel.message.contains("has no model 'fr-model'; it offers: en-model (en-US), de-model (de-DE)"))
        let noLanguage = try #require(RivaModel.refusal(of: listed, model: "de-model", language: "en-US", peer: "p"))
        #expect(noLanguage.message.contains("has no model 'de-model' for language 'en-US'"), "\(noLanguage.message)")
        #expect(RivaModel.refusal(of: [], model: "x", language: "xx", peer: "p") == nil)
        let unlabelled = try RivaModel.decodeConfigResponse(config([("m", nil)])[...])
        #expect(RivaModel.refusal(of: unlabelled, model: nil, language: "fr-FR", peer: "p") == nil)
        // Multilingual models (NVIDIA's codes) are the server's to judge: never refused here.
        for code in ["multi", "es-en-US", "ja-en-JP", "em-ea"] {
            let listing = try RivaModel.decodeConfigResponse(config([("parakeet", code)])[...])
            #expect(RivaModel.refusal(of: listing, model: nil, language: "en-US", peer: "p") == nil, "\(code)")
        }
        let plainOnly = try RivaModel.decodeConfigResponse(config([("de", "de-DE"), ("es", "es-419")])[...])
        #expect(RivaModel.refusal(of: plainOnly, model: nil, language: "en-US", peer: "p") != nil)
    }

    @Test func malformedResponsesAreParseErrors() {
        for bad: [UInt8] in [[0x0A, 0x05, 0x01], [0x0A, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]] {
            #expect(throws: SpeechClientError.self) { _ = try RivaResult.decodeResponse(bad[...]) }
        }
    }

    /// Through the relay a malformed response ends the call with gRPC status 13 INTERNAL, as the
    /// header promises for a malformed response, naming the message: it had no status (-1 in
    /// spc_error_grpc_status) and named only the field.
    @Test func aMalformedResponseIsInternalAndNamedThroughTheRelay() {
        let errors = Locked<[SpeechClientError]>([])
        let relay = RivaRelay(contextId: "c") { event in
            if case .closed(let e?) = event { errors.withLock { $0.append(e) } }
        }
        relay.started()
        relay.deliver(.message([0x0A, 0x05, 0x01]))
        let got = errors.withLock { $0 }
        #expect(got.count == 1 && got.first?.code == .parse && got.first?.grpcStatus == GRPCStatus.internal, "\(got)")
        #expect(got.first?.message.contains("malformed StreamingRecognizeResponse") == true, "\(got)")
    }

    /// A result with no alternative (Riva's voice-activity `pipeline_states` alone) says nothing
    /// of words: skipped, as NVIDIA's clients skip it. It was taken as the words taken back: the
    /// open segment's tentative words were cleared, and it ended empty at the finish.
    @Test func aResultWithoutAnAlternativeLeavesTheOpenSegmentAsItWas() throws {
        let r = Relayed()
        r.relay.deliver(.message(result("turn on the", final: false)))
        let statesOnly = response { w in
            w.message(1) { result in result.message(7) { states in states.float(1, 0.1) } }  // pipeline_states
        }
        r.relay.deliver(.message(statesOnly))
        r.relay.deliver(.message(result("turn on the lights", final: true)))
        #expect(r.lines.withLock { $0 } == ["segment 0 tentative turn on the", "segment 0 final turn on the lights"])
        #expect(try RivaResult.decodeResponse(statesOnly[...]).isEmpty)
    }
}
