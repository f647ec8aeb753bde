"""One exception hierarchy for govrag.

The library raises these; the edges (CLI, HTTP, MCP) translate them into exit codes, status
codes and tool errors. Every message quotes the bad value and says how to fix it. Driver and
parser errors are wrapped with ``raise ... from exc`` so the cause stays inspectable.
"""

from __future__ import annotations

from collections.abc import Iterable
from os import PathLike
from typing import Literal


class GovragError(Exception):
    """Base class of every error govrag raises on purpose."""

    #: Process exit code the CLI uses for this class of error.
    exit_code: int = 1


class ConfigError(GovragError):
    """A deployment file or setting is invalid (names the file, the field and a fix)."""

    exit_code = 2


class ConfigFileError(ConfigError):
    """A deployment file cannot be read as what it should be: not UTF-8, not valid JSON or
    TOML, nested too deep. The message starts with the file; ``detail`` is the rest."""

    def __init__(self, detail: str, *, path: str | PathLike[str]) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = str(path)
        self.detail = detail


class InputError(GovragError):
    """A caller-supplied value is invalid (a filter, a query, a CLI option, an API body)."""

    exit_code = 2


class IngestError(InputError):
    """A record of an ingest file is malformed. Carries the file and line number."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(f"{where}{message}")
        self.path = path
        self.line = line
        self.detail = message


class IdentityConflict(InputError):
    """A harvested identity would bind an account that another email owns (or rebind one
    from an email that does not own it). Nothing was changed; the message names the source
    system, the account and how to fix the record."""

    @classmethod
    def refused(
        cls,
        email: str,
        source_system: str,
        account_id: str,
        owner: str | None,
        previous: str | None,
    ) -> IdentityConflict:
        """The refusal of binding ``email`` (from ``previous``, on a rebind) to an account
        ``owner`` holds, with how to fix the record."""
        account = f"account {account_id!r} of source system {source_system!r}"
        if previous is None:
            held = repr(owner) if owner else "another email"
            return cls(
                f"{account} is already bound to {held}; an account has one owner, so {email!r} "
                "was not bound (nothing changed). If the owner's email changed, send this "
                f'record with "previous_email": {owner or "the current email"!r}; if the '
                "account now belongs to someone else, unbind it first (an identity record of "
                'the current owner with "active": false)'
            )
        if owner is None:
            return cls(
                f"{account} is not bound to anyone, so it cannot be rebound from previous_email "
                f"{previous!r} to {email!r} (nothing changed); send the record without "
                "previous_email to bind it"
            )
        return cls(
            f"{account} is already bound to {owner!r}, not to previous_email {previous!r}, so "
            f'it was not rebound to {email!r} (nothing changed); send "previous_email": '
            f'{owner!r} if that is the email that changed, or unbind it first ("active": false)'
        )


class SourceConflict(InputError):
    """A configured source (``[sources.<name>]``) would change or delete a group, document or
    identity binding that another configured source sharing its ``source_system`` wrote.
    Nothing was changed; the message names the row, both sources and the fix."""

    @classmethod
    def refused(
        cls, kind: str, name: str, source_system: str, owner: str, writer: str, *, delete: bool
    ) -> SourceConflict:
        """The refusal of ``writer``'s write (or delete) of ``owner``'s ``kind`` ``name``."""
        what = "delete" if delete else "change"
        return cls(
            f"{kind} {name!r} of source system {source_system!r} was written by source "
            f"{owner!r}, so source {writer!r} may not {what} it (nothing changed): sources "
            "sharing a source_system each manage only their own groups, documents and identity "
            f"bindings; give this {kind} another id in source {writer!r}, or give the sources "
            "distinct source_system values in govrag.toml"
        )

    @classmethod
    def binding(
        cls,
        account_id: str,
        source_system: str,
        email: str,
        owner: str,
        writer: str,
        *,
        unbind: bool,
    ) -> SourceConflict:
        """The refusal of ``writer``'s rebind (or unbind) of the binding of ``email`` to
        ``account_id`` that source ``owner`` made."""
        what = "unbind" if unbind else "rebind"
        return cls(
            f"account {account_id!r} of source system {source_system!r} was bound to {email!r} "
            f"by source {owner!r}, so source {writer!r} may not {what} it (nothing changed): "
            "sources sharing a source_system each manage only their own groups, documents and "
            f"identity bindings; send this record from source {owner!r} (or ingest it by path, "
            "the operator's feed), or give the sources distinct source_system values in "
            "govrag.toml"
        )


class NotFoundError(InputError):
    """A named thing (principal, corpus, tenant, deployment) does not exist."""


class UnknownRouteError(NotFoundError):
    """No route of the deployment is the one asked for. The message names only what the
    caller sent: the route table is the operator's, and a token holder over HTTP or MCP may
    not enumerate it. ``known_routes`` holds it for an operator, whom the CLI shows it
    (:meth:`for_operator`), because they run it on the deployment's own files."""

    def __init__(self, message: str, *, known_routes: Iterable[str]) -> None:
        super().__init__(message)
        self.known_routes = tuple(sorted(known_routes))

    def for_operator(self) -> str:
        """The message with the deployment's routes: for the CLI only, never a caller."""
        known = ", ".join(repr(r) for r in self.known_routes) or "none"
        return f"{self}; known routes: {known}"


