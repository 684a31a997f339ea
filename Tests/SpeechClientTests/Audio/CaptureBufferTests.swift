#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import SpeechClient

/// A device on the wall clock, as a sound card is: 16 kHz mono, each sample its own index, and a
/// 400 ms buffer (ALSA's here) that overruns, losing the oldest audio, when nobody reads it.
final class WallClockDevice: AudioSource, @unchecked Sendable {
    private let lock = ConditionLock()
    private var opened: UInt64 = 0
    private var nextSample = 0
    private var closed = false
    private(set) var overrunSamples = 0
    private var lostToSay = 0
    /// The next read first waits this long (ms): a capture thread held up past the buffer.
    var stallNextReadMilliseconds = Locked(0)
    let bufferSamples = 6_400

    var format: AudioFormat { .speech }
    func open() throws(SpeechClientError) {
        lock.withLock { opened = Clock.monotonicNanos(); nextSample = 0; closed = false }
    }

    func takeLostFrames() -> Int { lock.withLock { defer { lostToSay = 0 }; return lostToSay } }

    func read(maxFrames: Int) throws(SpeechClientError) -> [Float]? {
        let stall = stallNextReadMilliseconds.withLock { ms in defer { ms = 0 }; return ms }
        if stall > 0 { usleep(UInt32(stall) * 1_000) }
        while true {
            let out: [Float]? = lock.withLock {
                if closed { return nil }
                let produced = Int((Clock.monotonicNanos() - opened) / SpeechAudio.nanosecondsPerSample)
                if produced - nextSample > bufferSamples {
                    overrunSamples += produced - bufferSamples - nextSample
                    lostToSay += produced - bufferSamples - nextSample
                    nextSample = produced - bufferSamples
                }
                let n = min(maxFrames, produced - nextSample)
                guard n > 0 else { return [] }
                defer { nextSample += n }
                return (nextSample..<nextSample + n).map { Float($0) }
            }
            guard let out else { return nil }
            if !out.isEmpty { return out }
            usleep(5_000)  // the period
        }
    }

    func close() { lock.withLock { closed = true } }
}

@Suite struct CaptureBufferTests {
    /// A worker held up for 1.5 s (a connect, a login) finds the whole 1.5 s when it reads
    /// again, in order: read on the device directly, all but its last 400 ms was overrun.
    @Test func audioCapturedWhileTheReaderIsHeldUpIsKept() throws {
        let device = WallClockDevice()
        let buffer = CaptureBuffer(device)
        try buffer.open()
        defer { buffer.close() }
        buffer.startCollecting()
        usleep(1_500_000)
        var got: [Float] = []
        while got.count < 24_000, let block = try buffer.read(maxFrames: 1600) { got += block }
        #expect(device.overrunSamples == 0)
        #expect(got.count >= 24_000)
        #expect(got.enumerated().allSatisfy { Float($0.offset) + (got.first ?? 0) == $0.element })
    }

    /// The device overruns (its reader held up 700 ms, past its 400 ms buffer): silence stands
    /// in for the lost audio, so that every sample after the gap keeps its time, and the loss
    /// is said. Before, the audio after it came early by the gap (and word times with it), and
    /// only the log said anything.
    @Test func anOverrunsGapIsFilledWithSilenceAndSaid() throws {
        let device = WallClockDevice()
        let buffer = CaptureBuffer(device)
        let said = Locked<[String]>([])
        buffer.onLoss { e in said.withLock { $0.append(e.message) } }
        try buffer.open()
        defer { buffer.close() }
        buffer.startCollecting()
        usleep(200_000)
        device.stallNextReadMilliseconds.withLock { $0 = 700 }
        usleep(1_300_000)
        var got: [Float] = []
        while got.count < 24_000, let block = try buffer.read(maxFrames: 1600) { got += block }
        #expect(device.overrunSamples > 0)
        #expect(got.count >= 24_000)
        // Each sample is its index on the device's clock: where it is, it is on time.
        let first = got.first ?? 0
        let late = got.enumerated().first { $0.element != 0 && $0.element != Float($0.offset) + first }
        #expect(late == nil, "sample \(late?.element ?? 0) at \(late?.offset ?? 0): \(device.overrunSamples) samples overrun")
        #expect(got.contains(0) && said.withLock { $0 }.first?.contains("the microphone lost") == true, "\(said.withLock { $0 })")
    }

