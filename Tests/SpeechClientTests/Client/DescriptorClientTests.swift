#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import SpeechClient

/// A client reading a pipe (issue 19: `--file -`): each start reads on from where the last
/// context stopped, the end of the stream stops the context, a later start says it ended, and
/// a silent pipe never holds up a stop or a free.
@Suite struct DescriptorClientTests {
    /// 16 kHz mono raw PCM, one 100 ms chunk per value: the fake service names each chunk's
    /// word after its first sample ("a3"), so the test sees exactly which audio each context got.
    static func chunks(_ values: ClosedRange<Int16>) -> [UInt8] {
        values.flatMap { v in [Int16](repeating: v, count: 1600).flatMap { AudioFixtures.le16(UInt16(bitPattern: $0)) } }
    }

    static func options(fd: Int32) throws -> ClientOptions {
        var o = try pushOptions()
        try o.setAudio(.descriptor(fd: fd, sampleRate: 16_000, channels: 1))
        return o
    }

    @Test func eachStartReadsOnAndTheEndOfTheStreamStopsTheContext() throws {
        let pipe = TestPipe()
        let log = EventLog()
        let service = FakeRecognitionService(.init(wordsFromAudio: true))
        let client = try Client(options: try Self.options(fd: pipe.readFD), service: service, handler: log.handler)
        defer { try? client.close() }
        pipe.write(Self.chunks(1...3))
        try client.start()
        // The three chunks reach the server, then the pipe is silent: the context waits. Their
        // segment is delivered meanwhile, not when the worker's turn ends: its callbacks go out
        // before each read that may wait (a turn of 64 silent 100 ms reads would take 6.4 s).
        #expect(log.waitFor { $0.contains(where: { $0.hasSuffix("a1 a2 a3") }) })
        #expect(client.currentState == .listening)
        try client.stop()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        // The rest of the stream is the next context's.
        pipe.write(Self.chunks(4...5))
        pipe.closeWriter()
        try client.start()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        let finals = log.lines.filter { $0.hasPrefix("segment final") }
        #expect(finals == ["segment final a1 a2 a3", "segment final a4 a5"])
        // The stream has ended: a start says so instead of opening an empty context.
        try client.start()
        #expect(try client.waitIdle(timeoutMilliseconds: 5000))
        #expect(log.lines.filter { $0.hasPrefix("error") } == ["error audio"], "\(log.lines.suffix(3))")
        #expect(log.lines.filter { $0.hasPrefix("segment final") }.count == 2)
    }

    @Test func aSilentPipeDoesNotHoldUpStopOrFree() throws {
        let pipe = TestPipe()
        let log = EventLog()
        let client = try Client(options: try Self.options(fd: pipe.readFD), service: FakeRecognitionService(), handler: log.handler)
        try client.start()
        for _ in 0..<400 where client.currentState != .listening { usleepMs(5) }
        try client.stop()
        #expect(try client.waitIdle(timeoutMilliseconds: 2000))
        try client.start()
        for _ in 0..<400 where client.currentState != .listening { usleepMs(5) }
        // Freed while the worker waits on the silent pipe: close returns, the descriptor is left
        // open for its owner.
        try client.close()
        #expect(fcntl(pipe.readFD, F_GETFD) >= 0)
    }

    @Test func aDescriptorThatIsNotOpenFailsTheConstructor() throws {
        let error = #expect(throws: SpeechClientError.self) {
            _ = try Client(options: try Self.options(fd: 999), service: FakeRecognitionService(), handler: nil)
        }
        #expect(error?.code == .audio)
    }
}