#: Why a bearer token was refused: for logs and tests only. The caller is told
#: :data:`TOKEN_REFUSED` whatever the reason, so a refusal teaches an attacker nothing.
TokenFault = Literal[
    "missing", "malformed", "alg_not_allowed", "unknown_key", "bad_signature", "expired",
    "not_yet_valid", "wrong_audience", "wrong_issuer", "bad_claims", "tenant_not_served",
    "no_keys", "too_long_lived",
]  # fmt: skip
TOKEN_REFUSED = "invalid or missing bearer token"


class AuthError(GovragError):
    """A bearer token was refused. ``str()`` is always :data:`TOKEN_REFUSED`; ``fault`` and
    ``detail`` say why, for the server's log (never for the caller)."""

    exit_code = 6

    def __init__(self, fault: TokenFault, detail: str = "") -> None:
        super().__init__(TOKEN_REFUSED)
        self.fault: TokenFault = fault
        self.detail = detail


class MissingExtraError(GovragError):
    """An optional dependency is not installed; the message names the extra to install."""

    exit_code = 3

    def __init__(self, module: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the optional dependency {module!r}, which is not installed. "
            f"Install it with: pip install 'govrag[{extra}]'"
        )
        self.module = module
        self.extra = extra


class StoreError(GovragError):
    """The knowledge store failed (database or index). Wraps the driver error."""

    exit_code = 4


#: Why a model call failed. The first group are faults of configuration (the URL, the key, the
#: model name, the request govrag built, the context size): retrying cannot help, so ``ask``
#: exits with :attr:`LlmError.exit_code`. The rest are transient (:data:`TRANSIENT_LLM_FAULTS`).
LlmFault = Literal[
    "connection", "auth", "not_found", "rejected", "context_overflow", "protocol", "quota",
    "timeout", "overloaded", "rate_limited",
]  # fmt: skip
TRANSIENT_LLM_FAULTS: frozenset[str] = frozenset({"timeout", "overloaded", "rate_limited"})
#: ``govrag ask``'s exit code when the model failed for a transient reason (sysexits'
#: EX_TEMPFAIL: try again later); a configuration fault exits with ``LlmError.exit_code``.
LLM_TRANSIENT_EXIT = 75


class AuditEventError(GovragError):
    """A stored audit event cannot be read as a typed event: its kind has no model, its
    schema version is unknown to this govrag, or its payload does not match its model."""


class LlmError(GovragError):
    """The LLM endpoint failed or answered outside the chat-completions protocol.

    ``fault`` classifies the cause (:data:`LlmFault`): the message is for the operator (it
    names the URL and the setting to fix); an end user is told only the class."""

    exit_code = 5

    def __init__(self, message: str, *, fault: LlmFault = "protocol") -> None:
        super().__init__(message)
        self.fault: LlmFault = fault

    @property
    def transient(self) -> bool:
        """A retry later may succeed (timeout, overload, rate limit)."""
        return self.fault in TRANSIENT_LLM_FAULTS


class IndexStaleError(StoreError):
    """A derived index could not be brought up to date with the truth store in time.

    Searching a stale index could serve a revoked chunk, so the search is refused instead.
    """


def validation_problems(exc: Exception) -> list[tuple[str, str]]:
    """``(field, what is wrong and how to fix it)`` per problem of a pydantic
    ``ValidationError`` (field ``""`` when the problem is the whole value)."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return [("", str(exc))]
    out = []
    for err in errors():
        loc = ".".join(str(p) for p in err.get("loc", ()))
        kind = err.get("type", "")
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        if kind == "extra_forbidden":
            msg = "unknown field; remove it or check its spelling"
        elif kind == "missing":
            msg = "is required"
        elif kind == "string_unicode":
            msg = "holds an unpaired surrogate (a lone \\ud800-\\udfff escape); fix the text"
        elif kind == "literal_error":
            msg = f"{err.get('input')!r} is not allowed; {msg[0].lower()}{msg[1:]}"
        out.append((loc, msg))
    return out or [("", str(exc))]


def describe_validation(exc: Exception) -> str:
    """One line per problem of a pydantic ``ValidationError``: the field, what is wrong, a fix.

    Other exceptions are returned as their message.
    """
    parts = []
    for loc, msg in validation_problems(exc):
        if msg.startswith("unknown field"):
            parts.append(f"unknown field {loc!r}; remove it or check its spelling")
        elif msg == "is required":
            parts.append(f"field {loc!r} is required")
        elif loc:
            parts.append(f"field {loc!r}: {msg}")
        else:
            parts.append(msg)
    return "; ".join(parts) or str(exc)


def require_text(**named: str | None) -> None:
    """Refuse a name or id that is not text before it reaches a store or a log: a lone
    surrogate (no UTF-8 exists for it) or a NUL. Names the argument and the fix."""
    for name, value in named.items():
        if value is None:
            continue
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            shown = value.encode("utf-8", "backslashreplace").decode()[:80]
            raise InputError(f"{name} {shown!r} is not valid text (a lone surrogate); pass "
                             "UTF-8 text") from None  # fmt: skip
        if "\x00" in value:
            raise InputError(f"{name} contains a NUL character; remove it")
