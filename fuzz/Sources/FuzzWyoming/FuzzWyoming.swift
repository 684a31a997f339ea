import FuzzSupport
import SpeechClient

// The Wyoming event reader (a server's bytes, however the network splits them: the first byte
// picks the split) and the Riva response decoder, on the same untrusted bytes.
func fuzzOne(_ bytes: [UInt8]) {
    guard let first = bytes.first else { return }
    let step = Int(first % 64) + 1
    var reader = WyomingEventReader()
    var i = 1
    while i < bytes.count {
        let end = min(bytes.count, i + step)
        do { _ = try reader.feed(bytes[i..<end]) } catch { break }
        i = end
    }
    _ = try? RivaResult.decodeResponse(bytes[...])
}

@_cdecl("FuzzWyoming_main")
func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runFuzzer(argc, argv, fuzzOne)
}
