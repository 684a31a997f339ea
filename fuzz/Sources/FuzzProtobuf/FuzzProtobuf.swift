import SpeechClient

// Every response path of the protobuf decoder: SLU responses and login responses.
func fuzzOne(_ bytes: [UInt8]) {
    _ = try? SLUResponse.decode(bytes[...])
    _ = try? LoginResponse.decode(bytes[...])
}

// SwiftPM links an executable's entry as `<module>_main`; hand control to libFuzzer's driver.
@_cdecl("FuzzProtobuf_main")
func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    var count = argc
    var vector = argv
    return LLVMFuzzerRunDriver(&count, &vector) { data, size in
        fuzzOne(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
        return 0
    }
}

@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<Int32>,
                         _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32) -> Int32
