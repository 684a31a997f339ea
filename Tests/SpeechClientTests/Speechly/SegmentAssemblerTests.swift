import Testing
@testable import SpeechClient

@Suite struct SegmentAssemblerTests {
    func word(_ t: String, _ i: Int32) -> SLUWord {
        SLUWord(text: t, index: i, startMilliseconds: i * 300, endMilliseconds: i * 300 + 250)
    }

    @Test func tentativeThenFinal() throws {
        var a = SegmentAssembler()
        let started = a.apply(SLUResponse(audioContext: "c", segmentId: 0, payload: .started))
        #expect(started == nil)
        let tResult = a.apply(SLUResponse(audioContext: "c", segmentId: 0,
            payload: .tentativeTranscript(text: "turn on", words: [word("turn", 0), word("on", 1)])))
        let t = try #require(tResult)
        #expect(t.transcript == "turn on")
        #expect(!t.isFinal)
        #expect(t.words.allSatisfy { !$0.isFinal })
        let fResult = a.apply(SLUResponse(audioContext: "c", segmentId: 0, payload: .transcript(word("turn", 0))))
        let f = try #require(fResult)
        #expect(f.words.map(\.isFinal) == [true, false])
        _ = a.apply(SLUResponse(audioContext: "c", segmentId: 0, payload: .tentativeIntent("turn_on")))
        _ = a.apply(SLUResponse(audioContext: "c", segmentId: 0, payload: .tentativeEntities([SLUEntity(type: "room", value: "kitchen", startPosition: 3, endPosition: 4)])))
        _ = a.apply(SLUResponse(audioContext: "c", segmentId: 0, payload: .transcript(word("on", 1))))
        _ = a.apply(SLUResponse(audioContext: "c", segmentId: 0, payload: .intent("turn_on")))
        let endResult = a.apply(SLUResponse(audioContext: "c", segmentId: 0, payload: .segmentEnd))
        let end = try #require(endResult)
        #expect(end.isFinal)
        #expect(end.transcript == "turn on")
        #expect(end.intent == "turn_on" && end.intentIsFinal)
        // The tentative entity was never made final, so the final segment drops it.
        #expect(end.entities.isEmpty)
        #expect(end.json == #"{"type":"segment","context_id":"c","segment_id":0,"final":true,"transcript":"turn on","words":[{"text":"turn","index":0,"start_ms":0,"end_ms":250,"final":true},{"text":"on","index":1,"start_ms":300,"end_ms":550,"final":true}],"intent":{"intent":"turn_on","final":true},"entities":[]}"#)
        // A late update for an ended segment is ignored.
        let late = a.apply(SLUResponse(audioContext: "c", segmentId: 0, payload: .transcript(word("late", 2))))
        #expect(late == nil)
    }

    /// Some segments of a context closed (their stream finished without ending them), and the
    /// ended ones forgotten: the others stay open, and what is forgotten is no longer refused.
    @Test func closingAndForgettingSomeSegmentsOfAContext() throws {
        var a = SegmentAssembler()
        for id: Int32 in 0...2 {
            _ = a.apply(SLUResponse(audioContext: "c", segmentId: id, payload: .tentativeTranscript(text: "w", words: [word("w\(id)", 0)])))
        }
        let closed = a.closeUnfinished(context: "c", segments: [0, 2])
        #expect(closed.map(\.segmentId) == [0, 2] && closed.allSatisfy(\.isFinal))
        #expect(closed.flatMap(\.words).allSatisfy { !$0.isFinal })
        #expect(a.closeUnfinished(context: "c", segments: []).isEmpty)
        #expect(a.apply(SLUResponse(audioContext: "c", segmentId: 0, payload: .transcript(word("late", 1)))) == nil)
        a.forgetEnded(context: "c", segments: [0])
        #expect(a.apply(SLUResponse(audioContext: "c", segmentId: 0, payload: .transcript(word("again", 1)))) != nil)
        #expect(a.apply(SLUResponse(audioContext: "c", segmentId: 2, payload: .transcript(word("late", 1)))) == nil)
        #expect(a.closeUnfinished(context: "c").map(\.segmentId) == [0, 1])
    }

