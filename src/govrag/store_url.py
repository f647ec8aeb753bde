"""The grammar of ``[store] url``: the few URLs that name a store, and nothing else.

Accepted forms (:data:`ACCEPTED`)::

    sqlite:///relative/path.db     relative to the deployment directory
    sqlite:////absolute/path.db
    sqlite://:memory:              a throw-away in-memory store
    postgresql://user@host:5432/db (or postgres://; the 'postgres' extra)

Anything else is refused while the settings are validated, so ``govrag config check``
reports it and no command gets as far as opening (and creating) anything: a typo such as
``sqlite:/x.db``, ``sqlite://x.db`` or ``sqllite:///x.db`` must not leave a stray database
or directories behind. Refusals name the URL with any password masked.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Literal

ACCEPTED = (
    "sqlite:///relative/path.db (relative to the deployment directory), "
    "sqlite:////absolute/path.db, sqlite://:memory:, or "
    "postgresql://user@host:5432/dbname (with the 'postgres' extra)"
)
_POSTGRES = ("postgresql://", "postgres://")
_SCHEMES = ("sqlite", "postgresql", "postgres")
_MEMORY = ("sqlite://:memory:", "sqlite:///:memory:")


@dataclass(frozen=True)
class StoreUrl:
    kind: Literal["sqlite", "memory", "postgresql"]
    #: ``sqlite``: the file as written, relative to the deployment directory unless absolute.
    path: str = ""


def redact(url: str) -> str:
    """``url`` with any password masked (``user:***@``, ``password=***``), for messages."""
    url = re.sub(r"(?<=[:/])([^:/@]*):[^/@]*@", r"\1:***@", url, count=1)
    return re.sub(r"(password\s*=\s*)\S+", r"\1***", url, flags=re.IGNORECASE)


def parse_store_url(url: str) -> StoreUrl:
    """The store ``url`` names; :class:`ValueError` (the URL, what is wrong, the accepted
    forms) for anything outside the grammar."""
    problem = _problem(url)
    if problem is not None:
        raise ValueError(f"{redact(url)!r} {problem}; accepted forms: {ACCEPTED}")
    if url.startswith(_POSTGRES):
        return StoreUrl("postgresql")
    if url in _MEMORY:
        return StoreUrl("memory")
    return StoreUrl("sqlite", url.removeprefix("sqlite:///"))


def _problem(url: str) -> str | None:
    if url.startswith(_POSTGRES) or url in _MEMORY:
        return None
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        if not path or path == "/":
            return "names no file"
        if path.endswith("/"):
            return "names a directory, not a database file"
        if "?" in path or "#" in path:
            return "has a query or fragment; SQLite URLs here take a path only"
        if any(ord(ch) < 32 for ch in path):
            return "holds a control character"
        return None
    if url.startswith("sqlite://"):
        host = url.removeprefix("sqlite://").split("/", 1)[0]
        return f"has a host part ({host!r}); a relative path needs three slashes"
    if url.startswith("sqlite:"):
        return "needs 'sqlite:///' (three slashes) before a relative path"
    scheme, sep, _ = url.partition(":")
    if not sep or not scheme:
        return "is not a URL"
    if scheme.lower() in _SCHEMES:
        if scheme != scheme.lower():
            return f"writes the scheme as {scheme!r}; write it in lower case"
        return f"needs '//' after '{scheme}:'"
    near = difflib.get_close_matches(scheme.lower(), _SCHEMES, n=1, cutoff=0.6)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return f"has an unsupported scheme {scheme!r}{hint}"
