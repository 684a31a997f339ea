import CSpeechClientAPI
import SpeechClient

@c @implementation
public func spc_error_code(_ error: OpaquePointer?) -> spc_status {
    guard let e = ErrorHandle.from(error) else { return SPC_ERROR_INVALID_ARGUMENT }
    return .from(e.error)
}

@c @implementation
public func spc_error_message(_ error: OpaquePointer?) -> UnsafePointer<CChar>? {
    ErrorHandle.from(error)?.message.constPointer ?? StaticText.empty.constPointer
}

@c @implementation
public func spc_error_grpc_status(_ error: OpaquePointer?) -> Int32 {
    ErrorHandle.from(error)?.error.grpcStatus ?? -1
}

@c @implementation
public func spc_error_copy(_ error: OpaquePointer?) -> OpaquePointer? {
    guard let e = ErrorHandle.from(error) else { return nil }
    return ErrorHandle.retained(e.error)
}

@c @implementation
public func spc_error_free(_ error: OpaquePointer?) {
    guard let error else { return }
    Unmanaged<ErrorHandle>.fromOpaque(UnsafeRawPointer(error)).release()
}
