import Testing
@testable import SpeechClient

/// The Wyoming framing: what the client writes reads back the same however the bytes are split,
/// the reference's separate data block is merged, and a hostile or wrong server is a `.parse`
/// error naming what was wrong, never an allocation of what it claims.
@Suite struct WyomingEventTests {
    func read(_ bytes: [UInt8], splitEvery step: Int = .max, keepsPayloads: Bool = true,
              mostBuffered: ((Int) -> Void)? = nil) throws(SpeechClientError) -> [WyomingEvent] {
        var reader = WyomingEventReader(keepsPayloads: keepsPayloads)
        var events: [WyomingEvent] = []
        var i = 0
        while i < bytes.count {
            let end = min(bytes.count, i + max(step, 1))
            events += try reader.feed(bytes[i..<end])
            mostBuffered?(reader.bufferedBytes)
            i = end
        }
        return events
    }

    func parseError(_ text: String) -> SpeechClientError? {
        do throws(SpeechClientError) { _ = try read(Array(text.utf8)) } catch { return error }
        return nil
    }

    @Test func eventsReadBackWhateverTheSplit() throws {
        let chunk = WyomingEvent(type: "audio-chunk",
                                 data: ["rate": .number(16000), "width": .number(2), "channels": .number(1), "timestamp": .number(100)],
                                 payload: (0..<3200).map { UInt8(truncatingIfNeeded: $0) })
        let stop = WyomingEvent(type: "audio-stop", data: ["timestamp": .number(200)])
        let bytes = chunk.encoded() + WyomingEvent(type: "describe").encoded() + stop.encoded()
        for step in [1, 7, 1000, Int.max] {
            #expect(try read(bytes, splitEvery: step) == [chunk, WyomingEvent(type: "describe"), stop])
        }
        let line = String(decoding: chunk.encoded().prefix { $0 != 0x0A }, as: UTF8.self)
        #expect(line.contains("\"rate\":16000") && line.contains("\"payload_length\":3200") && line.contains("\"version\":"))
    }

    @Test func theReferenceDataBlockIsMergedOverTheInlineData() throws {
        let data = #"{"text":"turn on the lights","language":"en"}"#
        let text = #"{"type":"transcript","data":{"text":"old","x":1},"data_length":\#(data.utf8.count),"version":"1.5.2"}"# + "\n" + data
        let events = try read(Array(text.utf8), splitEvery: 5)
        #expect(events.count == 1)
        #expect(events.first?.data["text"] == .string("turn on the lights"))
        #expect(events.first?.data["x"] == .number(1))
    }

