"""Intent templates: parsing, the committed grammar, matching of final and tentative words."""
import subprocess
import sys

import pytest

from speechclient_server.intents import DEFAULT_GRAMMAR, Intents


@pytest.fixture(scope="module")
def intents():
    return Intents.load()


def test_committed_grammar_is_the_one_generated_from_the_intents(intents):
    assert DEFAULT_GRAMMAR.read_text() == intents.jsgf()
    out = subprocess.run([sys.executable, "-m", "speechclient_server", "--print-grammar"],
                         capture_output=True, text=True, check=True).stdout
    assert out == intents.jsgf() and "public <utterance>" in out


def test_pocketsphinx_accepts_the_grammar():
    from pocketsphinx import Decoder
    Decoder(jsgf=str(DEFAULT_GRAMMAR), loglevel="FATAL")


@pytest.mark.parametrize("words, intent, entities", [
    ("turn on the kitchen lights", "turn_on", [("room", "kitchen", 3, 4)]),
    ("turn off the living room lights", "turn_off", [("room", "living room", 3, 5)]),
    ("set a timer for fifteen minutes", "set_timer", [("minutes", "fifteen", 4, 5)]),
    ("please stop the music now", "stop_music", []),
    ("what time is it", "what_time", []),
])
def test_final_match(intents, words, intent, entities):
    m = intents.match(words.split(), final=True)
    assert m.intent == intent and list(m.entities) == entities and m.complete


@pytest.mark.parametrize("words", ["turn on the", "turn on the garden lights", "music", ""])
def test_no_final_match_for_incomplete_or_unknown(intents, words):
    assert intents.match(words.split(), final=True) is None


@pytest.mark.parametrize("words, intent, entities", [
    ("turn on the", "turn_on", []),
    ("turn off the living", "turn_off", []),
    ("play some jazz", "play_music", [("genre", "jazz", 2, 3)]),
    ("turn on the kitchen lights play", "turn_on", [("room", "kitchen", 3, 4)]),
])
def test_tentative_match_follows_what_is_being_said(intents, words, intent, entities):
    m = intents.match(words.split(), final=False)
    assert m.intent == intent and list(m.entities) == entities


def test_custom_template_file(tmp_path):
    f = tmp_path / "i.txt"
    f.write_text("# comment\nbook: book a table for {n} at {place}\nbook: reserve {place}\n"
                 "n: two | four\nplace: the harbour | noon\n")
    i = Intents.load(str(f))
    m = i.match("reserve the harbour".split())
    assert m.intent == "book" and m.entities == (("place", "the harbour", 1, 3),)
    m = i.match("book a table for four at noon".split())
    assert m.entities == (("n", "four", 4, 5), ("place", "noon", 6, 7))
    assert "<i_book> = ( book a table for <s_n> at <s_place> | reserve <s_place> );" in i.jsgf()


@pytest.mark.parametrize("text, error", [
    ("x: a {nope}\n", "unknown slot"),
    ("just words\n", "expected"),
    ("s: a | b\n", "no intent"),
])
def test_bad_template_files(tmp_path, text, error):
    f = tmp_path / "bad.txt"
    f.write_text(text)
    with pytest.raises(ValueError, match=error):
        Intents.load(str(f))


def test_server_with_custom_intents_recognises_them(start_server, tmp_path, speech):
    from conftest import config, context_requests, kind, texts
    f = tmp_path / "i.txt"
    f.write_text("greet: hello {who}\nwho: world | there\n")
    s = start_server("--intents", str(f))
    responses = s.stream([config(), *context_requests(speech("hello world"))], token=s.login().token)
    assert texts(responses) == ["hello world"]
    assert [r.intent.intent for r in responses if kind(r) == "intent"] == ["greet"]
