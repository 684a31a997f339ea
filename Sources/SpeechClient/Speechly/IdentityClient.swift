/// Logs in (`IdentityAPI/Login`, v2) and keeps the token fresh: a cached token is reused while it
/// has more than `refreshMarginSeconds` left; otherwise, or after the server rejected it, a new
/// login is made.
/// Sendable: immutable after init; `cache` and `channel` are thread-safe.
public final class IdentityClient: @unchecked Sendable {
    public static let loginPath = "/speechly.identity.v2.IdentityAPI/Login"

    private let channel: any GRPCCalling
    private let cache: TokenCache
    private let deviceId: String
    private let scope: LoginRequest.Scope
    private let cacheScope: String
    public let refreshMarginSeconds: Int64
    private let timeoutMilliseconds: Int
    private let now: @Sendable () -> Int64
    private let headers: [(String, String)]

    /// `server` names the login server in the cache key: a token from one server is never offered
    /// to another (issue 18: switching servers gave a spurious reconnection, and prepare-on-init's
    /// check of the credentials was defeated by another server's token).
    public init(channel: any GRPCCalling, cache: TokenCache, deviceId: String, appId: String?, projectId: String?,
                server: String = "", refreshMarginSeconds: Int64 = 600, timeoutMilliseconds: Int = 10_000,
                headers: [(String, String)] = [], now: @escaping @Sendable () -> Int64 = WallClock.nowSeconds) {
        self.headers = headers
        self.channel = channel
        self.cache = cache
        self.deviceId = deviceId
        if let projectId {
            scope = .project(projectId: projectId)
            cacheScope = (server.isEmpty ? "" : server + "\n") + "project:" + projectId
        } else {
            scope = .application(appId: appId ?? "", configId: nil)
            cacheScope = (server.isEmpty ? "" : server + "\n") + "app:" + (appId ?? "")
        }
        self.refreshMarginSeconds = refreshMarginSeconds
        self.timeoutMilliseconds = timeoutMilliseconds
        self.now = now
    }

    /// A token good for at least the refresh margin. `fresh` skips the cache (after a rejection).
    /// Returns the token and, if caching failed, a warning to log.
    public func token(fresh: Bool = false, cancellation: Cancellation? = nil) throws(SpeechClientError) -> (token: String, warning: String?) {
        // A cached token is used until its expiry, or until the end of the use the server
        // allowed (`valid_for_s`) if that comes first (issue 23).
        if !fresh, let cached = cache.entry(scope: cacheScope, deviceId: deviceId),
           let claims = try? JWTClaims.decode(cached.token),
           min(claims.expiresAt, cached.validUntil ?? .max) - now() > refreshMarginSeconds {
            return (cached.token, nil)
        }
        if fresh { cache.remove(scope: cacheScope, deviceId: deviceId) }
        let response: LoginResponse
        do throws(SpeechClientError) {
            let bytes = try channel.unary(path: Self.loginPath, metadata: headers,
                                          request: LoginRequest(deviceId: deviceId, scope: scope).encoded(),
                                          timeoutMilliseconds: timeoutMilliseconds, cancellation: cancellation)
            response = try LoginResponse.decode(bytes[...])
        } catch {
            if error.code == .api, error.grpcStatus != nil {
                var e = error
                e.code = .auth
                e.message = "login failed: \(error.message)"
                throw e
            }
            throw error
        }
        guard !response.token.isEmpty else { throw SpeechClientError(.parse, "login response has no token") }
        // Checked before it is cached or used (issue 23): nothing unusable is written.
        let issued = now()
        let claims = try Self.usable(response.token, now: issued)
        // The response's valid_for_s and expires_at_epoch shorten the token's use, never
        // lengthen it past its own expiry; 0: not given.
        var validUntil: Int64?
        if response.validForSeconds > 0 { validUntil = min(claims.expiresAt, issued + Int64(response.validForSeconds)) }
        if response.expiresAtEpoch > 0 && response.expiresAtEpoch < UInt64(claims.expiresAt) {
            validUntil = min(validUntil ?? claims.expiresAt, Int64(response.expiresAtEpoch))
        }
        let warning = cache.store(response.token, validUntil: validUntil, scope: cacheScope, deviceId: deviceId)
        return (response.token, warning)
    }

    /// The largest login token taken: a JWT with a few claims is a few hundred bytes.
    public static let maxTokenBytes = 8 * 1024
    /// The latest expiry taken: Speechly's tokens lived hours; a year is far beyond that.
    public static let maxTokenLifetimeSeconds: Int64 = 366 * 86_400

    /// A token the client can send and cache: a JWT in compact form (base64url parts and dots,
    /// so nothing a header value cannot carry), of sane size, readable, expiring in the future
    /// and within a year. Anything else is an auth error naming what was wrong.
    static func usable(_ token: String, now: Int64) throws(SpeechClientError) -> JWTClaims {
        func refused(_ why: String) -> SpeechClientError {
            SpeechClientError(.auth, "the login token \(why); it was not used or cached")
        }
        guard token.utf8.count <= maxTokenBytes else {
            throw refused("is \(token.utf8.count) bytes, over the \(maxTokenBytes / 1024) KiB limit")
        }
        let jwtCharacter: (UInt8) -> Bool = { c in
            (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || (c >= 0x30 && c <= 0x39) || c == 0x2D || c == 0x5F || c == 0x2E
        }
        guard token.utf8.allSatisfy(jwtCharacter) else {
            throw refused("holds characters a JWT does not have (control characters, spaces, or others)")
        }
        let claims: JWTClaims
        do throws(SpeechClientError) {
            claims = try JWTClaims.decode(token)
        } catch {
            throw refused("cannot be read: \(error.message)")
        }
        guard claims.expiresAt > now else { throw refused("had already expired (exp \(claims.expiresAt))") }
        guard claims.expiresAt - now <= maxTokenLifetimeSeconds else {
            throw refused("expires in \((claims.expiresAt - now) / 86_400) days, more than a year away (exp \(claims.expiresAt))")
        }
        return claims
    }

    public func invalidate() { cache.remove(scope: cacheScope, deviceId: deviceId) }
}
