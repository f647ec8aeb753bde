"""The harvester: a connector's items through an :class:`Ingestor`, one document at a time.

The connector only reads; everything that touches the store happens here, through the
:class:`Ingestor`: chunking, embedding, a transaction per document, idempotency by content
and record hash, the ACL epoch. An item's error is reported with its ``where`` and the run
goes on; nothing of a failed item is written. A dry run sends the same records to a
:class:`DryRunTarget`, which answers from the store's hashes but writes nothing, and skips
embedding, so it reports exactly what a real run would change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from govrag.embed.base import Embedder
from govrag.errors import IdentityConflict, SourceConflict
from govrag.harvest.connector import Connector, HarvestReport
from govrag.harvest.ingest import Ingestor
from govrag.settings import IngestSettings
from govrag.store.protocol import IngestWrites
from govrag.store.records import DocumentWrite, StoredHashes
from govrag.types import CorpusTenancy

Key = tuple[str, str]


class DryRunTarget:
    """An ingest target that answers as ``store`` would after the writes, and writes nothing.

    ``store`` may be ``None`` (no store exists yet): then every document would be added.
    """

    def __init__(self, store: IngestWrites | None) -> None:
        self.store = store
        self._written: dict[Key, StoredHashes | None] = {}  # None: deleted in this run
        self._owners: dict[tuple[str, str, str], str | None] = {}  # None: unbound in this run
        #: The configured source owning each binding this run made, moved or removed.
        self._binders: dict[tuple[str, str, str], str | None] = {}
        #: Groups and documents a configured source claimed in this run (by source system
        #: and id): what the store's writer columns would say after the writes.
        self._groups: dict[Key, str] = {}
        self._documents: dict[Key, str] = {}

    def account_owner(self, tenant: str, source_system: str, account_id: str) -> str | None:
        key = (tenant, source_system, account_id)
        if key in self._owners:
            return self._owners[key]
        if self.store is None:
            return None
        return self.store.account_owner(tenant, source_system, account_id)

    def identity_writer(self, tenant: str, source_system: str, account_id: str) -> str | None:
        key = (tenant, source_system, account_id)
        if key in self._binders:
            return self._binders[key]
        if self.store is None:
            return None
        return self.store.identity_writer(tenant, source_system, account_id)

    def put_identity(
        self,
        tenant: str,
        email: str,
        source_system: str,
        account_id: str,
        *,
        previous_email: str | None = None,
        writer: str | None = None,
    ) -> bool:
        """As the store's ``put_identity`` would answer (the same refusals), writing nothing."""
        email = email.casefold()
        previous = None if previous_email is None else previous_email.casefold()
        if previous == email:
            previous = None  # a plain bind, as the store takes it
        key = (tenant, source_system, account_id)
        owner = self.account_owner(*key)
        if owner == email:
            return False  # holds already
        if owner != previous:
            raise IdentityConflict.refused(email, source_system, account_id, owner, previous)
        if previous is None:  # a free account: the binding is the writer's
            self._binders[key] = writer
        elif writer is not None:  # a move: only of the writer's own binding, or no source's
            self._claim_binding(key, previous, writer, unbind=False)
        self._owners[key] = email
        return True

    def remove_identity(
        self,
        tenant: str,
        email: str,
        source_system: str,
        account_id: str,
        *,
        writer: str | None = None,
    ) -> bool:
        key = (tenant, source_system, account_id)
        if self.account_owner(*key) != email.casefold():
            return False
        if writer is not None:
            self._claim_binding(key, email.casefold(), writer, unbind=True)
        self._owners[key] = None
        self._binders[key] = None
        return True

    def _claim_binding(
        self, key: tuple[str, str, str], email: str, writer: str, *, unbind: bool
    ) -> None:
        """As the store would, for ``writer`` moving or removing ``email``'s binding."""
        held = self.identity_writer(*key)
        if held not in (None, writer):
            raise SourceConflict.binding(key[2], key[1], email, held, writer, unbind=unbind)
        self._binders[key] = writer

    def group_writer(self, tenant: str, source_system: str, group_id: str) -> str | None:
        key = (source_system, group_id)
        if key in self._groups:
            return self._groups[key]
        return None if self.store is None else self.store.group_writer(tenant, *key)

    def document_writer(self, tenant: str, source_system: str, external_id: str) -> str | None:
        key = (source_system, external_id)
        if key in self._documents:
            return self._documents[key]
        return None if self.store is None else self.store.document_writer(tenant, *key)

    def put_group(
        self,
        tenant: str,
        source_system: str,
        group_id: str,
        members: list[str],
        *,
        writer: str | None = None,
    ) -> bool:
        """As the store's ``put_group`` would answer (the same refusals), writing nothing."""
        if writer is not None:
            owner = self.group_writer(tenant, source_system, group_id)
            if owner not in (None, writer):
                raise SourceConflict.refused("group", group_id, source_system, owner, writer,
                                             delete=False)  # fmt: skip
            self._groups[(source_system, group_id)] = writer
        return True

    def stored_hashes(self, tenant: str, keys: Sequence[Key]) -> dict[Key, StoredHashes]:
        ask = [k for k in keys if k not in self._written]
        out = self.store.stored_hashes(tenant, ask) if self.store is not None and ask else {}
        for key in keys:
            written = self._written.get(key)
            if written is not None:
                out[key] = written
        return out

    def put_document(self, tenant: str, doc: DocumentWrite) -> str:
        key = (doc.source_system, doc.external_id)
        self._claim(tenant, key, doc.writer, delete=False)
        old = self.stored_hashes(tenant, [key]).get(key)
        self._written[key] = StoredHashes(text_hash=doc.text_hash, record_hash=doc.record_hash)
        if old is None:
            return "added"
        return "unchanged" if old.record_hash == doc.record_hash else "updated"

    def delete_document(
        self, tenant: str, source_system: str, external_id: str, *, writer: str | None = None
    ) -> bool:
        key = (source_system, external_id)
        self._claim(tenant, key, writer, delete=True)
        existed = key in self.stored_hashes(tenant, [key])
        self._written[key] = None
        self._documents.pop(key, None)
        return existed

    def _claim(self, tenant: str, key: Key, writer: str | None, *, delete: bool) -> None:
        """As :func:`govrag.store.database.claim` would, for the document ``key``."""
        if writer is None:
            return
        owner = self.document_writer(tenant, *key)
        if owner not in (None, writer):
            raise SourceConflict.refused("document", key[1], key[0], owner, writer, delete=delete)
        if not delete:
            self._documents[key] = writer


