"""The deployment's glossary of known entities: ``entities/*.jsonl``.

One JSON object per line, each an entity the graph leg should know by every name it goes by::

    {"id": "ent-orbis", "type": "organization",
     "names": ["Orbis Data Holdings plc", "Orbis", "549300ORBISDATAHOLD42"],
     "relations": [{"type": "parent_of", "target": "ent-orbis-cloud"}]}

Read like every deployment file (``deployfile``: bounded, UTF-8, no link out of the
deployment), strictly: unknown fields, a repeated id, a name two entities claim, a relation to
an id no file defines are each an error naming the file and line and how to fix it. Blank lines
and lines starting with ``#`` are skipped. No folder means no glossary (identifiers and
defined terms are still extracted).

The glossary is configuration, not data: the relations it states hold for every caller. A
relation that only a document states (a defined term) counts only for callers who may read
that document (``graph.py``).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from govrag import deployfile
from govrag.errors import ConfigFileError, describe_validation
from govrag.problems import Problem

GLOSSARY_DIR = "entities"
_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$"
Name = Annotated[str, StringConstraints(min_length=1, max_length=200)]


def fold(text: str) -> str:
    """Case- and width-folded text with runs of whitespace made one space."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


class _Relation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
    target: Annotated[str, StringConstraints(pattern=_ID)]


class GlossaryRecord(BaseModel):
    """One line of ``entities/*.jsonl``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Annotated[str, StringConstraints(pattern=_ID)]
    type: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
    names: list[Name] = Field(min_length=1, max_length=100)
    relations: list[_Relation] = Field(default_factory=list, max_length=1000)


@dataclass(frozen=True)
class GlossaryEntry:
    id: str
    type: str
    names: tuple[str, ...]
    #: ``(relation type, target id)`` pairs.
    relations: tuple[tuple[str, str], ...] = ()


@dataclass
class Glossary:
    """Known entities by every folded name; their relations both ways."""

    entries: dict[str, GlossaryEntry] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._by_name: dict[str, str] = {}
        for entry in self.entries.values():
            for name in entry.names:
                self._by_name.setdefault(fold(name), entry.id)
        longest = sorted(self._by_name, key=lambda n: (-len(n), n))
        self._pattern = (
            re.compile(r"(?<!\w)(" + "|".join(re.escape(n) for n in longest) + r")(?!\w)")
            if longest else None
        )  # fmt: skip
        self._neighbours: dict[str, set[tuple[str, str]]] = {}
        for entry in self.entries.values():
            for kind, target in entry.relations:
                self._neighbours.setdefault(entry.id, set()).add((kind, target))
                self._neighbours.setdefault(target, set()).add((kind, entry.id))

    def entity_named(self, name: str) -> str | None:
        return self._by_name.get(fold(name))

    def mentions(self, folded: str) -> set[str]:
        """Ids of the entities whose names occur in ``folded`` text (longest names first)."""
        if self._pattern is None:
            return set()
        return {self._by_name[m] for m in self._pattern.findall(folded)}

    def neighbours(self, entity_id: str) -> set[tuple[str, str]]:
        """``(relation type, other id)`` of ``entity_id``'s relations, either direction."""
        return self._neighbours.get(entity_id, set())


def load_glossary(root: Path) -> Glossary:
    """The glossary of the deployment at ``root`` (empty without an ``entities/`` folder)."""
    folder = root / GLOSSARY_DIR
    if not folder.is_dir():
        return Glossary()
    entries: dict[str, GlossaryEntry] = {}
    named: dict[str, str] = {}
    where: dict[str, str] = {}
    for path in sorted(folder.glob("*.jsonl")):
        text = deployfile.read_text(path, inside=root)
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                record = GlossaryRecord.model_validate(deployfile.parse_json(line))
            except (ValidationError, ValueError) as exc:
                detail = describe_validation(exc) if isinstance(exc, ValidationError) else exc
                raise ConfigFileError(f"line {number}: {detail}", path=path) from None
            at = f"{path}: line {number}"
            if record.id in entries:
                raise ConfigFileError(f"line {number}: entity id {record.id!r} is defined "
                                      f"again (first at {where[record.id]}); give each entity "
                                      "one line", path=path)  # fmt: skip
            for name in record.names:
                key = fold(name)
                if key in named and named[key] != record.id:
                    raise ConfigFileError(f"line {number}: the name {name!r} is claimed by "
                                          f"{named[key]!r} too; a name must lead to one entity",
                                          path=path)  # fmt: skip
                named[key] = record.id
            entries[record.id] = GlossaryEntry(
                id=record.id, type=record.type, names=tuple(record.names),
                relations=tuple((r.type, r.target) for r in record.relations),
            )  # fmt: skip
            where[record.id] = at
    for entry in entries.values():
        for kind, target in entry.relations:
            if target not in entries:
                raise ConfigFileError(f"entity {entry.id!r} (at {where[entry.id]}) relates "
                                      f"({kind}) to {target!r}, which no glossary line defines; "
                                      "add it or drop the relation", path=folder)  # fmt: skip
    return Glossary(entries)


def glossary_problems(root: Path) -> list[Problem]:
    """``govrag config check``: the glossary's problem, naming the file (none if it loads)."""
    try:
        load_glossary(root)
    except ConfigFileError as exc:
        where = Path(exc.path)
        shown = where.relative_to(root) if where.is_relative_to(root) else where
        return [Problem(str(shown), "", exc.detail)]
    return []
