"""A route's prompt (``prompt_id``): its own instructions to the model, from ``prompts/``.

``prompts/<prompt_id>.txt`` in the deployment holds what a route's model is told first (its
role, tone, the form of its answers). govrag's own rules always follow it in the same system
message and are not the route's to change: the caller's message is untrusted data, evidence
is data and the only thing to cite, a citation names a chunk handed over. So a prompt shapes
answers; it cannot widen what the model may see or cite.

Each prompt is versioned by its content: its SHA-256 goes with its id on every ``llm_call``
audit record of a request it served, so an examiner knows exactly which instructions the model
had. A route naming a prompt with no file is served with govrag's built-in instructions
(``govrag config check`` warns).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from govrag.problems import Collector

FOLDER = "prompts"
#: Longest prompt file, in characters: instructions, not a knowledge base.
MAX_CHARS = 16_384
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


@dataclass(frozen=True)
class RoutePrompt:
    prompt_id: str
    text: str
    #: SHA-256 of ``text`` (hex): the version recorded with every model call it served.
    sha256: str

    def system(self, rules: str) -> str:
        """The system message: this prompt, then govrag's ``rules`` (never the reverse)."""
        return f"{self.text}\n\n{rules}"


def load_prompts(c: Collector) -> dict[str, RoutePrompt]:
    """Every ``prompts/*.txt`` of the deployment, each a problem (naming the file) when it
    cannot serve as instructions."""
    out: dict[str, RoutePrompt] = {}
    folder = c.root / FOLDER
    for path in sorted(folder.glob("*.txt")) if folder.is_dir() else []:
        text = c.read_text(path, max_bytes=4 * MAX_CHARS)  # UTF-8: at most 4 bytes a char
        if text is None:
            continue
        if not _ID.fullmatch(path.stem):
            c.add(path, "", f"{path.name!r} does not name a prompt id (letters, digits, '_', "
                            "'-', '.'); rename the file")  # fmt: skip
            continue
        text = text.strip()
        if not text:
            c.add(path, "", "the prompt is empty; write the route's instructions or delete it")
        elif len(text) > MAX_CHARS:
            c.add(path, "", f"the prompt has {len(text)} characters, more than {MAX_CHARS}; "
                            "keep instructions short (evidence is in the corpora)")  # fmt: skip
        elif "\x00" in text:
            c.add(path, "", "the prompt holds a NUL character; remove it")
        else:
            digest = hashlib.sha256(text.encode()).hexdigest()
            out[path.stem] = RoutePrompt(path.stem, text, digest)
    return out


def missing_prompt(c: Collector, path: Path, route_id: str, prompt_id: str | None,
                   prompts: dict[str, RoutePrompt]) -> None:  # fmt: skip
    """Warn when a route names a prompt with no file (it gets govrag's built-in one)."""
    if prompt_id is not None and prompt_id not in prompts and FOLDER not in c.incomplete:
        c.add(path, "prompt_id",
              f"route {route_id!r} names prompt {prompt_id!r}, but there is no "
              f"{FOLDER}/{prompt_id}.txt; govrag's built-in instructions serve it until you "
              "write one", warning=True)  # fmt: skip
