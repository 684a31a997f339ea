/// The device id sent with every login: the one set in the options, else one generated once and
/// kept in the cache directory so that it survives restarts (protocol.md: stable per device).
enum DeviceIdentity {
    static func defaultCacheDirectory() -> String? {
        if let xdg = Files.environment("XDG_CACHE_HOME") { return xdg + "/speechclient" }
        if let home = Files.environment("HOME") { return home + "/.cache/speechclient" }
        return nil
    }

    /// Returns the id and, when it could not be persisted, a reason to log.
    static func resolve(options: ClientOptions) -> (id: String, warning: String?) {
        if let id = options.deviceId { return (id, nil) }
        guard let dir = options.cacheDir ?? defaultCacheDirectory() else {
            return (SystemRandom.uuid(), "no cache directory (HOME unset): the device id will change on every run")
        }
        if let why = Files.unsafeDirectoryReason(dir) {
            return (SystemRandom.uuid(), "the device id is not kept (it will change on every run): \(why)")
        }
        let path = dir + "/device-id"
        let (bytes, refused) = Files.readPrivate(path, limit: 64)
        if let bytes {
            let text = String(decoding: bytes, as: UTF8.self).filter { !$0.isWhitespace }
            if SystemRandom.isUUID(text) { return (text.lowercased(), nil) }
        }
        let id = SystemRandom.uuid()
        if let refused { return (id, "the device id file was not used and is not replaced: \(refused)") }
        do throws(SpeechClientError) {
            try Files.makeDirectories(dir, mode: 0o700)
            try Files.writeAtomically(path, Array((id + "\n").utf8), mode: 0o600)
            return (id, nil)
        } catch {
            return (id, "cannot keep the device id in \(dir): \(error.message)")
        }
    }
}
