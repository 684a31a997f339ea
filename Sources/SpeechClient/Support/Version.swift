import CSpeechClientAPI

/// The library's version: the header's SPC_VERSION_* macros, which scripts/stamp-version.sh
/// writes from the VERSION file (the one place a release changes it).
public enum LibraryVersion {
    public static let major: Int32 = SPC_VERSION_MAJOR
    public static let minor: Int32 = SPC_VERSION_MINOR
    public static let patch: Int32 = SPC_VERSION_PATCH
    public static let string = SPC_VERSION_STRING
    public static let number: Int32 = SPC_VERSION_NUMBER
    public static let cString = OwnedCString(string)
}