    @Test func interleavedSegmentsAndFinishedDropsTentative() throws {
        var a = SegmentAssembler()
        let s0Result = a.apply(SLUResponse(audioContext: "c", segmentId: 0, payload: .transcript(word("one", 0))))
        let s0 = try #require(s0Result)
        let s1Result = a.apply(SLUResponse(audioContext: "c", segmentId: 1, payload: .tentativeTranscript(text: "two", words: [word("two", 0)])))
        let s1 = try #require(s1Result)
        #expect(s0.segmentId == 0 && s1.segmentId == 1)
        let s0bResult = a.apply(SLUResponse(audioContext: "c", segmentId: 0, payload: .transcript(word("more", 1))))
        let s0b = try #require(s0bResult)
        #expect(s0b.transcript == "one more")
        let finished = a.apply(SLUResponse(audioContext: "c", segmentId: 1, payload: .finished(errorCode: nil, errorMessage: nil)))
        #expect(finished == nil)
        // After finished, the context's segments start from nothing.
        let againResult = a.apply(SLUResponse(audioContext: "c", segmentId: 1, payload: .tentativeTranscript(text: "x", words: [word("x", 0)])))
        let again = try #require(againResult)
        #expect(again.transcript == "x")
    }

    @Test func finalEntitiesReplaceTentativeOnes() throws {
        var a = SegmentAssembler()
        _ = a.apply(SLUResponse(audioContext: "c", segmentId: 0, payload: .tentativeEntities([SLUEntity(type: "room", value: "kitchen", startPosition: 3, endPosition: 4)])))
        let sResult = a.apply(SLUResponse(audioContext: "c", segmentId: 0, payload: .entity(SLUEntity(type: "room", value: "kitchen", startPosition: 3, endPosition: 4))))
        let s = try #require(sResult)
        #expect(s.entities.count == 1)
        #expect(s.entities[0].isFinal)
    }
}

@Suite struct SegmentAssemblerBoundsTests {
    private func word(_ index: Int32) -> SLUWord {
        SLUWord(text: "w", index: index, startMilliseconds: 0, endMilliseconds: 1)
    }

