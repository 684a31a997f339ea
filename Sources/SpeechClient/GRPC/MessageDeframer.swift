/// Reassembles gRPC length-prefixed messages (1 byte compressed flag, 4 bytes big-endian length,
/// then the message) from body pieces of any size, one byte at a time included. Memory is
/// bounded by `maxMessageBytes`: a larger announced length is rejected before any of it is
/// buffered, and a compressed message is rejected (this client never asks for compression).
public struct MessageDeframer {
    public let maxMessageBytes: Int
    private var header: [UInt8] = []
    private var body: [UInt8] = []
    private var expected = -1  // body length once the 5-byte prefix is complete

    /// Up to this much buffer stays with the stream between messages.
    static let keptBufferBytes = 512

    public init(maxMessageBytes: Int) { self.maxMessageBytes = maxMessageBytes }

    /// True when a message has started but not ended (a stream ending now is truncated).
    public var isMidMessage: Bool { !header.isEmpty || expected >= 0 }

    /// Feeds bytes; calls `deliver` for each complete message, in order.
    public mutating func append(_ bytes: UnsafeRawBufferPointer, _ deliver: ([UInt8]) -> Void) throws(SpeechClientError) {
        var index = 0
        let count = bytes.count
        while index < count {
            if expected < 0 {
                let take = min(5 - header.count, count - index)
                header.append(contentsOf: bytes[index..<(index + take)])
                index += take
                if header.count < 5 { return }
                if header[0] != 0 {
                    throw SpeechClientError(.parse, "the server sent a compressed gRPC message (flag \(header[0])), which this client did not ask for and cannot read",
                                            grpcStatus: 13)
                }
                let length = Int(header[1]) << 24 | Int(header[2]) << 16 | Int(header[3]) << 8 | Int(header[4])
                if length > maxMessageBytes {
                    throw SpeechClientError(.parse, "the server sent a \(length)-byte message, larger than the \(maxMessageBytes)-byte receive limit",
                                            grpcStatus: 8)
                }
                header.removeAll(keepingCapacity: true)
                expected = length
                body.reserveCapacity(min(length, 64 * 1024))  // grows with what really arrives
                if length == 0 {
                    expected = -1
                    deliver([])
                }
                continue
            }
            let take = min(expected - body.count, count - index)
            body.append(contentsOf: bytes[index..<(index + take)])
            index += take
            if body.count == expected {
                expected = -1
                deliver(body)
                // The buffer is kept for the next message (no allocation per message) unless it
                // is large (memory per stream: a small answer's buffer, not the largest one
                // seen). A receiver that kept this message keeps it intact: the buffer is shared
                // then, and emptying it makes a new one.
                if body.capacity > Self.keptBufferBytes { body = [] } else { body.removeAll(keepingCapacity: true) }
            }
        }
    }

    /// Byte `index` (0..<5) of the prefix of a message of `length` bytes: no compression, then
    /// the length, big-endian. Written byte by byte, so that a prefix may span two DATA frames.
    public static func prefixByte(_ index: Int, length: Int) -> UInt8 {
        index == 0 ? 0 : UInt8(truncatingIfNeeded: UInt32(truncatingIfNeeded: length) >> (8 * UInt32(4 - index)))
    }
}
