#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import SpeechClient

/// Test signals at 16 kHz: deterministic noise at a level, and "speech": noise bursts 20 dB
/// louder, amplitude-modulated at 4 Hz like syllables.
enum Signals {
    struct Noise {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        mutating func next() -> Double {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return Double(Int64(bitPattern: state >> 11) - (1 << 52)) / Double(1 << 52)  // -1...1
        }
    }

    /// RMS of uniform noise is amplitude/sqrt(3).
    static func amplitude(dbfs: Double) -> Double { 32768 * pow(10, dbfs / 20) * 3.0.squareRoot() }

    static func noise(ms: Int, dbfs: Double, _ gen: inout Noise) -> [Int16] {
        let a = amplitude(dbfs: dbfs)
        return (0..<16 * ms).map { _ in Int16(clamping: Int(gen.next() * a)) }
    }

    static func speech(ms: Int, dbfs: Double, _ gen: inout Noise) -> [Int16] {
        let a = amplitude(dbfs: dbfs)
        return (0..<16 * ms).map { i in
            let envelope = 0.55 + 0.45 * sin(2 * Double.pi * 4 * Double(i) / 16_000)
            return Int16(clamping: Int(gen.next() * a * envelope))
        }
    }

    static func chunks(_ samples: [Int16], size: Int = 1_600) -> [[Int16]] {
        stride(from: 0, to: samples.count, by: size).map { Array(samples[$0..<min($0 + size, samples.count)]) }
    }
}

@Suite struct VoiceActivityDetectorTests {
    @Test func levelsInDecibels() {
        #expect(VoiceActivityDetector.decibels([Int16](repeating: 0, count: 320)) == -100)
        let square = (0..<320).map { $0 % 2 == 0 ? Int16.max : Int16.min }
        #expect(abs(VoiceActivityDetector.decibels(square)) < 0.01)
        var g = Signals.Noise()
        #expect(abs(VoiceActivityDetector.decibels(Signals.noise(ms: 1000, dbfs: -40, &g)) + 40) < 0.5)
    }

    @Test func silenceAndSteadyNoiseAreNotSpeech() {
        var g = Signals.Noise()
        var steady = VoiceActivityDetector()
        #expect(steady.process(Signals.noise(ms: 5_000, dbfs: -35, &g)).isEmpty)
        #expect(abs((steady.noiseFloorDecibels ?? 0) + 35) < 2, "floor \(steady.noiseFloorDecibels ?? 0)")
        // Digital silence, then noise that stays: its onset sounds like speech, but within 3 s
        // the floor has risen to it and the detector lets go.
        var vad = VoiceActivityDetector()
        #expect(vad.process([Int16](repeating: 0, count: 16_000)).isEmpty)
        let t = vad.process(Signals.noise(ms: 5_000, dbfs: -35, &g))
        #expect(!vad.isSpeech)
        #expect(t.count <= 2 && (t.last.map { $0.sample <= 16_000 + 16 * 3_000 } ?? true), "\(t)")
        #expect(abs((vad.noiseFloorDecibels ?? 0) + 35) < 2, "floor \(vad.noiseFloorDecibels ?? 0)")
    }

    @Test func speechInNoiseIsFoundWhereItIs() {
        var g = Signals.Noise()
        var vad = VoiceActivityDetector()
        let audio = Signals.noise(ms: 2_000, dbfs: -45, &g) + Signals.speech(ms: 1_500, dbfs: -25, &g)
            + Signals.noise(ms: 2_000, dbfs: -45, &g)
        var transitions: [VoiceActivityDetector.Transition] = []
        for c in Signals.chunks(audio) { transitions += vad.process(c) }
        #expect(transitions.count == 2, "\(transitions.map { ($0.isSpeech, $0.sample / 16) }) floor \(vad.noiseFloorDecibels ?? 0)")
        guard transitions.count == 2 else { return }
        #expect(transitions[0].isSpeech && !transitions[1].isSpeech)
        // Within 100 ms (the window) of the true edges at 2.0 s and 3.5 s.
        #expect(abs(transitions[0].sample - 32_000) <= 1_600, "\(transitions[0].sample)")
        #expect(abs(transitions[1].sample - 56_000) <= 1_600, "\(transitions[1].sample)")
    }

