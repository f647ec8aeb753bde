"""JSONL ingest: validate each line, chunk and embed documents, write them transactionally.

Every document is written in its own transaction (chunks, vectors, ACL rows, metadata and an
index-outbox row together), so a bad line or a crash never leaves a partial document. A bad
line is reported with its number and field, counted, and skipped; the other lines still land.
Unchanged documents (same record hash) are skipped; documents whose text is unchanged keep
their chunks and vectors even when their rights change.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from govrag.embed.base import Embedder
from govrag.errors import IdentityConflict, InputError, SourceConflict, describe_validation
from govrag.harvest.chunking import chunk_text
from govrag.harvest.records import (
    RECORD_TYPES,
    DeleteRecord,
    DocumentRecord,
    GroupRecord,
    IdentityRecord,
    Record,
)
from govrag.settings import IngestSettings
from govrag.store.clock import utc_instant
from govrag.store.filters import meta_rows
from govrag.store.protocol import IngestWrites
from govrag.store.records import ChunkRow, DocumentWrite, titled
from govrag.strict_json import load_json
from govrag.types import CorpusTenancy

_BATCH = 64


@dataclass
class IngestReport:
    """Counts of one ingest run; ``messages`` holds one line per error."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    chunks: int = 0
    identities: int = 0
    groups: int = 0
    errors: int = 0
    #: Identity records refused because another email owns the account (also errors).
    conflicts: int = 0
    messages: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, int]:
        return {
            k: getattr(self, k)
            for k in (
                "added",
                "updated",
                "unchanged",
                "deleted",
                "chunks",
                "identities",
                "groups",
                "errors",
                "conflicts",
            )
        }


def placeholder_glob(email: str, globs: Sequence[str]) -> str | None:
    """The first of ``globs`` (case-insensitive ``fnmatch``) that ``email`` matches."""
    folded = email.casefold()
    return next((g for g in globs if fnmatch.fnmatchcase(folded, g.casefold())), None)


def parse_record(raw: bytes, *, max_text_bytes: int) -> Record:
    """Validate one JSONL line. Raises :class:`InputError` naming the field and a fix."""
    return validate_record(load_json(raw), max_text_bytes=max_text_bytes)


def validate_record(obj: object, *, max_text_bytes: int) -> Record:
    """Validate one parsed record (a JSON object). Raises :class:`InputError` naming the
    field and a fix."""
    if not isinstance(obj, dict):
        raise InputError("a record must be a JSON object with a 'type' field")
    kind = obj.get("type")
    model = RECORD_TYPES.get(kind) if isinstance(kind, str) else None
    if model is None:
        names = ", ".join(RECORD_TYPES)
        raise InputError(f"unknown record type {kind!r}; use one of: {names}")
    if kind == "document" and isinstance(obj.get("text"), str):
        size = len(obj["text"].encode("utf-8", "surrogatepass"))
        if size > max_text_bytes:
            raise InputError(
                f"field 'text' is {size} bytes, over the limit of {max_text_bytes}; split the "
                "document or raise [ingest] max_text_bytes in govrag.toml"
            )
    try:
        record: Record = model.model_validate(obj)  # type: ignore[assignment]
    except ValidationError as exc:
        raise InputError(describe_validation(exc)) from exc
    return record


def read_lines(path: Path) -> Iterator[tuple[int, bytes, int]]:
    """(line number, line bytes without its end, bytes consumed) for each line; a blank line
    gives ``b""``. Lines end at LF, CRLF or a lone CR (exporters write all three); valid JSON
    never holds a raw CR or LF inside a value, so none of them splits a record."""
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise InputError(f"cannot read {str(path)!r}: {exc.strerror}") from exc
    number = 0
    pending = b""
    with fh:
        while block := fh.read(1 << 20):
            pending += block
            # A CR at the end of the block may be the first half of a CRLF: keep it.
            cut = len(pending) - 1 if pending.endswith(b"\r") else len(pending)
            start = 0
            for m in _LINE_END.finditer(pending, 0, cut):
                number += 1
                yield number, pending[start : m.start()].strip(), m.end() - start
                start = m.end()
            pending = pending[start:]
    if pending:
        number += 1
        yield number, pending.strip(), len(pending)


