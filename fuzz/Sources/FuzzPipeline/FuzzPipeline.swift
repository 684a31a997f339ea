import FuzzSupport
import SpeechClient

// The hands-free pipeline on any audio and any valid tunables: the first bytes pick the VAD
// settings and endpointing lengths through the same validating setters as the C API, the rest
// is PCM cut into chunks of varying size. Checks what must hold whatever the input: an open is
// always followed by audio, close only after an open, the activation never longer than its
// maximum plus the pre-roll and one chunk.
func fuzzOne(_ bytes: [UInt8]) {
    guard bytes.count >= 8 else { return }
    var o = ClientOptions()
    _ = try? o.setVAD(parameter: Int32(bytes[0] % 7), value: Double(Int8(bitPattern: bytes[1])) * 0.9)
    _ = try? o.setVAD(parameter: Int32(bytes[2] % 7), value: Double(bytes[3]) / 100)
    _ = try? o.setEndpointing(preRoll: Int(bytes[4]) * 20, trailingSilence: 100 + Int(bytes[5]) * 10,
                              minActivation: Int(bytes[6]) * 10, maxActivation: 500 + Int(bytes[7]) * 20)
    let s = Endpointer.Settings(options: o)
    var ep = Endpointer(settings: s)
    var samples: [Int16] = []
    var i = 8
    while i + 1 < bytes.count {
        samples.append(Int16(bitPattern: UInt16(bytes[i]) | UInt16(bytes[i + 1]) << 8))
        i += 2
    }
    var open = false
    var sent = 0
    var offset = 0
    var size = 1 + Int(bytes[0]) * 7
    while offset < samples.count {
        let chunk = Array(samples[offset..<min(offset + size, samples.count)])
        offset += chunk.count
        size = 1 + (size * 31 + 17) % 4_000
        for action in ep.process(chunk) {
            switch action {
            case .open: precondition(!open); open = true; sent = 0
            case .audio(let a): precondition(open); sent += a.count
            case .close: precondition(open); open = false
            case .event: break
            }
        }
        precondition(!open || sent <= s.maxActivationSamples + s.preRollSamples + 2 * 4_000)
    }
    for action in ep.finish() where action == .close { precondition(open); open = false }
    precondition(!open)
}

@_cdecl("FuzzPipeline_main")
func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runFuzzer(argc, argv, fuzzOne)
}
