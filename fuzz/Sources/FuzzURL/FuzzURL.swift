import FuzzSupport
import SpeechClient

// Server URLs and option strings as a C caller could pass them.
func fuzzOne(_ bytes: [UInt8]) {
    let text = String(decoding: bytes, as: UTF8.self)
    _ = try? ServerURL(parsing: text)
    var o = ClientOptions()
    try? o.setLanguage(text)
    try? o.setDeviceId(text)
    try? o.setAppId(text)
    try? o.addContextOption(key: text, value: text)
}

@_cdecl("FuzzURL_main")
func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runFuzzer(argc, argv, fuzzOne)
}
