"""Connectors: where records come from (DESIGN.md 2.2).

A connector reads one source and yields :class:`Item` s: the identity, group, document and
delete records of each unit it read (a file, a line), or that unit's error. It never writes
to the store. The harvester (:func:`govrag.harvest.harvester.harvest`, driving an
:class:`~govrag.harvest.ingest.Ingestor`) owns chunking, embedding, per-document
transactions, idempotency and the ACL epoch. After the run the harvester calls
:meth:`Connector.finish` with the units that failed, so a connector can remember what it
synced (its state) without ever recording a failed unit as done.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from govrag.errors import InputError
from govrag.harvest.ingest import IngestReport, parse_record, read_lines
from govrag.harvest.kinds import ConnectorKind
from govrag.harvest.records import Record
from govrag.store.records import StoredHashes
from govrag.types import Classification, check_source_system

__all__ = [
    "Connector",
    "ConnectorKind",
    "HarvestReport",
    "Item",
    "JsonlConnector",
    "OwnerLookup",
    "SourceSpec",
    "StoredLookup",
    "slug",
]

#: ``stored(keys)``: which ``(source_system, external_id)`` keys the target tenant holds.
StoredLookup = Callable[[Sequence[tuple[str, str]]], dict[tuple[str, str], StoredHashes]]
#: ``owner(source_system, account_id)``: the email the target tenant binds the account to now.
OwnerLookup = Callable[[str, str], str | None]


@dataclass(frozen=True)
class SourceSpec:
    """One source to harvest: a configured ``[sources.<name>]`` or a path given on the CLI.

    ``state_path`` is where the connector keeps what it synced (``None``: keep nothing).
    """

    name: str
    connector: ConnectorKind
    path: Path
    source_system: str
    corpus: str | None = None
    classification: Classification = Classification.INTERNAL
    authority_tier: int = 3
    tenant: str | None = None
    state_path: Path | None = None
    #: Filesystem: front matter may put a file in another corpus (``[sources.<name>]``
    #: ``allow_front_matter_corpus``); off, such a file is refused.
    allow_front_matter_corpus: bool = False
    #: A configured source's name: the owner of the groups and documents it writes, so a
    #: source sharing its ``source_system`` cannot change them. ``None`` for a path given on
    #: the command line (the operator's own feed, which may write any).
    writer: str | None = None

    def __post_init__(self) -> None:
        try:
            check_source_system(self.source_system)
        except ValueError as exc:
            raise InputError(
                f"source {self.name!r}: {exc} (set source_system in [sources.<name>] of "
                "govrag.toml)"
            ) from exc


@dataclass(frozen=True)
class Item:
    """What a connector read from one unit of its source.

    Attributes:
        where: the unit, as reported to the user (a file path, ``path:line``).
        records: the records read from it, applied in order.
        error: why the unit could not be read; nothing of it is written.
        unchanged: the unit is already stored as it is; it was not read again.
        skipped: the unit is not something this connector reads (e.g. an image file).
        warning: something the user should know, not an error (e.g. a file nobody may read).
        size: bytes of the source this item covers, for a progress bar.
    """

    where: str
    records: tuple[Record, ...] = ()
    error: Exception | None = None
    unchanged: bool = False
    skipped: bool = False
    warning: str | None = None
    size: int = 0


@dataclass
class HarvestReport(IngestReport):
    """An :class:`IngestReport` plus what a connector skipped and warned about."""

    skipped: int = 0
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, int]:
        return {**super().as_dict(), "skipped": self.skipped}


class Connector(Protocol):
    """Reads one source and yields its records; writes nothing to the store."""

    kind: ConnectorKind

    def total_bytes(self) -> int:
        """Bytes :meth:`scan` will cover (for a progress bar); 0 when unknown."""
        ...

    def scan(self, stored: StoredLookup, owner: OwnerLookup) -> Iterator[Item]:
        """Yield one item per unit of the source. ``stored`` and ``owner`` tell what the
        tenant holds; the harvester applies an item's records before it asks for the next,
        so ``owner`` answers with the earlier items applied."""
        ...

    def finish(self, failed: Collection[str], report: HarvestReport, *, commit: bool) -> None:
        """Called once after the run: ``failed`` holds the ``where`` of every item that was
        not written. ``commit`` is false on a dry run: then nothing may be persisted."""
        ...


#: Called with the run's report when a connector without file state commits its run.
FinishHook = Callable[[HarvestReport], None]


class JsonlConnector:
    """The JSONL export format of DESIGN.md 2.2, one record per line (``ingest_jsonl``'s).

    A bad line is an error item naming ``path:line``; the other lines still land. The file's
    records carry their own source system, corpus and authority tier.
    """

    kind = ConnectorKind.JSONL

    def __init__(self, path: Path, *, max_text_bytes: int, on_finish: FinishHook | None = None):
        self.path = path
        self.max_text_bytes = max_text_bytes
        self.on_finish = on_finish

    def total_bytes(self) -> int:
        return self.path.stat().st_size if self.path.is_file() else 0

    def scan(self, stored: StoredLookup, owner: OwnerLookup) -> Iterator[Item]:
        if not self.path.is_file():
            raise InputError(f"ingest file {str(self.path)!r} does not exist or is not a file")
        for number, raw, consumed in read_lines(self.path):
            where = f"{self.path}:{number}"
            if not raw:
                yield Item(where, size=consumed)
                continue
            try:
                record = parse_record(raw, max_text_bytes=self.max_text_bytes)
            except InputError as exc:
                yield Item(where, error=exc, size=consumed)
            else:
                yield Item(where, records=(record,), size=consumed)

    def finish(self, failed: Collection[str], report: HarvestReport, *, commit: bool) -> None:
        if self.on_finish is not None and commit:
            self.on_finish(report)


_NOT_ID = re.compile(r"[^A-Za-z0-9_.:\-]+")


def slug(name: str, default: str = "default") -> str:
    """``name`` as a corpus id: runs of other characters become ``-`` (``"Risk Models"`` ->
    ``"Risk-Models"``); ``default`` when nothing is left."""
    out = _NOT_ID.sub("-", name)
    out = re.sub(r"^[^A-Za-z0-9]+", "", out)[:128].rstrip("-.:")
    return out or default