    @Test func chunkSizeDoesNotChangeTheResult() {
        var g = Signals.Noise()
        let audio = Signals.noise(ms: 1_000, dbfs: -45, &g) + Signals.speech(ms: 800, dbfs: -20, &g) + Signals.noise(ms: 800, dbfs: -45, &g)
        var a = VoiceActivityDetector(), b = VoiceActivityDetector()
        var ta: [VoiceActivityDetector.Transition] = [], tb: [VoiceActivityDetector.Transition] = []
        for c in Signals.chunks(audio, size: 1_600) { ta += a.process(c) }
        for c in Signals.chunks(audio, size: 333) { tb += b.process(c) }
        #expect(ta == tb && !ta.isEmpty)
    }

    @Test func aNoiseThatStaysIsLearntEvenDuringSpeech() {
        // A fan switched on (+25 dB for good): the detector may call it speech at first, but it
        // must let go within seconds instead of staying open for ever.
        var g = Signals.Noise()
        var vad = VoiceActivityDetector()
        _ = vad.process(Signals.noise(ms: 1_000, dbfs: -60, &g))
        _ = vad.process(Signals.noise(ms: 20_000, dbfs: -35, &g))
        #expect(!vad.isSpeech)
    }

    static func sine(hertz: Double, ms: Int, dbfs: Double) -> [Int16] {
        let a = 32768 * pow(10, dbfs / 20) * 2.0.squareRoot()  // RMS of a sine is amplitude/sqrt(2)
        return (0..<16 * ms).map { Int16(clamping: Int(a * sin(2 * Double.pi * hertz * Double($0) / 16_000))) }
    }

    @Test func theHighPassKeepsTheVoiceBandAndDropsHumAndRumble() {
        func through(_ hertz: Double) -> Double {
            var hp = HighPass(cutoffHertz: VADSettings.highPassHertz)
            let tone = Self.sine(hertz: hertz, ms: 1_000, dbfs: -20)
            _ = hp.decibels(tone[0..<8_000])  // past the filter's start
            return hp.decibels(tone[8_000...])
        }
        #expect(abs(through(1_000) + 20) < 0.5, "\(through(1_000))")
        #expect(abs(through(200) + 23) < 0.5, "\(through(200))")  // -3 dB at the cutoff
        #expect(through(50) < -20 - 20, "\(through(50))")  // mains hum: 12 dB per octave below
        // Digital silence after sound: the state settles to exactly zero instead of decaying
        // through subnormals (slow arithmetic for as long as the silence lasts).
        var hp = HighPass(cutoffHertz: VADSettings.highPassHertz)
        _ = hp.decibels(Self.sine(hertz: 440, ms: 100, dbfs: -10)[...])
        #expect(hp.y1 != 0)
        _ = hp.decibels([Int16](repeating: 0, count: 16_000)[...])
        #expect(hp.y1 == 0 && hp.y2 == 0, "\(hp.y1) \(hp.y2)")
        #expect(hp.decibels([Int16](repeating: 0, count: 320)[...]) == -100)
    }

