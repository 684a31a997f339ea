import FuzzSupport
import SpeechClient

// JWT payloads (base64url + JSON) and raw JSON.
func fuzzOne(_ bytes: [UInt8]) {
    _ = try? JSONValue.parse(bytes)
    _ = try? JWTClaims.decode(String(decoding: bytes, as: UTF8.self))
    _ = try? JWTClaims.decode("e30." + Base64URL.encode(bytes) + ".x")
}

@_cdecl("FuzzJSON_main")
func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runFuzzer(argc, argv, fuzzOne)
}
