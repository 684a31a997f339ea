"""Intent templates: parsing, a JSGF grammar of every phrase, and intent/entity matching."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

DEFAULT_FILE = Path(__file__).with_name("intents.txt")


@dataclasses.dataclass(frozen=True)
class Template:
    intent: str
    tokens: Tuple[str, ...]  # words, or "{slot}" placeholders


@dataclasses.dataclass(frozen=True)
class Match:
    intent: str
    entities: Tuple[Tuple[str, str, int, int], ...]  # (type, value, start word, end word)


class Intents:
    def __init__(self, templates: List[Template], slots: Dict[str, List[str]]):
        self.templates = templates
        self.slots = slots

    @classmethod
    def load(cls, path: Optional[str] = None) -> "Intents":
        text = Path(path or DEFAULT_FILE).read_text()
        templates: List[Template] = []
        slots: Dict[str, List[str]] = {}
        for n, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            name, sep, body = line.partition(":")
            if not sep or not name.strip() or not body.strip():
                raise ValueError(f"{path or DEFAULT_FILE}:{n}: expected 'name: ...'")
            name, body = name.strip(), body.strip().lower()
            if "|" in body:
                slots[name] = [v.strip() for v in body.split("|") if v.strip()]
            else:
                templates.append(Template(name, tuple(body.split())))
        for t in templates:
            for tok in t.tokens:
                if tok.startswith("{") and tok.strip("{}") not in slots:
                    raise ValueError(f"intent {t.intent}: unknown slot {tok}")
        return cls(templates, slots)

    def jsgf(self) -> str:
        """A JSGF grammar accepting one or more of the phrases."""
        def rule(name: str) -> str:
            return "<" + re.sub(r"[^a-z0-9_]", "_", name.lower()) + ">"
        lines = ["#JSGF V1.0;", "grammar commands;"]
        alts = " | ".join(rule("i_" + t.intent) for t in self.templates)
        lines.append(f"public <utterance> = ( {alts} )+;")
        for t in self.templates:
            words = " ".join(rule("s_" + tok.strip("{}")) if tok.startswith("{") else tok for tok in t.tokens)
            lines.append(f"{rule('i_' + t.intent)} = {words};")
        for name, values in self.slots.items():
            lines.append(f"{rule('s_' + name)} = {' | '.join(values)};")
        return "\n".join(lines) + "\n"

    def match(self, words: List[str]) -> Optional[Match]:
        """The first template matching a prefix of `words` (the best partial match while
        the segment is tentative), with entities as word spans."""
        best: Optional[Tuple[int, Match]] = None
        for t in self.templates:
            i = 0
            entities = []
            ok = True
            for tok in t.tokens:
                if i >= len(words):
                    break
                if tok.startswith("{"):
                    slot = tok.strip("{}")
                    found = None
                    for value in sorted(self.slots[slot], key=lambda v: -len(v.split())):
                        vw = value.split()
                        if words[i:i + len(vw)] == vw:
                            found = value
                            break
                    if found is None:
                        ok = False
                        break
                    n = len(found.split())
                    entities.append((slot, found, i, i + n))
                    i += n
                elif words[i] == tok:
                    i += 1
                else:
                    ok = False
                    break
            if ok and i > 0 and (best is None or i > best[0]):
                best = (i, Match(t.intent, tuple(entities)))
        return best[1] if best else None
