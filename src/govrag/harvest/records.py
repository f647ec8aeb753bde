"""The JSONL ingest format (DESIGN.md 2.2): one validated model per record type.

Every model forbids unknown fields, so a typo (``"acls"``) is an error, not a silently
public document. The models are the one place every connector's records pass through, so
every rule about values lives here: ids are printable text (no control, format or
bidirectional-override characters, which would make two different ids look alike), an e-mail
never matches another address once casefolded (:func:`govrag.types.check_email`), a
``source_system`` is never a name govrag reserves (:data:`govrag.types.RESERVED_SOURCE_SYSTEMS`),
timestamps carry a time zone, and metadata is bounded (nesting depth, 64-bit integers,
finite numbers, valid Unicode).
"""

from __future__ import annotations

import math
import re
import unicodedata
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from govrag.types import (
    Classification,
    Email,
    check_email,
    check_instant,
    check_source_system,
)

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: Unicode categories an id may not hold: controls, format characters (bidi overrides and
#: isolates, zero-width joiners, the BOM), surrogates, line and paragraph separators.
_UNSAFE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
#: Deepest nesting of a metadata value (``{"a": {"b": 1}}`` nests 2 levels).
MAX_METADATA_DEPTH = 8
_INT64 = 1 << 63
_META_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}")


def _unsafe_char(value: str) -> str | None:
    if value.isascii():
        found = _CONTROL.search(value)
        return found.group() if found else None
    return next((ch for ch in value if unicodedata.category(ch) in _UNSAFE), None)


def _describe(ch: str) -> str:
    kind = "an unpaired surrogate" if unicodedata.category(ch) == "Cs" else "a control character"
    return f"U+{ord(ch):04X} ({unicodedata.name(ch, kind).lower()})"


def check_id(value: str) -> str:
    bad = _unsafe_char(value)
    if bad is not None:
        raise ValueError(
            f"{value!r} contains {_describe(bad)}; ids must be printable text without "
            "control, format or bidirectional characters: remove it"
        )
    if value != value.strip():
        raise ValueError(f"{value!r} has leading or trailing whitespace; remove it")
    return value


def _check_source(value: str) -> str:
    return check_source_system(check_id(value))


