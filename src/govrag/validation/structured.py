"""Structured answers: a route's ``output_schema_id`` names the JSON shape its answer must have.

A structured answer is still an answer from evidence, so the claim check must be able to read
every fact it asserts. That is why an output schema is a *subset* of JSON Schema
(draft 2020-12), refused at load time when it steps outside it:

- every value is either **free text** (a ``string`` with no ``enum`` or ``const``), which the
  claim check reads sentence by sentence as it reads a plain answer (citations included), or a
  **closed choice** the schema lists (``enum``, ``const``, ``boolean``, ``null``): the model's
  judgment among the operator's options, which can carry no fact of a document;
- so a ``number`` or ``integer`` must be a closed choice (a bare figure cannot cite its
  evidence: write it into free text, where "EUR 5,000,000 [chunk]" is checked), and an object
  is closed (``additionalProperties`` absent or ``false``: a key the model names would be free
  text no check reads);
- ``$ref``, ``anyOf``, ``oneOf``, ``allOf``, ``not``, conditionals and pattern properties are
  refused, so which sub-schema governs which value is never in doubt; so is ``pattern`` (a
  regular expression run on a model's reply can backtrack for minutes), and so are rules no
  answer can meet (``required`` naming an unlisted property, an empty ``enum``, a minimum
  above its maximum).

:func:`read_answer` parses a model's reply (one JSON object, optionally in one code fence) and
validates it; :func:`check_structured` runs the claim check over its free text, removes the
unsupported sentences field by field, and validates what is left again (a required field
emptied by the removal fails the answer, it is never delivered half-formed).

Problems are written twice: for the model (a repair prompt may quote its own reply back) and
for the record (the trace, the audit log, the caller), which names only the path and the
schema's rule, never the model's words.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from govrag import strict_json
from govrag.types import PackChunk
from govrag.validation.claims import check_claims, remove_unsupported
from govrag.validation.normalise import visible
from govrag.validation.report import ClaimReport

__all__ = ["OutputSchema", "Problem", "check_structured", "read_answer", "subset_problems"]

#: Keywords an output schema may use, by where they apply (see the module docstring).
_ANY = frozenset({"type", "title", "description", "enum", "const", "$comment", "examples"})
_ROOT = frozenset({"$schema", "$id"})
_BY_TYPE = {
    "object": frozenset({"properties", "required", "additionalProperties", "minProperties",
                         "maxProperties"}),
    "array": frozenset({"items", "minItems", "maxItems", "uniqueItems"}),
    # No "pattern": a regular expression run on a model's reply can backtrack for minutes.
    "string": frozenset({"minLength", "maxLength", "format"}),
    "number": frozenset({"minimum", "maximum"}),
    "integer": frozenset({"minimum", "maximum"}),
    "boolean": frozenset(),
    "null": frozenset(),
}  # fmt: skip
_KEYWORDS = frozenset().union(*_BY_TYPE.values())
#: Deepest nesting of an output schema (objects and arrays).
MAX_DEPTH = 8
#: Most problems kept from one check.
MAX_PROBLEMS = 5
_FENCE = re.compile(r"^```(?:json)?[ \t]*\n(?P<body>.*)\n```$", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Problem:
    """One way a reply misses its schema: ``for_model`` may quote the reply; ``recorded``
    names only where and which rule of the schema."""

    for_model: str
    recorded: str


@dataclass(frozen=True)
class OutputSchema:
    schema_id: str
    schema: dict[str, Any]
    #: SHA-256 of the schema file's canonical JSON: the version a response records.
    sha256: str

    @functools.cached_property
    def compact(self) -> str:
        """The schema as one line of JSON (what a model is shown)."""
        return json.dumps(self.schema, separators=(",", ":"), ensure_ascii=False)

    @functools.cached_property
    def _validator(self) -> Any:
        """The schema's validator, objects closed: built once, used for every answer."""
        from jsonschema import Draft202012Validator

        return Draft202012Validator(_closed(self.schema))

    def problems(self, value: Any) -> list[Problem]:
        """How ``value`` misses the schema (closed objects enforced), at most
        :data:`MAX_PROBLEMS`, in path order."""
        if _depth(value) > MAX_DEPTH + 1:
            return [Problem(f"the answer is nested deeper than {MAX_DEPTH} levels",
                            f"the answer is nested deeper than {MAX_DEPTH} levels")]  # fmt: skip
        errors = sorted(self._validator.iter_errors(value),
                        key=lambda e: [str(p) for p in e.path])  # fmt: skip
        out = []
        for e in errors[:MAX_PROBLEMS]:
            where = ".".join(str(p) for p in e.path) or "(the answer)"
            rule = f"{e.validator} {e.validator_value!r}"
            said = e.message if len(e.message) <= 300 else f"breaks the rule {rule[:200]}"
            out.append(Problem(f"at {where}: {said}", f"at {where}: breaks {rule[:200]}"))
        return out