class _Ingestor(Ingestor):
    """An :class:`Ingestor` that remembers where each error happened."""

    failed: set[str]

    def error(self, where: str, exc: Exception) -> None:
        super().error(where, exc)
        self.failed.add(where)


def harvest(
    connector: Connector,
    store: IngestWrites | None,
    tenant: str,
    *,
    settings: IngestSettings | None = None,
    embedder: Embedder | None = None,
    progress: Callable[[int], None] | None = None,
    dry_run: bool = False,
    tenancy: CorpusTenancy | None = None,
    writer: str | None = None,
) -> HarvestReport:
    """Ingest everything ``connector`` yields into ``tenant``; ``progress(n_bytes)`` ticks as
    items are read. With ``dry_run`` nothing is written (``store`` may then be ``None``).
    ``tenancy``: a document into a corpus ``tenant`` does not hold is refused. ``writer``:
    the configured source this is (it changes only the groups and documents it wrote)."""
    if dry_run:
        target: IngestWrites = DryRunTarget(store)
        embedder = None
    elif store is None:
        raise ValueError("harvest() needs a store unless dry_run is set")
    else:
        target = store
    ingestor = _Ingestor(target, tenant, settings=settings, embedder=embedder, tenancy=tenancy,
                         writer=writer)  # fmt: skip
    ingestor.failed = set()
    report = ingestor.report = HarvestReport()

    def stored(keys: Sequence[Key]) -> dict[Key, StoredHashes]:
        return target.stored_hashes(tenant, list(keys)) if keys else {}

    def owner(source_system: str, account_id: str) -> str | None:
        return target.account_owner(tenant, source_system, account_id)

    for item in connector.scan(stored, owner):
        if item.error is not None:
            if isinstance(item.error, IdentityConflict):
                report.conflicts += 1
            ingestor.error(item.where, item.error)
        elif item.unchanged:
            report.unchanged += 1
        elif item.skipped:
            report.skipped += 1
        for record in item.records:
            ingestor.add(item.where, record)
        if item.warning:
            report.warnings.append(f"{item.where}: {item.warning}")
        if progress is not None and item.size:
            progress(item.size)
    ingestor.flush()
    connector.finish(ingestor.failed, report, commit=not dry_run)
    return report
