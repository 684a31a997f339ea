import FuzzSupport
import SpeechClient

// Whole response sequences into one segment assembler (issue 23): the input is a series of
// messages, each a 2-byte little-endian length and that many bytes of an SLU response, applied
// in order as a server would send them. Whatever the sequence, no crash, every snapshot stays
// within a small multiple of the per-segment byte bound, and closing the contexts at the end
// (as a context that ends does) is safe. `make fuzz` runs it with a malloc limit, so a bound
// that fails to hold shows as an out-of-memory crash.
func fuzzOne(_ bytes: [UInt8]) {
    var assembler = SegmentAssembler()
    var contexts: Set<String> = []
    var i = 0
    while i + 2 <= bytes.count {
        let n = Int(bytes[i]) | Int(bytes[i + 1]) << 8
        i += 2
        let end = min(bytes.count, i + n)
        let message = bytes[i..<end]
        i = end
        guard let response = try? SLUResponse.decode(message) else { continue }
        if contexts.count < 16 { contexts.insert(response.audioContext) }
        guard let snapshot = try? assembler.applyChecked(response) else { continue }
        precondition(snapshot.heldBytes <= 16 * SegmentAssembler.maxSegmentBytes,
                     "a snapshot of \(snapshot.heldBytes) bytes: the segment bound did not hold")
    }
    for context in contexts {
        for closed in assembler.closeUnfinished(context: context) {
            precondition(closed.isFinal && closed.heldBytes <= 16 * SegmentAssembler.maxSegmentBytes)
        }
    }
}

@_cdecl("FuzzAssembler_main")
func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runFuzzer(argc, argv, fuzzOne)
}
