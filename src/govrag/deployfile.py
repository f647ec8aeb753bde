"""Reading a deployment file an operator wrote: strictly, with one line per problem.

Every file of a deployment directory (``govrag.toml``, ``principals.json``, ``routes/``,
``manifests/``, ``workflows/``, ``policies/``) is read through this module, so each hostile
or careless shape is refused in one place, as a :class:`~govrag.errors.ConfigFileError`
naming the file and where in it, never as a parser's traceback:

- text that is not UTF-8 (a leading byte-order mark is allowed and dropped);
- nesting deeper than :data:`MAX_DEPTH`: JSON and TOML parsers recurse, and so do
  pydantic, jsonschema and Cedar after them (Cedar's parser overflows the C stack, a crash
  no ``except`` can catch), so depth is bounded *before* any parser sees the text;
- in JSON: a key repeated in one object (the last one silently won), ``NaN``,
  ``Infinity`` and numbers that overflow to it (not JSON), integers of more than
  :data:`MAX_DIGITS` digits, and strings with lone surrogates (``"\\udc00"``: not text;
  every later encode of it fails);
- in Cedar: a policy longer than :data:`MAX_POLICY_CHARS` (long operator chains overflow
  Cedar's parser too);
- a file larger than its bound (:data:`MAX_FILE_BYTES` unless the caller names a smaller one),
  and anything that is no regular file (a device, a FIFO, a link to one): never read without
  bound, never waited on;
- when the caller names the directory a file must stay in (``inside``), a link leading out of
  it: a file in the deployment is then the deployment's own, never another file of the
  machine reached through a link.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Any, NoReturn

from govrag import strict_json
from govrag.errors import ConfigFileError

#: Deepest nesting of brackets (JSON arrays and objects, TOML arrays and inline tables,
#: Cedar parentheses, sets and records) a deployment file may use. Real files use < 10.
MAX_DEPTH = 64
#: Longest integer literal in a JSON deployment file (Python refuses > 4300 digits anyway).
MAX_DIGITS = 100
#: Longest single Cedar policy, in characters (real policies are a few hundred).
MAX_POLICY_CHARS = 16_384
#: Largest deployment file read, in bytes: configuration, not a data set.
MAX_FILE_BYTES = 4 * 1024 * 1024


class TextProblem(ValueError):
    """What is wrong with a text and where in it (line and column), without a file name."""


def decode_utf8(data: bytes) -> str:
    """``data`` as text; a :class:`TextProblem` naming the first bad byte otherwise."""
    try:
        return strict_json.decode(data)
    except strict_json.JsonProblem as exc:
        raise TextProblem(str(exc)) from exc


# Strings (with their escapes) and comments are skipped; every other bracket counts.
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_CEDAR_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|//[^\n]*|[()\[\]{};]', re.DOTALL)
_TOML_TOKENS = re.compile(
    r'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*|[\[\]{}]',
    re.DOTALL,
)


def _too_deep(text: str, offset: int) -> NoReturn:
    raise TextProblem(
        f"nests deeper than {MAX_DEPTH} levels at {strict_json.position(text, offset)}; flatten it"
    )


def check_depth(text: str, tokens: re.Pattern[str] = _JSON_TOKENS) -> None:
    """Refuse brackets nested deeper than :data:`MAX_DEPTH` (outside strings and comments)."""
    depth = 0
    for m in tokens.finditer(text):
        token = m.group()
        if token in "([{":
            depth += 1
            if depth > MAX_DEPTH:
                _too_deep(text, m.start())
        elif token in ")]}":
            depth -= 1


def parse_json(text: str) -> Any:
    """Strict JSON (:func:`govrag.strict_json.parse`) of bounded depth, at most
    :data:`MAX_DIGITS` digits an integer. A :class:`TextProblem` says what and where."""
    check_depth(text)
    try:
        return strict_json.parse(text, max_int_digits=MAX_DIGITS)
    except strict_json.JsonProblem as exc:
        raise TextProblem(exc.describe()) from exc


def parse_toml(text: str) -> dict[str, Any]:
    """TOML with bounded depth; a :class:`TextProblem` says what and where."""
    check_depth(text, _TOML_TOKENS)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TextProblem(f"invalid TOML: {exc}; fix the syntax") from exc
    except RecursionError as exc:  # a shape the bracket scan did not foresee
        raise TextProblem(f"nests deeper than {MAX_DEPTH} levels; flatten it") from exc


def check_cedar(text: str) -> None:
    """Refuse Cedar text the Cedar parser cannot survive: deep nesting, huge policies."""
    check_depth(text, _CEDAR_TOKENS)
    start = 0
    for m in _CEDAR_TOKENS.finditer(text):
        if m.group() != ";":
            continue
        if m.end() - start > MAX_POLICY_CHARS:
            raise TextProblem(
                f"has a policy of {m.end() - start} characters ending at "
                f"{strict_json.position(text, m.start())}; at most {MAX_POLICY_CHARS} are "
                "accepted: split it"
            )
        start = m.end()
    if len(text) - start > MAX_POLICY_CHARS:
        raise TextProblem(
            f"ends with {len(text) - start} characters after its last policy; at most "
            f"{MAX_POLICY_CHARS} are accepted"
        )


def contained(path: Path, inside: Path) -> Path:
    """``path`` with every link resolved, when that is within the directory ``inside``;
    :class:`ConfigFileError` naming the file, where it leads and the fix otherwise."""
    real = Path(os.path.realpath(path))
    root = Path(os.path.realpath(inside))
    if real != root and root not in real.parents:
        raise ConfigFileError(f"is a link to {str(real)!r}, outside the deployment directory "
                              f"{str(root)!r}; copy the file into the deployment",
                              path=path)  # fmt: skip
    return real


def read_text(path: Path, *, max_bytes: int = MAX_FILE_BYTES, inside: Path | None = None) -> str:
    """The UTF-8 text of ``path``, at most ``max_bytes`` bytes of a regular file (within the
    directory ``inside`` once links are resolved, when it is given); :class:`ConfigFileError`
    naming the file otherwise."""
    target, flags = path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
    if inside is not None:
        # The resolved path is opened without following a last link, so a link swapped in
        # after the check is refused rather than followed out.
        target, flags = contained(path, inside), flags | getattr(os, "O_NOFOLLOW", 0)
    try:
        # Non-blocking, so a FIFO is refused below instead of waited on at open.
        fd = os.open(target, flags)
    except OSError as exc:
        raise ConfigFileError(f"cannot be read: {exc.strerror or exc}", path=path) from exc
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ConfigFileError("cannot be read: it is a directory", path=path)
        if not stat.S_ISREG(mode):
            raise ConfigFileError("cannot be read: it is not a regular file (a device, a FIFO, "
                                  "or a link to one); write it as a file", path=path)  # fmt: skip
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise ConfigFileError(f"cannot be read: {exc.strerror or exc}", path=path) from exc
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise ConfigFileError(f"is larger than {max_bytes} bytes; a deployment file holds "
                              "configuration, keep it small", path=path)  # fmt: skip
    try:
        return decode_utf8(data)
    except TextProblem as exc:
        raise ConfigFileError(str(exc), path=path) from exc


def read_json(path: Path, *, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """The strict JSON value of ``path`` (see :func:`parse_json`)."""
    text = read_text(path, max_bytes=max_bytes)
    try:
        return parse_json(text)
    except TextProblem as exc:
        raise ConfigFileError(str(exc), path=path) from exc


def read_toml(path: Path) -> dict[str, Any]:
    """The TOML table of ``path`` (see :func:`parse_toml`)."""
    text = read_text(path)
    try:
        return parse_toml(text)
    except TextProblem as exc:
        raise ConfigFileError(str(exc), path=path) from exc


def read_cedar(path: Path) -> str:
    """The Cedar text of ``path``, checked by :func:`check_cedar`."""
    text = read_text(path)
    try:
        check_cedar(text)
    except TextProblem as exc:
        raise ConfigFileError(str(exc), path=path) from exc
    return text
