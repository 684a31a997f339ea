/// libFuzzer's driver, shared by the targets of this package. SwiftPM names an executable's
/// entry point `<module>_main`; each target defines it with `@_cdecl` and hands its input
/// function here:
///
///     @_cdecl("FuzzWAV_main")
///     func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
///         runFuzzer(argc, argv, fuzzOne)
///     }

/// The target's input function; libFuzzer's callback is a C function and cannot capture it.
nonisolated(unsafe) private var fuzzTarget: ([UInt8]) -> Void = { _ in }

public func runFuzzer(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
                      _ fuzzOne: @escaping ([UInt8]) -> Void) -> Int32 {
    fuzzTarget = fuzzOne
    var count = argc
    var vector = argv
    return LLVMFuzzerRunDriver(&count, &vector) { data, size in
        fuzzTarget(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
        return 0
    }
}

@_silgen_name("LLVMFuzzerRunDriver")
private func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<Int32>,
                                 _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                                 _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32) -> Int32
