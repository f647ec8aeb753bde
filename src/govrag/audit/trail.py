"""What a request writes about itself besides its decisions: bounded values and how it ended.

Two rules every writer of a request's audit trail follows, kept here so there is one of each:

- **Recorded values are bounded.** A query, a question or a model's tool arguments are caller-
  or model-supplied and can be any size or any text, lone surrogates included. :func:`recorded`
  returns the value itself when its canonical JSON is valid UTF-8 text of at most
  :data:`RECORD_CHARS` characters, nested at most :data:`RECORD_DEPTH` deep; otherwise a
  summary: its SHA-256 (over the UTF-8 bytes, lone surrogates passed through), its length and
  an escaped prefix. An examiner can still match a summary against a value they hold; the log
  never grows with the input, and an event is always writable.
- **A trail that was opened is closed.** :func:`closing_trail` wraps a request after its
  session is open: whatever fails inside (the gateway, validation, the model adapter,
  delivery) is recorded as an ``error`` event (the error's class, and for govrag's own errors
  their bounded message) before it propagates, so replay shows how the request ended. An
  unexpected exception (not a :class:`~govrag.errors.GovragError`) reaches the caller as a
  ``GovragError`` naming only the request: its own message may quote internals (a corpus, a
  tenant, a document id) the caller has no right to see.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from govrag.audit.events import AuditSink, ErrorEvent, write
from govrag.errors import GovragError

log = logging.getLogger("govrag.audit")

#: Most characters of a value's canonical JSON recorded as is; longer values are summarised.
RECORD_CHARS = 1024
#: Characters of a summarised value's prefix.
PREFIX_CHARS = 128
#: Deepest nesting of lists and objects recorded as is. Depth costs few characters (``[[[...]]]``
#: 500 deep is 1,000), and the event models refuse values nested past their validator's
#: recursion limit: such a value is summarised, or the event could not be written at all.
RECORD_DEPTH = 32


def safe_text(text: str) -> str:
    """``text`` with every lone surrogate written as its ``\\udxxx`` escape: always encodable."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def recorded(value: Any, *, limit: int = RECORD_CHARS) -> Any:
    """``value`` as an audit event may hold it (see the module docstring)."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                              allow_nan=False)  # fmt: skip
        except (TypeError, ValueError, RecursionError):
            text = f"<{type(value).__name__} that is not JSON>"
            return {"sha256": None, "chars": None, "prefix": text}
    if len(text) <= limit and safe_text(text) is text and not _deeper(value, RECORD_DEPTH):
        return value
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return {"sha256": digest, "chars": len(text), "prefix": safe_text(text[:PREFIX_CHARS])}


def _deeper(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists or objects more than ``limit`` deep (without recursing:
    the value is the caller's)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth >= limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def error_event(exc: BaseException, stage: str) -> ErrorEvent:
    """The ``error`` event of a request that failed: the error's class, and the (bounded)
    message only for govrag's own errors, whose messages are written for callers."""
    message = str(exc) if isinstance(exc, GovragError) else "unexpected error (see the log)"
    return ErrorEvent(stage=stage, error_type=type(exc).__name__, message=recorded(message))


@contextmanager
def closing_trail(
    audit: AuditSink, tenant: str, *, request_id: str, session_id: str, stage: str = "request"
) -> Iterator[dict[str, str]]:
    """Record an ``error`` event if the body raises (see the module docstring). The body may
    set ``["stage"]`` of the yielded dict so the event says where the request was."""
    where = {"stage": stage}
    try:
        yield where
    except Exception as exc:
        try:
            write(audit, tenant, error_event(exc, where["stage"]), request_id=request_id,
                  session_id=session_id)  # fmt: skip
        except Exception as second:  # the log itself failing: the original error still wins
            log.error("request %s: could not record its error event: %s", request_id, second)
        if isinstance(exc, GovragError):
            raise
        log.exception("request %s failed unexpectedly", request_id)
        raise GovragError(
            f"request {request_id} failed unexpectedly ({type(exc).__name__}); it is recorded "
            "in the audit log (govrag replay shows it) and the details are in the server log"
        ) from exc