_LINE_END = re.compile(rb"\r\n|\r|\n")


def _sha(obj: Any) -> str:
    blob = json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


class Ingestor:
    """Turns validated records into store writes for one tenant."""

    def __init__(
        self,
        store: IngestWrites,
        tenant: str,
        *,
        settings: IngestSettings | None = None,
        embedder: Embedder | None = None,
        embed_progress: Callable[[int], None] | None = None,
        tenancy: CorpusTenancy | None = None,
        writer: str | None = None,
    ) -> None:
        self.store = store
        self.tenant = tenant
        #: The configured source writing (``None``: an operator's feed): a source changes
        #: only the groups, documents and identity bindings it wrote
        #: (:class:`~govrag.errors.SourceConflict`).
        self.writer = writer
        #: Which tenants hold each corpus: a document into one this tenant lacks is refused.
        self.tenancy = tenancy or CorpusTenancy()
        self.settings = settings or IngestSettings()
        self.embedder = embedder
        self.embed_progress = embed_progress
        self.report = IngestReport()
        self._pending: list[tuple[str, DocumentRecord]] = []

    def error(self, where: str, exc: Exception) -> None:
        self.report.errors += 1
        self.report.messages.append(f"{where}: {exc}")

    def add(self, where: str, record: Record) -> None:
        """Queue or apply one record; documents are batched for embedding."""
        if isinstance(record, DocumentRecord):
            if not self.tenancy.holds(self.tenant, record.corpus):
                # Nobody could ever search it: no session of this tenant pins the corpus.
                self.error(where, InputError(
                    f"corpus {record.corpus!r} is kept to other tenants ([corpora."
                    f"{record.corpus}] tenants), so tenant {self.tenant!r} could never search "
                    f"document {record.external_id!r}; ingest it with --tenant set to a tenant "
                    f"that holds the corpus, or add {self.tenant!r} to that list"
                ))  # fmt: skip
                return
            self._pending.append((where, record))
            if len(self._pending) >= _BATCH:
                self.flush()
            return
        self.flush()  # keep file order: a delete after a document must see it
        if isinstance(record, IdentityRecord):
            self._identity(where, record)
        elif isinstance(record, GroupRecord):
            try:
                self.store.put_group(self.tenant, record.source_system, record.group_id,
                                     record.members, writer=self.writer)  # fmt: skip
            except SourceConflict as exc:
                self.error(where, exc)
                return
            self.report.groups += 1
        elif isinstance(record, DeleteRecord):
            try:
                deleted = self.store.delete_document(
                    self.tenant, record.source_system, record.external_id, writer=self.writer
                )
            except SourceConflict as exc:
                self.error(where, exc)
                return
            if deleted:
                self.report.deleted += 1

    def _identity(self, where: str, record: IdentityRecord) -> None:
        """Bind, rebind or unbind one account; a refused record is an error of its own."""
        if not record.active:
            try:
                self.store.remove_identity(self.tenant, record.email, record.source_system,
                                           record.account_id, writer=self.writer)  # fmt: skip
            except SourceConflict as exc:
                self.error(where, exc)
                return
            self.report.identities += 1
            return
        glob = placeholder_glob(record.email, self.settings.placeholder_emails)
        if glob is not None:
            self.error(where, InputError(
                f"email {record.email!r} matches the placeholder pattern {glob!r} of [ingest] "
                "placeholder_emails, so it was not bound to account "
                f"{record.account_id!r}: a placeholder address never gets an account's "
                "rights; bind the account to its owner's real email (or change the setting)"
            ))  # fmt: skip
            return
        try:
            self.store.put_identity(
                self.tenant,
                record.email,
                record.source_system,
                record.account_id,
                previous_email=record.previous_email,
                writer=self.writer,
            )
        except IdentityConflict as exc:
            self.report.conflicts += 1
            self.error(where, exc)
            return
        except SourceConflict as exc:
            self.error(where, exc)
            return
        self.report.identities += 1

    def flush(self) -> None:
        """Chunk, embed and write the queued documents, one transaction each."""
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        stored = self.store.stored_hashes(
            self.tenant, [(r.source_system, r.external_id) for _, r in batch]
        )
        prepared: list[tuple[str, DocumentRecord, str, str, list[ChunkRow] | None]] = []
        to_embed: list[str] = []
        for where, rec in batch:
            text_hash = _sha(
                [rec.title, rec.text, self.settings.chunk_tokens, self.settings.section_tokens]
            )
            record_hash = _sha([text_hash, rec.model_dump(mode="json", exclude=_unhashed(rec))])
            old = stored.get((rec.source_system, rec.external_id))
            chunks: list[ChunkRow] | None = None
            if old is None or old.text_hash != text_hash:
                chunks = [
                    ChunkRow(c.ordinal, c.text, c.parent, c.indexed, c.token_count)
                    for c in chunk_text(
                        rec.text,
                        max_tokens=self.settings.chunk_tokens,
                        section_tokens=self.settings.section_tokens,
                    )
                ]
                to_embed.extend(titled(rec.title, c.text) for c in chunks if c.indexed)
            prepared.append((where, rec, text_hash, record_hash, chunks))
        vectors = None
        if self.embedder is not None and to_embed:
            vectors = self.embedder.embed_documents(
                to_embed, batch_size=64, progress=self.embed_progress
            )
        offset = 0
        for where, rec, text_hash, record_hash, chunks in prepared:
            n_indexed = sum(1 for c in chunks or () if c.indexed)
            doc_vectors = None
            if vectors is not None and chunks is not None:
                doc_vectors = np.asarray(vectors[offset : offset + n_indexed], dtype=np.float32)
            offset += n_indexed
            write = DocumentWrite(
                source_system=rec.source_system,
                external_id=rec.external_id,
                corpus=rec.corpus,
                title=rec.title,
                text_hash=text_hash,
                record_hash=record_hash,
                author=rec.author,
                acl=tuple(rec.acl),
                classification=int(rec.classification),
                authority_tier=rec.authority_tier,
                updated_at=rec.updated_at.isoformat() if rec.updated_at else None,
                effective_at=utc_instant(rec.effective_at or rec.updated_at),
                updated_utc=utc_instant(rec.updated_at),
                supersedes=tuple(rec.supersedes),
                metadata_json=json.dumps(rec.metadata, sort_keys=True, ensure_ascii=False),
                metadata_rows=tuple(meta_rows(rec.metadata)),
                chunks=tuple(chunks) if chunks is not None else None,
                vectors=doc_vectors,
                embedder=self.embedder.name if self.embedder is not None else None,
                writer=self.writer,
            )
            try:
                outcome = self.store.put_document(self.tenant, write)
            except InputError as exc:
                self.error(where, exc)
                continue
            setattr(self.report, outcome, getattr(self.report, outcome) + 1)
            if chunks is not None and outcome != "unchanged":
                self.report.chunks += n_indexed


