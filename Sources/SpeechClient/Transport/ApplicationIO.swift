/// Application-driven network I/O, process-wide (spc_io_fd, spc_io_process): the sockets of
/// clients created with `NetworkIO.application` are read on the application's thread, which
/// polls `fd()` and calls `process()`; the mechanism and its safety net are on `EventLoop`.
public enum ApplicationIO {
    /// The epoll descriptor of the application's set: readable while one of its sockets is.
    public static func fd() throws(SpeechClientError) -> Int32 {
        try EventLoop.shared().applicationFd
    }

    /// Serves the ready sockets on this thread without waiting; returns how many were ready.
    public static func process() throws(SpeechClientError) -> Int {
        try EventLoop.shared().processApplicationIO()
    }
}
