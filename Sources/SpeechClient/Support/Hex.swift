/// Lower-case hexadecimal text, built as ASCII bytes: the generic `String` paths (`joined`,
/// `String(_:radix:)` padded with `"0" +`) each cost a runtime type lookup the first time a
/// process takes them, on the way to the first `started` (docs/performance.md, cold start).
enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    /// Appends the two digits of `byte`.
    static func append(_ byte: UInt8, to text: inout [UInt8]) {
        text.append(digits[Int(byte >> 4)])
        text.append(digits[Int(byte & 0x0F)])
    }

    /// Two digits per byte.
    static func string(_ bytes: some Sequence<UInt8>) -> String {
        var text: [UInt8] = []
        text.reserveCapacity(bytes.underestimatedCount * 2)
        for b in bytes { append(b, to: &text) }
        return String(decoding: text, as: UTF8.self)
    }

    /// Sixteen digits, leading zeros kept.
    static func string(_ value: UInt64) -> String {
        string((0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * $0)) })
    }
}