def _unhashed(rec: DocumentRecord) -> set[str]:
    """Fields a record's hash leaves out: its text (hashed on its own) and title, and the
    time fields while unset, so a record written before they existed hashes as it did
    (re-sending it is still ``unchanged``)."""
    skip = {"text", "title"}
    if rec.effective_at is None:
        skip.add("effective_at")
    if not rec.supersedes:
        skip.add("supersedes")
    return skip


def ingest_jsonl(
    store: IngestWrites,
    path: str | Path,
    tenant: str,
    *,
    settings: IngestSettings | None = None,
    embedder: Embedder | None = None,
    progress: Callable[[int], None] | None = None,
) -> IngestReport:
    """Ingest a JSONL file into ``tenant``. ``progress(n_bytes)`` is called as lines are read."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"ingest file {str(path)!r} does not exist or is not a file")
    ingestor = Ingestor(store, tenant, settings=settings, embedder=embedder)
    limit = ingestor.settings.max_text_bytes
    for number, raw, consumed in read_lines(path):
        if raw:
            where = f"{path}:{number}"
            try:
                record = parse_record(raw, max_text_bytes=limit)
            except InputError as exc:
                ingestor.error(where, exc)
            else:
                ingestor.add(where, record)
        if progress is not None:
            progress(consumed)
    ingestor.flush()
    return ingestor.report
