// speechly.slu.v1 on the wire (protocol.md gives the field numbers).

extension SLURequest {
    public func encoded() -> [UInt8] {
        var w = ProtobufWriter()
        switch self {
        case .config(let c):
            w.message(1) { m in
                // encoding = LINEAR16 (0) is the default value, so it is not written.
                m.int32(2, c.channels)
                m.int32(3, c.sampleRateHertz)
                m.string(4, c.languageCode)
                for o in c.options { m.message(5) { $0.encodeOption(o) } }
            }
        case .audio(let samples):
            w = ProtobufWriter(reservingCapacity: samples.count * 2 + 8)
            w.int16LittleEndian(3, samples)
        case .rttResponse(let id):
            w.message(4) { $0.int32(1, id) }
        case .start(let appId, let options):
            w.message(5) { m in
                m.string(1, appId)
                for o in options { m.message(2) { $0.encodeOption(o) } }
            }
        case .stop:
            w.lengthDelimited(6, [])
        }
        return w.bytes
    }
}

extension ProtobufWriter {
    mutating func encodeOption(_ option: ContextOption) {
        string(1, option.key)
        for v in option.values { lengthDelimited(2, Array(v.utf8)) }
    }
}

extension SLUResponse {
    /// The longest audio context id taken from a server.
    public static let maxAudioContextBytes = 1_024

    public static func decode(_ bytes: ArraySlice<UInt8>) throws(SpeechClientError) -> SLUResponse {
        var r = ProtobufReader(bytes)
        var response = SLUResponse(audioContext: "", segmentId: 0, payload: .none)
        while let (field, value) = try r.next() {
            switch field {
            case 1:
                response.audioContext = try value.text("audio_context")
                // Every snapshot and the C string of each segment carry it, and a stream may
                // name a new one with each started: ids are short (UUIDs), so a long one is refused.
                guard response.audioContext.utf8.count <= maxAudioContextBytes else {
                    throw SpeechClientError(.parse, "the server sent an audio context id of \(response.audioContext.utf8.count) bytes, over the \(maxAudioContextBytes)-byte limit")
                }
            case 2: response.segmentId = try value.int32("segment_id")
            case 3: response.payload = .transcript(try decodeWord(try value.message("transcript")))
            case 4: response.payload = .entity(try decodeEntity(try value.message("entity")))
            case 5: response.payload = .intent(try decodeIntent(try value.message("intent")))
            case 6: try value.message("segment_end").skipAll(); response.payload = .segmentEnd
            case 7:
                var m = try value.message("tentative_transcript")
                var text = ""
                var words: [SLUWord] = []
                while let (f, v) = try m.next() {
                    if f == 1 { text = try v.string("tentative_transcript") }
                    if f == 2 {
                        // Refused here, not by the assembler later: a word decodes to some 30
                        // times its bytes on the wire, and a 4 MiB message of empty words made
                        // two million of them before any bound looked.
                        guard words.count < SegmentAssembler.maxWordsPerSegment else {
                            throw SpeechClientError(.parse, "the server sent a tentative transcript of more than \(SegmentAssembler.maxWordsPerSegment) words")
                        }
                        words.append(try decodeWord(try v.message("tentative_words")))
                    }
                }
                response.payload = .tentativeTranscript(text: text, words: words)
            case 8:
                var m = try value.message("tentative_entities")
                var entities: [SLUEntity] = []
                while let (f, v) = try m.next() {
                    guard f == 1 else { continue }
                    guard entities.count < SegmentAssembler.maxEntitiesPerSegment else {
                        throw SpeechClientError(.parse, "the server sent more than \(SegmentAssembler.maxEntitiesPerSegment) tentative entities")
                    }
                    entities.append(try decodeEntity(try v.message("tentative_entities")))
                }
                response.payload = .tentativeEntities(entities)
            case 9: response.payload = .tentativeIntent(try decodeIntent(try value.message("tentative_intent")))
            case 10: try value.message("started").skipAll(); response.payload = .started
            case 11:
                var m = try value.message("finished")
                var code: String?
                var message: String?
                while let (f, v) = try m.next() {
                    guard f == 2 else { continue }
                    var e = try v.message("finished.error")
                    while let (ef, ev) = try e.next() {
                        if ef == 1 { code = try ev.text("error.code").shownFromServer(limit: 128) }
                        if ef == 2 { message = try ev.text("error.message").shownFromServer() }
                    }
                }
                response.payload = .finished(errorCode: code, errorMessage: message)
            case 12:
                var m = try value.message("rtt_request")
                var id: Int32 = 0
                while let (f, v) = try m.next() { if f == 1 { id = try v.int32("rtt_request.id") } }
                response.payload = .rttRequest(id: id)
            default: break
            }
        }
        return response
    }

    static func decodeWord(_ reader: ProtobufReader) throws(SpeechClientError) -> SLUWord {
        var r = reader
        var w = SLUWord(text: "", index: 0, startMilliseconds: 0, endMilliseconds: 0)
        while let (f, v) = try r.next() {
            switch f {
            case 1: w.text = try v.text("word")
            case 2: w.index = try v.int32("index")
            case 3: w.startMilliseconds = try v.int32("start_time")
            case 4: w.endMilliseconds = try v.int32("end_time")
            default: break
            }
        }
        return w
    }

    static func decodeEntity(_ reader: ProtobufReader) throws(SpeechClientError) -> SLUEntity {
        var r = reader
        var e = SLUEntity(type: "", value: "", startPosition: 0, endPosition: 0)
        while let (f, v) = try r.next() {
            switch f {
            case 1: e.type = try v.text("entity")
            case 2: e.value = try v.text("value")
            case 3: e.startPosition = try v.int32("start_position")
            case 4: e.endPosition = try v.int32("end_position")
            default: break
            }
        }
        return e
    }

    static func decodeIntent(_ reader: ProtobufReader) throws(SpeechClientError) -> String {
        var r = reader
        var intent = ""
        while let (f, v) = try r.next() { if f == 1 { intent = try v.text("intent") } }
        return intent
    }
}