def _depth(value: Any) -> int:
    """How deeply ``value`` nests objects and arrays (iteratively: a reply may be deep)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in (item.values() if isinstance(item, dict)
                                                  else item))  # fmt: skip
    return deepest


def subset_problems(schema: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """``(path in the schema, message)`` for each way ``schema`` leaves the supported subset
    (module docstring); nothing for a schema inside it."""
    yield from _subset(schema, where, 0, root=True)


def _subset(
    schema: Any, where: str, depth: int, *, root: bool = False
) -> Iterator[tuple[str, str]]:
    here = where or "(the schema)"
    if not isinstance(schema, dict):
        yield here, "a sub-schema must be a JSON object"
        return
    if depth > MAX_DEPTH:
        yield here, f"nested deeper than {MAX_DEPTH} levels; flatten the answer's shape"
        return
    kind = schema.get("type")
    closed = "enum" in schema or "const" in schema
    if kind is None and closed:
        kind = "choice"
    if root and kind != "object":
        yield _at(where, "type"), 'an answer is a JSON object; set "type": "object"'
        return
    known = isinstance(kind, str) and (kind in _BY_TYPE or kind == "choice")
    allowed = _ANY | (_BY_TYPE.get(kind, frozenset()) if isinstance(kind, str) else frozenset())
    allowed |= _ROOT if root else frozenset()
    for key in sorted(set(schema) - allowed - (set() if known else set(_KEYWORDS))):
        yield _at(where, key), (f"{key!r} is outside the output-schema subset (supported "
                                f"here: {', '.join(sorted(allowed))}); see "
                                "docs/structured-answers.md")  # fmt: skip
    if not known:
        yield _at(where, "type"), (f"{kind!r} is not one of {sorted(_BY_TYPE)}; give each value "
                                   "exactly one type (or an enum)")  # fmt: skip
        return
    yield from _satisfiable(schema, where)
    if kind in ("number", "integer") and not closed:
        yield here, (f"a bare {kind} cannot cite its evidence; make it free text (a string the "
                     "claim check reads) or list its values in an enum")  # fmt: skip
    if kind == "object":
        extra = schema.get("additionalProperties", False)
        if extra is not False:
            yield (
                _at(where, "additionalProperties"),
                (
                    "an answer's objects are closed: a key the model names would be text no check "
                    "reads; set it to false (or leave it out) and list the properties"
                ),
            )
        props = schema.get("properties", {})
        if not isinstance(props, dict):
            yield _at(where, "properties"), "must be an object of sub-schemas"
            return
        for name, sub in props.items():
            yield from _subset(sub, _at(where, f"properties.{name}"), depth + 1)
    elif kind == "array":
        if "items" not in schema:
            yield here, 'an array needs "items": the schema of every element'
        else:
            yield from _subset(schema["items"], _at(where, "items"), depth + 1)


def _satisfiable(schema: dict[str, Any], where: str) -> Iterator[tuple[str, str]]:
    """Rules no answer can meet (every request would pay a repair, then abstain)."""
    if "enum" in schema and not schema["enum"]:
        yield _at(where, "enum"), "an empty enum allows no value; list the choices"
    for low, high in (("minLength", "maxLength"), ("minItems", "maxItems"),
                      ("minProperties", "maxProperties"), ("minimum", "maximum")):  # fmt: skip
        lo, hi = schema.get(low), schema.get(high)
        if isinstance(lo, int | float) and isinstance(hi, int | float) and lo > hi:
            yield _at(where, low), f"{low} {lo} is above {high} {hi}"
    props = schema.get("properties", {})
    for i, name in enumerate(schema.get("required", ())):
        if isinstance(props, dict) and name not in props:
            yield (
                _at(where, f"required.{i}"),
                (
                    f"{name!r} is required but not among the properties "
                    f"({', '.join(sorted(props)) or 'none'}); the closed object could never have it"
                ),
            )


def array_warnings(schema: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Arrays with no ``maxItems``: legal, but a model may then send any number of items,
    and how many there are (or which closed choices they hold) is a message no check reads."""
    if not isinstance(schema, dict):
        return
    if schema.get("type") == "array":
        if "maxItems" not in schema:
            yield (
                where or "(the schema)",
                (
                    "an array with no maxItems: the count of items (and their closed choices) is "
                    "unbounded text no check reads; set maxItems"
                ),
            )
        yield from array_warnings(schema.get("items"), _at(where, "items"))
    for name, sub in (schema.get("properties") or {}).items():
        yield from array_warnings(sub, _at(where, f"properties.{name}"))


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _closed(schema: Any) -> Any:
    """``schema`` with every object closed (``additionalProperties: false``)."""
    out = copy.deepcopy(schema)
    stack = [out]
    while stack:
        s = stack.pop()
        if isinstance(s, dict):
            if s.get("type") == "object":
                s.setdefault("additionalProperties", False)
            stack.extend(s.get("properties", {}).values())
            if "items" in s:
                stack.append(s["items"])
    return out


