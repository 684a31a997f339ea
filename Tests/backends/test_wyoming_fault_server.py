"""The scripted Wyoming server (Tests/peers/wyoming_fault_server.py) does what each scenario says,
checked with our own client (wyomingtools.Connection), so that a library test against it judges
the library and not the peer. Stdlib only; a few seconds in all."""
import json
import socket
import time

import pytest

import wyomingtools as wt

SECOND = 32000          # bytes of 16 kHz mono s16
FMT = {"rate": 16000, "width": 2, "channels": 1}


def audio(conn, seconds: float, chunk: int = 3200, pace: float = 0.0):
    """audio-start and `seconds` of silence in 0.1 s chunks (each `pace` s apart)."""
    conn.send("audio-start", dict(FMT, timestamp=0))
    total = int(SECOND * seconds)
    for off in range(0, total, chunk):
        conn.send("audio-chunk", dict(FMT, timestamp=off // 32), b"\0" * min(chunk, total - off))
        if pace:
            time.sleep(pace)
    return total


def raw_read(address, request: bytes, want, timeout: float = 5.0) -> bytes:
    """The raw bytes answering `request`: until `want` bytes (or want(bytes) holds), EOF or the
    timeout."""
    done = want if callable(want) else (lambda out: len(out) >= want)
    family, addr = wt.parse_address(address)
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(addr)
        s.sendall(request)
        out = b""
        while not done(out):
            try:
                b = s.recv(65536)
            except socket.timeout:
                break
            if not b:
                break
            out += b
        return out


@pytest.mark.parametrize("unix", [False, True], ids=["tcp", "unix"])
def test_normal_info_transcript_ping_and_second_utterance(unix):
    with wt.FaultServer("Normal", unix=unix) as srv:
        assert srv.url.startswith("wyoming+unix:///" if unix else "wyoming://127.0.0.1:")
        info = wt.describe(srv.url)
        (prog,) = info["asr"]
        assert prog["supports_transcript_streaming"] is False
        assert [m["languages"] for m in prog["models"]] == [["en"]]
        with wt.Connection(srv.url) as c:
            c.send("ping", {"text": "x"})
            assert c.recv(5).type == "pong"
            for seconds in (1.0, 0.5):
                c.send("transcribe", {"language": "en"})
                n = audio(c, seconds)
                c.send("audio-stop", {"timestamp": 1000})
                ev = c.recv(5)
                assert (ev.type, ev.data) == ("transcript", {"text": f"{n} bytes"})
        logged = srv.events()
        assert [e["type"] for e in logged if e["type"] == "transcribe"] == ["transcribe", "transcribe"]
        assert sum(e["payload_length"] for e in logged) == SECOND * 1.5


def test_normal_close_after_transcript():
    with wt.FaultServer("Normal", "--close-after-transcript") as srv, wt.Connection(srv.url) as c:
        audio(c, 0.2)
        c.send("audio-stop")
        assert c.recv(5).data == {"text": "6400 bytes"}
        assert c.recv(5) is None


@pytest.mark.parametrize("scenario", ["Streaming", "StreamingStopFirst"])
def test_streaming_sends_deltas_while_audio_arrives(scenario):
    with wt.FaultServer(scenario) as srv, wt.Connection(srv.url) as c:
        c.send("describe")
        assert c.recv(5).data["asr"][0]["supports_transcript_streaming"] is True
        audio(c, 2.0)
        # Before audio-stop: transcript-start and one delta per 0.5 s of audio.
        got = [c.recv(5) for _ in range(5)]
        assert [e.type for e in got] == ["transcript-start"] + ["transcript-chunk"] * 4
        assert got[0].data == {"language": "en"}
        assert [e.data["text"] for e in got[1:]] == ["part1", " part2", " part3", " part4"]
        c.send("audio-stop")
        rest = [c.recv(5) for _ in range(3)]
        tail = ["transcript", "transcript-stop"] if scenario == "Streaming" else ["transcript-stop", "transcript"]
        assert [e.type for e in rest] == ["transcript-chunk"] + tail
        chunks = "".join(e.data["text"] for e in got[1:] + rest[:1])
        final = next(e for e in rest if e.type == "transcript")
        assert final.data["text"] == chunks == "part1 part2 part3 part4 64000 bytes"


def test_no_info_never_answers():
    with wt.FaultServer("NoInfo") as srv, wt.Connection(srv.url) as c:
        c.send("describe")
        with pytest.raises(socket.timeout):
            c.recv(1.5)


def test_http_400():
    with wt.FaultServer("HTTP") as srv:
        raw = raw_read(srv.address, wt.encode_event("describe"), 1000)
        assert raw.startswith(b"HTTP/1.1 400 Bad Request\r\n") and raw.endswith(b"Bad Request\n")
        with wt.Connection(srv.url) as c:
            c.send("describe")
            with pytest.raises(wt.WyomingProtocolError, match="not JSON"):
                c.recv(5)


@pytest.mark.parametrize("scenario,field", [("HugePayload", "payload_length"), ("HugeData", "data_length")])
def test_huge_lengths(scenario, field):
    with wt.FaultServer(scenario) as srv:
        raw = raw_read(srv.address, wt.encode_event("describe"),
                       lambda out: b"\n" in out and len(out.partition(b"\n")[2]) >= 65536)
        line, _, rest = raw.partition(b"\n")
        assert json.loads(line)[field] == 1 << 40
        assert len(rest) == 65536
        with wt.Connection(srv.url) as c:
            c.send("describe")
            with pytest.raises(wt.WyomingProtocolError, match="out of bounds"):
                c.recv(5)


def test_huge_line_without_newline_and_held_open():
    with wt.FaultServer("HugeLine") as srv:
        t = time.monotonic()
        raw = raw_read(srv.address, wt.encode_event("describe"), 10_000_000, timeout=3)
        assert len(raw) == 10_000_000 and b"\n" not in raw, len(raw)
        assert time.monotonic() - t < 20
        with wt.Connection(srv.url) as c:
            c.send("describe")
            with pytest.raises(wt.WyomingProtocolError, match="longer than"):
                c.recv(10)


def test_truncated_json_header_and_data():
    with wt.FaultServer("TruncatedJSON") as srv, wt.Connection(srv.url) as c:
        c.send("describe")
        with pytest.raises(wt.WyomingProtocolError, match="not JSON"):
            c.recv(5)
    with wt.FaultServer("TruncatedData") as srv, wt.Connection(srv.url) as c:
        c.send("describe")
        with pytest.raises(wt.WyomingProtocolError, match="not UTF-8 JSON"):
            c.recv(5)


def test_unknown_events_around_a_normal_exchange():
    with wt.FaultServer("UnknownEvents") as srv, wt.Connection(srv.url) as c:
        c.send("describe")
        ev, seen = c.recv_until({"info"}, 5)
        assert [e.type for e in seen] == ["x-future-event", "x-binary-event", "x-extra-fields", "info"]
        assert len(seen[1].payload) == 300
        audio(c, 0.5)
        c.send("audio-stop")
        ev, seen = c.recv_until({"transcript"}, 5)
        assert [e.type for e in seen] == ["x-transcript-alternatives", "x-binary-event", "transcript"]
        assert ev.data == {"text": "16000 bytes"}


def test_not_utf8_transcript():
    with wt.FaultServer("NotUTF8") as srv:
        with wt.Connection(srv.url) as c:
            audio(c, 0.1)
            c.send("audio-stop")
            with pytest.raises(wt.WyomingProtocolError, match="not UTF-8"):
                c.recv(5)
        req = wt.encode_event("audio-start", FMT) + wt.encode_event("audio-chunk", FMT, b"\0" * 10) \
            + wt.encode_event("audio-stop")
        raw = raw_read(srv.address, req, lambda out: out.endswith(b' bytes"}'), timeout=5)
        line, _, body = raw.partition(b"\n")
        assert json.loads(line)["data_length"] == len(body)
        assert b"\xff\xfe" in body
        with pytest.raises(UnicodeDecodeError):
            body.decode("utf-8")


@pytest.mark.parametrize("reset", [False, True], ids=["fin", "rst"])
def test_close_mid_stream_then_normal(reset):
    args = ["--reset"] if reset else []
    with wt.FaultServer("CloseMidStream", *args) as srv:
        assert wt.describe(srv.url)["asr"]    # a describe-only connection does not count
        with wt.Connection(srv.url) as c:
            t = time.monotonic()
            with pytest.raises((OSError, wt.WyomingProtocolError)) if reset else _maybe_oserror():
                audio(c, 3.0, pace=0.02)   # 30 chunks, ~0.6 s: cut after 10 (1 s of audio)
                c.send("audio-stop")
                assert c.recv(5) is None
            assert time.monotonic() - t < 5
        with wt.Connection(srv.url) as c:
            n = audio(c, 3.0)
            c.send("audio-stop")
            assert c.recv(5).data == {"text": f"{n} bytes"}
        assert "closing after 32000 bytes" in srv.log_text()


class _maybe_oserror:
    """A FIN may surface as EOF or, once we keep writing into the closed socket, as EPIPE/ECONNRESET."""

    def __enter__(self):
        return self

    def __exit__(self, typ, value, tb):
        return typ is not None and issubclass(typ, OSError)


def test_error_event_answers_audio_stop():
    with wt.FaultServer("Error") as srv, wt.Connection(srv.url) as c:
        audio(c, 0.2)
        c.send("audio-stop")
        ev = c.recv(5)
        assert ev.type == "error"
        assert ev.data == {"text": "scripted failure: recognizer unavailable", "code": "scripted-error"}


def test_exits_when_its_stdin_closes():
    srv = wt.FaultServer("Normal")
    try:
        srv.proc.stdin.close()
        assert srv.proc.wait(timeout=5) == 0
    finally:
        srv.stop()


@pytest.mark.parametrize("scenario", ["Normal", "Streaming", "StreamingStopFirst", "UnknownEvents"])
def test_reference_client_reads_every_form_of_transcript(scenario, tmp_path):
    """transcribe_with_wyoming, the client the library is compared with, against each form."""
    wav = tmp_path / "silence.wav"
    import wave
    with wave.open(str(wav), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\0" * SECOND * 2)
    with wt.FaultServer(scenario) as srv:
        r = wt.transcribe_with_wyoming(srv.url, wav, language="en")
        assert r.text.endswith(f"{SECOND * 2} bytes")
        assert r.partials == ([] if scenario in ("Normal", "UnknownEvents")
                              else ["part1", " part2", " part3", " part4", " 64000 bytes"])
        assert not r.closed_after
        sent = srv.events()
        assert [e["type"] for e in sent if e["type"] != "audio-chunk"] == \
            ["describe", "transcribe", "audio-start", "audio-stop"]
        assert sent[1]["data"] == {"language": "en"}


def test_endpointing_answers_each_end_of_speech_before_audio_stop():
    """Endpointing: a transcript at each end of speech while audio still comes; at audio-stop
    nothing when no speech came since, and describe after it answered with info (in order)."""
    import struct
    fmt = dict(FMT, timestamp=0)
    with wt.FaultServer("Endpointing") as srv, wt.Connection(srv.url) as c:
        c.send("audio-start", fmt)
        for value in (1001, 1002):
            for _ in range(5):      # 0.5 s of speech, then 0.5 s of silence
                c.send("audio-chunk", fmt, struct.pack("<1600h", *([value] * 1600)))
            for _ in range(5):
                c.send("audio-chunk", fmt, b"\0" * 3200)
            ev = c.recv(5)
            # 0.5 s of speech and the 0.3 s of silence that ended it (the rest of the silence
            # before the second utterance counts toward the next transcript).
            assert (ev.type, ev.data["text"]) == ("transcript", f"{25600 if value == 1001 else 32000} bytes v{value}")
        c.send("audio-stop")
        c.send("describe")
        ev = c.recv(5)
        assert ev.type == "info", ev