def check_metadata(value: object, path: str, depth: int) -> None:
    """Raise :class:`ValueError` naming the value (``path``, e.g. ``k[1].z``) when a metadata
    value cannot be stored the same way on every backend (or filtered on) without surprise."""
    what = f"value {path!r}"
    if depth > MAX_METADATA_DEPTH:
        raise ValueError(f"{what} nests deeper than {MAX_METADATA_DEPTH} levels; flatten it")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise ValueError(
                f"{what}: the integer {str(value)[:12]}... is beyond 64 bits; send it as a string"
            )
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{what}: {value} is not a finite number; send one, or a string")
    elif isinstance(value, str):
        _check_text(value, path)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_metadata(item, f"{path}[{i}]", depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{what}: key {key!r} is not a string")
            child = f"{path}.{key}" if path else key
            _check_text(key, child)
            check_metadata(item, child, depth + 1)
    else:
        raise ValueError(
            f"{what}: a {type(value).__name__} is not a JSON value; use a string, number, "
            "boolean, null, list or object"
        )


def check_document_metadata(value: dict[str, Any]) -> dict[str, Any]:
    """A document's ``metadata`` object, or :class:`ValueError` naming the key and a fix."""
    for key in value:
        if not _META_KEY.fullmatch(key):
            raise ValueError(
                f"metadata key {key!r} is not allowed; use letters, digits, '_', '.', '-' "
                "(at most 64 characters)"
            )
    check_metadata(value, "", 0)
    return value


def _check_text(value: str, path: str = "") -> None:
    """Valid Unicode text without NUL (``path`` names the metadata value, when it is one)."""
    where = f"value {path!r} " if path else ""
    if "\x00" in value:
        raise ValueError(f"{where}contains a NUL character (\\u0000); remove it")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{where}holds an unpaired surrogate ({value[exc.start]!r} at character "
            f"{exc.start}); fix the text"
        ) from exc


Id = Annotated[str, StringConstraints(min_length=1, max_length=256)]
CORPUS_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$"
CorpusId = Annotated[str, StringConstraints(pattern=CORPUS_PATTERN)]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IdentityRecord(_Record):
    """Binds ``email`` to an account of a source system; an account has one owner.

    ``previous_email`` rebinds an account after its owner's email changed (applied only if
    that email owns it now); ``active: false`` unbinds ``email`` from the account.
    """

    type: Literal["identity"]
    email: Email
    source_system: Id
    account_id: Id
    previous_email: Email | None = None
    active: StrictBool = True

    _ids = field_validator("account_id")(check_id)
    _source = field_validator("source_system")(_check_source)

    @field_validator("email", "previous_email")
    @classmethod
    def _email(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if "@" not in value or _unsafe_char(value) is not None:
            raise ValueError(f"{value!r} is not an email address")
        # Refused, never stripped or folded past case: an address that matching would turn
        # into another's ("ß" into "ss") would bind the account to that other person.
        return check_email(value)

    @model_validator(mode="after")
    def _rebind_or_unbind(self) -> IdentityRecord:
        if not self.active and self.previous_email is not None:
            raise ValueError(
                "'active': false (unbind) and 'previous_email' (rebind) cannot be combined; "
                "send an unbind of the current owner, or a rebind, not both in one record"
            )
        return self


class GroupRecord(_Record):
    type: Literal["group"]
    source_system: Id
    group_id: Id
    members: list[Id] = Field(max_length=100_000)

    _ids = field_validator("group_id")(check_id)
    _source = field_validator("source_system")(_check_source)

    @field_validator("members")
    @classmethod
    def _members(cls, value: list[str]) -> list[str]:
        return [check_id(v) for v in value]


class DocumentRecord(_Record):
    type: Literal["document"]
    source_system: Id
    external_id: Id
    corpus: CorpusId
    title: Annotated[str, StringConstraints(max_length=2000)] = ""
    text: str
    author: Id | None = None
    acl: list[Id] = Field(max_length=10_000)
    classification: Classification
    updated_at: datetime | None = None
    #: When this version takes effect (a policy adopted now, in force from next month);
    #: without it, the version is in effect from ``updated_at``.
    effective_at: datetime | None = None
    #: External ids of documents of the same source system that this version replaces: the
    #: ``temporal`` strategy prefers it over them, for callers who may read it.
    supersedes: list[Id] = Field(default_factory=list, max_length=100)
    authority_tier: int = Field(default=3, ge=1, le=5)
    metadata: dict[str, Any] = Field(default_factory=dict)

    _ids = field_validator("external_id", "author")(lambda v: v if v is None else check_id(v))
    _source = field_validator("source_system")(_check_source)

    @field_validator("classification", mode="before")
    @classmethod
    def _classification(cls, value: object) -> Classification:
        return Classification.parse(value)

    @field_validator("title", "text")
    @classmethod
    def _no_nul(cls, value: str) -> str:
        # NUL carries no meaning in text and PostgreSQL cannot store it: drop it on every
        # backend so both hold (and hash) the same text.
        value = value.replace("\x00", "")
        _check_text(value)
        return value

    @field_validator("updated_at", "effective_at")
    @classmethod
    def _aware(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        if value is not None and value.utcoffset() is None:
            raise ValueError(
                f"{value.isoformat()!r} has no time zone; add 'Z' (UTC) or an offset such as "
                "'+02:00'"
            )
        return check_instant(value, str(info.field_name))

    @field_validator("acl")
    @classmethod
    def _acl(cls, value: list[str]) -> list[str]:
        return sorted({check_id(v) for v in value})

    @field_validator("supersedes")
    @classmethod
    def _supersedes(cls, value: list[str]) -> list[str]:
        return sorted({check_id(v) for v in value})

    def model_post_init(self, __context: object) -> None:
        if self.external_id in self.supersedes:
            raise ValueError(
                f"document {self.external_id!r} names itself in 'supersedes'; list the ids "
                "of the versions it replaces"
            )

    _metadata = field_validator("metadata")(check_document_metadata)


class DeleteRecord(_Record):
    type: Literal["delete"]
    source_system: Id
    external_id: Id

    _ids = field_validator("external_id")(check_id)
    _source = field_validator("source_system")(_check_source)


Record = IdentityRecord | GroupRecord | DocumentRecord | DeleteRecord
RECORD_TYPES: dict[str, type[_Record]] = {
    "identity": IdentityRecord,
    "group": GroupRecord,
    "document": DocumentRecord,
    "delete": DeleteRecord,
}
