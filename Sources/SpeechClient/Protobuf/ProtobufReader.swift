/// Protobuf wire-format decoding that never traps: every malformed input ends in a `.parse`
/// error naming what was wrong. Unknown fields are skipped, as protobuf requires.
public struct ProtobufReader {
    private let bytes: ArraySlice<UInt8>
    private var position: Int

    public init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
        position = bytes.startIndex
    }

    public init(_ bytes: [UInt8]) { self.init(bytes[...]) }

    public var isAtEnd: Bool { position >= bytes.endIndex }

    public enum WireValue {
        case varint(UInt64)
        case fixed64(UInt64)
        case bytes(ArraySlice<UInt8>)
        case fixed32(UInt32)
    }

    static func malformed(_ what: String) -> SpeechClientError {
        SpeechClientError(.parse, "malformed protobuf: \(what)")
    }

    public mutating func varint() throws(SpeechClientError) -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            guard position < bytes.endIndex else { throw Self.malformed("truncated varint") }
            let b = bytes[position]
            position += 1
            if shift == 63 && b > 1 { throw Self.malformed("varint longer than 64 bits") }
            result |= UInt64(b & 0x7F) << shift
            if b & 0x80 == 0 { return result }
            shift += 7
            if shift > 63 { throw Self.malformed("varint longer than 10 bytes") }
        }
    }

    /// The next field number and value, or nil at the end.
    public mutating func next() throws(SpeechClientError) -> (field: UInt32, value: WireValue)? {
        guard !isAtEnd else { return nil }
        let key = try varint()
        let field = key >> 3
        guard field >= 1, field <= 536_870_911 else { throw Self.malformed("field number \(field)") }
        switch key & 7 {
        case 0:
            return (UInt32(field), .varint(try varint()))
        case 1:
            return (UInt32(field), .fixed64(try fixed(8)))
        case 2:
            let length = try varint()
            guard length <= UInt64(bytes.endIndex - position) else {
                throw Self.malformed("field \(field) claims \(length) bytes, \(bytes.endIndex - position) remain")
            }
            let start = position
            position += Int(length)
            return (UInt32(field), .bytes(bytes[start..<position]))
        case 5:
            return (UInt32(field), .fixed32(UInt32(truncatingIfNeeded: try fixed(4))))
        default:
            throw Self.malformed("unsupported wire type \(key & 7) for field \(field)")
        }
    }

    /// Checks that the rest is well-formed, ignoring its content (messages with no known fields).
    public func skipAll() throws(SpeechClientError) {
        var copy = self
        while try copy.next() != nil {}
    }

    private mutating func fixed(_ count: Int) throws(SpeechClientError) -> UInt64 {
        guard bytes.endIndex - position >= count else { throw Self.malformed("truncated fixed-width field") }
        var v: UInt64 = 0
        for i in 0..<count { v |= UInt64(bytes[position + i]) << (8 * UInt64(i)) }
        position += count
        return v
    }
}

extension ProtobufReader.WireValue {
    /// int32 from a varint (negative numbers arrive sign-extended to 64 bits).
    func int32(_ field: String) throws(SpeechClientError) -> Int32 {
        guard case .varint(let v) = self else { throw ProtobufReader.malformed("\(field) is not a varint") }
        return Int32(truncatingIfNeeded: v)
    }

    func uint64(_ field: String) throws(SpeechClientError) -> UInt64 {
        guard case .varint(let v) = self else { throw ProtobufReader.malformed("\(field) is not a varint") }
        return v
    }

    func string(_ field: String) throws(SpeechClientError) -> String {
        guard case .bytes(let b) = self else { throw ProtobufReader.malformed("\(field) is not length-delimited") }
        return String(decoding: b, as: UTF8.self)
    }

    /// A string for text the client hands to C (words, entities, intents, context ids): a NUL
    /// would cut a C string short, so it is replaced by U+FFFD (issue 23 item 3).
    func text(_ field: String) throws(SpeechClientError) -> String {
        let s = try string(field)
        guard s.utf8.contains(0) else { return s }
        return String(String.UnicodeScalarView(s.unicodeScalars.map { $0 == "\0" ? "\u{FFFD}" : $0 }))
    }

    /// A `float` (fixed32); NaN and infinities pass through (callers range-check).
    func float(_ field: String) throws(SpeechClientError) -> Float {
        guard case .fixed32(let v) = self else { throw ProtobufReader.malformed("\(field) is not a fixed32") }
        return Float(bitPattern: v)
    }

    func message(_ field: String) throws(SpeechClientError) -> ProtobufReader {
        guard case .bytes(let b) = self else { throw ProtobufReader.malformed("\(field) is not a message") }
        return ProtobufReader(b)
    }
}
