"""Typed metadata filters compiled to SQL with bound parameters (never SQL text).

Document metadata is stored as rows ``doc_meta(doc_id, key, value_text, value_num)``: strings
in ``value_text``, numbers in ``value_num``, booleans as ``'true'``/``'false'`` text, and each
scalar of a list as its own row. A filter matches a document when any row matches.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from govrag.deployfile import parse_json
from govrag.errors import InputError, describe_validation
from govrag.types import MetadataFilter, MetaValue, TimeRange

#: A string that sorts after every string starting with a prefix (UTF-8 / code point order).
_TOP = "\U0010ffff"


def meta_rows(metadata: dict[str, Any]) -> Iterator[tuple[str, str | None, float | None]]:
    """The ``(key, value_text, value_num)`` rows of a document's metadata object."""
    for key, value in metadata.items():
        items = value if isinstance(value, list) else [value]
        for item in items:
            column = _column(item)
            if column is not None:
                yield (key, *column)


def _column(value: object) -> tuple[str | None, float | None] | None:
    if isinstance(value, bool):
        return ("true" if value else "false", None)
    if isinstance(value, int | float):
        return (None, float(value))
    if isinstance(value, str):
        return (value, None)
    return None  # nested objects and null are kept in the JSON but are not filterable


def _cond(value: MetaValue, op: str) -> tuple[str, list[object]]:
    col = _column(value)
    assert col is not None
    text, num = col
    if text is not None:
        return f"value_text {op} ?", [text]
    return f"value_num {op} ?", [num]


def compile_filter(f: MetadataFilter) -> tuple[str, list[object]]:
    """SQL condition over ``doc_meta`` rows (``tenant_id`` and ``key`` bound by the caller)."""
    if f.op == "eq":
        assert f.value is not None
        return _cond(f.value, "=")
    if f.op == "in":
        parts, params = [], []
        for v in f.values or ():
            sql, p = _cond(v, "=")
            parts.append(sql)
            params.extend(p)
        return "(" + " OR ".join(parts) + ")", params
    if f.op == "prefix":
        assert isinstance(f.value, str)
        return "(value_text >= ? AND value_text < ?)", [f.value, f.value + _TOP]
    parts, params = [], []
    for bound, op in ((f.gte, ">="), (f.lte, "<=")):
        if bound is None:
            continue
        if isinstance(bound, bool):
            raise InputError(f"filter on {f.key!r}: a range bound cannot be a boolean")
        sql, p = _cond(bound, op)
        parts.append(sql)
        params.extend(p)
    return "(" + " AND ".join(parts) + ")", params


def filters_sql(
    filters: tuple[MetadataFilter, ...], tenant: str, doc_column: str = "d.doc_id"
) -> tuple[str, list[object]]:
    """``AND``-ed conditions restricting ``doc_column`` to documents matching every filter."""
    parts: list[str] = []
    params: list[object] = []
    for f in filters:
        cond, p = compile_filter(f)
        parts.append(
            f"{doc_column} IN (SELECT doc_id FROM doc_meta WHERE tenant_id = ? AND key = ? "
            f"AND {cond})"
        )
        params.append(tenant)
        params.append(f.key)
        params.extend(p)
    return " AND ".join(parts), params


def parse_cli_filter(raw: str) -> MetadataFilter:
    """``KEY=VALUE`` from the command line: an equality filter. VALUE is read as a JSON
    scalar when it is one (``2024``, ``true``), else as a string."""
    key, sep, text = raw.partition("=")
    if not sep or not key:
        raise InputError(f"--filter {raw!r} is not KEY=VALUE; write e.g. --filter doc_type=policy")
    value: MetaValue = text
    try:
        parsed = parse_json(text)  # bounded: ``[[[[...`` is a string, not a RecursionError
    except ValueError:
        parsed = None
    if isinstance(parsed, bool | int | float | str):
        value = parsed
    try:
        return MetadataFilter(key=key, op="eq", value=value)
    except ValueError as exc:
        raise InputError(f"--filter {raw!r}: {describe_validation(exc)}") from exc


def parse_instant(option: str, raw: str) -> datetime:
    """An instant from the command line: ISO 8601; a date, or a time without a zone, is
    read as UTC (``2026-07-01`` is its midnight, UTC)."""
    try:
        moment = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise InputError(
            f"{option} {raw!r} is not an ISO 8601 date or time; write e.g. 2026-07-01 or "
            "2026-07-01T09:00:00+02:00"
        ) from None
    return moment if moment.utcoffset() is not None else moment.replace(tzinfo=UTC)


def parse_time_range(field: str, since: str | None, until: str | None) -> TimeRange | None:
    """``--since``/``--until`` on ``field`` as a :class:`TimeRange` (``None``: neither)."""
    if since is None and until is None:
        return None
    start = None if since is None else parse_instant("--since", since)
    end = None if until is None else parse_instant("--until", until)
    try:
        return TimeRange.model_validate({"field": field, "start": start, "end": end})
    except ValueError as exc:
        raise InputError(f"--since/--until: {describe_validation(exc)}") from exc
