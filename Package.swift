// swift-tools-version:6.2
// Packaging flags (static Swift runtime, SONAME, version script) live in the Makefile, not
// here: in the manifest they break `swift test` (../shared/docs/build.md).
import PackageDescription

let package = Package(
    name: "speechclient",
    products: [
        .library(name: "speechclient", type: .dynamic, targets: ["SpeechClientCAPI"]),
        // The core alone, for the fuzzers in fuzz/ (not installed).
        .library(name: "SpeechClientCore", targets: ["SpeechClient"]),
    ],
    targets: [
        .systemLibrary(name: "CNghttp2", pkgConfig: "libnghttp2",
                       providers: [.apt(["libnghttp2-dev"])]),
        // Headers only: libssl is opened when TLS is first used, not linked (CShims/openssl_loader.c).
        .systemLibrary(name: "COpenSSL",
                       providers: [.apt(["libssl-dev"])]),
        // Headers only: libasound is opened on first use, not linked (CShims/alsa_loader.c).
        .systemLibrary(name: "CALSA",
                       providers: [.apt(["libasound2-dev"])]),
        // C helpers for what Swift cannot import (GNU extensions, variadic calls, macros).
        .target(name: "CShims"),
        // The one public header, include/speechclient.h, with no copy.
        .target(name: "CSpeechClientAPI", path: ".",
                sources: ["Sources/CSpeechClientAPI/speechclient.c"],
                publicHeadersPath: "include"),
        // The core: pure Swift, no Foundation.
        // CSpeechClientAPI: the header's SPC_VERSION_* macros (Support/Version.swift).
        .target(name: "SpeechClient", dependencies: ["CShims", "CNghttp2", "COpenSSL", "CALSA", "CSpeechClientAPI"],
                swiftSettings: [.swiftLanguageMode(.v6)]),
        // @c @implementation functions only: the C boundary, no logic.
        .target(name: "SpeechClientCAPI", dependencies: ["SpeechClient", "CSpeechClientAPI"],
                exclude: ["exports.map"],
                swiftSettings: [.swiftLanguageMode(.v6)]),
        .testTarget(name: "SpeechClientTests", dependencies: ["SpeechClient"],
                    swiftSettings: [.swiftLanguageMode(.v6)]),
    ]
)
