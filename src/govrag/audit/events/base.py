"""What every typed audit event is, and the one place an event becomes a stored payload.

The store keeps a generic hash-chained log of ``(kind, payload)`` rows; what a kind's payload
holds is decided here, once, for its writer and for its readers. An event is a frozen
pydantic model that rejects unknown fields, with two fields that are not part of its
payload's content:

- ``kind``, the discriminator: a literal per model, stored in the row's ``kind`` column, not
  in the payload (a payload may have a ``kind`` field of its own, e.g. a decision's proposal
  kind, read and written under that name).
- ``v``, the schema version. Version 1 is the payload every writer wrote before events were
  typed (commit 8fd14a5), which carried no version; so version 1 is *not written* and a
  payload without ``v`` is version 1. A later, incompatible payload of a kind gets a model with
  ``v: Literal[2]`` and is stored with ``"v": 2``, so a reader tells the two apart, and a
  reader that does not know a version says so instead of guessing.

A field with a default is written only when its writer set it (a refused proposal has no
``corpus``, a failed model call no ``reply_hash``), so the payload of an event parsed from a row
is written back exactly as it was read, and each writer's payload keeps the keys it always
had. Not writing ``v`` for version 1 keeps every payload written from now on byte-for-byte what the
same event was before (the hash chain does not care, but examiners' tools comparing payloads
and the write-back sink's fixed keys do).

:func:`govrag.audit.events.write` is how a writer records an event: the model's
:meth:`AuditEventBase.payload` is what the store hashes and stores, so there is no hand-made
payload dict anywhere.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    JsonValue,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from govrag.store.protocol import AuditWriter

#: The version a payload without ``v`` has: the schema of the untyped writers.
UNVERSIONED = 1
#: The key the discriminator is read from when a row is parsed (never a payload key).
EVENT_KIND = "@kind"

#: A value recorded through :func:`govrag.audit.trail.recorded`: the value itself (when its
#: JSON is short, valid text) or a summary ``{"sha256", "chars", "prefix"}``.
Recorded = JsonValue


class Record(BaseModel):
    """Base of events and of the records inside them: immutable, unknown fields rejected, and
    a defaulted field left unset by its writer is not written (see the module docstring)."""

    # ``constants``: a non-finite float is written as the json module writes it (``NaN``,
    # ``Infinity``), as before the models; ``null`` would not read back as a float.
    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="constants")

    @model_serializer(mode="wrap")
    def _as_written(self, handler: SerializerFunctionWrapHandler) -> Any:
        out = handler(self)
        if isinstance(out, dict):
            for name, info in type(self).model_fields.items():
                # (An excluded field, the discriminator, is not in ``out``: its name may be
                # the stored name of another field, e.g. a decision's ``kind``.)
                if name not in self.model_fields_set and not info.exclude:
                    out.pop(info.serialization_alias or name, None)
        return out


class AuditEventBase(Record):
    """Base of every event model; each adds its ``kind`` literal (the discriminator)."""

    #: The payload's schema version (see the module docstring); a later one narrows it anew.
    v: Literal[1] = 1

    def payload(self) -> dict[str, Any]:
        """The payload the store hashes and keeps: JSON-safe values under their stored names,
        without ``kind`` (a column of its own) and without ``v`` for version 1."""
        out: dict[str, Any] = self.model_dump(mode="json", by_alias=True)
        out.pop("v", None)
        if self.v != UNVERSIONED:
            out["v"] = self.v
        return out


#: Where a writer records events: the store's audit log (a test's stand-in has the same
#: ``append_audit``). The one protocol is the store's; this name is the writers' view of it.
AuditSink: TypeAlias = AuditWriter
