"""Helpers of the filesystem-connector tests: a tiny PDF, a counting embedder, store views."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from govrag.embed.base import Embedder, FloatArray, ProgressCallback
from govrag.harvest.connector import ConnectorKind, SourceSpec
from govrag.harvest.filesystem import FilesystemConnector
from govrag.harvest.harvester import harvest
from govrag.store.sqlite import SQLiteStore
from govrag.types import Classification

SOURCE = "docs"


def tiny_pdf(text: str) -> bytes:
    """A valid one-page PDF showing ``text`` in Helvetica (xref offsets computed)."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


class CountingEmbedder:
    """Wraps an embedder and records every text it was asked to embed."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.texts: list[str] = []

    def embed_documents(
        self,
        texts: Sequence[str],
        *,
        batch_size: int = 64,
        progress: ProgressCallback | None = None,
    ) -> FloatArray:
        self.texts.extend(texts)
        return self.inner.embed_documents(texts, batch_size=batch_size, progress=progress)

    def embed_query(self, text: str) -> FloatArray:
        return self.inner.embed_query(text)


def write(root: Path, rel: str, content: str | bytes | dict[str, Any]) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, dict):
        content = json.dumps(content)
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    return path


def spec(root: Path, state: Path | None, **kw: Any) -> SourceSpec:
    kw.setdefault("classification", Classification.INTERNAL)
    return SourceSpec(
        name=SOURCE,
        connector=ConnectorKind.FILESYSTEM,
        path=root,
        source_system=SOURCE,
        state_path=state,
        **kw,
    )


def run(
    store: SQLiteStore,
    root: Path,
    state: Path | None,
    embedder: CountingEmbedder | None = None,
    *,
    dry_run: bool = False,
    tenant: str = "t1",
    **kw: Any,
) -> Any:
    connector = FilesystemConnector(spec(root, state, **kw), tenant, max_text_bytes=100_000)
    return harvest(connector, store, tenant, embedder=embedder, dry_run=dry_run)


def snapshot(store: SQLiteStore, tenant: str = "t1") -> dict[str, dict[str, Any]]:
    """Every stored document of the source: its fields, ACL rows and leaf chunk texts."""
    out: dict[str, dict[str, Any]] = {}
    rows = store._db.q(
        tenant,
        "SELECT doc_id, external_id, corpus_id, title, classification, author_account, "
        "metadata FROM documents WHERE tenant_id = ? AND source_system = ?",
        (tenant, SOURCE),
    )
    for doc_id, ext, corpus, title, classification, author, metadata in rows:
        acl = store._db.q(
            tenant,
            "SELECT principal_id FROM doc_acl WHERE doc_id = ? ORDER BY principal_id",
            (doc_id,),
        )
        chunks = store._db.q(
            tenant,
            "SELECT text FROM chunks WHERE doc_id = ? AND indexed = 1 ORDER BY ordinal",
            (doc_id,),
        )
        out[ext] = {
            "corpus": corpus,
            "title": title,
            "classification": Classification(classification).label,
            "author": author,
            "acl": [r[0] for r in acl],
            "text": "\n".join(r[0] for r in chunks),
            "path": json.loads(metadata).get("path"),
        }
    return out
