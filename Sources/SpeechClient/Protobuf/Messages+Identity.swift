// speechly.identity.v2 on the wire (protocol.md).

public struct LoginRequest: Sendable, Equatable {
    public enum Scope: Sendable, Equatable {
        case application(appId: String, configId: String?)
        case project(projectId: String)
    }
    public var deviceId: String
    public var scope: Scope

    public init(deviceId: String, scope: Scope) {
        self.deviceId = deviceId
        self.scope = scope
    }

    public func encoded() -> [UInt8] {
        var w = ProtobufWriter()
        w.string(1, deviceId)
        switch scope {
        case .application(let appId, let configId):
            w.message(2) { m in
                m.string(1, appId)
                if let configId { m.string(3, configId) }
            }
        case .project(let projectId):
            w.message(3) { $0.string(1, projectId) }
        }
        return w.bytes
    }
}

public struct LoginResponse: Sendable, Equatable {
    public var token = ""
    public var validForSeconds: UInt32 = 0
    public var expiresAtEpoch: UInt64 = 0
    public var expiresAt = ""

    public init() {}

    public static func decode(_ bytes: ArraySlice<UInt8>) throws(SpeechClientError) -> LoginResponse {
        var r = ProtobufReader(bytes)
        var out = LoginResponse()
        while let (f, v) = try r.next() {
            switch f {
            case 1: out.token = try v.string("token")
            case 2: out.validForSeconds = UInt32(truncatingIfNeeded: try v.uint64("valid_for_s"))
            case 3: out.expiresAtEpoch = try v.uint64("expires_at_epoch")
            case 4: out.expiresAt = try v.string("expires_at")
            default: break
            }
        }
        return out
    }
}
