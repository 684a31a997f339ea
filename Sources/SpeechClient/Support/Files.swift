#if canImport(Glibc)
import Glibc
#endif

/// Small file helpers on raw system calls (the core has no Foundation).
public enum Files {
    /// The whole file, or nil when it cannot be read. Refuses files over `limit` bytes.
    public static func read(_ path: String, limit: Int = 1 << 20) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 { if errno == EINTR { continue }; return nil }
            if n == 0 { return out }
            out.append(contentsOf: buffer[0..<n])
            if out.count > limit { return nil }
        }
    }

    /// Writes through a temporary file and rename, so readers never see a half-written file.
    public static func writeAtomically(_ path: String, _ bytes: [UInt8], mode: mode_t) throws(SpeechClientError) {
        let tmp = path + ".tmp.\(getpid())"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard fd >= 0 else { throw SpeechClientError.errno(.internal, "open", errno, context: tmp) }
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress.map { $0 + written }, bytes.count - written) }
            if n < 0 {
                if errno == EINTR { continue }
                let e = errno
                close(fd); unlink(tmp)
                throw SpeechClientError.errno(.internal, "write", e, context: tmp)
            }
            written += n
        }
        fchmod(fd, mode)
        close(fd)
        if rename(tmp, path) != 0 {
            let e = errno
            unlink(tmp)
            throw SpeechClientError.errno(.internal, "rename", e, context: path)
        }
    }

    /// Creates a directory and its parents; the last component gets `mode`.
    public static func makeDirectories(_ path: String, mode: mode_t) throws(SpeechClientError) {
        var prefix = path.hasPrefix("/") ? "/" : ""
        let parts = path.split(separator: "/")
        for (i, part) in parts.enumerated() {
            prefix += (prefix.isEmpty || prefix == "/" ? "" : "/") + part
            if mkdir(prefix, i == parts.count - 1 ? mode : 0o755) != 0 && errno != EEXIST {
                throw SpeechClientError.errno(.internal, "mkdir", errno, context: prefix)
            }
        }
    }

    public static func environment(_ name: String) -> String? {
        guard let value = getenv(name) else { return nil }
        let s = String(cString: value)
        return s.isEmpty ? nil : s
    }
}
