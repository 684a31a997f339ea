/// Wyoming's framing (github.com/rhasspy/wyoming, `wyoming/event.py`): each event is one line of
/// JSON, `{"type": ..., "data": {...}, "data_length": N, "payload_length": M, "version": ...}`,
/// then N bytes of JSON merged into `data`, then M bytes of payload (audio for `audio-chunk`).
public struct WyomingEvent: Sendable, Equatable {
    public var type: String
    public var data: [String: JSONValue]
    public var payload: [UInt8]

    public init(type: String, data: [String: JSONValue] = [:], payload: [UInt8] = []) {
        self.type = type
        self.data = data
        self.payload = payload
    }

    /// The protocol version this client writes (the events it uses exist since 1.0).
    static let version = "1.5.2"

    /// The event's bytes: its data inline in the header line (as the reference `write_event` puts
    /// it in a separate block; readers merge both), then the payload.
    public func encoded() -> [UInt8] {
        var line = "{\"type\":" + JSON.quote(type) + ",\"version\":\"" + Self.version + "\""
        if !data.isEmpty {
            line += ",\"data\":" + JSONValue.object(data).serialized()
        }
        if !payload.isEmpty { line += ",\"payload_length\":\(payload.count)" }
        line += "}\n"
        var bytes = Array(line.utf8)
        bytes.append(contentsOf: payload)
        return bytes
    }
}

/// Reads events from the bytes a server sends, however they are split. A server is untrusted:
/// every length is bounded before anything is allocated for it, and what cannot be an event is
/// an error naming what was wrong (`.parse`).
public struct WyomingEventReader {
    /// The longest header line taken (the reference writes a few hundred bytes; `info` with every
    /// model of a multilingual program inline runs to tens of kilobytes).
    public static let maxLineBytes = 1 << 20
    /// Data and payload of one event. A recognition or wake service sends text, not audio; 4 MiB
    /// is far beyond any transcript.
    public static let maxBodyBytes = 4 << 20
    /// The memory one event's JSON (its line and its data block together) may take once parsed:
    /// text expands up to ~25 times (`JSONValue.Cost`), so 5 MiB of it could otherwise hold
    /// ~120 MB. A legitimate event is far below: a transcript about its text's size, an `info`
    /// listing a hundred models and their languages well under 1 MiB.
    public static let maxParsedBytes = 16 << 20

    /// Payloads are kept for the caller (`true`), or dropped as they arrive and events handed over
    /// with an empty one: a recognition or wake service's events carry none that this client reads.
    public let keepsPayloads: Bool

    private var buffer: [UInt8] = []
    private var offset = 0
    /// Where the search for the current line's end goes on (bytes before it hold no newline).
    private var scanned = 0
    /// The header of the event whose data and payload are still arriving, and what of the
    /// parse budget its line left for its data.
    private var pending: (type: String, data: [String: JSONValue], dataLength: Int, payloadLength: Int, budget: Int)?
    /// Payload bytes still to be dropped as they arrive (`keepsPayloads` false).
    private var skipping = 0

    public init(keepsPayloads: Bool = true) {
        self.keepsPayloads = keepsPayloads
    }

    /// Bytes held for an event not yet complete.
    public var bufferedBytes: Int { buffer.count - offset }

    /// Appends `bytes` and returns the events they complete, in order.
    public mutating func feed(_ bytes: ArraySlice<UInt8>) throws(SpeechClientError) -> [WyomingEvent] {
        var bytes = bytes
        if skipping > 0 {
            let dropped = min(skipping, bytes.count)
            skipping -= dropped
            bytes = bytes.dropFirst(dropped)
        }
        buffer.append(contentsOf: bytes)
        var events: [WyomingEvent] = []
        while let event = try next() { events.append(event) }
        if offset > 0 && (offset == buffer.count || offset > 64 * 1024) {
            buffer.removeFirst(offset)
            scanned = max(0, scanned - offset)
            offset = 0
        }
        return events
    }

