/// Protobuf wire-format encoding (proto3) for the handful of messages in protocol.md. The core
/// has its own codec because swift-protobuf would pull Foundation into the .so (build.md).
public struct ProtobufWriter {
    public private(set) var bytes: [UInt8] = []

    public init() {}

    public init(reservingCapacity capacity: Int) { bytes.reserveCapacity(capacity) }

    public mutating func varint(_ value: UInt64) {
        var v = value
        while v >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        bytes.append(UInt8(v))
    }

    mutating func tag(_ field: UInt32, _ wireType: UInt8) {
        varint(UInt64(field) << 3 | UInt64(wireType))
    }

    /// int32 fields: negative values take ten bytes, as the spec says (sign-extended).
    public mutating func int32(_ field: UInt32, _ value: Int32) {
        guard value != 0 else { return }
        tag(field, 0)
        varint(UInt64(bitPattern: Int64(value)))
    }

    /// float fields (fixed32, little-endian); 0 is left off the wire, as proto3 does.
    public mutating func float(_ field: UInt32, _ value: Float) {
        guard value != 0 else { return }
        tag(field, 5)
        let v = value.bitPattern
        for shift: UInt32 in [0, 8, 16, 24] { bytes.append(UInt8(truncatingIfNeeded: v >> shift)) }
    }

    public mutating func uint32(_ field: UInt32, _ value: UInt32) {
        guard value != 0 else { return }
        tag(field, 0)
        varint(UInt64(value))
    }

    public mutating func uint64(_ field: UInt32, _ value: UInt64) {
        guard value != 0 else { return }
        tag(field, 0)
        varint(value)
    }

    public mutating func string(_ field: UInt32, _ value: String) {
        guard !value.isEmpty else { return }
        lengthDelimited(field, Array(value.utf8))
    }

    /// Always written, even when empty: used for fields inside a oneof, where presence matters.
    public mutating func lengthDelimited(_ field: UInt32, _ value: [UInt8]) {
        tag(field, 2)
        varint(UInt64(value.count))
        bytes.append(contentsOf: value)
    }

    /// A bytes field holding 16-bit samples, little-endian, copied in one go (audio: the hot
    /// path, once per chunk; the bench profile showed the per-sample append at 4.5 %).
    public mutating func int16LittleEndian(_ field: UInt32, _ samples: [Int16]) {
        tag(field, 2)
        varint(UInt64(samples.count * 2))
        #if _endian(little)
        samples.withUnsafeBytes { bytes.append(contentsOf: $0) }
        #else
        for s in samples {
            let u = UInt16(bitPattern: s)
            bytes.append(UInt8(truncatingIfNeeded: u))
            bytes.append(UInt8(truncatingIfNeeded: u >> 8))
        }
        #endif
    }

    public mutating func message(_ field: UInt32, _ build: (inout ProtobufWriter) -> Void) {
        var inner = ProtobufWriter()
        build(&inner)
        lengthDelimited(field, inner.bytes)
    }
}
