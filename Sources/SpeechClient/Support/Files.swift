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
        return readAll(fd, limit: limit)
    }

    /// Everything left to read on `fd`, or nil on a read error or past `limit` bytes.
    private static func readAll(_ fd: Int32, limit: Int) -> [UInt8]? {
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

    /// A file only this user could have written: a regular file (not a symbolic link) owned by
    /// the current user with no group or other permissions, at most `limit` bytes. Otherwise nil
    /// and why. Checked on the open descriptor, so the file cannot be swapped in between.
    public static func readPrivate(_ path: String, limit: Int) -> (bytes: [UInt8]?, refused: String?) {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard fd >= 0 else {
            return (nil, errno == ENOENT ? nil : "\(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return (nil, "\(path): cannot stat it") }
        guard st.st_mode & S_IFMT == S_IFREG else { return (nil, "\(path) is not a regular file") }
        guard st.st_uid == getuid() else { return (nil, "\(path) belongs to another user (uid \(st.st_uid))") }
        guard st.st_mode & 0o077 == 0 else {
            return (nil, "\(path) is accessible to other users (mode \(String(st.st_mode & 0o777, radix: 8)))")
        }
        guard Int(st.st_size) <= limit, let bytes = readAll(fd, limit: limit) else {
            return (nil, "\(path) could not be read whole (at most \(limit) bytes)")
        }
        return (bytes, nil)
    }

    /// nil when `path` is a directory (not a symbolic link) owned by this user that no one else
    /// may write to, or does not exist yet; otherwise why it must not hold secrets.
    public static func unsafeDirectoryReason(_ path: String) -> String? {
        var st = stat()
        if lstat(path, &st) != 0 { return errno == ENOENT ? nil : "\(path): \(String(cString: strerror(errno)))" }
        if st.st_mode & S_IFMT != S_IFDIR { return "\(path) is not a directory" }
        if st.st_uid != getuid() { return "\(path) belongs to another user (uid \(st.st_uid))" }
        if st.st_mode & 0o022 != 0 { return "\(path) is writable by other users (mode \(String(st.st_mode & 0o777, radix: 8)))" }
        return nil
    }

    /// Writes through a temporary file and rename, so readers never see a half-written file.
    /// The temporary file is created exclusively (a link planted in its place is not followed).
    public static func writeAtomically(_ path: String, _ bytes: [UInt8], mode: mode_t) throws(SpeechClientError) {
        let tmp = path + ".tmp.\(getpid())"
        unlink(tmp)
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
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
            if !(prefix.isEmpty || prefix == "/") { prefix += "/" }
            prefix += String(part)  // a String, not the Substring: no generic append at run time
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
