#if canImport(Glibc)
import Glibc
#endif

/// Login tokens kept on disk between runs (the iOS client's cache never hit because it keyed
/// tokens by a per-process hash: here the key is the scope id and the device id). The directory
/// is 0700 and each file 0600; a file owned by another user, readable by others or a symbolic
/// link is ignored, and a directory others may write to (or owned by another user) is not used.
/// Without a usable directory the cache lives in memory only.
/// Sendable: `lock` guards `memory`; `directory` and `refusal` are immutable; files are replaced atomically.
public final class TokenCache: @unchecked Sendable {
    public let directory: String?
    /// Why the directory is not used, when it is not (for a warning).
    public let refusal: String?
    private let lock = ConditionLock()
    private var memory: [String: Entry] = [:]

    /// A cached token and, when the server said how long it may be used (`valid_for_s`), until
    /// when (Unix seconds): kept in a file of its own beside the token's (NAME.valid-until), so
    /// that the token's file stays what releases before 0.9 read (they share the directory).
    public struct Entry: Equatable, Sendable {
        public var token: String
        public var validUntil: Int64?
        public init(token: String, validUntil: Int64? = nil) {
            self.token = token
            self.validUntil = validUntil
        }
    }

    public init(directory: String?) {
        if let directory, let why = Files.unsafeDirectoryReason(directory) {
            self.directory = nil
            refusal = "token cache not kept on disk: \(why)"
        } else {
            self.directory = directory
            refusal = nil
        }
    }

    /// The file name for a key: hex of its first 64 bytes (so no id can escape the directory)
    /// and a 64-bit FNV-1a hash of the whole key (two long keys with the same start differ).
    static func fileName(scope: String, deviceId: String) -> String {
        let key = Array((scope + "\n" + deviceId).utf8)
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in key { hash = (hash ^ UInt64(b)) &* 0x0000_0100_0000_01b3 }
        return "token-" + Hex.string(key.prefix(64)) + "-" + Hex.string(hash)
    }

    public func load(scope: String, deviceId: String) -> String? { entry(scope: scope, deviceId: deviceId)?.token }

    public func entry(scope: String, deviceId: String) -> Entry? {
        let name = Self.fileName(scope: scope, deviceId: deviceId)
        if let e = lock.withLock({ memory[name] }) { return e }
        guard let directory else { return nil }
        guard let bytes = Files.readPrivate(directory + "/" + name, limit: 64 * 1024).bytes else { return nil }
        let token = String(decoding: bytes, as: UTF8.self).filter { !$0.isWhitespace }
        if token.isEmpty { return nil }
        var e = Entry(token: token)
        if let until = Files.readPrivate(directory + "/" + name + Self.validUntilSuffix, limit: 64).bytes {
            e.validUntil = Int64(String(decoding: until, as: UTF8.self).filter { !$0.isWhitespace })
        }
        lock.withLock { memory[name] = e }
        return e
    }

    /// Keeps the token; a failure to write the file is returned for logging, not thrown: the
    /// token still works for this process.
    @discardableResult
    public func store(_ token: String, validUntil: Int64? = nil, scope: String, deviceId: String) -> String? {
        let name = Self.fileName(scope: scope, deviceId: deviceId)
        let e = Entry(token: token, validUntil: validUntil)
        lock.withLock { memory[name] = e }
        guard let directory else { return nil }
        do throws(SpeechClientError) {
            try Files.makeDirectories(directory, mode: 0o700)
            // The limit first: a token is never found beside a stale, later limit.
            if let validUntil {
                try Files.writeAtomically(directory + "/" + name + Self.validUntilSuffix, Array("\(validUntil)\n".utf8), mode: 0o600)
            } else {
                unlink(directory + "/" + name + Self.validUntilSuffix)
            }
            try Files.writeAtomically(directory + "/" + name, Array(token.utf8), mode: 0o600)
            return nil
        } catch {
            return "cannot cache the login token in \(directory): \(error.message)"
        }
    }

    public func remove(scope: String, deviceId: String) {
        let name = Self.fileName(scope: scope, deviceId: deviceId)
        lock.withLock { memory[name] = nil }
        if let directory {
            unlink(directory + "/" + name)
            unlink(directory + "/" + name + Self.validUntilSuffix)
        }
    }

    static let validUntilSuffix = ".valid-until"
}
