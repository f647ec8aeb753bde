"""JSON read strictly: the one reader for every JSON text govrag did not write itself.

Python's ``json`` module is lenient where untrusted input must not be: a repeated key keeps
the *last* value (``"acl": ["S-1"], "acl": ["*"]`` would silently publish a document), the
non-standard literals ``NaN`` and ``Infinity`` are accepted and ``1e999`` overflows to
infinity, an integer literal of thousands of digits costs quadratic time (and then raises a
bare ``ValueError``), ``"\\udc00"`` decodes to a lone surrogate that every later encode
fails on, and deep nesting raises ``RecursionError``. :func:`parse` refuses each of these
with a :class:`JsonProblem` that says what is wrong, where (the path of the value, or the
line and column of a syntax error) and how to fix it. Ingest lines and sidecars
(:func:`load_json`, an :class:`~govrag.errors.InputError` per line) and deployment files
(:mod:`govrag.deployfile`) read through it; what a value must mean is checked afterwards by
the models that consume it.
"""

from __future__ import annotations

import json
from typing import Any

from govrag.errors import InputError

#: Longest integer literal an ingest feed may send (a 64-bit integer has at most 20 digits).
INGEST_INT_DIGITS = 20


class JsonProblem(ValueError):
    """What is wrong with a JSON text, and the path of the value (``""`` when none applies)."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path

    def describe(self) -> str:
        """The message, after the field it is about: ``field 'metadata.x': ...``."""
        return f"field {self.path!r}: {self}" if self.path else str(self)


class _Refused(ValueError):
    """Raised inside the decoder's hooks; :func:`parse` adds the value's path."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(
                f"key {key!r} appears twice in one JSON object (the last one would silently "
                "win); keep one"
            )
        out[key] = value
    return out


def _constant(name: str) -> Any:
    raise _Refused(
        f"{name} is not a JSON number; send a finite number, or null, or the value as a string"
    )


def _float(literal: str) -> float:
    value = float(literal)
    if value in (float("inf"), float("-inf")):
        raise _Refused(f"the number {literal} is too large for a float; send a smaller one")
    return value


def position(text: str, offset: int) -> str:
    """``line L column C`` of ``offset`` in ``text`` (both from 1)."""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"line {line} column {column}"


def decode(data: bytes) -> str:
    """``data`` as UTF-8 text (a leading byte-order mark dropped); a :class:`JsonProblem`
    naming the first bad byte otherwise."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        where = f"offset {exc.start}"
        if b"\n" in data:  # a file of lines: say which one too
            good = data[: exc.start].decode("utf-8-sig", errors="replace")
            where += f", {position(good, len(good))}"
        raise JsonProblem(
            f"is not valid UTF-8 (byte 0x{data[exc.start]:02x} at {where}); save it as UTF-8"
        ) from exc


def parse(text: str, *, max_int_digits: int, text_only: bool = True) -> Any:
    """Strict JSON: no repeated keys, no NaN/Infinity, no float overflow, no integer longer
    than ``max_int_digits`` digits, no nesting deeper than Python can parse and, with
    ``text_only``, no lone surrogates (a caller whose models check each string with its
    field's name may leave that to them). A leading byte-order mark is dropped."""

    def integer(literal: str) -> int:
        digits = len(literal.lstrip("-"))
        if digits > max_int_digits:
            raise _Refused(
                f"an integer of {digits} digits is too large (at most {max_int_digits}); send "
                "it as a string"
            )
        return int(literal)

    text = text.removeprefix("\ufeff")
    try:
        value = json.loads(
            text,
            object_pairs_hook=_object,
            parse_constant=_constant,
            parse_int=integer,
            parse_float=_float,
        )
    except _Refused as exc:
        raise JsonProblem(str(exc), _locate(text, max_int_digits) or "") from exc
    except json.JSONDecodeError as exc:
        raise JsonProblem(
            f"invalid JSON: {exc.msg} at {position(text, exc.pos)}; fix the syntax"
        ) from exc
    except RecursionError as exc:
        raise JsonProblem("JSON nested too deeply to read; flatten it") from exc
    for path, s in _strings(value) if text_only else ():
        try:
            s.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise JsonProblem(
                f"holds a lone surrogate ({s[exc.start]!r}), which is not text; remove the "
                "\\ud800-\\udfff escape",
                path,
            ) from exc
    return value


def load_json(data: bytes | str) -> Any:
    """One untrusted ingest line or sidecar file, parsed by :func:`parse` (its strings are
    checked by the record models, which name the field); any problem is an
    :class:`~govrag.errors.InputError`, so a caller reports the line (or file) and goes on
    with the next one."""
    try:
        text = decode(data) if isinstance(data, bytes) else data
        return parse(text, max_int_digits=INGEST_INT_DIGITS, text_only=False)
    except JsonProblem as exc:
        raise InputError(exc.describe()) from exc


def _strings(value: Any, path: str = "") -> list[tuple[str, str]]:
    """``(path, string)`` of every key and string in a parsed value, in document order."""
    out: list[tuple[str, str]] = []
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            out.append((where, item))
        elif isinstance(item, dict):
            children = []
            for k, v in item.items():
                inner = f"{where}.{k}" if where else k
                out.append((inner, k))
                children.append((inner, v))
            stack.extend(reversed(children))
        elif isinstance(item, list):
            stack.extend(reversed([(f"{where}[{i}]", v) for i, v in enumerate(item)]))
    return out


class _Flagged:
    """A value the strict parse refused, kept by the lenient re-parse of :func:`_locate`."""


class _FlaggedDict(dict[str, Any], _Flagged):
    """An object with a repeated key."""


def _locate(text: str, max_int_digits: int) -> str | None:
    """The path (``metadata.n``, ``acl[2]``) of the first value the strict parse refused,
    found by a lenient re-parse that keeps such values flagged (only after a refusal)."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in items]
        return (_FlaggedDict if len(set(keys)) < len(keys) else dict)(items)

    def number(literal: str) -> object:
        return _Flagged() if len(literal.lstrip("-")) > max_int_digits else int(literal)

    def real(literal: str) -> object:
        value = float(literal)
        return _Flagged() if value in (float("inf"), float("-inf")) else value

    try:
        tree = json.loads(text, object_pairs_hook=pairs, parse_constant=lambda _: _Flagged(),
                          parse_int=number, parse_float=real)  # fmt: skip
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
