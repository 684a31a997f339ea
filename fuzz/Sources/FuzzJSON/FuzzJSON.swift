import SpeechClient

// JWT payloads (base64url + JSON) and raw JSON.
func fuzzOne(_ bytes: [UInt8]) {
    _ = try? JSONValue.parse(bytes)
    _ = try? JWTClaims.decode(String(decoding: bytes, as: UTF8.self))
    _ = try? JWTClaims.decode("e30." + Base64URL.encode(bytes) + ".x")
}

// SwiftPM links an executable's entry as `<module>_main`; hand control to libFuzzer's driver.
@_cdecl("FuzzJSON_main")
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
