"""Rights of files in a folder tree: ``_access.json`` sidecars and Markdown front matter.

A folder's ``_access.json`` applies to every file below it; a subfolder's own sidecar
replaces the keys it sets (``metadata`` is merged key by key), and its ``files`` entries
override them for single files of that folder::

    {"acl": ["S-1", "G-risk"], "classification": "internal", "author": "S-9",
     "files": {"memo.md": {"acl": ["S-1"], "classification": "confidential"}}}

Front matter is written by whoever may edit the file, who is not trusted with its rights:
it may only *narrow* them (:func:`narrow`). Its ``acl`` is intersected with the sidecars'
ACL, its ``classification`` can only raise the level, and its ``corpus`` may move the file
only where the source allows it (``allow_front_matter_corpus``). Keys are checked strictly:
an unknown key (``"acls"``), a repeated key or an unprintable id is an error, never a
silently public file. A file that gets no ``acl`` from a sidecar keeps ``acl`` unset, which
the connector stores as an empty ACL (nobody may read it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from govrag.errors import InputError, describe_validation
from govrag.harvest.extract import FrontValue
from govrag.harvest.records import CORPUS_PATTERN, check_document_metadata, check_id
from govrag.store.records import EVERYONE
from govrag.strict_json import load_json
from govrag.types import Classification

ACCESS_FILE = "_access.json"
IDENTITIES_FILE = "_identities.jsonl"


class FolderRule(BaseModel):
    """What a sidecar (or one of its ``files`` entries) states; ``None``: not stated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    acl: list[str] | None = Field(default=None, max_length=10_000)
    classification: Classification | None = None
    author: str | None = None
    corpus: str | None = Field(default=None, pattern=CORPUS_PATTERN)
    metadata: dict[str, Any] | None = None

    @field_validator("classification", mode="before")
    @classmethod
    def _parse(cls, value: object) -> Classification | None:
        return None if value is None else Classification.parse(value)

    @field_validator("acl")
    @classmethod
    def _acl(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else [check_id(v) for v in value]

    @field_validator("author")
    @classmethod
    def _author(cls, value: str | None) -> str | None:
        return None if value is None else check_id(value)

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else check_document_metadata(value)


class FileRule(FolderRule):
    """A rule for one file: a sidecar's ``files`` entry, or front matter."""

    title: str | None = None


class AccessFile(FolderRule):
    """A whole ``_access.json``."""

    files: dict[str, FileRule] = {}


def load_access(path: Path) -> AccessFile:
    """Parse a sidecar. Raises :class:`InputError` naming the field and a fix."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}") from exc
    raw = load_json(data)
    try:
        return AccessFile.model_validate(raw)
    except ValidationError as exc:
        raise InputError(describe_validation(exc)) from exc


_SCALARS = ("title", "author", "classification", "corpus")


def front_rule(front: Mapping[str, FrontValue]) -> tuple[FileRule, str | None]:
    """The rule stated by front matter, and its ``updated_at`` (as written).

    ``acl`` and ``tags`` take a list (a single value is a list of one); ``tags`` and every
    key that is not a document field become metadata.
    """
    data: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    updated_at: str | None = None
    for key, value in front.items():
        if key in ("acl", "tags"):
            items = value if isinstance(value, list) else ([str(value)] if value != "" else [])
            if key == "acl":
                data["acl"] = items
            else:
                metadata["tags"] = items
        elif key in (*_SCALARS, "updated_at", "metadata"):
            if isinstance(value, list) or key == "metadata":
                raise InputError(f"front matter: {key!r} must be a single value")
            if key == "updated_at":
                updated_at = str(value) or None
            elif value != "":
                data[key] = str(value)
        else:
            metadata[key] = value
    if metadata:
        data["metadata"] = metadata
    try:
        return FileRule.model_validate(data), updated_at
    except ValidationError as exc:
        raise InputError(f"front matter: {describe_validation(exc)}") from exc


@dataclass(frozen=True)
class Rights:
    """The effective rule of one file so far: ``None`` fields were stated nowhere."""

    acl: tuple[str, ...] | None = None
    classification: Classification | None = None
    author: str | None = None
    corpus: str | None = None
    title: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def merged(self, rule: FolderRule | None) -> Rights:
        """These rights with ``rule``'s stated keys on top."""
        if rule is None:
            return self
        return replace(
            self,
            acl=tuple(rule.acl) if rule.acl is not None else self.acl,
            classification=(
                rule.classification if rule.classification is not None else self.classification
            ),
            author=rule.author if rule.author is not None else self.author,
            corpus=rule.corpus if rule.corpus is not None else self.corpus,
            title=getattr(rule, "title", None) or self.title,
            metadata={**self.metadata, **(rule.metadata or {})},
        )

    def key(self) -> str:
        """A stable hash of these rights (a change re-emits the file)."""
        blob = json.dumps(
            [self.acl, self.classification, self.author, self.corpus, self.title,
             self.metadata],
            sort_keys=True, default=str,
        )  # fmt: skip
        return hashlib.sha256(blob.encode()).hexdigest()


def narrow(
    base: Rights,
    front: FileRule,
    *,
    classification: Classification,
    corpus: str,
    move_corpus: bool,
    source: str,
    name: str = "this file",
) -> tuple[Rights, list[str]]:
    """A file's rights: its sidecars' (``base``, with ``classification`` and ``corpus``
    resolved) narrowed by its front matter, and a warning per part of the front matter that
    would have widened them.

    * ``acl``: the intersection with the sidecars' ACL: an id stays if that ACL names it (or
      grants ``*``), and ``*`` stands for that whole ACL. An id the sidecars grant only
      through a group is dropped, so the result never grants more than the sidecars did.
      With no sidecar ACL the file has no readers. Front matter that drops an id (or every
      id) gets a warning saying whom the file was stored for and how to grant the rest.
    * ``classification``: the higher of the two levels.
    * ``corpus``: another corpus only when ``move_corpus`` (the source's opt-in).
    * ``title``, ``author`` and metadata: the front matter's (they grant nothing).

    Raises:
        InputError: the front matter names another corpus and the source does not allow it.
    """
    warnings: list[str] = []
    acl = base.acl
    if front.acl is not None:
        granted = list(base.acl or ())
        if EVERYONE in front.acl:  # everyone, intersected with the sidecars' ACL: that ACL
            kept = granted
        elif EVERYONE in granted:
            kept = list(front.acl)
        else:
            kept = [p for p in front.acl if p in granted]
        beyond = [p for p in front.acl if p not in granted and EVERYONE not in granted]
        acl = tuple(dict.fromkeys(kept))
        if base.acl is None:
            warnings.append(
                f"front matter 'acl' {front.acl} was ignored: front matter can only narrow the "
                "ACL of an _access.json, and none grants this file to anyone, so nobody may "
                "read it; state the acl in an _access.json"
            )
        elif beyond or not acl:
            warnings.append(_narrowed(front.acl, sorted(granted), beyond, acl, name))
    level = classification
    if front.classification is not None:
        if front.classification < classification:
            warnings.append(
                f"front matter 'classification' {front.classification.label!r} was ignored: "
                f"front matter can only raise the folder's {classification.label!r}; lower it "
                "in _access.json"
            )
        level = max(level, front.classification)
    if front.corpus is not None and front.corpus != corpus and not move_corpus:
        raise InputError(
            f"front matter 'corpus' {front.corpus!r} would move the file out of corpus "
            f"{corpus!r}, and source {source!r} does not let front matter choose a corpus "
            "(not ingested); remove 'corpus' from the front matter, set it in _access.json, "
            f"or set allow_front_matter_corpus = true in [sources.{source}] of govrag.toml"
        )
    rights = replace(
        base,
        acl=acl,
        classification=level,
        corpus=front.corpus if front.corpus is not None and move_corpus else corpus,
        author=front.author if front.author is not None else base.author,
        title=front.title or base.title,
        metadata={**base.metadata, **(front.metadata or {})},
    )
    return rights, warnings


def _narrowed(
    front: list[str], granted: list[str], beyond: list[str], stored: tuple[str, ...], name: str
) -> str:
    """The warning for front matter whose ``acl`` did not simply narrow the sidecars' ACL:
    an entry outside it (granted nothing), or nothing of it left (the file is readable by
    nobody, which is never what its author meant). Names both ACLs, what was stored, the fix.

    The likeliest cause is an account the sidecars grant only through a group (``S-1`` under
    a folder for ``G-staff``): it is dropped because a membership can change after ingest,
    and a stored ``S-1`` would outlive S-1's removal from the group."""
    readers = f"readable by {list(stored)} only" if stored else "readable by nobody"
    if not front:
        return (
            f"front matter 'acl' is empty, so the file was stored {readers}, though its "
            f"_access.json grants {granted}; remove 'acl' from the front matter to keep that "
            "ACL, or list in it the entries of that ACL who may read this file"
        )
    ids = [p for p in beyond if p != EVERYONE]
    why = []
    if ids:
        why.append(
            f"{ids} {'is' if len(ids) == 1 else 'are'} not in that ACL (an account in a group "
            "it names does not count: memberships change after ingest)"
        )
    if EVERYONE in beyond:
        why.append("'*' stands for that ACL, never for more")
    fix = (
        f"to let {ids} read it, grant {'it' if len(ids) == 1 else 'them'} in _access.json "
        f'(for this file alone: "files": {{"{name}": {{"acl": [...]}}}}), or name in front '
        "matter only entries of that ACL"
        if ids
        else "to publish the file, grant '*' in _access.json"
    )
    if any("@" in p for p in ids):
        fix += "; ACL entries are account and group ids of the source system, not emails"
    return (
        f"front matter 'acl' {front} can only narrow the ACL its _access.json grants "
        f"({granted}), and {'; '.join(why)}, so the file was stored {readers}; {fix}"
    )
