"""Deployment files are read strictly: whatever the bytes, a TextProblem or a value, nothing else.

Hypothesis feeds the readers arbitrary bytes, arbitrary text, and bracket soups nested far
past the recursion limit; the only exception allowed out is :class:`TextProblem` (which the
callers turn into one line naming the file). Valid JSON within the depth bound reads as
``json.loads`` reads it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from govrag.deployfile import (
    MAX_DEPTH,
    TextProblem,
    check_cedar,
    decode_utf8,
    parse_json,
    parse_toml,
    read_json,
)
from govrag.errors import ConfigFileError

SOUP = st.lists(
    st.sampled_from(['[', ']', '{', '}', '(', ')', '"', '\\', ':', ',', '1', 'a', '#', "'",
                     '"""', '\n', ' ', ';', 'true', '&&', 'NaN', '1e999', '"\\udc00"']),
    max_size=400,
).map("".join)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(), SOUP))
def test_any_text_is_a_value_or_a_text_problem(text: str) -> None:
    for fn in (parse_json, parse_toml, check_cedar):
        with contextlib.suppress(TextProblem):
            fn(text)


@settings(max_examples=200, deadline=None)
@given(data=st.binary())
def test_any_bytes_decode_or_name_the_bad_byte(data: bytes) -> None:
    try:
        decode_utf8(data)
    except TextProblem as exc:
        assert "is not valid UTF-8 (byte 0x" in str(exc)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1000, 200_000])
@pytest.mark.parametrize(("opening", "closing"), [("[", "]"), ('{"a": ', "}")])
def test_deep_nesting_is_refused_before_any_parser(depth: int, opening: str, closing: str) -> None:
    text = opening * depth + "1" + closing * depth
    with pytest.raises(TextProblem, match=f"nests deeper than {MAX_DEPTH} levels at line 1"):
        parse_json(text)
    with pytest.raises(TextProblem, match="nests deeper"):
        parse_toml("x = " + "[" * depth + "]" * depth)
    with pytest.raises(TextProblem, match="nests deeper"):
        check_cedar("permit(principal, action, resource) when { " + "(" * depth + ")" * depth)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(value=JSON)
def test_valid_json_reads_as_json_loads_reads_it(value: Any) -> None:
    text = json.dumps(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate drawn: refused, by design
        with pytest.raises(TextProblem, match="lone surrogate"):
            parse_json(text)
        return
    assert parse_json(text) == json.loads(text)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"a": 1, "a": 2}', "key 'a' appears twice in one JSON object"),
        ("[NaN]", "field '[0]': NaN is not a JSON number"),
        ("[-Infinity]", "-Infinity is not a JSON number"),
        ("[1e999]", "the number 1e999 is too large for a float"),
        ("[" + "7" * 101 + "]", "an integer of 101 digits is too large (at most 100)"),
        ('{"k": ["\\ud800"]}', "field 'k[0]': holds a lone surrogate ('\\ud800')"),
        ('{"a": }', "invalid JSON: Expecting value at line 1 column 7"),
    ],
)
def test_json_nobody_meant_is_refused(text: str, problem: str) -> None:
    with pytest.raises(TextProblem) as info:
        parse_json(text)
    assert problem in str(info.value)


def test_files_are_named_and_a_bom_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "routes.json"
    path.write_bytes(b'\xef\xbb\xbf{"a": [1.5]}')
    assert read_json(path) == {"a": [1.5]}
    path.write_bytes(b'{"a":\n "\xc3"}')
    with pytest.raises(ConfigFileError) as info:
        read_json(path)
    assert str(info.value) == (
        f"{path}: is not valid UTF-8 (byte 0xc3 at offset 8, line 2 column 3); save it as UTF-8"
    )
    assert info.value.detail.startswith("is not valid UTF-8") and info.value.path == str(path)
    with pytest.raises(ConfigFileError, match="cannot be read"):
        read_json(tmp_path / "missing.json")
    assert math.isfinite(parse_json("1e308"))


def test_a_file_is_read_with_a_bound_and_never_waited_on(tmp_path: Path) -> None:
    # A FIFO would block a plain open until a writer came; a device would be read forever.
    fifo = tmp_path / "routes.json"
    os.mkfifo(fifo)
    with pytest.raises(ConfigFileError, match="not a regular file"):
        read_json(fifo)
    zero = tmp_path / "policy.json"
    zero.symlink_to("/dev/zero")
    with pytest.raises(ConfigFileError, match="not a regular file"):
        read_json(zero)
    big = tmp_path / "big.json"
    big.write_text('{"a": "' + "x" * 100 + '"}')
    with pytest.raises(ConfigFileError, match="is larger than 64 bytes"):
        read_json(big, max_bytes=64)
    assert read_json(big, max_bytes=200) == {"a": "x" * 100}
