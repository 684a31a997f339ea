import Foundation
import Testing
@testable import SpeechClient

/// The Swift codec against Google's protobuf runtime: the bytes the generated Python stubs make
/// for the same messages (Tests/peers/protobuf_reference.py) must equal what the Swift encoder
/// makes, and decode to the expected values.
@Suite struct ProtobufInteropTests {
    static let reference: [String: [UInt8]]? = {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        let python = [ProcessInfo.processInfo.environment["SPEECHCLIENT_TEST_PYTHON"], root.path + "/.venv/bin/python"]
            .compactMap { $0 }.first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let python else { return nil }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: python)
        p.arguments = [root.path + "/Tests/peers/protobuf_reference.py"]
        var env = ProcessInfo.processInfo.environment
        env["PYTHONPATH"] = root.path + "/server"
        p.environment = env
        let pipe = Pipe()
        p.standardOutput = pipe
        guard (try? p.run()) != nil else { return nil }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        guard p.terminationStatus == 0 else { return nil }
        var out: [String: [UInt8]] = [:]
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
            let parts = line.split(separator: " ", omittingEmptySubsequences: false)
            guard parts.count == 2 else { continue }
            let hex = Array(parts[1].utf8)
            var bytes: [UInt8] = []
            var i = 0
            while i + 1 < hex.count {
                bytes.append(UInt8(String(decoding: hex[i...i + 1], as: UTF8.self), radix: 16) ?? 0)
                i += 2
            }
            out[String(parts[0])] = bytes
        }
        return out
    }()

    func ref(_ name: String) throws -> [UInt8] {
        let all = try #require(Self.reference, "the reference server's stubs and protobuf are needed (scripts/setup-debian.sh)")
        return try #require(all[name], "no reference bytes for \(name)")
    }

    @Test func requestsEncodeExactlyAsGoogleProtobuf() throws {
        #expect(SLURequest.config(SLUConfig(languageCode: "en-US")).encoded() == (try ref("config")))
        #expect(SLURequest.start(appId: "app", options: [ContextOption(key: "vocabulary", values: ["kitchen", "bedroom"]),
                                                         ContextOption(key: "timezone", values: ["Europe/Helsinki"])]).encoded()
                == (try ref("start")))
        #expect(SLURequest.audio([1, -1, Int16.min, Int16.max]).encoded() == (try ref("audio")))
        #expect(SLURequest.stop.encoded() == (try ref("stop")))
        #expect(SLURequest.rttResponse(id: 42).encoded() == (try ref("rtt")))
        #expect(LoginRequest(deviceId: "0f0e0d0c-0b0a-4908-8706-050403020100", scope: .application(appId: "app", configId: nil)).encoded()
                == (try ref("login_app")))
        #expect(LoginRequest(deviceId: "d", scope: .project(projectId: "proj")).encoded() == (try ref("login_project")))
    }

    @Test func responsesDecodeAsGoogleProtobufEncodesThem() throws {
        func decode(_ name: String) throws -> SLUResponse { try SLUResponse.decode(try ref(name)[...]) }
        #expect(try decode("r_started") == SLUResponse(audioContext: "ctx", segmentId: 0, payload: .started))
        #expect(try decode("r_word") == SLUResponse(audioContext: "ctx", segmentId: 3,
            payload: .transcript(SLUWord(text: "kitchen", index: 3, startMilliseconds: 510, endMilliseconds: 930))))
        #expect(try decode("r_negative") == SLUResponse(audioContext: "ctx", segmentId: -1,
            payload: .transcript(SLUWord(text: "x", index: -2, startMilliseconds: -3, endMilliseconds: 0))))
        #expect(try decode("r_tentative").payload == .tentativeTranscript(text: "turn on", words: [
            SLUWord(text: "turn", index: 0, startMilliseconds: 0, endMilliseconds: 270),
            SLUWord(text: "on", index: 1, startMilliseconds: 270, endMilliseconds: 400)]))
        #expect(try decode("r_entity").payload == .entity(SLUEntity(type: "room", value: "kitchen", startPosition: 3, endPosition: 4)))
        #expect(try decode("r_tentative_entities").payload == .tentativeEntities([SLUEntity(type: "room", value: "living room", startPosition: 3, endPosition: 5)]))
        #expect(try decode("r_intent").payload == .intent("turn_on"))
        #expect(try decode("r_tentative_intent").payload == .tentativeIntent("turn_off"))
        #expect(try decode("r_segment_end") == SLUResponse(audioContext: "ctx", segmentId: 2, payload: .segmentEnd))
        #expect(try decode("r_finished").payload == .finished(errorCode: "E1", errorMessage: "too long"))
        #expect(try decode("r_rtt") == SLUResponse(audioContext: "", segmentId: 0, payload: .rttRequest(id: 7)))
        let login = try LoginResponse.decode(try ref("login_response")[...])
        #expect(login.token == "a.b.c" && login.validForSeconds == 3600 && login.expiresAtEpoch == 1_900_000_000
                && login.expiresAt == "2030-03-17T17:46:40Z")
    }
}
