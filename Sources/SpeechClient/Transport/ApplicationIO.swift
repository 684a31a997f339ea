/// Application-driven network I/O, process-wide (spc_io_fd, spc_io_process, spc_io_dispatch): the sockets of
/// clients created with `NetworkIO.application` are read on the application's thread, which
/// polls `fd()` and calls `process()`; the mechanism and its safety net are on `EventLoop`.
public enum ApplicationIO {
    /// The epoll descriptor of the application's set: readable while one of its sockets is.
    public static func fd() throws(SpeechClientError) -> Int32 {
        try EventLoop.shared().applicationFd
    }

    /// Serves the ready sockets on this thread without waiting; returns how many were ready.
    public static func process() throws(SpeechClientError) -> Int {
        try EventLoop.shared().processApplicationIO().ready
    }

    /// `process()`, then runs on this thread the callbacks that its work queued for clients in
    /// application delivery (their event fds stay as they were); returns both counts.
    public static func dispatch() throws(SpeechClientError) -> (ready: Int, callbacks: Int) {
        try EventLoop.shared().processApplicationIO(deliver: true)
    }
}
