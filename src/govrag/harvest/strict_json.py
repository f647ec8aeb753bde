"""Untrusted JSON (ingest lines and sidecar files) read strictly, with one-line errors.

Python's ``json`` module is lenient where an ingest feed must not be: a repeated key keeps
the *last* value (``"acl": ["S-1"], "acl": ["*"]`` would silently publish a document), the
non-standard literals ``NaN`` and ``Infinity`` are accepted, an integer literal of thousands
of digits costs quadratic time (and then raises a bare ``ValueError``), and deep nesting
raises ``RecursionError``. :func:`load_json` turns each of these into an
:class:`~govrag.errors.InputError` that says what is wrong and how to fix it, so a caller
reports the line (or file) and goes on with the next one. Values are checked by the record
models (:mod:`govrag.harvest.records`); this module only guards the syntax.
"""

from __future__ import annotations

import json
from typing import Any

from govrag.errors import InputError

#: Longest integer literal read (a 64-bit integer has at most 20 digits with its sign).
MAX_INT_DIGITS = 20


class _Refused(ValueError):
    """Raised inside the decoder's hooks; :func:`load_json` turns it into an InputError."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(
                f"key {key!r} appears twice in one JSON object (JSON readers disagree on which "
                "value wins); keep one"
            )
        out[key] = value
    return out


def _constant(name: str) -> Any:
    raise _Refused(
        f"{name} is not a JSON number; send a finite number, or null, or the value as a string"
    )


def _integer(literal: str) -> int:
    digits = len(literal.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _Refused(
            f"an integer of {digits} digits is too large (numbers must fit in 64 bits); send "
            "it as a string"
        )
    return int(literal)


def load_json(data: bytes | str) -> Any:
    """Decode UTF-8 (a leading byte-order mark is dropped) and parse strict JSON.

    Raises:
        InputError: invalid UTF-8 (the byte offset), invalid JSON (the column), a repeated
            key, ``NaN``/``Infinity``, an integer beyond 64 bits, or nesting too deep.
    """
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(
                f"not valid UTF-8 (byte {exc.start}); re-encode the file as UTF-8"
            ) from exc
    else:
        text = data
    text = text.removeprefix("\ufeff")
    try:
        return json.loads(
            text, object_pairs_hook=_pairs, parse_constant=_constant, parse_int=_integer
        )
    except _Refused as exc:
        path = _locate(text)
        raise InputError(f"field {path!r}: {exc}" if path else str(exc)) from exc
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}" if exc.lineno > 1 else f"column {exc.colno}"
        raise InputError(f"invalid JSON: {exc.msg} at {where}") from exc
    except RecursionError as exc:
        raise InputError(
            "JSON nested too deeply to read; flatten it (metadata may nest a few levels only)"
        ) from exc


class _Flagged:
    """A value the strict parse refused, kept by the lenient re-parse of :func:`_locate`."""


class _FlaggedDict(dict[str, Any], _Flagged):
    """An object with a repeated key."""


def _locate(text: str) -> str | None:
    """The path (``metadata.n``, ``acl[2]``) of the first value the strict parse refused,
    found by a lenient re-parse that keeps such values flagged (only after a refusal)."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in items]
        return (_FlaggedDict if len(set(keys)) < len(keys) else dict)(items)

    def number(literal: str) -> object:
        return _Flagged() if len(literal.lstrip("-")) > MAX_INT_DIGITS else int(literal)

    try:
        tree = json.loads(
            text, object_pairs_hook=pairs, parse_constant=lambda _: _Flagged(), parse_int=number
        )
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[str, Any]] = [("", tree)]
    while stack:  # depth first, in document order
        path, value = stack.pop()
        if isinstance(value, _Flagged):
            return path or None
        if isinstance(value, dict):
            children = [(f"{path}.{k}" if path else k, v) for k, v in value.items()]
        elif isinstance(value, list):
            children = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
        else:
            continue
        stack.extend(reversed(children))
    return None
