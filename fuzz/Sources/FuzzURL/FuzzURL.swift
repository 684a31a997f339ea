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

// SwiftPM links an executable's entry as `<module>_main`; hand control to libFuzzer's driver.
@_cdecl("FuzzURL_main")
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
