"""The filesystem connector: a folder tree of .md, .txt, .html/.htm and .pdf files.

Each file is one document. Its rights come from ``_access.json`` sidecars, which Markdown
front matter may only narrow (:mod:`govrag.harvest.access`); a file with no ``acl`` in any
sidecar is stored with an empty ACL, so nobody may read it (fail-closed), and the run warns
about it. Identities and groups may be listed in ``_identities.jsonl`` at the root, a
snapshot of the bindings this source made (:mod:`govrag.harvest.identities`): it never moves
or unbinds another source's. Hidden files and folders, symbolic links and files of other
types are skipped.

The external id of a file is its path relative to the root (posix), except that a moved file
keeps the id it had: a new path whose bytes equal those of a vanished path takes over its id
(so the move is an update of rights and metadata, never a re-embedding). The per-source sync
state (:mod:`govrag.harvest.state`) makes re-runs cheap: a file with the same size, mtime
and rights as last time is not even read; one with the same bytes is not re-extracted; a
vanished file becomes a delete. A failed file keeps its last stored version and its state.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterator
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from govrag.errors import GovragError, InputError, describe_validation
from govrag.harvest.access import IDENTITIES_FILE, front_rule, narrow
from govrag.harvest.connector import (
    ConnectorKind,
    HarvestReport,
    Item,
    OwnerLookup,
    SourceSpec,
    StoredLookup,
    slug,
)
from govrag.harvest.extract import extract
from govrag.harvest.identities import IdentitiesFile
from govrag.harvest.records import DeleteRecord, DocumentRecord, Record
from govrag.harvest.state import FileState, load_state, record_sync
from govrag.harvest.tree import Tree, TreeFile, walk_tree

#: Files larger than this are reported, not read.
MAX_FILE_BYTES = 256 * 1024 * 1024
#: Bumped when extraction (or how front matter sets rights) changes, so every file is read
#: again once. 2: front matter only narrows rights (files it widened are narrowed).
EXTRACT_VERSION = 2
_NO_ACL = "no 'acl' in any _access.json: stored with an empty ACL (nobody may read it)"


class FilesystemConnector:
    """Yields the documents, deletes, identities and groups of one folder tree."""

    kind = ConnectorKind.FILESYSTEM

    def __init__(self, spec: SourceSpec, tenant: str, *, max_text_bytes: int) -> None:
        self.spec = spec
        self.root = spec.path
        self.tenant = tenant
        self.max_text_bytes = max_text_bytes
        self._tree: Tree | None = None
        self._old: dict[str, FileState] = {}
        self._done: dict[str, FileState] = {}  # rel -> state to keep once written
        self._moved_from: dict[str, str] = {}  # new rel -> vanished rel whose id it took
        self._hidden: dict[str, FileState] = {}  # kept: their folder could not be listed
        self._accounts = IdentitiesFile(
            spec.path / IDENTITIES_FILE, spec.source_system, max_text_bytes=max_text_bytes
        )

    def _list(self) -> Tree:
        if self._tree is None:
            salt = json.dumps([self.spec.source_system, self.spec.corpus,
                               int(self.spec.classification), self.spec.authority_tier,
                               self.spec.allow_front_matter_corpus, EXTRACT_VERSION])  # fmt: skip
            self._tree = walk_tree(self.root, salt)
        return self._tree

    def total_bytes(self) -> int:
        """Bytes of the files the tree holds (of the types read) and of its identities file."""
        return self._accounts.size() + sum(f.size for f in self._list().files.values())

    # -- the run -------------------------------------------------------------------------
    def scan(self, stored: StoredLookup, owner: OwnerLookup) -> Iterator[Item]:
        tree = self._list()
        files = tree.files
        yield from tree.notes
        if self.spec.state_path is not None:
            state, warning = load_state(self.spec.state_path)
            if warning:
                yield Item(str(self.spec.state_path), warning=warning)
            entry = state.tenants.get(self.tenant) if state else None
            self._old = dict(entry.files) if entry else {}
            self._accounts.made = set(entry.identities) if entry else set()
        yield from self._accounts.items(owner)
        old, ss = self._old, self.spec.source_system
        vanished = {rel: st for rel, st in sorted(old.items()) if rel not in files}
        for rel in [rel for rel in vanished if tree.hides(rel)]:
            self._hidden[rel] = vanished.pop(rel)  # in a folder that could not be listed
        # Moves: a new path whose bytes equal a vanished path's takes over its external id.
        by_hash: dict[str, list[str]] = {}
        for rel, st in vanished.items():
            by_hash.setdefault(st.content_hash, []).append(rel)
        ids = {rel: old[rel].external_id for rel in files if rel in old}
        new = [f for rel, f in files.items() if rel not in old and f.held is None]
        unread: dict[str, Exception] = {}
        hashes: dict[str, str] = {}
        for f in new:
            try:
                hashes[f.rel] = _hash(f.path)
            except OSError as exc:
                unread[f.rel] = InputError(f"cannot read: {exc.strerror}")
                continue
            if by_hash.get(hashes[f.rel]):
                self._moved_from[f.rel] = by_hash[hashes[f.rel]].pop(0)
                ids[f.rel] = vanished[self._moved_from[f.rel]].external_id
        used = set(ids.values())
        for f in new:
            if f.rel in hashes and f.rel not in ids:
                ids[f.rel] = _fresh_id(f.rel, hashes[f.rel], used)
                used.add(ids[f.rel])
        taken = set(self._moved_from.values())
        for rel, st in vanished.items():  # deletes first: a new file may reuse a freed id
            if rel not in taken:
                record = DeleteRecord(type="delete", source_system=ss, external_id=st.external_id)
                yield Item(str(self.root / rel), records=(record,))
        present = stored([(ss, old[rel].external_id) for rel in files if rel in old])
        for rel, f in files.items():
            if f.held is not None:
                yield Item(str(f.path), error=InputError(f.held), size=f.size)
            elif rel in unread:
                yield Item(str(f.path), error=unread[rel], size=f.size)
            else:
                prev = old.get(rel)
                known = prev is not None and (ss, prev.external_id) in present
                yield self._file_item(f, ids[rel], prev if known else None)

    def _file_item(self, f: TreeFile, external_id: str, prev: FileState | None) -> Item:
        where = str(f.path)
        if prev is not None and prev.rights == f.rights_key and (prev.size, prev.mtime_ns) == (
            f.size, f.mtime_ns,
        ):  # fmt: skip
            self._done[f.rel] = prev
            return Item(where, unchanged=True, size=f.size)
        try:
            if f.size > MAX_FILE_BYTES:
                raise InputError(f"{f.size} bytes, over the limit of {MAX_FILE_BYTES}")
            data = f.path.read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            state = FileState(external_id=external_id, content_hash=digest, mtime_ns=f.mtime_ns,
                              size=f.size, rights=f.rights_key)  # fmt: skip
            if prev is not None and (prev.rights, prev.content_hash) == (f.rights_key, digest):
                self._done[f.rel] = state
                return Item(where, unchanged=True, size=f.size)
            record, warning = self._document(f, external_id, data)
        except OSError as exc:
            return Item(where, error=InputError(f"cannot read: {exc.strerror}"), size=f.size)
        except GovragError as exc:
            return Item(where, error=exc, size=f.size)
        self._done[f.rel] = state
        return Item(where, records=(record,), warning=warning, size=f.size)

    def _document(self, f: TreeFile, external_id: str, data: bytes) -> tuple[Record, str | None]:
        assert f.rights is not None
        found = extract(data, f.fmt)
        rule, updated_at = front_rule(found.front)
        size = len(found.text.encode("utf-8", "surrogatepass"))
        if size > self.max_text_bytes:
            raise InputError(
                f"its text is {size} bytes, over the limit of {self.max_text_bytes}; split the "
                "file or raise [ingest] max_text_bytes in govrag.toml"
            )
        top = f.rel.split("/", 1)[0] if "/" in f.rel else self.root.resolve().name
        sidecar = f.rights
        rights, notes = narrow(
            sidecar,
            rule,
            classification=(
                self.spec.classification if sidecar.classification is None
                else sidecar.classification
            ),
            corpus=sidecar.corpus or self.spec.corpus or slug(top),
            move_corpus=self.spec.allow_front_matter_corpus,
            source=self.spec.name,
            name=f.path.name,
        )  # fmt: skip
        fields = {
            "type": "document",
            "source_system": self.spec.source_system,
            "external_id": external_id,
            "corpus": rights.corpus,
            "title": rights.title or found.title or f.path.stem,
            "text": found.text,
            "author": rights.author,
            "acl": list(rights.acl or ()),
            "classification": rights.classification,
            "updated_at": _instant(updated_at) or datetime.fromtimestamp(f.mtime_ns / 1e9, UTC),
            "authority_tier": self.spec.authority_tier,
            "metadata": {**rights.metadata, "path": f.rel, "format": f.fmt},
        }
        try:
            record = DocumentRecord.model_validate(fields)
        except ValidationError as exc:
            raise InputError(describe_validation(exc)) from exc
        if rights.acl is None:
            notes.append(_NO_ACL)
        if not found.text.strip():
            notes.append("no text found in it")
        return record, "; ".join(notes) or None

    def finish(self, failed: Collection[str], report: HarvestReport, *, commit: bool) -> None:
        """Record what is now stored; a failed file keeps its previous state (if any)."""
        if not commit or self.spec.state_path is None or self._tree is None:
            return
        kept = dict(self._hidden)
        for rel, f in self._tree.files.items():
            if rel in self._done and str(f.path) not in failed:
                kept[rel] = self._done[rel]
                continue
            for old_rel in (rel, self._moved_from.get(rel)):
                if old_rel is not None and old_rel in self._old:
                    kept[old_rel] = self._old[old_rel]
        bindings = self._accounts.made_after(failed)
        record_sync(self.spec.state_path, source=self.spec.name, connector=self.kind.value,
                    root=self.root.resolve(), tenant=self.tenant, counts=report.as_dict(),
                    files=kept, identities=bindings)  # fmt: skip


def _instant(value: str | None) -> datetime | str | None:
    """Front matter's ``updated_at``: an ISO date or time without a zone is read as UTC (a
    bare ``2026-07-01`` is how people write dates); anything else goes to the record model,
    which names what is wrong."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return value
    return parsed if parsed.utcoffset() is not None else parsed.replace(tzinfo=UTC)


def _hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fresh_id(rel: str, digest: str, used: set[str]) -> str:
    """``rel``, or ``rel#<hash>`` when a moved file already holds ``rel`` as its id."""
    candidate, n = rel, 1
    while candidate in used:
        candidate = f"{rel}#{digest[:12]}" + (f"-{n}" if n > 1 else "")
        n += 1
    return candidate