    @Test func rumbleIsNotSpeechAndSpeechIsFoundUnderRumbleAndHum() {
        // Brown noise (a random walk: rumble, traffic) swings slowly; by energy alone its swings
        // pass for syllables. At -30 dBFS for 10 s: no speech found.
        var g = Signals.Noise()
        var walk = 0.0
        var brown = (0..<160_000).map { _ -> Double in walk = 0.999 * walk + g.next(); return walk }
        let rms = (brown.reduce(0) { $0 + $1 * $1 } / Double(brown.count)).squareRoot()
        brown = brown.map { $0 / rms * 32768 * pow(10, -30.0 / 20) }
        var vad = VoiceActivityDetector()
        var t: [VoiceActivityDetector.Transition] = []
        for c in Signals.chunks(brown.map { Int16(clamping: Int($0)) }) { t += vad.process(c) }
        #expect(t.isEmpty, "brown noise: \(t.map { ($0.isSpeech, $0.sample / 16) })")
        // Speech under a hum 10 dB louder than itself is found (by energy alone, the speech
        // would add less than 0.5 dB to the hum's).
        var hum = VoiceActivityDetector()
        var g3 = Signals.Noise()
        let tone = Self.sine(hertz: 50, ms: 5_000, dbfs: -20)
        var voice = [Int16](repeating: 0, count: 32_000)
        voice += Signals.speech(ms: 1_500, dbfs: -30, &g3)
        voice += [Int16](repeating: 0, count: 24_000)
        let humMixed: [Int16] = zip(tone, voice).map { Int16(clamping: Int($0.0) + Int($0.1)) }
        var th: [VoiceActivityDetector.Transition] = []
        for c in Signals.chunks(humMixed) { th += hum.process(c) }
        #expect(th.count == 2 && th.first?.isSpeech == true, "hum: \(th.map { ($0.isSpeech, $0.sample / 16) })")
        // Speech over that rumble is still found.
        var g2 = Signals.Noise()
        var both = VoiceActivityDetector()
        let speech = Signals.speech(ms: 1_500, dbfs: -20, &g2)
        var mixed: [Int16] = brown[0..<24_000].map { Int16(clamping: Int($0)) }
        mixed += zip(brown[24_000..<48_000], speech).map { Int16(clamping: Int($0.0) + Int($0.1)) }
        mixed += brown[48_000..<80_000].map { Int16(clamping: Int($0)) }
        var tb: [VoiceActivityDetector.Transition] = []
        for c in Signals.chunks(mixed) { tb += both.process(c) }
        #expect(tb.count == 2 && tb.first?.isSpeech == true, "\(tb.map { ($0.isSpeech, $0.sample / 16) })")
    }
}

@Suite struct EndpointerTests {
    static func settings(preRoll: Int = 300, trailing: Int = 600, min: Int = 500, max: Int = 15_000) -> Endpointer.Settings {
        var s = Endpointer.Settings()
        s.preRollSamples = 16 * preRoll
        s.trailingSilenceSamples = 16 * trailing
        s.minActivationSamples = 16 * min
        s.maxActivationSamples = 16 * max
        return s
    }

    /// Runs audio through an endpointer; returns the activations as (first sample, samples sent)
    /// and the events in order.
    static func run(_ ep: inout Endpointer, _ audio: [Int16]) -> (activations: [(Int, Int)], events: [ListenEvent], actions: [Endpointer.Action]) {
        var activations: [(Int, Int)] = []
        var events: [ListenEvent] = []
        var all: [Endpointer.Action] = []
        var open = false
        for c in Signals.chunks(audio) {
            for a in ep.process(c) {
                all.append(a)
                switch a {
                case .event(let e, _): events.append(e)
                case .open: #expect(!open); open = true; activations.append((ep.position - c.count, 0))
                case .audio(let chunk): #expect(open); activations[activations.count - 1].1 += chunk.count
                case .close: #expect(open); open = false
                }
            }
        }
        for a in ep.finish() { all.append(a); if case .event(let e, _) = a { events.append(e) } }
        return (activations, events, all)
    }