def read_answer(text: str, schema: OutputSchema) -> tuple[dict[str, Any] | None, list[Problem]]:
    """The JSON object ``text`` holds (the whole reply, or one code fence that is the whole
    reply) when it satisfies ``schema``; else ``None`` and the problems."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group("body").strip()
    try:
        value = strict_json.parse(body, max_int_digits=20)
    except strict_json.JsonProblem as exc:
        return None, [Problem(f"the reply is not strict JSON: {exc.describe()}",
                              "the reply is not strict JSON")]  # fmt: skip
    if not isinstance(value, dict):
        return None, [Problem("the reply is JSON but not one object",
                              "the reply is JSON but not one object")]  # fmt: skip
    problems = schema.problems(value)
    return (None, problems) if problems else (value, [])


def _free_text(value: Any, schema: dict[str, Any], path: tuple[str | int, ...] = ()
               ) -> Iterator[tuple[tuple[str | int, ...], str]]:  # fmt: skip
    """``(path, text)`` of every free-text value of ``value`` (valid for ``schema``)."""
    if "enum" in schema or "const" in schema:
        return
    kind = schema.get("type")
    if kind == "string" and isinstance(value, str):
        yield path, value
    elif kind == "object" and isinstance(value, dict):
        props = schema.get("properties", {})
        for key, item in value.items():
            yield from _free_text(item, props.get(key, {}), (*path, key))
    elif kind == "array" and isinstance(value, list):
        for i, item in enumerate(value):
            yield from _free_text(item, schema.get("items", {}), (*path, i))


def free_text(value: dict[str, Any], schema: OutputSchema) -> list[str]:
    """The free-text values of a structured answer, in document order."""
    return [text for _, text in _free_text(value, schema.schema)]


def visible_strings(value: Any) -> Any:
    """``value`` with every string without the invisible characters the claim check drops
    (:func:`~govrag.validation.normalise.visible`); keys stay (the schema closed them)."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {k: visible_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [visible_strings(v) for v in value]
    return value


def _replaced(value: Any, path: tuple[str | int, ...], text: str) -> Any:
    if not path:
        return text
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replaced(value[head], rest, text)}
    items = list(value)
    items[int(head)] = _replaced(items[int(head)], rest, text)
    return items


def check_structured(
    value: dict[str, Any],
    schema: OutputSchema,
    chunks: Sequence[PackChunk],
    *,
    min_overlap: float,
) -> tuple[ClaimReport, dict[str, Any], list[Problem]]:
    """The claim check of every free-text value (one report, in document order), the answer
    with each value's unsupported sentences removed, and how that answer now misses the
    schema (empty when it still satisfies it)."""
    claims: list[Any] = []
    unsupported: list[str] = []
    pruned: Any = value
    for path, text in list(_free_text(value, schema.schema)):
        report = check_claims(text, chunks, min_overlap=min_overlap)
        claims.extend(report.claims)
        unsupported.extend(report.unsupported)
        if not report.all_supported:
            try:
                cut = remove_unsupported(text, report)
            except ValueError:  # a field the report cannot cut: the answer is not delivered
                return report, value, [Problem("a field could not be cut",
                                               "a field could not be cut")]  # fmt: skip
            pruned = _replaced(pruned, path, cut)
    merged = ClaimReport(claims=tuple(claims), unsupported=tuple(unsupported),
                         all_supported=not unsupported)  # fmt: skip
    return merged, pruned, schema.problems(pruned) if unsupported else []
