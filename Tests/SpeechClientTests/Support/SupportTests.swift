import Testing
#if canImport(Glibc)
import Glibc
#endif
@testable import SpeechClient

@Suite struct ServerURLTests {
    @Test(arguments: [
        ("grpc://127.0.0.1:50051", false, "127.0.0.1", 50051, "127.0.0.1:50051"),
        ("grpc+tls://api.example.com", true, "api.example.com", 443, "api.example.com"),
        ("https://api.example.com:8443/", true, "api.example.com", 8443, "api.example.com:8443"),
        ("http://localhost", false, "localhost", 80, "localhost"),
        ("grpc://[::1]:9000", false, "::1", 9000, "[::1]:9000"),
        ("GRPC+TLS://Host.Example:443", true, "Host.Example", 443, "Host.Example"),
        ("grpcs://api.example.com", true, "api.example.com", 443, "api.example.com"),
    ])
    func parsesValidURLs(text: String, tls: Bool, host: String, port: Int, authority: String) throws {
        let url = try ServerURL(parsing: text)
        #expect(url.useTLS == tls)
        #expect(url.host == host)
        #expect(Int(url.port) == port)
        #expect(url.authority == authority)
    }

    @Test(arguments: ["", "ftp://x", "grpc://", "grpc://host:0", "grpc://host:65536", "grpc://host:12ab",
                      "grpc://host/path", "grpc://user@host", "grpc://[::1", "grpc://[zz]:1", "grpc://ho st",
                      "grpc://host:", "127.0.0.1:50051", "grpc://host?x=1", "wyoming://", "wyoming://host/x",
                      "wyoming+unix://relative.sock", "wyoming+unix://", "wyoming+unix:///" + String(repeating: "x", count: 107)])
    func rejectsInvalidURLs(text: String) {
        #expect(throws: SpeechClientError.self) { try ServerURL(parsing: text) }
        do { _ = try ServerURL(parsing: text) } catch {
            #expect(error.code == .invalidArgument)
            #expect(text.isEmpty || error.message.contains(text))
        }
    }

    @Test func schemesNameTheBackend() throws {
        #expect(try ServerURL(parsing: "grpc://h:1").backend == .speechly)
        let tcp = try ServerURL(parsing: "wyoming://127.0.0.1:10300")
        #expect(tcp.backend == .wyoming && tcp.host == "127.0.0.1" && tcp.port == 10300 && tcp.unixPath == nil && !tcp.useTLS)
        #expect(tcp.description == "wyoming://127.0.0.1:10300")
        #expect(try ServerURL(parsing: "wyoming://whisper.local").port == 10300)
        #expect(try ServerURL(parsing: "wyoming://[::1]:7").description == "wyoming://[::1]:7")
        let unix = try ServerURL(parsing: "wyoming+unix:///run/whisper.sock")
        #expect(unix.backend == .wyoming && unix.unixPath == "/run/whisper.sock" && unix.isLoopback)
        #expect(unix.description == "wyoming+unix:///run/whisper.sock")
        let riva = try ServerURL(parsing: "riva://127.0.0.1")
        #expect(riva.backend == .riva && riva.port == 50051 && !riva.useTLS && riva.description == "riva://127.0.0.1:50051")
        let rivas = try ServerURL(parsing: "rivas://grpc.nvcf.nvidia.com")
        #expect(rivas.backend == .riva && rivas.port == 443 && rivas.useTLS && rivas.authority == "grpc.nvcf.nvidia.com")
    }

    @Test func onlySpeechlyNeedsAnAppId() throws {
        var o = ClientOptions()
        try o.setServer("wyoming://127.0.0.1:10300")
        try o.validateForClient()
        try o.setServer("grpc://127.0.0.1:1")
        #expect(throws: SpeechClientError.self) { try o.validateForClient() }
    }
}

@Suite struct OptionsTests {
    @Test func defaults() {
        let o = ClientOptions()
        #expect(o.language == "en-US")
        #expect(o.chunkMilliseconds == 100)
        #expect(o.audio == .microphone(device: "default"))
        #expect(o.logLevel == .warning)
        #expect(!o.insecureTLS)
    }

    @Test func validation() throws {
        var o = ClientOptions()
        #expect(throws: SpeechClientError.self) { try o.validateForClient() }
        try o.setServer("grpc://127.0.0.1:1")
        #expect(throws: SpeechClientError.self) { try o.validateForClient() }
        try o.setAppId("app")
        try o.validateForClient()
        #expect(throws: SpeechClientError.self) { try o.setChunkMilliseconds(19) }
        #expect(throws: SpeechClientError.self) { try o.setChunkMilliseconds(1001) }
        try o.setChunkMilliseconds(20)
        #expect(throws: SpeechClientError.self) { try o.setAudio(.push(sampleRate: 7999, channels: 1)) }
        #expect(throws: SpeechClientError.self) { try o.setAudio(.push(sampleRate: 16000, channels: 9)) }
        #expect(throws: SpeechClientError.self) { try o.setDeviceId("not-a-uuid") }
        try o.setDeviceId("0F0E0D0C-0B0A-4908-8706-050403020100")
        #expect(o.deviceId == "0f0e0d0c-0b0a-4908-8706-050403020100")
        #expect(throws: SpeechClientError.self) { try o.setLanguage("e") }
        #expect(throws: SpeechClientError.self) { try o.setAppId("has space") }
        #expect(throws: SpeechClientError.self) { try o.setLogLevel(5) }
        try o.addContextOption(key: "vocabulary", value: "kitchen")
        try o.addContextOption(key: "vocabulary", value: "bedroom")
        #expect(o.contextOptions == [ContextOption(key: "vocabulary", values: ["kitchen", "bedroom"])])
    }
}

