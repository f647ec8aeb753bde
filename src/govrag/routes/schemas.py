"""A route's output schema (``output_schema_id``): the JSON shape its answers must have.

``schemas/<output_schema_id>.json`` in the deployment is a JSON Schema in govrag's subset
(:mod:`govrag.validation.structured`: free text the claim check reads, closed choices, closed
objects). Each is versioned by its content: its SHA-256 goes with its id on the ``response``
audit record of every answer it shaped.

A route that names a schema with no file is an error, not a warning: the route promises its
consumers a shape, and serving free text instead would break that promise silently.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from govrag.problems import Collector
from govrag.validation.structured import OutputSchema, array_warnings, subset_problems

FOLDER = "schemas"
#: Largest schema file, in bytes: a shape, not a document.
MAX_BYTES = 65_536
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


def load_schemas(c: Collector) -> dict[str, OutputSchema]:
    """Every ``schemas/*.json`` of the deployment, each a problem (naming the file and the
    schema's path) when it is not a valid output schema."""
    from jsonschema import Draft202012Validator, SchemaError

    out: dict[str, OutputSchema] = {}
    folder = c.root / FOLDER
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        if not _ID.fullmatch(path.stem):
            c.add(path, "", f"{path.name!r} does not name a schema id (letters, digits, '_', "
                            "'-', '.'); rename the file")  # fmt: skip
            c.failed(path)
            continue
        schema = c.read_json(path, max_bytes=MAX_BYTES)
        if schema is None:
            continue
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            where = ".".join(str(p) for p in exc.path)
            c.add(path, where, f"is not a valid JSON Schema: {exc.message[:300]}")
            c.failed(path)
            continue
        problems = list(subset_problems(schema))
        for where, message in problems:
            c.add(path, where, message)
        for where, message in array_warnings(schema):
            c.add(path, where, message, warning=True)
        if problems:
            c.failed(path)
            continue
        canonical = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        out[path.stem] = OutputSchema(path.stem, schema, digest)
    return out


def missing_schema(c: Collector, path: Path, route_id: str, schema_id: str | None,
                   schemas: dict[str, OutputSchema]) -> None:  # fmt: skip
    """An error when a route names an output schema with no (valid) file."""
    if schema_id is None or schema_id in schemas or FOLDER in c.incomplete:
        return
    known = ", ".join(repr(k) for k in sorted(schemas)) or "none"
    c.add(path, "output_schema_id",
          f"route {route_id!r} names output schema {schema_id!r}, but there is no "
          f"{FOLDER}/{schema_id}.json (known: {known}); write it (docs/structured-answers.md) "
          "or drop output_schema_id")  # fmt: skip