    @Test func wordIndicesOutsideTheBoundAreRefused() throws {
        var a = SegmentAssembler()
        #expect(try a.applyChecked(SLUResponse(audioContext: "c", segmentId: 0, payload: .transcript(word(3)))) != nil)
        for bad: Int32 in [-1, Int32(SegmentAssembler.maxWordsPerSegment), .max] {
            #expect(throws: SpeechClientError.self) {
                _ = try a.applyChecked(SLUResponse(audioContext: "c", segmentId: 0, payload: .transcript(word(bad))))
            }
        }
        let many = (0...Int32(SegmentAssembler.maxWordsPerSegment)).map(word)
        #expect(throws: SpeechClientError.self) {
            _ = try a.applyChecked(SLUResponse(audioContext: "c", segmentId: 0, payload: .tentativeTranscript(text: "", words: many)))
        }
    }

    /// Ended segments are remembered until their stream finishes: a server ending new ones
    /// without end (a segment_end is a few bytes on the wire) is refused past the bound, and a
    /// stream that finished frees its records.
    @Test func endedSegmentsAreBounded() throws {
        var a = SegmentAssembler()
        for id in 0..<Int32(SegmentAssembler.maxEndedSegments) {
            _ = try a.applyChecked(SLUResponse(audioContext: "c", segmentId: id, payload: .segmentEnd))
        }
        #expect { _ = try a.applyChecked(SLUResponse(audioContext: "c", segmentId: -1, payload: .segmentEnd)) } throws: {
            ($0 as? SpeechClientError)?.code == .parse && ($0 as? SpeechClientError)?.message.contains("ended more than") == true
        }
        // A segment already ended is still taken (its late duplicate is ignored, not refused).
        #expect(try a.applyChecked(SLUResponse(audioContext: "c", segmentId: 5, payload: .segmentEnd)) == nil)
        _ = a.apply(SLUResponse(audioContext: "c", segmentId: 0, payload: .finished(errorCode: nil, errorMessage: nil)))
        #expect(try a.applyChecked(SLUResponse(audioContext: "c", segmentId: -1, payload: .segmentEnd)) != nil)
    }

    /// Issue 23: a server sent one new word of ~4 MB per message; memory grew to gigabytes.
    /// Bytes are bounded per word, per segment and per context, before anything is stored.
    @Test func bytesAreBoundedPerWordAndSegment() throws {
        func text(_ n: Int) -> String { String(repeating: "a", count: n) }
        func message(_ segment: Int32, _ index: Int32, _ bytes: Int) -> SLUResponse {
            SLUResponse(audioContext: "c", segmentId: segment,
                        payload: .transcript(SLUWord(text: text(bytes), index: index, startMilliseconds: 0, endMilliseconds: 1)))
        }
        var a = SegmentAssembler()
        for huge in [SegmentAssembler.maxWordBytes + 1, 4 << 20] {
            do throws(SpeechClientError) { _ = try a.applyChecked(message(0, 0, huge)); Issue.record("taken") } catch {
                #expect(error.code == .parse && error.message.contains("over the 1024-byte limit"), "\(error)")
            }
        }
        // One segment: 1000-byte words until the 64 KiB bound.
        var taken = 0
        var refusal: SpeechClientError?
        for i in 0..<100 {
            do throws(SpeechClientError) { _ = try a.applyChecked(message(0, Int32(i), 1000)); taken += 1 } catch { refusal = error; break }
        }
        #expect(taken == 64 * 1024 / 1016, "\(taken)")
        #expect(refusal?.message.contains("over the 64 KiB limit") == true)
    }

    @Test func bytesAreBoundedPerContext() throws {
        // Segments of ~60 KB each (one tentative update of 60 words of 1000 bytes) until the
        // 1 MiB bound across the context's open segments.
        let words = (0..<Int32(60)).map { SLUWord(text: String(repeating: "a", count: 1000), index: $0, startMilliseconds: 0, endMilliseconds: 1) }
        func update(_ segment: Int32) -> SLUResponse {
            SLUResponse(audioContext: "c", segmentId: segment, payload: .tentativeTranscript(text: "", words: words))
        }
        var b = SegmentAssembler()
        var segmentsTaken: Int32 = 0
        var refusal: SpeechClientError?
        for segment in 0..<Int32(30) {
            do throws(SpeechClientError) { _ = try b.applyChecked(update(segment)); segmentsTaken += 1 } catch { refusal = error; break }
        }
        #expect(segmentsTaken == 17, "\(segmentsTaken)")
        #expect(refusal?.message.contains("over the 1 MiB limit") == true)
        // Another context has its own budget; ending segments frees their share.
        #expect(try b.applyChecked(SLUResponse(audioContext: "d", segmentId: 0, payload: .tentativeTranscript(text: "", words: words))) != nil)
        _ = try b.applyChecked(SLUResponse(audioContext: "c", segmentId: 0, payload: .segmentEnd))
        #expect(try b.applyChecked(update(100)) != nil)
    }

    @Test func emptyWordsCountToo() throws {
        // Empty words count too (16 bytes each), so a flood of them is bounded as well.
        var c = SegmentAssembler()
        let empties = (0..<Int32(5000)).map { SLUWord(text: "", index: $0, startMilliseconds: 0, endMilliseconds: 0) }
        #expect(throws: SpeechClientError.self) {
            _ = try c.applyChecked(SLUResponse(audioContext: "c", segmentId: 0, payload: .tentativeTranscript(text: "", words: empties)))
        }
    }

    @Test func endlessNewSegmentsAreRefusedBeyondTheBound() throws {
        var a = SegmentAssembler()
        for id in 0..<Int32(SegmentAssembler.maxOpenSegments) {
            _ = try a.applyChecked(SLUResponse(audioContext: "c", segmentId: id, payload: .tentativeIntent("x")))
        }
        #expect(throws: SpeechClientError.self) {
            _ = try a.applyChecked(SLUResponse(audioContext: "c", segmentId: 100_000, payload: .tentativeIntent("x")))
        }
        // Ending a segment makes room again; updates to open segments are still taken.
        _ = try a.applyChecked(SLUResponse(audioContext: "c", segmentId: 0, payload: .segmentEnd))
        #expect(try a.applyChecked(SLUResponse(audioContext: "c", segmentId: 100_000, payload: .tentativeIntent("x"))) != nil)
        #expect(try a.applyChecked(SLUResponse(audioContext: "c", segmentId: 5, payload: .intent("y"))) != nil)
    }

    @Test func endlessEntitiesAreRefusedBeyondTheBound() throws {
        var a = SegmentAssembler()
        for i in 0..<Int32(SegmentAssembler.maxEntitiesPerSegment) {
            _ = try a.applyChecked(SLUResponse(audioContext: "c", segmentId: 0,
                                               payload: .entity(SLUEntity(type: "t", value: "v", startPosition: i, endPosition: i + 1))))
        }
        #expect(throws: SpeechClientError.self) {
            _ = try a.applyChecked(SLUResponse(audioContext: "c", segmentId: 0,
                                               payload: .entity(SLUEntity(type: "t", value: "v", startPosition: -5, endPosition: -4))))
        }
    }
}

