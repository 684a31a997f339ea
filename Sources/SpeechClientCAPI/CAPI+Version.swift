import CSpeechClientAPI
import SpeechClient

@c @implementation
public func spc_version() -> UnsafePointer<CChar>? {
    LibraryVersion.cString.constPointer
}

@c @implementation
public func spc_version_number() -> Int32 {
    LibraryVersion.number
}

@c @implementation
public func spc_status_str(_ status: spc_status) -> UnsafePointer<CChar>? {
    StatusTexts.text(Int32(bitPattern: status.rawValue))
}

/// Static C strings for `spc_status_str`, made once.
enum StatusTexts {
    static let all: [OwnedCString] = (0...12).map { OwnedCString(Status.text(Int32($0))) }
    static func text(_ status: Int32) -> UnsafePointer<CChar> {
        let index = (0...11).contains(status) ? Int(status) : 12
        return all[index].constPointer
    }
}
