import FuzzSupport
import SpeechClient

// WAV files as a user could hand them over: parsed and read to the end (every chunk layout,
// format tag, sample kind and declared size), through the same reader as a file on disk
// (fmemopen). The converter is not run here: building resampler kernels for each odd rate would
// cut the rate to a few thousand inputs a second; the Resampler tests cover absurd rates.
func fuzzOne(_ bytes: [UInt8]) {
    let source = WAVFileSource(bytes: bytes)
    guard (try? source.open()) != nil else { return }
    defer { source.close() }
    var reads = 0
    var samples = 0
    while reads < 10_000, let block = try? source.read(maxFrames: 4096) {
        samples += block.count
        reads += 1
    }
}

@_cdecl("FuzzWAV_main")
func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runFuzzer(argc, argv, fuzzOne)
}
