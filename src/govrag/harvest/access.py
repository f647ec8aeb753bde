"""Rights of files in a folder tree: ``_access.json`` sidecars and Markdown front matter.

A folder's ``_access.json`` applies to every file below it; a subfolder's own sidecar
replaces the keys it sets (``metadata`` is merged key by key), and its ``files`` entries
override them for single files of that folder::

    {"acl": ["S-1", "G-risk"], "classification": "internal", "author": "S-9",
     "files": {"memo.md": {"acl": ["S-1"], "classification": "confidential"}}}

Front matter of a Markdown file overrides both. Keys are checked strictly: an unknown key
(``"acls"``) is an error, never a silently public file. A file that gets no ``acl`` from any
of them keeps ``acl`` unset, which the connector stores as an empty ACL (nobody may read it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from govrag.errors import InputError, describe_validation
from govrag.harvest.extract import FrontValue
from govrag.types import Classification

ACCESS_FILE = "_access.json"
IDENTITIES_FILE = "_identities.jsonl"


class FolderRule(BaseModel):
    """What a sidecar (or one of its ``files`` entries) states; ``None``: not stated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    acl: list[str] | None = None
    classification: Classification | None = None
    author: str | None = None
    corpus: str | None = None
    metadata: dict[str, Any] | None = None

    @field_validator("classification", mode="before")
    @classmethod
    def _parse(cls, value: object) -> Classification | None:
        return None if value is None else Classification.parse(value)


class FileRule(FolderRule):
    """A rule for one file: a sidecar's ``files`` entry, or front matter."""

    title: str | None = None


class AccessFile(FolderRule):
    """A whole ``_access.json``."""

    files: dict[str, FileRule] = {}


def load_access(path: Path) -> AccessFile:
    """Parse a sidecar. Raises :class:`InputError` naming the field and a fix."""
    try:
        raw = json.loads(path.read_bytes())
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}") from exc
    except ValueError as exc:
        raise InputError(f"not valid JSON: {exc}") from exc
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