    @Test(arguments: [
        ("HTTP/1.1 400 Bad Request\r\n\r\n", "HTTP"),
        (#"{"type":"transcript","payload_length":1099511627776}"# + "\n", "payload_length"),
        (#"{"type":"transcript","data_length":-1}"# + "\n", "data_length"),
        (#"{"type":"transcript","data_length":"5"}"# + "\n", "not a number"),
        (#"{"type":"transcript","data_length":3000000,"payload_length":3000000}"# + "\n", "more than the 4 MiB"),
        (#"{"type":"transcr"# + "\n", "not valid JSON"),
        (#"["transcript"]"# + "\n", "not a JSON object"),
        (#"{"data":{}}"# + "\n", "no \"type\""),
        (#"{"type":"transcript","data":[1]}"# + "\n", "\"data\" of a Wyoming 'transcript' event"),
        (#"{"type":"transcript","data_length":2}"# + "\n[]", "not a JSON object"),
    ])
    func malformedEventsAreParseErrorsNamingWhy(text: String, named: String) {
        let error = parseError(text)
        #expect(error?.code == .parse)
        #expect(error?.message.contains(named) == true, "\(error?.message ?? "no error")")
    }

    @Test func payloadsNotKeptAreDroppedAsTheyArriveAndTheEventsAreTheSame() throws {
        let transcript = WyomingEvent(type: "transcript", data: ["text": .string("hello there")])
        let chunk = WyomingEvent(type: "audio-chunk", data: ["rate": .number(16000)],
                                 payload: [UInt8](repeating: 7, count: WyomingEventReader.maxBodyBytes))
        let bytes = chunk.encoded() + transcript.encoded() + chunk.encoded() + WyomingEvent(type: "describe").encoded()
        for step in [1, 4096, 100_000, Int.max] where step != 1 || bytes.count < 1 << 16 {
            var most = 0
            let events = try read(bytes, splitEvery: step, keepsPayloads: false) { most = max(most, $0) }
            var bare = chunk
            bare.payload = []
            #expect(events == [bare, transcript, bare, WyomingEvent(type: "describe")])
            // Never more than one piece of the network's bytes held: the 4 MiB payloads are not.
            #expect(most <= min(step, bytes.count), "step \(step): \(most) bytes held")
        }
        // A payload cut anywhere, even where the next line begins, leaves the next event whole.
        let small = WyomingEvent(type: "audio-chunk", payload: [1, 2, 3, 10, 10])
        let pair = small.encoded() + transcript.encoded()
        for step in 1...pair.count {
            var bare = small
            bare.payload = []
            #expect(try read(pair, splitEvery: step, keepsPayloads: false) == [bare, transcript])
        }
    }

    /// A hostile server's JSON expands in memory far beyond its bytes (measured before the
    /// bound: 5 MiB of `{"a":0},` took 121 MB at peak); one event's line and data share a bound.
    @Test(arguments: ["0,", "{\"a\":0},", "[],", "\"aaaaaaaaaaaaaaaaaaaa\","])
    func anEventWhoseJSONWouldExpandPastTheBoundIsRefused(unit: String) {
        let items = String(repeating: unit, count: (4 << 20) / unit.utf8.count - 8) + "0"
        let data = "{\"items\":[" + items + "]}"
        let line = "{\"type\":\"info\",\"data_length\":\(data.utf8.count)}\n"
        let error = parseError(line + data)
        #expect(error?.code == .parse)
        #expect(error?.message.contains("more than the \(WyomingEventReader.maxParsedBytes >> 10) KB of memory") == true, "\(String(describing: error?.message))")
        // The same text with the memory to hold it parses: only the bound refused it.
        #expect((try? JSONValue.parse(Array(data.utf8), maxBytes: 1 << 30)) != nil)
    }

    /// A high surrogate escape followed by an escape that is not its pair: the lone half is
    /// U+FFFD and the next escape is read as itself (its letter was dropped).
    @Test func aLoneSurrogateEscapeKeepsTheEscapeAfterIt() throws {
        #expect(try JSONValue.parse(Array("\"\\uD800\\u0041b\"".utf8)) == .string("\u{FFFD}Ab"))
        #expect(try JSONValue.parse(Array("\"\\uD83D\\uDE00\"".utf8)) == .string("\u{1F600}"))
    }

    @Test func theLineAndItsDataShareOneBound() throws {
        // Each half alone is within the bound; the two together are not.
        let half = String(repeating: "0,", count: WyomingEventReader.maxParsedBytes / JSONValue.Cost.value / 2 + 1000) + "0"
        let inline = "{\"type\":\"x\",\"data\":{\"a\":[" + half + "]}"
        let data = "{\"b\":[" + half + "]}"
        #expect(throws: Never.self) { try read(Array((inline + "}\n").utf8)) }
        #expect(throws: Never.self) { try read(Array(("{\"type\":\"x\",\"data_length\":\(data.utf8.count)}\n" + data).utf8)) }
        let both = parseError(inline + ",\"data_length\":\(data.utf8.count)}\n" + data)
        #expect(both?.message.contains("data of a 'x' event") == true && both?.message.contains("of memory") == true,
                "\(String(describing: both?.message))")
    }

    /// What a real multilingual server says of itself is far within the bound: 200 models, each
    /// with 100 languages and a description (~1 MiB, the longest line taken).
    @Test func aLargeInfoIsWithinTheBound() throws {
        let languages = "[" + (0..<100).map { "\"l\($0)\"" }.joined(separator: ",") + "]"
        let model = { (n: Int) in
            "{\"name\":\"model-\(n)-large-v3\",\"description\":\"\(String(repeating: "a model for speech ", count: 10))\","
                + "\"attribution\":{\"name\":\"someone\",\"url\":\"https://example.com/models/\(n)\"},"
                + "\"installed\":true,\"version\":\"1.0\",\"languages\":\(languages)}"
        }
        let models = (0..<200).map(model).joined(separator: ",")
        let line = "{\"type\":\"info\",\"data\":{\"asr\":[{\"name\":\"whisper\",\"installed\":true,\"models\":[" + models + "]}]}}\n"
        #expect(line.utf8.count < WyomingEventReader.maxLineBytes)
        let events = try read(Array(line.utf8))
        #expect(events.count == 1 && events.first?.type == "info")
    }

    @Test func aLineWithoutEndIsRefusedOnceItPassesTheBound() throws {
        var reader = WyomingEventReader()
        let block = [UInt8](repeating: UInt8(ascii: "a"), count: 64 * 1024)
        var thrown: SpeechClientError?
        for _ in 0..<40 {
            do throws(SpeechClientError) { _ = try reader.feed(block[...]) } catch { thrown = error; break }
        }
        #expect(thrown?.code == .parse)
        #expect(thrown?.message.contains("without its end") == true)
        #expect(reader.bufferedBytes <= WyomingEventReader.maxLineBytes + block.count)
    }

    @Test func transcriptWordsDropControlCharactersAndHaveNoTimes() throws {
        let words = try #require(SLUWord.words(" turn\u{0}on  the\nlights\u{7} "))
        #expect(words.map(\.text) == ["turn", "on", "the", "lights"])
        #expect(words.map(\.index) == [0, 1, 2, 3])
        #expect(words.allSatisfy { $0.startMilliseconds == -1 && $0.endMilliseconds == -1 })
        #expect(SLUWord.words(" \u{0}\n ")?.isEmpty == true)
        // A combining mark after a space is the server's: kept, at the start of the next word
        // (split by scalars, as a transcript streamed in pieces is; it was dropped with the space).
        #expect(SLUWord.words("caf\u{E9} \u{301}ok\r\nyes", firstIndex: 5)?.map { "\($0.index):\($0.text)" } == ["5:caf\u{E9}", "6:\u{301}ok", "7:yes"])
    }

    /// A transcript of more words than a segment takes is refused before its words are made
    /// (a 4 MiB one of one-letter words made two million, 60 times its size in memory).
    @Test func transcriptWordsBeyondTheBoundAreRefused() {
        let limit = SegmentAssembler.maxWordsPerSegment
        let atLimit = String(repeating: "a ", count: limit)
        #expect(SLUWord.words(atLimit)?.count == limit)
        #expect(SLUWord.words(atLimit + "b") == nil)
        #expect(SLUWord.words(String(repeating: "a\u{0}", count: 2 << 20)) == nil)
        #expect(SLUWord.words("one two three", atMost: 2) == nil)
        #expect(SLUWord.words("one two", atMost: 2)?.count == 2)
    }

    @Test func theLanguageIsCheckedAgainstTheModels() throws {
        func info(_ languages: [String]) -> WyomingEvent {
            WyomingEvent(type: "info", data: ["asr": .array([.object(["name": .string("faster-whisper"), "models": .array([
                .object(["name": .string("tiny.en"), "languages": .array(languages.map { .string($0) })])])])])])
        }
        #expect(try WyomingService.language("en-US", info: info(["en"]), peer: "p") == "en")
        #expect(try WyomingService.language("EN", info: info(["en"]), peer: "p") == "en")
        #expect(try WyomingService.language("en-US", info: info(["de", "en-US"]), peer: "p") == "en-US")
        #expect(try WyomingService.language("fi-FI", info: info([]), peer: "p") == "fi-FI")
        #expect(throws: SpeechClientError.self) { try WyomingService.language("fi-FI", info: info(["en", "de"]), peer: "p") }
        do { _ = try WyomingService.language("fi-FI", info: info(["en", "de"]), peer: "p") } catch {
            #expect(error.code == .invalidArgument && error.message.contains("en, de"))
        }
        // A model asked for by name must be one info lists.
        try WyomingService.checkModel("tiny.en", info: info(["en"]), peer: "p")
        do { try WyomingService.checkModel("large-v3", info: info(["en"]), peer: "p"); Issue.record("an unknown model taken") } catch {
            #expect(error.code == .invalidArgument && error.message.contains("no model 'large-v3'") && error.message.contains("tiny.en"))
        }
        let wake = WyomingEvent(type: "info", data: ["wake": .array([.object(["name": .string("openwakeword")])])])
        do { _ = try WyomingService.language("en", info: wake, peer: "p"); Issue.record("a wake service taken for ASR") } catch {
            #expect(error.message.contains("without speech recognition") && error.message.contains("wake"))
        }
    }

    /// A wake-word service: its wake program's model whose name starts with the wake word asked
    /// for (openWakeWord versions its names); anything else refused naming what it lists.
    @Test func theWakeWordIsFoundByPrefixAmongTheServiceModels() throws {
        let models: [JSONValue] = ["alexa_v0.1", "hey_jarvis_v0.1", "hey_mycroft_v0.1"].map { .object(["name": .string($0)]) }
        let info = WyomingEvent(type: "info", data: ["wake": .array([.object(["name": .string("openwakeword"), "models": .array(models)])])])
        #expect(try WyomingWakeStream.model("hey_jarvis", info: info, peer: "p") == "hey_jarvis_v0.1")
        #expect(try WyomingWakeStream.model("HEY_MYCROFT", info: info, peer: "p") == "hey_mycroft_v0.1")
        #expect(try WyomingWakeStream.model(nil, info: info, peer: "p") == nil)
        do { _ = try WyomingWakeStream.model("ok_nabu", info: info, peer: "p"); Issue.record("an unknown wake word taken") } catch {
            #expect(error.code == .invalidArgument && error.message.contains("'ok_nabu'") && error.message.contains("hey_jarvis_v0.1"))
        }
        let asr = WyomingEvent(type: "info", data: ["asr": .array([.object(["name": .string("faster-whisper")])])])
        do { _ = try WyomingWakeStream.model("hey_jarvis", info: asr, peer: "p"); Issue.record("an ASR service taken for wake") } catch {
            #expect(error.message.contains("not a Wyoming wake-word service"))
        }
    }
}
