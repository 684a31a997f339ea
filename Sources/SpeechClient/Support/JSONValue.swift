/// A small JSON reader (RFC 8259) for JWT payloads, config and Wyoming events: bounded depth and
/// bounded memory, never traps, malformed text throws a `.parse` error. `serialized()` writes it back.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public subscript(key: String) -> JSONValue? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    public var numberValue: Double? {
        if case .number(let n) = self { return n }
        return nil
    }

    /// Compact JSON text; object keys in sorted order, so the same value always gives the same
    /// bytes. Integral numbers are written without a fraction (Wyoming's rates and widths are ints).
    public func serialized() -> String {
        switch self {
        case .null: return "null"
        case .bool(let b): return b ? "true" : "false"
        case .number(let n):
            if n == n.rounded() && abs(n) < 9e15 { return String(Int64(n)) }
            return n.isFinite ? String(n) : "null"
        case .string(let s): return JSON.quote(s)
        case .array(let a): return "[" + a.map { $0.serialized() }.joined(separator: ",") + "]"
        case .object(let o):
            return "{" + o.keys.sorted().map { JSON.quote($0) + ":" + (o[$0] ?? .null).serialized() }.joined(separator: ",") + "}"
        }
    }

    /// The memory a parsed value may take by default (`maxBytes`): far beyond any JWT, config or
    /// Wyoming event this library reads, and what a hostile peer can make one parse hold.
    public static let defaultMaxBytes = 16 << 20

    /// Parses `bytes`. `maxBytes` bounds the memory the value will hold, estimated as it is built
    /// (see `Cost`): text is small next to what it expands to (`[0,0,...]` takes ~15 times its
    /// bytes, `[{"a":0},...]` ~25 times), so a bound on the text alone is no bound on memory.
    public static func parse(_ bytes: [UInt8], maxDepth: Int = 32, maxBytes: Int = defaultMaxBytes) throws(SpeechClientError) -> JSONValue {
        var budget = maxBytes
        return try parse(bytes, maxDepth: maxDepth, budget: &budget, bound: maxBytes)
    }

    /// As `parse(_:maxDepth:maxBytes:)`, taking what the value holds off `budget`: values parsed
    /// one after the other (a Wyoming event's line and its data block) share one `bound`, the
    /// figure an error names.
    static func parse(_ bytes: [UInt8], maxDepth: Int = 32, budget: inout Int, bound: Int) throws(SpeechClientError) -> JSONValue {
        var p = Parser(bytes: bytes, maxDepth: maxDepth, budget: budget, bound: bound)
        p.skipSpace()
        let v = try p.value(depth: 0)
        p.skipSpace()
        guard p.i == bytes.count else { throw p.fail("trailing characters") }
        budget = p.budget
        return v
    }

    /// What a parsed value holds in memory, in bytes, measured (peak RSS while 5 MiB of each shape
    /// was parsed, growth of arrays and tables included): a value ~30-40 in its parent's storage,
    /// an object member ~100 more for its hash table slot, a non-empty array or object ~64 for its
    /// heap header, a string longer than the 15 bytes Swift keeps inline ~48 plus its bytes.
    enum Cost {
        static let value = 40
        static let member = 96
        static let container = 64
        static let inlineString = 15
        static let heapString = 48
    }

    private struct Parser {
        let bytes: [UInt8]
        let maxDepth: Int
        var budget: Int
        let bound: Int
        var i = 0

        init(bytes: [UInt8], maxDepth: Int, budget: Int, bound: Int) {
            self.bytes = bytes
            self.maxDepth = maxDepth
            self.budget = budget
            self.bound = bound
        }

        func fail(_ why: String) -> SpeechClientError {
            SpeechClientError(.parse, "not valid JSON at byte \(i): \(why)")
        }

        /// Takes `bytes` off the budget, or fails: the text would expand past the memory allowed.
        mutating func spend(_ bytes: Int) throws(SpeechClientError) {
            budget -= bytes
            if budget < 0 {
                let allowed = bound >= 1024 ? "\(bound >> 10) KB" : "\(bound) bytes"
                throw SpeechClientError(.parse, "JSON that would take more than the \(allowed) of memory allowed once read (at byte \(i))")
            }
        }

        mutating func spend(string s: String) throws(SpeechClientError) {
            let n = s.utf8.count
            if n > Cost.inlineString { try spend(Cost.heapString + n) }
        }

        mutating func skipSpace() {
            while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09 { i += 1 }
        }

        mutating func literal(_ word: String, _ v: JSONValue) throws(SpeechClientError) -> JSONValue {
            let w = Array(word.utf8)
            guard bytes.count - i >= w.count, Array(bytes[i..<i + w.count]) == w else { throw fail("unexpected character") }
            i += w.count
            return v
        }

        mutating func value(depth: Int) throws(SpeechClientError) -> JSONValue {
            guard depth < maxDepth else { throw fail("nested deeper than \(maxDepth)") }
            guard i < bytes.count else { throw fail("unexpected end") }
            try spend(Cost.value)
            switch bytes[i] {
            case UInt8(ascii: "{"):
                i += 1
                var o: [String: JSONValue] = [:]
                skipSpace()
                if i < bytes.count, bytes[i] == UInt8(ascii: "}") { i += 1; return .object(o) }
                try spend(Cost.container)
                while true {
                    skipSpace()
                    guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { throw fail("expected a key") }
                    let k = try string()
                    try spend(Cost.member)
                    skipSpace()
                    guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { throw fail("expected ':'") }
                    i += 1
                    skipSpace()
                    o[k] = try value(depth: depth + 1)
                    skipSpace()
                    guard i < bytes.count else { throw fail("unexpected end in object") }
                    if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                    if bytes[i] == UInt8(ascii: "}") { i += 1; return .object(o) }
                    throw fail("expected ',' or '}'")
                }
            case UInt8(ascii: "["):
                i += 1
                var a: [JSONValue] = []
                skipSpace()
                if i < bytes.count, bytes[i] == UInt8(ascii: "]") { i += 1; return .array(a) }
                try spend(Cost.container)
                while true {
                    skipSpace()
                    a.append(try value(depth: depth + 1))
                    skipSpace()
                    guard i < bytes.count else { throw fail("unexpected end in array") }
                    if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                    if bytes[i] == UInt8(ascii: "]") { i += 1; return .array(a) }
                    throw fail("expected ',' or ']'")
                }
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"): return try literal("true", .bool(true))
            case UInt8(ascii: "f"): return try literal("false", .bool(false))
            case UInt8(ascii: "n"): return try literal("null", .null)
            default: return .number(try number())
            }
        }

        mutating func number() throws(SpeechClientError) -> Double {
            let start = i
            while i < bytes.count, let c = Optional(bytes[i]),
                  (c >= 0x30 && c <= 0x39) || c == UInt8(ascii: "-") || c == UInt8(ascii: "+") || c == UInt8(ascii: ".") || c == UInt8(ascii: "e") || c == UInt8(ascii: "E") {
                i += 1
            }
            guard i > start, i - start <= 64, let d = Double(String(decoding: bytes[start..<i], as: UTF8.self)) else {
                throw fail("invalid number")
            }
            return d
        }

        mutating func hex4() throws(SpeechClientError) -> UInt32 {
            guard bytes.count - i >= 4 else { throw fail("short \\u escape") }
            var v: UInt32 = 0
            for _ in 0..<4 {
                let c = bytes[i]
                i += 1
                let d: UInt32
                switch c {
                case 0x30...0x39: d = UInt32(c - 0x30)
                case 0x41...0x46: d = UInt32(c - 0x41 + 10)
                case 0x61...0x66: d = UInt32(c - 0x61 + 10)
                default: throw fail("bad hex digit in \\u escape")
                }
                v = v << 4 | d
            }
            return v
        }

        /// A string's value, its memory taken off the budget. Text without escapes is decoded
        /// straight from the input (one copy, not an array of bytes and then a string).
        mutating func string() throws(SpeechClientError) -> String {
            i += 1 // opening quote
            let start = i
            var j = i
            while j < bytes.count, bytes[j] != UInt8(ascii: "\""), bytes[j] != UInt8(ascii: "\\"), bytes[j] >= 0x20 { j += 1 }
            if j < bytes.count, bytes[j] == UInt8(ascii: "\"") {
                i = j + 1
                let s = String(decoding: bytes[start..<j], as: UTF8.self)
                try spend(string: s)
                return s
            }
            i = j
            var out = Array(bytes[start..<j])
            while true {
                guard i < bytes.count else { throw fail("unterminated string") }
                let c = bytes[i]
                i += 1
                if c == UInt8(ascii: "\"") { break }
                if c < 0x20 { throw fail("control character in string") }
                guard c == UInt8(ascii: "\\") else { out.append(c); continue }
                guard i < bytes.count else { throw fail("unterminated escape") }
                let e = bytes[i]
                i += 1
                switch e {
                case UInt8(ascii: "\""): out.append(0x22)
                case UInt8(ascii: "\\"): out.append(0x5C)
                case UInt8(ascii: "/"): out.append(0x2F)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4()
                    if (0xD800..<0xDC00).contains(scalar), bytes.count - i >= 6,
                       bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u") {
                        let next = i
                        i += 2
                        let low = try hex4()
                        if (0xDC00..<0xE000).contains(low) {
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        } else {
                            i = next  // not its pair: the lone half is U+FFFD, the escape after it its own
                        }
                    }
                    let u = Unicode.Scalar(scalar) ?? "\u{FFFD}"
                    out.append(contentsOf: Array(String(Character(u)).utf8))
                default: throw fail("unknown escape")
                }
            }
            let s = String(decoding: out, as: UTF8.self)
            try spend(string: s)
            return s
        }
    }
}