/// Issue 23: snapshots share the assembler's words instead of copying the segment per update.
@Suite struct SharedSnapshotTests {
    func word(_ t: String, _ i: Int32) -> SLUWord {
        SLUWord(text: t, index: i, startMilliseconds: i * 10, endMilliseconds: i * 10 + 5)
    }

    /// Words put in any order (appended, before all, between, replaced, across chunk splits)
    /// read back sorted by index, the same as a dictionary keyed by index.
    @Test func finalWordsMatchADictionaryWhateverTheOrder() {
        var rng = SystemRandomNumberGenerator()
        for round in 0..<20 {
            var store = FinalWords()
            var reference: [Int32: SLUWord] = [:]
            for k in 0..<600 {
                let index: Int32 = round % 2 == 0 ? Int32(k) : Int32.random(in: 0..<400, using: &rng)
                let w = word("w\(k)", index)
                let replaced = store.set(w)
                #expect(replaced == reference[index])
                reference[index] = w
            }
            #expect(store.count == reference.count)
            #expect(store.all == reference.values.sorted { $0.index < $1.index })
            #expect(store.chunks.allSatisfy { !$0.words.isEmpty && $0.words.count <= FinalWords.chunkSize })
            for i: Int32 in [-1, 0, 17, 399, 600] { #expect(store.word(at: i) == reference[i]) }
        }
    }

    /// A snapshot keeps what the segment was when it was made, however the segment changes after
    /// (its words are made from shared parts only when read).
    @Test func aSnapshotIsUnchangedByLaterUpdates() throws {
        var a = SegmentAssembler()
        var snapshots: [Segment] = []
        for i in 0..<Int32(200) {
            let f = a.apply(SLUResponse(audioContext: "c", segmentId: 0, payload: .transcript(word("f\(i)", i))))
            snapshots.append(try #require(f))
            let t = a.apply(SLUResponse(audioContext: "c", segmentId: 0,
                payload: .tentativeTranscript(text: "", words: [word("t\(i + 1)", i + 1), word("t\(i + 2)", i + 2)])))
            snapshots.append(try #require(t))
        }
        // A word replaced early on must not show in older snapshots.
        _ = a.apply(SLUResponse(audioContext: "c", segmentId: 0, payload: .transcript(word("changed", 3))))
        for (k, s) in snapshots.enumerated() {
            // After a final word, the previous tentative still fills the index after it.
            let finals = k / 2 + 1
            let tentative = k % 2 == 1 ? ["t\(finals)", "t\(finals + 1)"] : (k >= 2 ? ["t\(finals)"] : [])
            let expected = (0..<finals).map { "f\($0)" } + tentative
            #expect(s.words.map(\.text) == expected)
            #expect(s.transcript == expected.joined(separator: " "))
            #expect(s.wordTextC.map(\.string) == expected)
        }
    }

    @Test func aSnapshotsCCopiesAreMadeOnceAndKept() {
        let s = Segment(contextId: "ctx", segmentId: 1, isFinal: true,
                        words: [Segment.Word(text: "hi", index: 0, startMilliseconds: 0, endMilliseconds: 90, isFinal: true)],
                        intent: "greet", intentIsFinal: true, entities: [])
        // The C accessors hand out these pointers for as long as the snapshot lives.
        #expect(s.contextIdC === s.contextIdC && s.contextIdC.string == "ctx")
        #expect(s.intentC === s.intentC && s.intentC.string == "greet")
        #expect(s.transcriptC === s.transcriptC && s.transcriptC.string == "hi")
        #expect(s.jsonC === s.jsonC && s.json.contains("\"context_id\":\"ctx\""))
    }
}
