"""Ingest throughput: documents/s and chunks/s, with the hash embedder and with MiniLM.

The synthetic enterprise corpus (documents with ACLs over 1,000 accounts and 200 nested
groups) goes through the real record path (``Ingestor``: validation, chunking, embedding, one
durable SQLite transaction per document with its chunks, vectors, ACL rows and outbox row),
then the derived lexical index is brought up to date. The baseline, measured in the same run
on the same texts, is the embedder alone: what any ingest must spend; the ratio shows what
the transactional write path costs on top.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from bench import synthetic
from govrag.embed import get_embedder, semantic_available
from govrag.embed.base import Embedder
from govrag.harvest.ingest import Ingestor
from govrag.harvest.records import DocumentRecord
from govrag.settings import SearchSettings
from govrag.store.sqlite import SQLiteStore

Say = synthetic.Say


def _one(corpus: synthetic.Corpus, embedder: Embedder, say: Say) -> dict[str, Any]:
    texts = list(corpus.texts)
    t0 = time.perf_counter()
    embedder.embed_documents(texts, batch_size=64)
    embed_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="govrag-bench-ingest-") as tmp:
        store = SQLiteStore(Path(tmp) / "govrag.db", index_dir=Path(tmp) / "index",
                            embedder=embedder, search=SearchSettings())  # fmt: skip
        try:
            t0 = time.perf_counter()
            ingestor = Ingestor(store, synthetic.TENANT, embedder=embedder)
            for i, record in enumerate(synthetic.records(corpus)):
                ingestor.add(f"record {i}", record)
            ingestor.flush()
            ingest_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            store.sync_indexes(synthetic.TENANT)
            index_s = time.perf_counter() - t0
            report = ingestor.report
            if report.errors:
                raise RuntimeError(f"ingest errors: {report.messages[:3]}")
            # Re-ingesting the same records: every document is unchanged (hash compared).
            t0 = time.perf_counter()
            again = Ingestor(store, synthetic.TENANT, embedder=embedder)
            for i, record in enumerate(synthetic.records(corpus)):
                if isinstance(record, DocumentRecord):
                    again.add(f"record {i}", record)
            again.flush()
            reingest_s = time.perf_counter() - t0
        finally:
            store.close()
    docs, chunks = report.added, report.chunks
    total = ingest_s + index_s
    say(f"  {embedder.name}: {docs} docs in {total:.1f}s")
    return {
        "embedder": embedder.name,
        "documents": docs,
        "chunks": chunks,
        "ingest_s": round(ingest_s, 2),
        "index_s": round(index_s, 2),
        "docs_per_s": round(docs / total, 1),
        "chunks_per_s": round(chunks / total, 1),
        "embed_only_docs_per_s": round(docs / embed_s, 1),
        "ratio_to_embedding": round((docs / total) / (docs / embed_s), 3),
        "reingest_unchanged_docs_per_s": round(docs / reingest_s, 1),
    }


def run(n_docs: int, n_minilm: int, seed: int, say: Say, *, minilm: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": []}
    say(f"ingest: {n_docs} docs with the hash embedder")
    out["runs"].append(_one(synthetic.generate(n_docs, seed), get_embedder("hash", dim=384), say))
    if minilm and semantic_available():
        say(f"ingest: {n_minilm} docs with MiniLM")
        out["runs"].append(_one(synthetic.generate(n_minilm, seed), get_embedder("minilm"), say))
    return out


def table(result: dict[str, Any]) -> str:
    lines = [
        "\nIngest throughput (SQLite, one durable transaction per document, then the lexical "
        "index)",
        f"{'embedder':>9} | {'docs':>6} {'chunks':>6} | {'docs/s':>8} {'chunks/s':>9} | "
        f"{'embed-only docs/s':>17} {'ratio':>6} | {'re-ingest unchanged docs/s':>26}",
    ]
    for r in result["runs"]:
        lines.append(
            f"{r['embedder']:>9} | {r['documents']:>6} {r['chunks']:>6} | {r['docs_per_s']:>8} "
            f"{r['chunks_per_s']:>9} | {r['embed_only_docs_per_s']:>17} "
            f"{r['ratio_to_embedding']:>5}x | {r['reingest_unchanged_docs_per_s']:>26}"
        )
    return "\n".join(lines)
