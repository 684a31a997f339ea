import Synchronization
import Testing
@testable import SpeechClient
#if canImport(Glibc)
import Glibc
#endif

func makeJWT(_ payload: String) -> String {
    Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8)) + "." + Base64URL.encode(Array(payload.utf8)) + ".c2ln"
}

func temporaryDirectory() -> String {
    var template = Array("/tmp/spc-test-XXXXXX".utf8CString)
    return template.withUnsafeMutableBufferPointer { buf in
        guard let base = buf.baseAddress, let p = mkdtemp(base) else { return "/tmp" }
        return String(cString: p)
    }
}

/// Answers Login with a token valid for `validity` seconds; counts calls.
final class FakeIdentityChannel: GRPCCalling, @unchecked Sendable {
    let logins = Atomic<Int>(0)
    let validity: Int64
    let reject: SpeechClientError?
    let fixedToken: String?
    /// LoginResponse.valid_for_s, when not 0.
    let validFor: UInt64
    init(validity: Int64 = 3600, reject: SpeechClientError? = nil, token: String? = nil, validFor: UInt64 = 0) {
        self.validity = validity
        self.validFor = validFor
        self.reject = reject
        self.fixedToken = token
    }

    func unary(path: String, metadata: [(String, String)], request: [UInt8], timeoutMilliseconds: Int?,
               cancellation: Cancellation?) throws(SpeechClientError) -> [UInt8] {
        #expect(path == IdentityClient.loginPath)
        logins.add(1, ordering: .relaxed)
        if let reject { throw reject }
        var w = ProtobufWriter()
        let n = logins.load(ordering: .relaxed)
        w.string(1, fixedToken ?? makeJWT(#"{"appId":"a","deviceId":"d","scope":"slu","exp":\#(WallClock.nowSeconds() + validity),"n":\#(n)}"#))
        if validFor > 0 { w.uint64(2, validFor) }
        return w.bytes
    }

    func openStreamingCall(path: String, metadata: [(String, String)], cancellation: Cancellation?, handler: @escaping @Sendable (GRPCCallEvent) -> Void) throws(SpeechClientError) -> any GRPCStreamingCall {
        throw SpeechClientError(.internal, "not used")
    }
}

@Suite struct JWTTests {
    @Test func decodesBase64URLPayloadWithoutPadding() throws {
        // "?>" encodes to "Pz4" in base64url ('/' and '+' would appear in standard base64).
        #expect(Base64URL.decode("Pz4") == Array("?>".utf8))
        #expect(Base64URL.decode("Pz4=") == Array("?>".utf8))
        #expect(Base64URL.decode("_-8") == [0xFF, 0xEF])
        #expect(Base64URL.decode("A") == nil)
        #expect(Base64URL.decode("a*b") == nil)
        for n in 0..<40 {
            let bytes = (0..<n).map { UInt8(($0 * 37 + 11) & 0xFF) }
            #expect(Base64URL.decode(Base64URL.encode(bytes)) == bytes)
        }
        let claims = try JWTClaims.decode(makeJWT(#"{"appId":"app","deviceId":"dev","scope":"slu","exp":1900000000}"#))
        #expect(claims == JWTClaims(appId: "app", projectId: nil, deviceId: "dev", scope: "slu", expiresAt: 1_900_000_000))
    }

    @Test(arguments: ["", "a.b", "a.!!!.c", makeJWT("[1]"), makeJWT(#"{"exp":"soon"}"#), makeJWT("{"), makeJWT(#"{"exp":1e400}"#)])
    func rejectsMalformedTokens(token: String) {
        #expect { try JWTClaims.decode(token) } throws: { ($0 as? SpeechClientError)?.code == .parse }
    }

    @Test func jsonParser() throws {
        let v = try JSONValue.parse(Array(#" {"a":[1,-2.5e1,true,false,null],"b":"\u00e9\ud83d\ude00\n"} "#.utf8))
        #expect(v["a"] == .array([.number(1), .number(-25), .bool(true), .bool(false), .null]))
        #expect(v["b"] == .string("é😀\n"))
        for bad in ["", "{", "[1,]", "{\"a\"}", "\"\\x\"", "tru", "1 2", String(repeating: "[", count: 100)] {
            #expect(throws: SpeechClientError.self) { try JSONValue.parse(Array(bad.utf8)) }
        }
    }
}

@Suite struct IdentityTests {
    /// Issue 23: the server's valid_for_s caps how long a token is used, in this process and
    /// from the cache in the next, though its exp is later.
    @Test func validForCapsTheUseOfACachedToken() throws {
        let dir = temporaryDirectory() + "/cache"
        // Valid for 300 s (under the 600 s refresh margin): every call logs in again.
        let short = FakeIdentityChannel(validity: 3600, validFor: 300)
        let a = IdentityClient(channel: short, cache: TokenCache(directory: dir), deviceId: "d", appId: "a", projectId: nil)
        _ = try a.token()
        _ = try a.token()
        #expect(short.logins.load(ordering: .relaxed) == 2)
        let b = IdentityClient(channel: short, cache: TokenCache(directory: dir), deviceId: "d", appId: "a", projectId: nil)
        _ = try b.token()
        #expect(short.logins.load(ordering: .relaxed) == 3)
        let entry = try #require(TokenCache(directory: dir).entry(scope: "app:a", deviceId: "d"))
        #expect(entry.validUntil.map { abs($0 - WallClock.nowSeconds() - 300) <= 2 } == true)
        // Valid for 1200 s: reused, from memory and from the file.
        let dir2 = temporaryDirectory() + "/cache"
        let long = FakeIdentityChannel(validity: 3600, validFor: 1200)
        let c = IdentityClient(channel: long, cache: TokenCache(directory: dir2), deviceId: "d", appId: "a", projectId: nil)
        let t = try c.token().token
        let d = IdentityClient(channel: long, cache: TokenCache(directory: dir2), deviceId: "d", appId: "a", projectId: nil)
        #expect(try d.token().token == t)
        #expect(long.logins.load(ordering: .relaxed) == 1)
        // The token's own file holds the token alone, as releases before 0.9 read it.
        let file = Files.readPrivate(dir2 + "/" + TokenCache.fileName(scope: "app:a", deviceId: "d"), limit: 64 * 1024).bytes
        #expect(file.map { String(decoding: $0, as: UTF8.self) } == t)
        // A valid_for_s beyond the token's exp does not extend it.
        let dir3 = temporaryDirectory() + "/cache"
        let beyond = FakeIdentityChannel(validity: 3600, validFor: 4_000_000_000)
        let e = IdentityClient(channel: beyond, cache: TokenCache(directory: dir3), deviceId: "d", appId: "a", projectId: nil)
        _ = try e.token()
        let capped = try #require(TokenCache(directory: dir3).entry(scope: "app:a", deviceId: "d"))
        #expect(capped.validUntil.map { $0 <= WallClock.nowSeconds() + 3600 } == true)
    }

    @Test func tokenIsCachedOnDiskAndReusedAcrossInstances() throws {
        let dir = temporaryDirectory() + "/cache"
        let channel = FakeIdentityChannel()
        let a = IdentityClient(channel: channel, cache: TokenCache(directory: dir), deviceId: "d", appId: "a", projectId: nil)
        let t1 = try a.token().token
        let b = IdentityClient(channel: channel, cache: TokenCache(directory: dir), deviceId: "d", appId: "a", projectId: nil)
        #expect(try b.token().token == t1)
        #expect(channel.logins.load(ordering: .relaxed) == 1)
        // Another device id or scope is another key.
        let c = IdentityClient(channel: channel, cache: TokenCache(directory: dir), deviceId: "e", appId: "a", projectId: nil)
        #expect(try c.token().token != t1)
        var st = stat()
        #expect(stat(dir, &st) == 0 && st.st_mode & 0o777 == 0o700)
        let file = dir + "/" + TokenCache.fileName(scope: "app:a", deviceId: "d")
        #expect(stat(file, &st) == 0 && st.st_mode & 0o777 == 0o600)
    }

    /// Issue 23: a 1 MB token, one with CR/LF, one expiring in year 9999 or already expired were
    /// cached (and then refused when sent). Now each is an auth error naming why, and the cache
    /// directory stays empty.
    @Test(arguments: [
        (String(repeating: "a", count: 1 << 20), "over the 8 KiB limit"),
        (makeJWT(#"{"exp":4102444800}"#) + "\r\nx", "characters a JWT does not have"),
        (makeJWT(#"{"exp":253402300799}"#), "more than a year away"),
        (makeJWT(#"{"exp":1000}"#), "already expired"),
        (makeJWT(#"{"exp":-1}"#), "out of range"),
        (makeJWT(#"{"exp":1e30}"#), "out of range"),
        (makeJWT(#"{"appId":"a"}"#), "no numeric exp claim"),
        ("not-a-jwt", "cannot be read"),
    ])
    func unusableTokensAreRefusedAndNeverCached(token: String, named: String) throws {
        let dir = temporaryDirectory() + "/cache"
        let client = IdentityClient(channel: FakeIdentityChannel(token: token), cache: TokenCache(directory: dir),
                                    deviceId: "d", appId: "a", projectId: nil)
        var thrown: SpeechClientError?
        do throws(SpeechClientError) { _ = try client.token() } catch { thrown = error }
        #expect(thrown?.code == .auth)
        #expect(thrown?.message.contains(named) == true, "\(thrown?.message ?? "no error")")
        let cached = (try? FileManagerless.list(dir)) ?? []
        #expect(cached.allSatisfy { !$0.hasPrefix("token-") }, "\(cached)")
    }

    @Test func tokensOfTwoServersAreKeptApart() throws {
        let dir = temporaryDirectory() + "/cache"
        let channel = FakeIdentityChannel()
        let a = IdentityClient(channel: channel, cache: TokenCache(directory: dir), deviceId: "d", appId: "a", projectId: nil,
                               server: "grpc://one:1")
        let t1 = try a.token().token
        let b = IdentityClient(channel: channel, cache: TokenCache(directory: dir), deviceId: "d", appId: "a", projectId: nil,
                               server: "grpc://two:2")
        #expect(try b.token().token != t1)
        #expect(channel.logins.load(ordering: .relaxed) == 2)
        // Keys longer than the readable part of the name still differ.
        let long = String(repeating: "x", count: 300)
        #expect(TokenCache.fileName(scope: long + "1", deviceId: "d") != TokenCache.fileName(scope: long + "2", deviceId: "d"))
    }

    /// The names 0.10 wrote (computed apart, in Python): a cache stays readable across versions.
    @Test func theTokenFileNameIsTheOneEarlierVersionsWrote() {
        #expect(TokenCache.fileName(scope: "app:a", deviceId: "d") == "token-6170703a610a64-dbc7ad221a927c17")
        let scope = String(repeating: "grpc://127.0.0.1:1\napp:x", count: 5)
        #expect(TokenCache.fileName(scope: scope, deviceId: "d")
                == "token-677270633a2f2f3132372e302e302e313a310a6170703a78677270633a2f2f3132372e302e302e313a310a6170703a78677270633a2f2f3132372e302e302e31-af4ee6c1d9d8204c")
    }

    @Test func tokenCloseToExpiryIsRefreshed() throws {
        let channel = FakeIdentityChannel(validity: 300)   // less than the 600 s margin
        let id = IdentityClient(channel: channel, cache: TokenCache(directory: nil), deviceId: "d", appId: "a", projectId: nil)
        let t1 = try id.token().token
        let t2 = try id.token().token
        #expect(t1 != t2)
        #expect(channel.logins.load(ordering: .relaxed) == 2)
        _ = try id.token(fresh: true)
        #expect(channel.logins.load(ordering: .relaxed) == 3)
    }

    @Test func rejectedLoginIsAnAuthError() {
        let channel = FakeIdentityChannel(reject: SpeechClientError(.api, "unknown app", grpcStatus: 7))
        let id = IdentityClient(channel: channel, cache: TokenCache(directory: nil), deviceId: "d", appId: "a", projectId: nil)
        #expect { try id.token() } throws: {
            let e = $0 as? SpeechClientError
            return e?.code == .auth && e?.grpcStatus == 7 && (e?.message.contains("unknown app") ?? false)
        }
    }

    @Test func cacheFileReadableByOthersIsIgnored() throws {
        let dir = temporaryDirectory()
        let cache = TokenCache(directory: dir)
        cache.store("tok", scope: "s", deviceId: "d")
        #expect(TokenCache(directory: dir).load(scope: "s", deviceId: "d") == "tok")
        chmod(dir + "/" + TokenCache.fileName(scope: "s", deviceId: "d"), 0o644)
        #expect(TokenCache(directory: dir).load(scope: "s", deviceId: "d") == nil)
    }

    @Test func cacheFileOwnedByAnotherUserOrALinkIsIgnored() throws {
        let dir = temporaryDirectory()
        TokenCache(directory: dir).store("tok", scope: "s", deviceId: "d")
        let file = dir + "/" + TokenCache.fileName(scope: "s", deviceId: "d")
        // Another owner (the tests run as root in CI; as another user chown fails and the
        // check is skipped).
        if chown(file, 4242, 4242) == 0 {
            #expect(TokenCache(directory: dir).load(scope: "s", deviceId: "d") == nil)
            #expect(Files.readPrivate(file, limit: 100).refused?.contains("another user") == true)
        }
        // A symbolic link to a private file of ours is not followed.
        let other = temporaryDirectory()
        TokenCache(directory: other).store("secret", scope: "s", deviceId: "d")
        unlink(file)
        #expect(symlink(other + "/" + TokenCache.fileName(scope: "s", deviceId: "d"), file) == 0)
        #expect(TokenCache(directory: dir).load(scope: "s", deviceId: "d") == nil)
    }

    @Test func directoryWritableByOthersIsNotUsed() throws {
        let dir = temporaryDirectory()
        chmod(dir, 0o777)
        let cache = TokenCache(directory: dir)
        #expect(cache.directory == nil)
        #expect(cache.refusal?.contains("writable by other users") == true)
        cache.store("tok", scope: "s", deviceId: "d")
        // Kept in memory for this process, never written there.
        #expect(cache.load(scope: "s", deviceId: "d") == "tok")
        var st = stat()
        #expect(stat(dir + "/" + TokenCache.fileName(scope: "s", deviceId: "d"), &st) != 0)
    }
}

/// Directory listing without Foundation (the core's tests stay close to what the core uses).
enum FileManagerless {
    static func list(_ path: String) throws -> [String] {
        guard let dir = opendir(path) else { return [] }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }
}
