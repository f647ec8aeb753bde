"""Every kind of audit event, the union readers parse rows into, and the one writer.

:func:`parse_event` is strict: a row whose kind has no model, whose version is one this code
does not know, or whose payload does not match its model exactly is refused with
:class:`~govrag.errors.AuditEventError` naming the kind and what is wrong; it never guesses.
A reader that must go on (replay) shows such a row as it is and says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Protocol, TypeVar

from pydantic import Discriminator, Tag, TypeAdapter, ValidationError

from govrag.audit.events.base import EVENT_KIND, UNVERSIONED, AuditEventBase, AuditSink
from govrag.audit.events.checks import IncidentEvent, ValidationEvent
from govrag.audit.events.model import LlmCallEvent, LlmResultEvent, ProposalEvent
from govrag.audit.events.policy import ContextPackEvent, HiddenMarkerEvent, PepDecisionEvent
from govrag.audit.events.session import (
    ErrorEvent,
    EscalationEvent,
    PinViolationEvent,
    ResponseEvent,
    RoutePinned,
)
from govrag.audit.events.writeback import WritebackAdmissionEvent
from govrag.errors import AuditEventError, describe_validation
from govrag.store.audit import AuditEvent

E = TypeVar("E", bound=AuditEventBase)


class StoredEvent(Protocol):
    """A stored row as readers get it (``govrag.store.audit.AuditEvent`` is one)."""

    @property
    def kind(self) -> str: ...
    @property
    def payload(self) -> dict[str, Any]: ...


def _tag(value: Any) -> Any:
    return value.get(EVENT_KIND) if isinstance(value, dict) else getattr(value, "kind", None)


#: Any event this code base writes, discriminated by ``kind``.
AuditEventModel = Annotated[
    Annotated[RoutePinned, Tag("route_pinned")]
    | Annotated[PinViolationEvent, Tag("pin_violation")]
    | Annotated[PepDecisionEvent, Tag("pep_decision")]
    | Annotated[ContextPackEvent, Tag("context_pack")]
    | Annotated[HiddenMarkerEvent, Tag("hidden_marker")]
    | Annotated[ValidationEvent, Tag("validation")]
    | Annotated[IncidentEvent, Tag("incident")]
    | Annotated[LlmCallEvent, Tag("llm_call")]
    | Annotated[LlmResultEvent, Tag("llm_result")]
    | Annotated[ProposalEvent, Tag("proposal")]
    | Annotated[ResponseEvent, Tag("response")]
    | Annotated[EscalationEvent, Tag("escalation")]
    | Annotated[ErrorEvent, Tag("error")]
    | Annotated[WritebackAdmissionEvent, Tag("writeback_admission")],
    Discriminator(_tag),
]

_ADAPTER: TypeAdapter[AuditEventModel] = TypeAdapter(AuditEventModel)

#: The kinds with a model, and the payload versions each is known in.
KNOWN_VERSIONS: dict[str, frozenset[int]] = {
    kind: frozenset({UNVERSIONED})
    for kind in ("route_pinned", "pin_violation", "pep_decision", "context_pack",
                 "hidden_marker", "validation", "incident", "llm_call", "llm_result",
                 "proposal", "response", "escalation", "error", "writeback_admission")
}  # fmt: skip


def payload_version(payload: Mapping[str, Any]) -> object:
    """The schema version a stored payload declares (none declared: version 1)."""
    return payload.get("v", UNVERSIONED)


def parse_event(kind: str, payload: Mapping[str, Any]) -> AuditEventModel:
    """The typed event of a stored ``(kind, payload)`` row; raises :class:`AuditEventError`
    for an unknown kind or version or a payload that does not match (see the module)."""
    versions = KNOWN_VERSIONS.get(kind)
    if versions is None:
        raise AuditEventError(
            f"audit event kind {kind!r} has no model in this govrag (known: "
            f"{', '.join(sorted(KNOWN_VERSIONS))}); it was written by another version: read "
            "it with that version, or as raw JSON (`govrag replay --json` shows it as is)"
        )
    version = payload_version(payload)
    # ``type(...) is int``: ``True`` and ``1.0`` equal 1 but were never written as a version.
    if type(version) is not int or version not in versions:
        raise AuditEventError(
            f"audit event kind {kind!r} version {version!r} is not known to this govrag "
            f"(it knows {sorted(versions)}); upgrade govrag to read it"
        )
    try:
        return _ADAPTER.validate_python({**payload, EVENT_KIND: kind})
    except ValidationError as exc:
        raise AuditEventError(
            f"audit event kind {kind!r} does not match its model: {describe_validation(exc)}; "
            "the row was not written by govrag's own writers (check the log's integrity with "
            "`govrag audit verify`)"
        ) from exc


def write(
    sink: AuditSink, tenant: str, event: AuditEventModel, *, request_id: str, session_id: str
) -> AuditEvent:
    """Commit ``event`` to ``sink`` and return what it returns (the stored row); the store
    raises when it could not, and nothing is written then."""
    return sink.append_audit(
        tenant, event.kind, event.payload(), request_id=request_id, session_id=session_id
    )


def kind_of(model: type[AuditEventBase]) -> str:
    """The ``kind`` column value of ``model``'s events."""
    return str(model.model_fields["kind"].default)


def events_of(model: type[E], rows: Iterable[StoredEvent]) -> list[E]:
    """The rows of ``model``'s kind, parsed strictly (:func:`parse_event`), in order."""
    kind = kind_of(model)
    out: list[E] = []
    for row in rows:
        if row.kind == kind:
            event = parse_event(kind, row.payload)
            if isinstance(event, model):  # always: the union's member for this kind
                out.append(event)
    return out