    @Test func twoUtterancesOpenTwoContextsWithPreRoll() {
        var g = Signals.Noise()
        let audio = Signals.noise(ms: 1_000, dbfs: -50, &g) + Signals.speech(ms: 1_000, dbfs: -25, &g)
            + Signals.noise(ms: 2_000, dbfs: -50, &g) + Signals.speech(ms: 1_200, dbfs: -25, &g)
            + Signals.noise(ms: 2_000, dbfs: -50, &g)
        var ep = Endpointer(settings: Self.settings())
        let r = Self.run(&ep, audio)
        #expect(r.activations.count == 2, "\(r.activations)")
        #expect(r.events.filter { $0 == .activate }.count == 2)
        #expect(r.events.filter { $0 == .deactivate }.count == 2)
        #expect(!r.events.contains(.timeout))
        // Each context got its speech plus the pre-roll before it and the trailing silence after.
        for (i, speechMs) in [1_000, 1_200].enumerated() where i < r.activations.count {
            let sentMs = r.activations[i].1 / 16
            #expect(sentMs >= speechMs + 300 + 500 && sentMs <= speechMs + 300 + 600 + 300, "context \(i): \(sentMs) ms")
        }
        // The first context's audio starts at most 300 ms before the speech (at 1.0 s).
        if let first = r.actions.firstIndex(of: .open), case .audio(let preRoll) = r.actions[first + 1] {
            #expect(preRoll.count <= 16 * 300 + 1_600)
        }
    }

