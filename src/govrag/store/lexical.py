"""Lexical BM25 search in tantivy: one derived index per tenant.

Chunks are indexed as govrag's analyzed terms (see ``analyzer.py``) with a whitespace
tokenizer, so every BM25 index in govrag scores the same tokens. Each chunk also carries its
ACL principal tokens, corpus and classification as indexed fields, and every query is
``(text) AND (principal tokens) AND (corpus) AND (classification <= ceiling)`` evaluated inside
the engine, before the top-k collector truncates anything.

The index is derived from the truth store: ``applied_seq`` records the last outbox sequence
number whose changes it holds; replaying entries is idempotent (delete by document, re-add).
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import tantivy

from govrag.errors import IndexStaleError, StoreError
from govrag.store.records import IndexedChunk

_SEQ_FILE = "applied_seq"
#: How long a search waits for another process's index writer before refusing to search.
WRITER_WAIT_SECONDS = 15.0


def _schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_unsigned_field("cid", indexed=True, fast=True)
    sb.add_unsigned_field("did", indexed=True, fast=True)
    sb.add_text_field("body", tokenizer_name="whitespace", index_option="freq")
    sb.add_text_field("acl", tokenizer_name="raw", index_option="basic")
    sb.add_text_field("corpus", tokenizer_name="raw", index_option="basic")
    sb.add_unsigned_field("cls", indexed=True, fast=True)
    return sb.build()


class LexicalIndex:
    """The tantivy index of one tenant, on disk (``path``) or in memory (``path=None``)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.schema = _schema()
        self._mem_seq = 0
        try:
            if path is None:
                self._index = tantivy.Index(self.schema)
            else:
                path.mkdir(parents=True, exist_ok=True)
                self._index = tantivy.Index(self.schema, str(path), reuse=True)
            # Manual reloads: the reader moves only when this process syncs, so what it
            # searches is exactly the outbox position it recorded.
            self._index.config_reader(reload_policy="Manual")
        except (ValueError, OSError) as exc:
            raise StoreError(
                f"cannot open the lexical index at {path}: {exc}; "
                "run `govrag index rebuild` to recreate it"
            ) from exc
        self.loaded_seq = self.applied_seq()

    # -- watermark -------------------------------------------------------------------------
    def applied_seq(self) -> int:
        """The outbox sequence number this index holds all changes up to (as committed)."""
        if self.path is None:
            return self._mem_seq
        try:
            return int((self.path / _SEQ_FILE).read_text().strip() or 0)
        except FileNotFoundError:
            return 0
        except (OSError, ValueError):
            return 0  # unreadable watermark: replay everything, which is idempotent

    def _write_seq(self, seq: int) -> None:
        if self.path is None:
            self._mem_seq = seq
            return
        tmp = self.path / f"{_SEQ_FILE}.{os.getpid()}.tmp"
        tmp.write_text(str(seq))
        os.replace(tmp, self.path / _SEQ_FILE)

    def refresh(self) -> int:
        """Reload the reader to see commits of other processes; returns their watermark."""
        seq = self.applied_seq()
        if seq != self.loaded_seq:
            self._index.reload()
            self.loaded_seq = seq
        return seq

    # -- writes ----------------------------------------------------------------------------
    def apply(
        self,
        doc_ids: Iterable[int],
        docs: Iterable[IndexedChunk],
        seq: int,
        *,
        reset: bool = False,
    ) -> None:
        """Replace every chunk of ``doc_ids`` with ``docs`` and record ``seq`` as applied.

        ``reset`` drops the whole index first (a rebuild).
        """
        writer = self._writer()
        try:
            if reset:
                writer.delete_all_documents()
            else:
                ids = sorted(set(doc_ids))
                for start in range(0, len(ids), 4096):
                    batch = ids[start : start + 4096]
                    writer.delete_documents_by_query(
                        tantivy.Query.term_set_query(self.schema, "did", batch)
                    )
            for doc in docs:
                writer.add_document(self._to_tantivy(doc))
            writer.commit()
        except ValueError as exc:
            with contextlib.suppress(ValueError):
                writer.rollback()
            raise StoreError(f"lexical index write failed: {exc}") from exc
        finally:
            del writer
            gc.collect()  # drop the Rust writer now, releasing the index lock for others
        self._write_seq(seq)
        self._index.reload()
        self.loaded_seq = seq

    def _writer(self) -> tantivy.IndexWriter:
        deadline = time.monotonic() + WRITER_WAIT_SECONDS
        delay = 0.005
        while True:
            try:
                return self._index.writer(heap_size=64_000_000, num_threads=1)
            except ValueError as exc:  # LockBusy: another process is writing
                if time.monotonic() > deadline:
                    raise IndexStaleError(
                        f"the lexical index at {self.path} is locked by another writer and "
                        f"could not be updated within {WRITER_WAIT_SECONDS:.0f}s; retry"
                    ) from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.2)

    @staticmethod
    def _to_tantivy(doc: IndexedChunk) -> tantivy.Document:
        out = tantivy.Document()
        out.add_unsigned("cid", doc.chunk_id)
        out.add_unsigned("did", doc.doc_id)
        out.add_text("body", doc.terms)
        for token in doc.acl_tokens:
            out.add_text("acl", token)
        out.add_text("corpus", doc.corpus)
        out.add_unsigned("cls", doc.classification)
        return out

    # -- reads -----------------------------------------------------------------------------
    def search(
        self,
        terms: Sequence[str],
        *,
        corpora: Sequence[str] | None,
        acl_tokens: Sequence[str] | None,
        max_classification: int | None,
        doc_ids: Sequence[int] | None,
        limit: int,
    ) -> list[tuple[int, float]]:
        """BM25 top-``limit`` as (chunk id, score), best first.

        ``acl_tokens=None`` and ``max_classification=None`` lift the access predicate; only the
        hidden-item marker asks for that (and, for the ceiling, a scope where it cannot exclude
        anything). ``corpora=None`` means every corpus of the tenant. ``doc_ids`` narrows to
        caller-filtered documents.
        """
        unique = list(dict.fromkeys(t for t in terms if t))
        if not unique or (corpora is not None and not corpora):
            return []
        if acl_tokens is not None and not acl_tokens:
            return []
        if doc_ids is not None and not doc_ids:
            return []
        q = tantivy.Query
        occur = tantivy.Occur
        text = q.boolean_query(
            [(occur.Should, q.term_query(self.schema, "body", t, "freq")) for t in unique]
        )
        clauses: list[tuple[tantivy.Occur, tantivy.Query]] = [(occur.Must, text)]

        def restrict(field: str, values: Sequence[str] | Sequence[int]) -> None:
            # Constant score 0: a filter narrows the candidates without changing BM25 scores.
            clauses.append(
                (occur.Must, q.const_score_query(q.term_set_query(self.schema, field, values), 0.0))
            )

        if corpora is not None:
            restrict("corpus", list(corpora))
        if acl_tokens is not None:
            restrict("acl", list(acl_tokens))
        if max_classification is not None:
            restrict("cls", list(range(max_classification + 1)))
        if doc_ids is not None:
            restrict("did", list(doc_ids))
        searcher = self._index.searcher()
        hits = searcher.search(q.boolean_query(clauses), limit, count=False).hits
        if not hits:
            return []
        cids = searcher.fast_field_values("cid", [addr for _, addr in hits])
        return [(int(cid or 0), float(score)) for (score, _), cid in zip(hits, cids, strict=True)]

    def all_chunk_ids(self) -> set[int]:
        """Every chunk id in the index (for ``govrag index verify``)."""
        searcher = self._index.searcher()
        n = searcher.num_docs
        if n == 0:
            return set()
        hits = searcher.search(tantivy.Query.all_query(), n, count=False).hits
        return {int(c or 0) for c in searcher.fast_field_values("cid", [a for _, a in hits])}