    private mutating func next() throws(SpeechClientError) -> WyomingEvent? {
        if pending == nil {
            guard let newline = buffer[max(offset, scanned)...].firstIndex(of: 0x0A) else {
                scanned = buffer.count
                if buffer.count - offset > Self.maxLineBytes {
                    throw SpeechClientError(.parse, "a Wyoming event line longer than \(Self.maxLineBytes / 1024) KB without its end: not a Wyoming server?")
                }
                return nil
            }
            guard newline - offset <= Self.maxLineBytes else {
                throw SpeechClientError(.parse, "a Wyoming event line longer than \(Self.maxLineBytes / 1024) KB")
            }
            let line = Array(buffer[offset..<newline])
            offset = newline + 1
            pending = try Self.header(line)
        }
        guard let header = pending else { return nil }
        // Without its payload kept, an event is complete once its data is here; the payload is
        // dropped from the buffer and, past it, as it arrives.
        let needed = header.dataLength + (keepsPayloads ? header.payloadLength : 0)
        guard buffer.count - offset >= needed else { return nil }
        var data = header.data
        if header.dataLength > 0 {
            let block = Array(buffer[offset..<(offset + header.dataLength)])
            var budget = header.budget
            guard case .object(let extra) = try Self.json(block, what: "data of a '\(header.type)' event", budget: &budget) else {
                throw SpeechClientError(.parse, "the data of a Wyoming '\(header.type)' event is not a JSON object")
            }
            data.merge(extra) { _, new in new }
        }
        offset += header.dataLength
        var payload: [UInt8] = []
        if keepsPayloads {
            payload = Array(buffer[offset..<(offset + header.payloadLength)])
            offset += header.payloadLength
        } else {
            let here = min(header.payloadLength, buffer.count - offset)
            offset += here
            skipping = header.payloadLength - here
        }
        pending = nil
        return WyomingEvent(type: header.type, data: data, payload: payload)
    }

    private static func header(_ line: [UInt8]) throws(SpeechClientError) -> (type: String, data: [String: JSONValue], dataLength: Int, payloadLength: Int, budget: Int) {
        if line.starts(with: Array("HTTP/".utf8)) {
            throw SpeechClientError(.parse, "the server answered in HTTP, not Wyoming: '\(String(decoding: line.prefix(60), as: UTF8.self))'")
        }
        var budget = maxParsedBytes
        guard case .object(let header) = try json(line, what: "event line", budget: &budget) else {
            throw SpeechClientError(.parse, "a Wyoming event line is not a JSON object")
        }
        guard let type = header["type"]?.stringValue, !type.isEmpty else {
            throw SpeechClientError(.parse, "a Wyoming event line has no \"type\"")
        }
        var data: [String: JSONValue] = [:]
        switch header["data"] {
        case nil, .null?: break
        case .object(let d)?: data = d
        default: throw SpeechClientError(.parse, "the \"data\" of a Wyoming '\(type)' event is not a JSON object")
        }
        let dataLength = try length(header["data_length"], name: "data_length", type: type)
        let payloadLength = try length(header["payload_length"], name: "payload_length", type: type)
        guard dataLength + payloadLength <= maxBodyBytes else {
            throw SpeechClientError(.parse, "a Wyoming '\(type)' event announces \(dataLength + payloadLength) bytes of data and payload, more than the \(maxBodyBytes >> 20) MiB taken")
        }
        return (type, data, dataLength, payloadLength, budget)
    }

    private static func length(_ value: JSONValue?, name: String, type: String) throws(SpeechClientError) -> Int {
        switch value {
        case nil, .null?: return 0
        case .number(let n)?:
            guard n >= 0, n == n.rounded(), n <= Double(maxBodyBytes) else {
                throw SpeechClientError(.parse, "a Wyoming '\(type)' event has \(name) \(n): not a length up to \(maxBodyBytes >> 20) MiB")
            }
            return Int(n)
        default:
            throw SpeechClientError(.parse, "a Wyoming '\(type)' event has a \(name) that is not a number")
        }
    }

    private static func json(_ bytes: [UInt8], what: String, budget: inout Int) throws(SpeechClientError) -> JSONValue {
        do throws(SpeechClientError) {
            return try JSONValue.parse(bytes, budget: &budget, bound: maxParsedBytes)
        } catch {
            // "not valid JSON at byte N: why", or what it would take in memory.
            throw SpeechClientError(.parse, "a Wyoming \(what): \(error.message)")
        }
    }
}
