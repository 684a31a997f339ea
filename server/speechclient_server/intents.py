"""Intent templates: parsing, a JSGF grammar of every phrase, and intent/entity matching.

File format (one definition per line, `#` starts a comment):

    turn_on: turn on the {room} lights        an intent: its name, then its words
    room: kitchen | bedroom | living room     a slot: values separated by `|`

A line whose body contains `|` defines a slot; any other line an intent template (several
lines may share an intent name). `{slot}` placeholders become entities of that type."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

DEFAULT_FILE = Path(__file__).with_name("intents.txt")
DEFAULT_GRAMMAR = Path(__file__).with_name("commands.gram")

Entity = Tuple[str, str, int, int]  # (type, value, start word, end word): [start, end)


@dataclasses.dataclass(frozen=True)
class Template:
    intent: str
    tokens: Tuple[str, ...]  # words, or "{slot}" placeholders


@dataclasses.dataclass(frozen=True)
class Match:
    intent: str
    entities: Tuple[Entity, ...]
    complete: bool  # every word of the template was heard (False: a tentative prefix)


class Intents:
    def __init__(self, templates: List[Template], slots: Dict[str, List[str]]):
        self.templates = templates
        self.slots = slots

    @classmethod
    def load(cls, path: Optional[str] = None) -> "Intents":
        where = str(path or DEFAULT_FILE)
        text = Path(where).read_text()
        templates: List[Template] = []
        slots: Dict[str, List[str]] = {}
        for n, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            name, sep, body = line.partition(":")
            name, body = name.strip(), body.strip().lower()
            if not sep or not body or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
                raise ValueError(f"{where}:{n}: expected 'name: words' or 'name: value | value'")
            if "|" in body:
                slots[name] = [" ".join(v.split()) for v in body.split("|") if v.strip()]
            else:
                templates.append(Template(name, tuple(body.split())))
        if not templates:
            raise ValueError(f"{where}: no intent templates")
        for t in templates:
            for tok in t.tokens:
                if tok.startswith("{") and tok.strip("{}") not in slots:
                    raise ValueError(f"{where}: intent {t.intent}: unknown slot {tok}")
        return cls(templates, slots)

    def jsgf(self) -> str:
        """A JSGF grammar accepting one or more of the phrases in a row."""
        def rule(name: str) -> str:
            return "<" + re.sub(r"[^a-z0-9_]", "_", name.lower()) + ">"
        names: List[str] = []
        bodies: Dict[str, List[str]] = {}
        for t in self.templates:
            r = rule("i_" + t.intent)
            if r not in bodies:
                names.append(r)
                bodies[r] = []
            bodies[r].append(" ".join(rule("s_" + tok.strip("{}")) if tok.startswith("{") else tok
                                      for tok in t.tokens))
        lines = ["#JSGF V1.0;", "", "// Generated from the intent templates: python -m speechclient_server --print-grammar",
                 "grammar commands;", "", f"public <utterance> = ( {' | '.join(names)} )+;", ""]
        for r in names:
            alts = bodies[r]
            lines.append(f"{r} = {alts[0]};" if len(alts) == 1 else f"{r} = ( {' | '.join(alts)} );")
        for name, values in self.slots.items():
            lines.append(f"{rule('s_' + name)} = {' | '.join(values)};")
        return "\n".join(lines) + "\n"

    def _match_at(self, t: Template, words: Sequence[str], start: int) -> Optional[Tuple[int, bool, List[Entity]]]:
        """Matches template t at words[start:]: (words consumed, complete, entities), or None.
        Running out of words part-way (even inside a slot value) is an incomplete match."""
        i = start
        entities: List[Entity] = []
        for tok in t.tokens:
            if i >= len(words):
                return i - start, False, entities
            if tok.startswith("{"):
                slot = tok.strip("{}")
                found = None
                for value in sorted(self.slots[slot], key=lambda v: -len(v.split())):
                    vw = value.split()
                    if list(words[i:i + len(vw)]) == vw:
                        found = vw
                        break
                    if len(words) - i < len(vw) and list(words[i:]) == vw[:len(words) - i]:
                        return len(words) - start, False, entities  # a value still being said
                if found is None:
                    return None
                entities.append((slot, " ".join(found), i, i + len(found)))
                i += len(found)
            elif words[i] == tok:
                i += 1
            else:
                return None
        return i - start, True, entities

    def match(self, words: Sequence[str], final: bool = True) -> Optional[Match]:
        """The intent of a segment's words. Final: the earliest complete template (the longest
        when several start there). Tentative (final=False): the same, or else a template whose
        beginning matches the words up to the end (what is being said)."""
        words = [w.lower() for w in words]
        best: Optional[Tuple[Tuple[int, int], Match]] = None
        for start in range(len(words)):
            for t in self.templates:
                m = self._match_at(t, words, start)
                if m is None:
                    continue
                consumed, complete, entities = m
                if not complete and (final or start + consumed < len(words) or consumed == 0):
                    continue
                key = (0 if complete else 1, -consumed)
                if best is None or key < best[0]:
                    best = (key, Match(t.intent, tuple(entities), complete))
            if best is not None and best[1].complete:
                break
        return best[1] if best else None
