// swift-tools-version:6.2
// libFuzzer targets for the parsers that read untrusted bytes. Built by `make fuzz` with
// -sanitize=fuzzer,address; each target is an executable whose entry point libFuzzer provides.
import PackageDescription

let package = Package(
    name: "speechclient-fuzz",
    dependencies: [.package(name: "speechclient", path: "..")],
    targets: [
        .target(name: "FuzzSupport"),
        .executableTarget(name: "FuzzProtobuf", dependencies: ["FuzzSupport", .product(name: "SpeechClientCore", package: "speechclient")]),
        .executableTarget(name: "FuzzJSON", dependencies: ["FuzzSupport", .product(name: "SpeechClientCore", package: "speechclient")]),
        .executableTarget(name: "FuzzURL", dependencies: ["FuzzSupport", .product(name: "SpeechClientCore", package: "speechclient")]),
        .executableTarget(name: "FuzzWAV", dependencies: ["FuzzSupport", .product(name: "SpeechClientCore", package: "speechclient")]),
        .executableTarget(name: "FuzzFraming", dependencies: ["FuzzSupport", .product(name: "SpeechClientCore", package: "speechclient")]),
        .executableTarget(name: "FuzzPipeline", dependencies: ["FuzzSupport", .product(name: "SpeechClientCore", package: "speechclient")]),
        .executableTarget(name: "FuzzWyoming", dependencies: ["FuzzSupport", .product(name: "SpeechClientCore", package: "speechclient")]),
        .executableTarget(name: "FuzzAssembler", dependencies: ["FuzzSupport", .product(name: "SpeechClientCore", package: "speechclient")]),
    ]
)
