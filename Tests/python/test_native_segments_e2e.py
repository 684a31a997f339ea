"""The segment API of include/speechclient.h on real segments, through the raw ctypes layer
(speechclient._native), against the reference server.

The C suite checks the accessors with NULL only; here every accessor is read on each real
segment update inside the callback and compared with spc_segment_json(), indices out of range
(up to SIZE_MAX) must give NULL / -1 / 0, and spc_segment_copy() must keep a segment that reads
the same after its callback returned and after the client is freed.
"""
import ctypes
import json
import threading

import pytest

from speechclient import _native as n
from conftest import DEVICE_ID

pytestmark = pytest.mark.e2e

SIZE_MAX = 2 ** (8 * ctypes.sizeof(ctypes.c_size_t)) - 1


def _s(b):
    return None if b is None else b.decode("utf-8")


def read_segment(s):
    """Everything the accessors say about a segment, in the shape of spc_segment_json()."""
    words = []
    for i in range(n.spc_segment_word_count(s)):
        words.append({"text": _s(n.spc_segment_word_text(s, i)), "index": n.spc_segment_word_index(s, i),
                      "start_ms": n.spc_segment_word_start_ms(s, i), "end_ms": n.spc_segment_word_end_ms(s, i),
                      "final": bool(n.spc_segment_word_is_final(s, i))})
    entities = []
    for i in range(n.spc_segment_entity_count(s)):
        entities.append({"type": _s(n.spc_segment_entity_type(s, i)), "value": _s(n.spc_segment_entity_value(s, i)),
                         "start": n.spc_segment_entity_start(s, i), "end": n.spc_segment_entity_end(s, i),
                         "final": bool(n.spc_segment_entity_is_final(s, i))})
    intent = _s(n.spc_segment_intent(s))
    return {"type": "segment", "context_id": _s(n.spc_segment_context_id(s)), "segment_id": n.spc_segment_id(s),
            "final": bool(n.spc_segment_is_final(s)), "transcript": _s(n.spc_segment_transcript(s)),
            "words": words,
            "intent": {"intent": intent, "final": bool(n.spc_segment_intent_is_final(s))} if intent else None,
            "entities": entities}


def out_of_range(s):
    """What the indexed accessors give past the end; each must be NULL, -1 or 0."""
    bad = []
    for i in (n.spc_segment_word_count(s), n.spc_segment_word_count(s) + 1, SIZE_MAX):
        got = (n.spc_segment_word_text(s, i), n.spc_segment_word_index(s, i), n.spc_segment_word_start_ms(s, i),
               n.spc_segment_word_end_ms(s, i), n.spc_segment_word_is_final(s, i))
        if got != (None, -1, -1, -1, 0):
            bad.append(("word", i, got))
    for i in (n.spc_segment_entity_count(s), n.spc_segment_entity_count(s) + 1, SIZE_MAX):
        got = (n.spc_segment_entity_type(s, i), n.spc_segment_entity_value(s, i), n.spc_segment_entity_start(s, i),
               n.spc_segment_entity_end(s, i), n.spc_segment_entity_is_final(s, i))
        if got != (None, None, -1, -1, 0):
            bad.append(("entity", i, got))
    return bad


class Recorder:
    """Raw callbacks that check each segment while it is valid and keep a copy of it."""

    def __init__(self):
        self.events = []      # ("start"|"stop", context_id) or ("segment", accessors, json)
        self.copies = []      # (spc_segment_copy() pointer, json read in the callback)
        self.problems = []
        self.threads = set()
        self.cbs = (n.SEGMENT_CB(self.on_segment), n.START_CB(self.on_start), n.STOP_CB(self.on_stop),
                    n.ERROR_CB(self.on_error))

    def on_segment(self, _client, s, _ud):
        try:
            self.threads.add(threading.get_ident())
            text = _s(n.spc_segment_json(s))
            read = read_segment(s)
            self.events.append(("segment", read, text))
            self.problems.extend(out_of_range(s))
            copy = n.spc_segment_copy(s)
            if not copy:
                self.problems.append(("spc_segment_copy returned NULL", read["segment_id"]))
            else:
                self.copies.append((copy, text))
        except BaseException as e:  # never into C
            self.problems.append(("exception in the segment callback", repr(e)))

    def on_start(self, _client, context_id, _ud):
        self.threads.add(threading.get_ident())
        self.events.append(("start", _s(context_id)))

    def on_stop(self, _client, context_id, _ud):
        self.threads.add(threading.get_ident())
        self.events.append(("stop", _s(context_id)))

    def on_error(self, _client, error, _ud):
        self.problems.append(("error event", n.spc_error_code(error), _s(n.spc_error_message(error))))