    @Test func aLongUtteranceTimesOutAtTheMaximum() {
        var g = Signals.Noise()
        let audio = Signals.noise(ms: 500, dbfs: -50, &g) + Signals.speech(ms: 6_000, dbfs: -25, &g)
        var ep = Endpointer(settings: Self.settings(max: 2_000))
        let r = Self.run(&ep, audio)
        #expect(r.events.contains(.timeout))
        // Re-activates while the speech goes on: no audio is left out between activations.
        #expect(r.activations.count >= 2)
        #expect(r.activations.allSatisfy { $0.1 <= 16 * (2_000 + 300 + 100) })
        if let t = r.events.firstIndex(of: .timeout) { #expect(r.events[t + 1] == .deactivate) }
    }

    /// With a wake-word service, speech alone opens nothing; a detection opens an activation
    /// with the audio from the pre-roll before the detection point (kept for the service's
    /// latency), and the voice detector ends it.
    @Test func aDetectionOpensAnActivationFromThePreRollBeforeIt() {
        var g = Signals.Noise()
        var s = Self.settings(preRoll: 300, trailing: 600, min: 500)
        s.opensOnSpeech = false
        var ep = Endpointer(settings: s)
        let speech = Signals.noise(ms: 500, dbfs: -50, &g) + Signals.speech(ms: 1_500, dbfs: -25, &g)
        var actions: [Endpointer.Action] = []
        for c in Signals.chunks(speech) { actions += ep.process(c) }
        #expect(!actions.contains(.open) && !ep.isActive, "speech opened an activation without a detection")
        // The service heard its wake word at 1.2 s; it says so at 2.0 s.
        let opened = ep.activate(from: 16 * 1_200)
        #expect(opened.first == .open && ep.isActive)
        let sent = opened.reduce(0) { n, a in if case .audio(let c) = a { return n + c.count }; return n }
        #expect(sent == 16 * (2_000 - 1_200 + 300), "\(sent / 16) ms sent")
        #expect(ep.activate(from: nil).isEmpty, "a second detection while active opened another")
        var closed = false
        for c in Signals.chunks(Signals.noise(ms: 2_000, dbfs: -50, &g)) where !closed { closed = ep.process(c).contains(.close) }
        #expect(closed && !ep.isActive)
        // Only what is kept can be sent: a detection stamped long ago starts at the oldest audio.
        for c in Signals.chunks(Signals.noise(ms: 3_000, dbfs: -50, &g)) { _ = ep.process(c) }
        let late = ep.activate(from: 0)
        let kept = late.reduce(0) { n, a in if case .audio(let c) = a { return n + c.count }; return n }
        #expect(kept <= 16 * 300 + Endpointer.Settings.detectionLatencySamples + 1_600, "\(kept / 16) ms kept")
    }

    /// A detection handled while the detector still holds the wake word's speech (its hold
    /// time): the trailing silence counts from the detection, not from where the wake word
    /// ended. The detector's silence, stamped back at that end, moved the count back, and the
    /// activation closed trailing-silence minus the hold after the detection: the command said
    /// after the chime came too late.
    @Test func aWakeActivationsTrailingSilenceCountsFromTheDetection() {
        var g = Signals.Noise()
        var s = Self.settings(preRoll: 300, trailing: 1_000, min: 500)
        s.opensOnSpeech = false
        var ep = Endpointer(settings: s)
        // The wake word (1 s of speech), and the detection 200 ms after it ends, the detector
        // still in its hold (300 ms). 20 ms chunks, as a microphone's.
        for c in Signals.chunks(Signals.noise(ms: 500, dbfs: -50, &g) + Signals.speech(ms: 1_000, dbfs: -25, &g)
                                + Signals.noise(ms: 200, dbfs: -50, &g), size: 320) { _ = ep.process(c) }
        let detectedAt = ep.position
        _ = ep.activate(from: 16 * 1_500)
        var closedAt: Int?
        for c in Signals.chunks(Signals.noise(ms: 3_000, dbfs: -50, &g), size: 320) where closedAt == nil {
            if ep.process(c).contains(.close) { closedAt = ep.position }
        }
        #expect(closedAt != nil)
        #expect((closedAt ?? 0) - detectedAt >= 16 * 1_000, "closed \(((closedAt ?? 0) - detectedAt) / 16) ms after the detection")
    }

    @Test func aBlipIsHeldForTheMinimumLength() {
        var g = Signals.Noise()
        let audio = Signals.noise(ms: 1_000, dbfs: -50, &g) + Signals.speech(ms: 200, dbfs: -20, &g) + Signals.noise(ms: 3_000, dbfs: -50, &g)
        var ep = Endpointer(settings: Self.settings(preRoll: 0, trailing: 100, min: 1_500))
        let r = Self.run(&ep, audio)
        #expect(r.activations.count == 1)
        #expect((r.activations.first?.1 ?? 0) >= 16 * 1_500)
    }

    @Test func finishClosesAnOpenActivationOnce() {
        var g = Signals.Noise()
        var ep = Endpointer(settings: Self.settings())
        _ = ep.process(Signals.noise(ms: 500, dbfs: -50, &g))
        let opened = ep.process(Signals.speech(ms: 500, dbfs: -20, &g))
        #expect(opened.contains(.open) && ep.isActive)
        let closing = ep.finish()
        #expect(closing.last == .close && closing.count == 2)
        #expect(ep.finish().isEmpty && !ep.isActive)
    }

    @Test func anAbandonedActivationWaitsForTheSpeechToEnd() {
        var g = Signals.Noise()
        var ep = Endpointer(settings: Self.settings())
        _ = ep.process(Signals.noise(ms: 500, dbfs: -50, &g))
        #expect(ep.process(Signals.speech(ms: 300, dbfs: -20, &g)).contains(.open))
        let abandoned = ep.abandon()
        #expect(abandoned == [.event(.deactivate, sample: ep.position)] && !ep.isActive)
        // The same speech goes on: no new activation.
        for c in Signals.chunks(Signals.speech(ms: 1_000, dbfs: -20, &g)) { #expect(!ep.process(c).contains(.open)) }
        // After a pause, new speech opens one again.
        for c in Signals.chunks(Signals.noise(ms: 1_000, dbfs: -50, &g)) { _ = ep.process(c) }
        var opened = false
        for c in Signals.chunks(Signals.speech(ms: 500, dbfs: -20, &g)) where ep.process(c).contains(.open) { opened = true }
        #expect(opened)
        #expect(ep.abandon().count == 1 && ep.abandon().isEmpty)
    }

    @Test func wakewordMatching() {
        #expect(ClientOptions.normalizedWords("Hey, Computer!") == ["hey", "computer"])
        #expect(ClientWorker.contains(["ok", "Hey", "computer,", "lights"], phrase: ["hey", "computer"]))
        #expect(!ClientWorker.contains(["hey", "there", "computer"], phrase: ["hey", "computer"]))
        #expect(!ClientWorker.contains([], phrase: ["hey"]))
    }
}