@Suite struct SupportTests {
    @Test func jsonEscapes() {
        #expect(JSON.quote("a\"b\\c\n\u{01}é") == "\"a\\\"b\\\\c\\n\\u0001é\"")
    }

    @Test func uuidShape() {
        let a = SystemRandom.uuid(), b = SystemRandom.uuid()
        #expect(SystemRandom.isUUID(a))
        #expect(a != b)
        #expect(Array(a)[14] == "4")
        #expect("89ab".contains(Array(a)[19]))  // the RFC 4122 variant
        #expect(a == a.lowercased())
    }

    @Test func hexIsLowerCaseTwoDigitsPerByteAndSixteenPerWord() {
        #expect(Hex.string([0x00, 0x0a, 0xab, 0xff] as [UInt8]) == "000aabff")
        #expect(Hex.string([UInt8]()) == "")
        #expect(Hex.string(UInt64(1)) == "0000000000000001")
        #expect(Hex.string(UInt64(0xdbc7_ad22_1a92_7c17)) == "dbc7ad221a927c17")
    }

    @Test func makeDirectoriesCreatesEveryLevelAndGivesTheLastItsMode() throws {
        let root = "/tmp/spc-mkdirs-\(getpid())-\(SystemRandom.uuid())"
        defer { for p in ["/a/b/c", "/a/b", "/a", ""].map({ root + $0 }) { rmdir(p) } }
        try Files.makeDirectories(root + "/a/b/c", mode: 0o700)
        try Files.makeDirectories(root + "/a/b/c", mode: 0o700)  // all there: no error
        var st = stat()
        #expect(stat(root + "/a/b", &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR)
        #expect(stat(root + "/a/b/c", &st) == 0 && (st.st_mode & 0o777) == 0o700)
    }

    @Test func fifoOrderAcrossCompaction() {
        var q = FIFO<Int>()
        var next = 0
        for i in 0..<5000 {
            q.push(i)
            if i % 3 != 0 { #expect(q.pop() == next); next += 1 }
        }
        while let v = q.pop() { #expect(v == next); next += 1 }
        #expect(next == 5000)
        #expect(q.isEmpty)
    }

    /// A queue that is never empty (the replay buffer keeps about ten chunks) keeps a few dozen
    /// slots, not one per element ever pushed up to the next compaction.
    @Test func aFIFOThatIsNeverEmptyStaysSmall() {
        var q = FIFO<(Int, [Int16])>()
        for i in 0..<10 { q.push((i, [])) }
        for i in 10..<10_000 {
            q.push((i, []))
            #expect(q.pop()?.0 == i - 10)
            #expect(q.count == 10)
        }
        #expect(q.storageCapacity <= 4 * (FIFO<Int>.compactAfter + 10), "\(q.storageCapacity) slots")
    }

    @Test func serverTextIsCutAndHasNoControlCharacters() {
        #expect("plain".shownFromServer() == "plain")
        #expect("a\nb\u{1B}[31mc\u{0}".shownFromServer() == "a?b?[31mc?")
        #expect(String(repeating: "x", count: 5_000).shownFromServer(limit: 10) == "xxxxxxxxxx...")
        // Cut between characters: "é" is 2 bytes, the third does not fit in 5.
        #expect("ééé".shownFromServer(limit: 5) == "éé...")
        #expect(String(repeating: "y", count: 4 << 20).shownFromServer().utf8.count == 1_024 + 3)
        // Not inside one: "e" and a combining accent (3 bytes) stay together, as do a flag's two
        // regional indicators (8 bytes).
        #expect("e\u{301}e\u{301}".shownFromServer(limit: 5) == "e\u{301}...")
        #expect("ok \u{1F1EB}\u{1F1EE}".shownFromServer(limit: 9) == "ok ...")
        // What makes a log line lie about itself: separators that end it, controls that turn it.
        #expect("a\u{2028}b\u{2029}c\u{202E}d\u{2066}e\u{200F}f\r\ng".shownFromServer() == "a?b?c?d?e?f??g")
        // A text of one character of 4 MiB (a letter and two million accents) is looked at only
        // as far as the limit: it was copied whole, scalar by scalar, to be thrown away.
        let huge = "ab" + "e" + String(repeating: "\u{301}", count: 2 << 20)
        #expect(huge.shownFromServer(limit: 10) == "ab...")
        // The cut is at the limit however the text goes on: a separator past it changes nothing.
        #expect(("0123456789" + "\u{2028}" + String(repeating: "z", count: 100)).shownFromServer(limit: 10) == "0123456789...")
        #expect("0123456789".shownFromServer(limit: 10) == "0123456789")
        // Format characters that only join or shape what is shown stay.
        #expect("\u{1F469}\u{200D}\u{1F4BB} soft\u{AD}hyphen".shownFromServer() == "\u{1F469}\u{200D}\u{1F4BB} soft\u{AD}hyphen")
    }

    @Test func ownedCStringReplacesInteriorNUL() {
        let s = OwnedCString("a\u{0}b")
        #expect(String(cString: s.pointer) == "a?b")
    }
}
