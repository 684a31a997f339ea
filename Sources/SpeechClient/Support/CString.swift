#if canImport(Glibc)
import Glibc
#endif

/// A NUL-terminated copy of a Swift string, owned by this object and freed with it: the way the
/// core hands strings to C callers that must stay valid as long as their owner.
/// Sendable: immutable after init; the buffer is freed only in deinit.
public final class OwnedCString: @unchecked Sendable {
    public let pointer: UnsafeMutablePointer<CChar>
    public let string: String

    public init(_ string: String) {
        self.string = string
        var utf8 = Array(string.utf8)
        // An interior NUL would silently cut the string short in C: replace it.
        for i in utf8.indices where utf8[i] == 0 { utf8[i] = 0x3F }
        pointer = UnsafeMutablePointer<CChar>.allocate(capacity: utf8.count + 1)
        utf8.withUnsafeBufferPointer { src in
            for (i, byte) in src.enumerated() { pointer[i] = CChar(bitPattern: byte) }
        }
        pointer[utf8.count] = 0
    }

    deinit { pointer.deallocate() }

    public var constPointer: UnsafePointer<CChar> { UnsafePointer(pointer) }
}

extension String {
    /// Decodes a C string, repairing invalid UTF-8 rather than failing; NULL gives "".
    public init(cStringOrEmpty pointer: UnsafePointer<CChar>?) {
        guard let pointer else { self = ""; return }
        let length = strlen(pointer)
        self = pointer.withMemoryRebound(to: UInt8.self, capacity: length) {
            String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self)
        }
    }
}
