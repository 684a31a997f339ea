#if canImport(Glibc)
import Glibc
#endif
import CALSA

/// The capture devices ALSA knows, as `arecord -L` lists them (issue 19 item 9): each name is
/// usable as the microphone option, with ALSA's description (first line: the card, then what
/// the device does). From `snd_device_name_hint` over every card; devices that only play are
/// left out (`IOID` "Output"), the rest can capture or both.
public struct AudioDevice: Sendable, Equatable {
    public var name: String
    public var description: String

    public init(name: String, description: String) {
        self.name = name
        self.description = description
    }

    /// At most this many (a system lists a few dozen; the bound keeps a broken configuration
    /// from growing the list without limit).
    public static let maxCount = 1_024

    public static func capture() throws(SpeechClientError) -> [AudioDevice] {
        try ALSACapture.requireALSA(for: "listing the ALSA devices")
        _ = ALSACapture.routed  // ALSA's messages are dropped here, not printed on stderr
        var hints: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
        let rc = snd_device_name_hint(-1, "pcm", &hints)
        guard rc >= 0, let hints else {
            let reason = snd_strerror(rc).map { String(cString: $0) } ?? "error \(rc)"
            throw SpeechClientError(.audio, "listing the ALSA devices failed: snd_device_name_hint: \(reason)")
        }
        defer { snd_device_name_free_hint(hints) }
        func hint(_ h: UnsafeMutableRawPointer, _ id: String) -> String? {
            guard let value = snd_device_name_get_hint(h, id) else { return nil }
            defer { free(value) }
            return String(cString: value)
        }
        var devices: [AudioDevice] = []
        var i = 0
        while let h = hints[i], devices.count < maxCount {
            i += 1
            guard let name = hint(h, "NAME"), !name.isEmpty else { continue }
            if hint(h, "IOID") == "Output" { continue }
            // ALSA separates the description's lines with '\n': kept as they are.
            devices.append(AudioDevice(name: name, description: hint(h, "DESC") ?? ""))
        }
        return devices
    }
}
