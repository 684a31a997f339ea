public enum SystemRandom {
    /// Bytes from the system's CSPRNG (Swift's generator reads getrandom on Linux).
    public static func bytes(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }

    /// A random (version 4) UUID in lower case.
    public static func uuid() -> String {
        var b = bytes(16)
        b[6] = (b[6] & 0x0F) | 0x40
        b[8] = (b[8] & 0x3F) | 0x80
        var text: [UInt8] = []  // as bytes: see `Hex`
        text.reserveCapacity(36)
        for (i, byte) in b.enumerated() {
            if i == 4 || i == 6 || i == 8 || i == 10 { text.append(UInt8(ascii: "-")) }
            Hex.append(byte, to: &text)
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// True for "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" with hex digits.
    public static func isUUID(_ s: String) -> Bool {
        let chars = Array(s.utf8)
        guard chars.count == 36 else { return false }
        for (i, c) in chars.enumerated() {
            if i == 8 || i == 13 || i == 18 || i == 23 {
                if c != UInt8(ascii: "-") { return false }
            } else if !((c >= 48 && c <= 57) || (c >= 97 && c <= 102) || (c >= 65 && c <= 70)) {
                return false
            }
        }
        return true
    }
}
