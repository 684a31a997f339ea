import FuzzSupport
import SpeechClient

// Every response path of the protobuf decoder: SLU responses and login responses.
func fuzzOne(_ bytes: [UInt8]) {
    _ = try? SLUResponse.decode(bytes[...])
    _ = try? LoginResponse.decode(bytes[...])
}

@_cdecl("FuzzProtobuf_main")
func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runFuzzer(argc, argv, fuzzOne)
}
