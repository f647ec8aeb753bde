"""Connector names, importable without the harvester (the CLI builds its options from it)."""

from __future__ import annotations

from enum import StrEnum


class ConnectorKind(StrEnum):
    """The connectors govrag ships, by name (``[sources.<name>] connector``)."""

    FILESYSTEM = "filesystem"
    JSONL = "jsonl"
