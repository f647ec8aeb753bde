"""The JSONL ingest format (DESIGN.md 2.2): one validated model per record type.

Every model forbids unknown fields, so a typo (``"acls"``) is an error, not a silently
public document.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    field_validator,
    model_validator,
)

from govrag.types import Classification

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check_id(value: str) -> str:
    if _CONTROL.search(value):
        raise ValueError(f"{value!r} contains a control character; ids must be printable")
    if value != value.strip():
        raise ValueError(f"{value!r} has leading or trailing whitespace; remove it")
    return value


Id = Annotated[str, StringConstraints(min_length=1, max_length=256)]
CorpusId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$")]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Email = Annotated[str, StringConstraints(min_length=3, max_length=320)]


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

    _ids = field_validator("source_system", "account_id")(_check_id)

    @field_validator("email", "previous_email")
    @classmethod
    def _email(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if "@" not in value or _CONTROL.search(value):
            raise ValueError(f"{value!r} is not an email address")
        return value.casefold()

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

    _ids = field_validator("source_system", "group_id")(_check_id)

    @field_validator("members")
    @classmethod
    def _members(cls, value: list[str]) -> list[str]:
        return [_check_id(v) for v in value]


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
    authority_tier: int = Field(default=3, ge=1, le=5)
    metadata: dict[str, Any] = Field(default_factory=dict)

    _ids = field_validator("source_system", "external_id", "author")(
        lambda v: v if v is None else _check_id(v)
    )

    @field_validator("classification", mode="before")
    @classmethod
    def _classification(cls, value: object) -> Classification:
        return Classification.parse(value)

    @field_validator("title", "text")
    @classmethod
    def _no_nul(cls, value: str) -> str:
        # NUL carries no meaning in text and PostgreSQL cannot store it: drop it on every
        # backend so both hold (and hash) the same text.
        return value.replace("\x00", "")

    @field_validator("acl")
    @classmethod
    def _acl(cls, value: list[str]) -> list[str]:
        return sorted({_check_id(v) for v in value})

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}", key):
                raise ValueError(
                    f"metadata key {key!r} is not allowed; use letters, digits, '_', '.', '-' "
                    "(at most 64 characters)"
                )
        if "\\u0000" in json.dumps(value):
            raise ValueError("metadata contains a NUL character (\\u0000); remove it")
        return value


class DeleteRecord(_Record):
    type: Literal["delete"]
    source_system: Id
    external_id: Id

    _ids = field_validator("source_system", "external_id")(_check_id)


Record = IdentityRecord | GroupRecord | DocumentRecord | DeleteRecord
RECORD_TYPES: dict[str, type[_Record]] = {
    "identity": IdentityRecord,
    "group": GroupRecord,
    "document": DocumentRecord,
    "delete": DeleteRecord,
}
