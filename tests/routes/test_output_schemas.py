"""Output schemas (``schemas/<id>.json``): loaded, hashed, and refused with the file and the
schema path when they step outside the subset the claim check can read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from govrag.routes import check_config
from govrag.validation.structured import OutputSchema, read_answer

ROUTE = {"route_id": "memo", "output_schema_id": "memo_v1"}
TEXT = {"type": "string"}


def deployment(root: Path, schema: Any, *, raw: str | None = None) -> Path:
    (root / "routes").mkdir(parents=True)
    (root / "routes" / "memo.json").write_text(json.dumps(ROUTE))
    (root / "schemas").mkdir()
    (root / "schemas" / "memo_v1.json").write_text(raw if raw is not None else json.dumps(schema))
    return root


def obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


def test_a_schema_in_the_subset_loads_with_its_hash(tmp_path: Path) -> None:
    schema = obj(summary=TEXT, risk={"enum": ["high", "low"]}, tags={"type": "array",
                 "items": TEXT}, cap={"type": "integer", "enum": [1, 2]},
                 urgent={"type": "boolean"})  # fmt: skip
    config, problems = check_config(deployment(tmp_path, schema))
    assert config is not None, problems
    loaded = config.schemas["memo_v1"]
    assert loaded.schema == schema and len(loaded.sha256) == 64


@pytest.mark.parametrize(
    ("schema", "field", "said"),
    [
        ({"type": "array", "items": TEXT}, "type", "an answer is a JSON object"),
        (obj(cap={"type": "number"}), "properties.cap", "a bare number cannot cite"),
        (obj(n={"type": "integer", "minimum": 0}), "properties.n", "a bare integer"),
        (obj(a={"$ref": "#/$defs/x"}), "properties.a.$ref", "outside the output-schema subset"),
        (obj(a={"anyOf": [TEXT]}), "properties.a.anyOf", "outside the output-schema subset"),
        ({**obj(a=TEXT), "additionalProperties": True}, "additionalProperties", "closed"),
        ({**obj(a=TEXT), "additionalProperties": TEXT}, "additionalProperties", "closed"),
        (obj(a={"type": ["string", "null"]}), "properties.a.type", "exactly one type"),
        (obj(a={"type": "array"}), "properties.a", '"items"'),
        ({**obj(a=TEXT), "patternProperties": {}}, "patternProperties", "subset"),
        (obj(a={"type": "string", "minimum": 3}), "properties.a.minimum", "subset"),
        (obj(a={"type": 5}), "properties.a.type", "not a valid JSON Schema"),
        # A regular expression run on a model's reply can backtrack for minutes.
        (obj(a={"type": "string", "pattern": "^(\\w+\\s?)+$"}), "properties.a.pattern", "subset"),
        # Rules no answer can meet.
        ({**obj(limti=TEXT), "required": ["limit"]}, "required.0", "not among the properties"),
        (obj(a={"type": "string", "enum": []}), "properties.a.enum", "empty enum"),
        (
            obj(a={"type": "string", "minLength": 5, "maxLength": 2}),
            "properties.a.minLength",
            "above maxLength",
        ),
    ],
)
def test_a_schema_outside_the_subset_is_refused_by_file_and_path(
    tmp_path: Path, schema: Any, field: str, said: str
) -> None:
    config, problems = check_config(deployment(tmp_path, schema))
    assert config is None
    mine = [p for p in problems if p.path == "schemas/memo_v1.json"]
    assert mine and mine[0].field == field and said in mine[0].message, problems
    # The route naming it is not reported again: the file's problem is the one to fix.
    assert not [p for p in problems if p.field == "output_schema_id"]


def test_an_array_without_max_items_is_warned(tmp_path: Path) -> None:
    config, problems = check_config(deployment(tmp_path, obj(tags={"type": "array",
                                                                    "items": TEXT})))  # fmt: skip
    assert config is not None
    (warning,) = problems
    assert warning.warning and warning.field == "properties.tags" and "maxItems" in warning.message


def test_a_schema_file_that_is_no_regular_file_is_refused_unread(tmp_path: Path) -> None:
    root = deployment(tmp_path, obj(a=TEXT))
    (root / "schemas" / "memo_v1.json").unlink()
    (root / "schemas" / "memo_v1.json").symlink_to("/dev/zero")  # would read forever
    config, problems = check_config(root)
    assert config is None
    assert any("not a regular file" in p.message for p in problems)


def test_a_schema_file_name_with_a_line_break_is_no_id(tmp_path: Path) -> None:
    root = deployment(tmp_path, obj(a=TEXT))
    (root / "schemas" / "x\n.json").write_text(json.dumps(obj(a=TEXT)))
    config, problems = check_config(root)
    assert config is None and any("does not name a schema id" in p.message for p in problems)


def test_a_schema_that_is_not_json_is_refused(tmp_path: Path) -> None:
    config, problems = check_config(deployment(tmp_path, None, raw='{"type": "object",'))
    assert config is None and problems[0].path == "schemas/memo_v1.json"


def test_a_route_naming_a_missing_schema_is_an_error(tmp_path: Path) -> None:
    root = deployment(tmp_path, obj(a=TEXT))
    (root / "schemas" / "memo_v1.json").rename(root / "schemas" / "other.json")
    config, problems = check_config(root)
    assert config is None
    (problem,) = [p for p in problems if not p.warning]
    assert problem.path == "routes/memo.json" and problem.field == "output_schema_id"
    assert "no schemas/memo_v1.json (known: 'other')" in problem.message


def test_a_deeply_nested_schema_is_refused(tmp_path: Path) -> None:
    schema: dict[str, Any] = TEXT
    for _ in range(10):
        schema = obj(a=schema)
    config, problems = check_config(deployment(tmp_path, schema))
    assert config is None and any("nested deeper" in p.message for p in problems)


SCHEMA = OutputSchema("memo_v1", obj(a=TEXT), "0" * 64)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": "x"}', {"a": "x"}),
        ('  ```json\n{"a": "x"}\n```  ', {"a": "x"}),
        ('```\n{"a": "x"}\n```', {"a": "x"}),
        ('Here it is: {"a": "x"}', None),
        ('{"a": "x"} and more', None),
        ('{"a": "x", "a": "Q9"}', None),
        ('{"a": NaN}', None),
        ('["x"]', None),
        ('{"a": "x", "Q9": "Q9"}', None),  # objects are closed even when the file says nothing
        ("", None),
        ('{"a": ' + "[" * 400 + "]" * 400 + "}", None),  # deep: refused before any check runs
    ],
)
def test_a_reply_is_one_json_object_or_one_fenced_one(text: str, value: Any) -> None:
    read, problems = read_answer(text, SCHEMA)
    assert read == value and bool(problems) == (value is None)
    # What is recorded names where and which rule, never the reply's words.
    assert all(p.recorded and "Q9" not in p.recorded for p in problems)


def test_a_deep_reply_under_unique_items_is_refused_not_crashed() -> None:
    # jsonschema compares unique items recursively: 300 levels would raise RecursionError.
    unique = OutputSchema("memo_v1", obj(a={"type": "array", "uniqueItems": True,
                                            "maxItems": 4, "items": TEXT}), "0" * 64)  # fmt: skip
    deep = "[" * 300 + "]" * 300
    read, problems = read_answer(f'{{"a": [{deep}, {deep}]}}', unique)
    assert read is None and "nested deeper" in problems[0].recorded
