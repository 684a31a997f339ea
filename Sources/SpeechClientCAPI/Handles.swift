import CSpeechClientAPI
#if canImport(Glibc)
import Glibc
#endif
import SpeechClient

// The objects behind the C handles, and the conversions between them. Each handle is an
// `Unmanaged` reference: `_new`/`_copy` retain, `_free` releases.

/// `spc_options`: the core options plus the C callbacks.
final class OptionsHandle {
    var options = ClientOptions()
    var callbacks = CCallbacks()
    /// Why the last setter failed (spc_options_last_error), nil after one that succeeded.
    var lastError: OwnedCString?
    /// Every setter that failed, by name: spc_client_new() names them when what is missing is
    /// what they would have set ("no server URL" after a rejected URL).
    var rejected: [String: String] = [:]

    static func from(_ p: OpaquePointer?) -> OptionsHandle? {
        guard let p else { return nil }
        return Unmanaged<OptionsHandle>.fromOpaque(UnsafeRawPointer(p)).takeUnretainedValue()
    }
}

/// The C callbacks and their user_data. C function pointers are Sendable; the user_data pointers
/// are only handed back to the application, never dereferenced, so sharing them is safe.
struct CCallbacks: @unchecked Sendable {
    var segment: spc_segment_cb?
    var segmentData: UnsafeMutableRawPointer?
    var error: spc_error_cb?
    var errorData: UnsafeMutableRawPointer?
    var start: spc_start_cb?
    var startData: UnsafeMutableRawPointer?
    var stop: spc_stop_cb?
    var stopData: UnsafeMutableRawPointer?
    var log: spc_log_cb?
    var logData: UnsafeMutableRawPointer?
    var state: spc_state_cb?
    var stateData: UnsafeMutableRawPointer?
    var listen: spc_listen_cb?
    var listenData: UnsafeMutableRawPointer?
    var level: spc_level_cb?
    var levelData: UnsafeMutableRawPointer?
    var idle: spc_idle_cb?
    var idleData: UnsafeMutableRawPointer?
}

/// `spc_error`.
final class ErrorHandle {
    let error: SpeechClientError
    let message: OwnedCString

    init(_ error: SpeechClientError) {
        self.error = error
        message = OwnedCString(error.message)
    }

    static func from(_ p: OpaquePointer?) -> ErrorHandle? {
        guard let p else { return nil }
        return Unmanaged<ErrorHandle>.fromOpaque(UnsafeRawPointer(p)).takeUnretainedValue()
    }

    /// A new handle the caller owns.
    static func retained(_ error: SpeechClientError) -> OpaquePointer {
        OpaquePointer(Unmanaged.passRetained(ErrorHandle(error)).toOpaque())
    }
}

func segmentFrom(_ p: OpaquePointer?) -> Segment? {
    guard let p else { return nil }
    return Unmanaged<Segment>.fromOpaque(UnsafeRawPointer(p)).takeUnretainedValue()
}

extension spc_status {
    static func from(_ error: SpeechClientError) -> spc_status { spc_status(rawValue: UInt32(error.code.rawValue)) }
}

/// Runs a throwing core call and maps its outcome to a status.
func status(_ body: () throws(SpeechClientError) -> Void) -> spc_status {
    do throws(SpeechClientError) {
        try body()
        return SPC_OK
    } catch {
        return .from(error)
    }
}

/// A C string argument, or nil for NULL. Invalid UTF-8 is refused, naming where: repaired
/// (U+FFFD for each bad byte), a Linux path such as "caf\xE9.wav" in Latin-1 was opened under a
/// name that was never given, and the error named that name.
func optionalString(_ p: UnsafePointer<CChar>?) throws(SpeechClientError) -> String? {
    guard let p else { return nil }
    if let text = String(validatingCString: p) { return text }
    let bytes = UnsafeRawBufferPointer(start: p, count: strlen(p))
    // The first byte that starts no valid sequence.
    var bad = 0
    while bad < bytes.count {
        let b = bytes[bad]
        let length = b < 0x80 ? 1 : b >> 5 == 0b110 ? 2 : b >> 4 == 0b1110 ? 3 : b >> 3 == 0b11110 ? 4 : 0
        guard length > 0, bad + length <= bytes.count,
              String(validating: bytes[bad..<(bad + length)], as: UTF8.self) != nil else { break }
        bad += length
    }
    bad = min(bad, max(bytes.count - 1, 0))
    let shown = String(decoding: bytes, as: UTF8.self)
    throw SpeechClientError(.invalidArgument, "'\(shown)' is not valid UTF-8 (byte \(bad) is 0x\(String(bytes[bad], radix: 16))): strings and paths are taken as UTF-8")
}

/// Empty strings constant for NULL-handle accessors.
enum StaticText {
    static let empty = OwnedCString("")
}
