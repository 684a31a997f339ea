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
        let hex = b.map { byte -> String in
            let s = String(byte, radix: 16)
            return s.count == 1 ? "0" + s : s
        }.joined()
        let c = Array(hex)
        return String(c[0..<8]) + "-" + String(c[8..<12]) + "-" + String(c[12..<16]) + "-"
            + String(c[16..<20]) + "-" + String(c[20..<32])
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