    /// A reader held up past the buffer's capacity (1 s here, 30 s by default): the oldest audio
    /// is dropped, and when the reader takes audio again an error says how much. Only the log
    /// said, when it began, that it was.
    @Test func audioDroppedForCapacityIsSaidWhenTheReaderIsBack() throws {
        let device = WallClockDevice()
        let buffer = CaptureBuffer(device, capacitySeconds: 1)
        let said = Locked<[String]>([])
        buffer.onLoss { e in said.withLock { $0.append(e.message) } }
        try buffer.open()
        defer { buffer.close() }
        buffer.startCollecting()
        let began = Clock.monotonicNanos()
        usleep(1_600_000)
        _ = try buffer.readAvailable()
        let heldSeconds = Double(Clock.monotonicNanos() - began) / 1e9
        let dropped = said.withLock { $0 }.filter { $0.contains("s of the microphone's audio were dropped") }
        #expect(dropped.count == 1, "\(said.withLock { $0 })")
        // About what was held past the 1 s capacity (the device's own start aside).
        let seconds = dropped.first.flatMap { Double($0.split(separator: " ")[0]) } ?? -1
        #expect(seconds >= 0.2 && seconds <= heldSeconds - 0.9, "\(dropped) after \(heldSeconds) s")
    }

    /// Outside a context nothing is kept (the device is still read, so it never overruns), and
    /// a stop takes what was captured and not read, without waiting.
    @Test func onlyWhatCameWhileCollectingIsKeptAndAStopTakesItAtOnce() throws {
        let device = WallClockDevice()
        let buffer = CaptureBuffer(device)
        try buffer.open()
        defer { buffer.close() }
        usleep(300_000)
        #expect(buffer.takeBuffered().isEmpty)
        buffer.startCollecting()
        usleep(300_000)
        let t0 = Clock.monotonicNanos()
        let taken = buffer.takeBuffered()
        #expect(Clock.monotonicNanos() - t0 < 50_000_000)
        #expect(taken.count >= 3_200 && taken.count <= 8_000, "\(taken.count)")
        buffer.stopCollecting()
        usleep(200_000)
        #expect(buffer.takeBuffered().isEmpty)
        #expect(device.overrunSamples == 0)
    }

    /// Outside a context the device is read every 100 ms, not every 20 ms period, and still
    /// never overruns: an idle client with its microphone open cost 0.7 % of a core reading it
    /// 50 times a second (the bench's idle_mic_open_cpu).
    @Test func outsideAContextTheDeviceIsReadTenTimesASecond() throws {
        final class Counting: AudioSource, @unchecked Sendable {
            let device = WallClockDevice()
            let reads = Locked(0)
            var format: AudioFormat { device.format }
            func open() throws(SpeechClientError) { try device.open() }
            func read(maxFrames: Int) throws(SpeechClientError) -> [Float]? {
                reads.withLock { $0 += 1 }
                return try device.read(maxFrames: maxFrames)
            }
            func close() { device.close() }
        }
        let counting = Counting()
        let buffer = CaptureBuffer(counting)
        try buffer.open()
        defer { buffer.close() }
        usleep(1_000_000)
        let idleReads = counting.reads.withLock { $0 }
        #expect(idleReads >= 5 && idleReads <= 15, "\(idleReads) reads in 1 s")
        #expect(counting.device.overrunSamples == 0)
        #expect(buffer.takeBuffered().isEmpty)
    }

    /// The worker does not block in a read: it is told when the rest of its chunk is there, and
    /// when the capture ends (a close), so a wait for audio never outlives the device.
    @Test func aReaderIsToldWhenItsBlockIsThereAndWhenTheCaptureEnds() throws {
        let buffer = CaptureBuffer(WallClockDevice())
        try buffer.open()
        buffer.startCollecting()
        let told = Locked(0)
        #expect(buffer.notifyWhenAvailable(samples: 1_600) { told.withLock { $0 += 1 } })
        let until = Clock.monotonicNanos() + 5_000_000_000
        while told.withLock({ $0 }) == 0 && Clock.monotonicNanos() < until { usleep(5_000) }
        #expect(told.withLock { $0 } == 1)
        #expect(try (buffer.readAvailable()?.count ?? 0) >= 1_600)
        // There already: nothing asked, read now.
        usleep(150_000)
        #expect(!buffer.notifyWhenAvailable(samples: 800) { told.withLock { $0 += 10 } })
        #expect(buffer.notifyWhenAvailable(samples: 16_000_000) { told.withLock { $0 += 100 } })
        buffer.close()
        #expect(told.withLock { $0 } == 101)  // once, at the close
        #expect(try buffer.readAvailable() == nil)
    }

    /// Closing ends the capture thread and a read then says the end.
    @Test func closeEndsTheThreadAndReadsSayTheEnd() throws {
        let buffer = CaptureBuffer(WallClockDevice())
        try buffer.open()
        buffer.close()
        #expect(try buffer.read(maxFrames: 1600) == nil)
        buffer.close()  // idempotent
    }

    /// The library's microphone is read on its own thread.
    @Test func theMicrophoneIsACaptureBuffer() {
        #expect(Client.realSource(.microphone(device: "default")) is CaptureBuffer)
    }
}
