import CSpeechClientAPI
import SpeechClient

/// `spc_devices`: a snapshot of the capture devices, with C copies of their texts.
final class DevicesHandle {
    let names: [OwnedCString]
    let descriptions: [OwnedCString]

    init(_ devices: [AudioDevice]) {
        names = devices.map { OwnedCString($0.name) }
        descriptions = devices.map { OwnedCString($0.description) }
    }

    static func from(_ p: OpaquePointer?) -> DevicesHandle? {
        guard let p else { return nil }
        return Unmanaged<DevicesHandle>.fromOpaque(UnsafeRawPointer(p)).takeUnretainedValue()
    }
}

@c @implementation
public func spc_audio_devices(_ outDevices: UnsafeMutablePointer<OpaquePointer?>?) -> spc_status {
    guard let outDevices else { return SPC_ERROR_INVALID_ARGUMENT }
    outDevices.pointee = nil
    return status { () throws(SpeechClientError) in
        let handle = DevicesHandle(try AudioDevice.capture())
        outDevices.pointee = OpaquePointer(Unmanaged.passRetained(handle).toOpaque())
    }
}

@c @implementation
public func spc_devices_count(_ devices: OpaquePointer?) -> Int {
    DevicesHandle.from(devices)?.names.count ?? 0
}

@c @implementation
public func spc_devices_name(_ devices: OpaquePointer?, _ i: Int) -> UnsafePointer<CChar>? {
    guard let d = DevicesHandle.from(devices), i >= 0, i < d.names.count else { return nil }
    return d.names[i].constPointer
}

@c @implementation
public func spc_devices_description(_ devices: OpaquePointer?, _ i: Int) -> UnsafePointer<CChar>? {
    guard let d = DevicesHandle.from(devices), i >= 0, i < d.descriptions.count else { return nil }
    return d.descriptions[i].constPointer
}

@c @implementation
public func spc_devices_free(_ devices: OpaquePointer?) {
    guard let devices else { return }
    Unmanaged<DevicesHandle>.fromOpaque(UnsafeRawPointer(devices)).release()
}
