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

The settings hold a store URL as a :class:`SecretUrl`: its ``str()`` and ``repr()`` (and so
``repr(settings)``, log lines and messages) mask the password; only the code that connects
asks for the URL itself (``get_secret_value()``).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote

from pydantic import GetCoreSchemaHandler, SecretStr
from pydantic_core import CoreSchema, core_schema

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


#: ``user:password@`` (after the scheme, or at the start when the scheme was left out): the
#: password runs to the *last* ``@``, so one holding an unescaped ``@``, ``/`` or ``?`` is
#: masked whole (masking too much is harmless, too little is a leak).
_USERINFO = re.compile(r"(?<=[:/])(?P<a>[^:/@]*):.*@|^(?P<b>[^:/@]*):(?!/).*@", re.DOTALL)
#: ``password=...`` of a keyword/value string or a query, quoted or not.
_PASSWORD_KEY = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S+)", re.IGNORECASE)


def redact(url: str) -> str:
    """``url`` with any password masked (``user:***@``, ``password=***``), for messages."""
    url = _USERINFO.sub(lambda m: f"{m['a'] if m['a'] is not None else m['b']}:***@", url, 1)
    return _PASSWORD_KEY.sub(r"\1***", url)


def redact_endpoint(url: str) -> str:
    """An HTTP endpoint's ``url`` (an LLM server, a rights service) as messages and logs show
    it: any password masked and the query and fragment dropped, since a query may carry a key
    (``?api-key=...``). Masked first: a password may itself hold a ``?``."""
    return re.split(r"[?#]", redact(url), maxsplit=1)[0]


class SecretUrl(SecretStr):
    """A database URL that may hold a password: shown (``str``, ``repr``, JSON dumps) with
    the password masked by :func:`redact`, so a SQLite path stays readable while a
    PostgreSQL password never leaves the object except through ``get_secret_value()``.

    As a pydantic field it accepts text in the store URL grammar (:func:`parse_store_url`;
    a refusal quotes the URL masked) or a ``SecretStr`` holding such text.
    """

    # pydantic's documented way to choose how a secret is shown is overriding _display.
    def _display(self) -> str:
        return redact(self.get_secret_value())

    def __eq__(self, other: object) -> bool:
        # Equal to the same URL given as text too: a file's value compares with a default.
        if isinstance(other, SecretUrl):
            other = other.get_secret_value()
        return isinstance(other, str) and other == self.get_secret_value()

    def __hash__(self) -> int:
        return hash(self.get_secret_value())

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[Any], handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls._validate,
            serialization=core_schema.plain_serializer_function_ser_schema(
                cls._serialize, info_arg=True
            ),
            json_schema_input_schema=core_schema.str_schema(),
        )

    @classmethod
    def _validate(cls, value: object) -> SecretUrl:
        # An instance is checked too: the settings' sources wrap text before validation.
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if not isinstance(value, str):
            raise ValueError(f"a store URL is text, not {type(value).__name__}; accepted forms: "
                             f"{ACCEPTED}")  # fmt: skip
        parse_store_url(value)
        return cls(value)

    @staticmethod
    def _serialize(value: SecretUrl, info: core_schema.SerializationInfo) -> SecretUrl | str:
        return str(value) if info.mode == "json" else value


def scrub(text: str, url: str) -> str:
    """``text`` (a driver's message about ``url``) with every password ``url`` holds masked:
    libpq quotes what it cannot parse, a password or the whole URL included."""
    found = [m.group(0)[len(m["a"] if m["a"] is not None else m["b"]) + 1 : -1]
             for m in _USERINFO.finditer(url)]  # fmt: skip
    found += [m.group(2) for m in _PASSWORD_KEY.finditer(url)]
    text = text.replace(url, redact(url))
    for secret in sorted({f for s in found for f in (s, unquote(s)) if f}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def parse_store_url(url: str | SecretStr) -> StoreUrl:
    """The store ``url`` names; :class:`ValueError` (the URL, what is wrong, the accepted
    forms) for anything outside the grammar."""
    if isinstance(url, SecretStr):
        url = url.get_secret_value()
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
        host = redact(url).removeprefix("sqlite://").split("/", 1)[0]  # may hold user:pw@
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
