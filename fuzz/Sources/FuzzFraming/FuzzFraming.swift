import FuzzSupport
import SpeechClient

// gRPC message framing and reassembly: the input's first byte picks how the rest is cut into
// DATA pieces (1 to 256 bytes each, as a server may frame it), under a small receive limit.
func fuzzOne(_ bytes: [UInt8]) {
    guard let first = bytes.first else { return }
    var deframer = MessageDeframer(maxMessageBytes: 4096)
    var index = 1
    var piece = Int(first) + 1
    var delivered = 0
    while index < bytes.count {
        let end = min(bytes.count, index + piece)
        let ok = bytes[index..<end].withUnsafeBytes { raw -> Bool in
            do throws(SpeechClientError) {
                try deframer.append(raw) { delivered += $0.count }
                return true
            } catch {
                return false
            }
        }
        if !ok { return }
        index = end
        piece = piece % 7 + 1  // vary the cut: 1..7 after the first piece
    }
    _ = deframer.isMidMessage
}

@_cdecl("FuzzFraming_main")
func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runFuzzer(argc, argv, fuzzOne)
}
