/// The library's version; the Makefile checks these against the header's SPC_VERSION_* macros.
public enum LibraryVersion {
    public static let major: Int32 = 0
    public static let minor: Int32 = 9
    public static let patch: Int32 = 0
    public static let string = "\(major).\(minor).\(patch)"
    public static let number: Int32 = major * 1_000_000 + minor * 1_000 + patch
    public static let cString = OwnedCString(string)
}