def transcribe_raw(url, wav, cache_dir, rec):
    o = n.spc_options_new()
    try:
        assert n.spc_options_set_server_url(o, url.encode()) == n.Status.OK
        assert n.spc_options_set_app_id(o, b"py-native") == n.Status.OK
        assert n.spc_options_set_device_id(o, DEVICE_ID.encode()) == n.Status.OK
        assert n.spc_options_set_cache_dir(o, cache_dir.encode()) == n.Status.OK
        assert n.spc_options_set_audio_file(o, str(wav).encode()) == n.Status.OK
        seg, start, stop, err = rec.cbs
        assert n.spc_options_set_segment_cb(o, seg, None) == n.Status.OK
        assert n.spc_options_set_start_cb(o, start, None) == n.Status.OK
        assert n.spc_options_set_stop_cb(o, stop, None) == n.Status.OK
        assert n.spc_options_set_error_cb(o, err, None) == n.Status.OK
        client, error = n.client_p(), n.error_p()
        status = n.spc_client_new(o, ctypes.byref(client), ctypes.byref(error))
        assert status == n.Status.OK, _s(n.spc_error_message(error))
    finally:
        n.spc_options_free(o)
    try:
        assert n.spc_client_start(client) == n.Status.OK
        assert n.spc_client_wait_idle(client, 60000) == n.Status.OK
    finally:
        assert n.spc_client_free(client) == n.Status.OK


def test_segment_accessors_json_and_copies_agree(server, synthesize, cache_dir):
    wav = synthesize("turn on the kitchen lights")
    rec = Recorder()
    transcribe_raw(server.url, wav, cache_dir, rec)
    try:
        assert not rec.problems, rec.problems
        kinds = [e[0] for e in rec.events]
        assert kinds[0] == "start" and kinds[-1] == "stop" and kinds.count("start") == kinds.count("stop") == 1
        context_id = rec.events[0][1]
        assert context_id and rec.events[-1][1] == context_id
        segments = [e for e in rec.events if e[0] == "segment"]
        assert segments, "no segment update"
        assert len(rec.threads) == 1 and threading.get_ident() not in rec.threads

        finished = set()
        for _, read, text in segments:
            # spc_segment_json() is one line of JSON saying what the accessors say.
            assert "\n" not in text
            assert json.loads(text) == read, text
            assert read["context_id"] == context_id
            # The transcript is the words joined with single spaces, in index order.
            words = sorted(read["words"], key=lambda w: w["index"])
            assert read["transcript"] == " ".join(w["text"] for w in words)
            for w in read["words"]:
                assert 0 <= w["start_ms"] <= w["end_ms"], w
            for e in read["entities"]:
                assert 0 <= e["start"] < e["end"], e
            # A segment's last update is the final one: nothing for it after that.
            assert read["segment_id"] not in finished, f"an update after the final one: {text}"
            if read["final"]:
                finished.add(read["segment_id"])
                assert all(w["final"] for w in read["words"]), text
        assert finished, "no final segment"
        last = [json.loads(t) for _, _, t in segments if json.loads(t)["final"]][-1]
        assert last["transcript"] == "turn on the kitchen lights"

        # The copies outlived their callbacks and the client, and still read the same.
        assert len(rec.copies) == len(segments)
        for copy, text in rec.copies:
            assert _s(n.spc_segment_json(copy)) == text
            assert json.loads(text) == read_segment(copy)
            assert not out_of_range(copy)
            second = n.spc_segment_copy(copy)  # a copy of a copy is a segment too
            assert _s(n.spc_segment_json(second)) == text
            n.spc_segment_free(second)
    finally:
        for copy, _ in rec.copies:
            n.spc_segment_free(copy)
