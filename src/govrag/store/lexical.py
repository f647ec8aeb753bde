"""Lexical BM25 search in tantivy: one derived index per tenant.

Chunks are indexed as govrag's analyzed terms (see ``analyzer.py``), so every BM25 index in
govrag scores the same tokens. Each chunk also carries its ACL principal tokens, corpus and
classification as indexed fields, and every query is ``(text) AND (principal tokens) AND
(corpus) AND (classification <= ceiling)`` evaluated inside the engine, before the top-k
collector truncates anything.

Scores are govrag's BM25 (``bm25.py``) with statistics counted under that same filter: a
chunk's score depends only on chunks the caller may read, never on the rest of the index.
The engine sums per-token constant weights computed for this query; ties are broken by
chunk id, also across the cut at ``limit``, so the result does not depend on how the index
happens to be laid out in segments.

The index is derived from the truth store: ``applied_seq`` records the last outbox sequence
number whose changes it holds; replaying entries is idempotent (delete by document, re-add).
An index written in an older format is discarded on open and rebuilt from the truth store.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path

import tantivy

from govrag.errors import IndexStaleError, StoreError
from govrag.store import bm25
from govrag.store.lexical_format import discard_other_format, schema, to_tantivy
from govrag.store.records import IndexedChunk

_SEQ_FILE = "applied_seq"
#: Filter statistics kept per index (a few KB each).
STATS_ENTRIES = 4096
#: How long a search waits for another process's index writer before refusing to search.
WRITER_WAIT_SECONDS = 15.0


class LexicalIndex:
    """The tantivy index of one tenant, on disk (``path``) or in memory (``path=None``)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.schema = schema()
        self._mem_seq = 0
        #: Whether this index holds no committed state (new, or of an older format).
        self.created = path is None or not (path / _SEQ_FILE).exists()
        try:
            if path is None:
                self._index = tantivy.Index(self.schema)
            else:
                self.created = discard_other_format(path) or self.created
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
        #: Statistics of recent filters at ``loaded_seq``: ``(filter, prefix) -> counts``. A
        #: caller's next search mostly repeats its filter, and counting under it is most of
        #: the cost of a search; any reload empties it.
        self._stats: OrderedDict[tuple[object, ...], list[tuple[str, int]]] = OrderedDict()
        self._stats_lock = threading.Lock()

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
            self._reload(seq)
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
                writer.add_document(to_tantivy(doc))
            writer.commit()
        except ValueError as exc:
            with contextlib.suppress(ValueError):
                writer.rollback()
            raise StoreError(f"lexical index write failed: {exc}") from exc
        finally:
            # Consumes the writer: its merges finish and the index lock is released now, for
            # other processes (not whenever a collection of cyclic garbage frees it: a full
            # collection per write cost a tenth of a second in a large process).
            with contextlib.suppress(ValueError):
                writer.wait_merging_threads()
        self._write_seq(seq)
        self._reload(seq)

    def _reload(self, seq: int) -> None:
        with self._stats_lock:
            self._index.reload()
            self.loaded_seq = seq
            self._stats.clear()

    def _counts(
        self,
        searcher: tantivy.Searcher,
        scope: tantivy.Query,
        key: tuple[object, ...],
        field: str,
        prefix: str,
    ) -> list[tuple[str, int]]:
        """``terms_with_prefix`` under the filter ``scope``, cached by ``key`` (the reader
        generation first, then what identifies the filter)."""
        entry = (key, field, prefix)
        with self._stats_lock:
            found = self._stats.get(entry)
            if found is not None:
                self._stats.move_to_end(entry)
                return found
        counts = searcher.terms_with_prefix(field, prefix, filter_query=scope)
        with self._stats_lock:
            if key[0] == self.loaded_seq:  # still the current generation
                self._stats[entry] = counts
                while len(self._stats) > STATS_ENTRIES:
                    self._stats.popitem(last=False)
        return counts

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
        """BM25 top-``limit`` as (chunk id, score), best first, ties by chunk id.

        ``acl_tokens=None`` lifts the access predicate (only the hidden-item marker asks for
        that); ``max_classification=None`` and ``corpora=None`` mean no such limit (a scope
        where it cannot exclude anything). ``doc_ids`` narrows to caller-filtered documents.
        The statistics are counted under exactly this filter.
        """
        unique = list(dict.fromkeys(t for t in terms if t))
        if not unique or limit < 1 or _excludes_all(corpora, acl_tokens, doc_ids):
            return []
        scope = self._scope(corpora, acl_tokens, max_classification, doc_ids)
        with self._stats_lock:  # a searcher, and the generation its statistics belong to
            searcher, generation = self._index.searcher(), self.loaded_seq
        key = (
            generation,
            None if corpora is None else tuple(corpora),
            None if acl_tokens is None else tuple(acl_tokens),
            max_classification,
            None if doc_ids is None else tuple(doc_ids),
        )
        lengths = self._counts(searcher, scope, key, "dl", "")
        n = sum(count for _, count in lengths)
        if n == 0:
            return []
        avgdl = sum(int(dl) * count for dl, count in lengths) / n
        q, occur = tantivy.Query, tantivy.Occur
        weighted: list[tuple[tantivy.Occur, tantivy.Query]] = []
        for term in unique:
            tokens = self._counts(searcher, scope, key, "tf", term + bm25.SEP)
            df = sum(count for _, count in tokens)
            if df == 0:
                continue
            idf = bm25.idf(n, df)
            for token, _ in tokens:
                tf, dl = bm25.parse_token(token)
                weight = idf * bm25.saturation(tf, dl, avgdl)
                term_q = q.term_query(self.schema, "tf", token, "basic")
                weighted.append((occur.Should, q.const_score_query(term_q, weight)))
        if not weighted:
            return []
        query = q.boolean_query([(occur.Must, q.boolean_query(weighted)), (occur.Must, scope)])
        return _top(searcher, query, limit)

    def any_match(
        self,
        *,
        corpora: Sequence[str] | None,
        acl_tokens: Sequence[str] | None,
        max_classification: int | None,
    ) -> bool:
        """Whether any chunk passes the filter (``None``: no such limit)."""
        if _excludes_all(corpora, acl_tokens, None):
            return False
        with self._stats_lock:
            searcher = self._index.searcher()
        scope = self._scope(corpora, acl_tokens, max_classification, None)
        return bool(searcher.search(scope, 1, count=False).hits)

    def _scope(
        self,
        corpora: Sequence[str] | None,
        acl_tokens: Sequence[str] | None,
        max_classification: int | None,
        doc_ids: Sequence[int] | None,
    ) -> tantivy.Query:
        """The filter ``(corpus) AND (principal tokens) AND (classification <= ceiling) AND
        (caller-filtered documents)``, each part only when given, as a query of score 0.
        Always a query, even "everything": counts under a filter see live documents only (a
        deleted one stays in its segment's term counts until a merge)."""
        q, occur = tantivy.Query, tantivy.Occur
        parts: list[tuple[str, Sequence[str] | Sequence[int]]] = []
        if corpora is not None:
            parts.append(("corpus", list(corpora)))
        if acl_tokens is not None:
            parts.append(("acl", list(acl_tokens)))
        if max_classification is not None:
            parts.append(("cls", list(range(max_classification + 1))))
        if doc_ids is not None:
            parts.append(("did", list(doc_ids)))
        if not parts:
            return q.all_query()
        return q.boolean_query(
            [(occur.Must, q.const_score_query(q.term_set_query(self.schema, field, values), 0.0))
             for field, values in parts]
        )  # fmt: skip

    def withheld(
        self,
        terms: Sequence[str],
        *,
        min_terms: int,
        corpora: Sequence[str] | None,
        acl_tokens: Sequence[str],
        max_classification: int | None,
        limit: int,
    ) -> list[int]:
        """Up to ``limit`` chunk ids, lowest first, of chunks that hold at least ``min_terms``
        (at least 1) of the distinct ``terms``, are in ``corpora`` at or below
        ``max_classification``, and that none of ``acl_tokens`` may read: the hidden-item
        marker's candidates (the rule that picks ``min_terms`` is ``search.py``'s). Whether a
        chunk is one depends on that chunk and the terms alone (no score, no statistics, no
        cut by rank), so no other document can make it count or not."""
        if min_terms < 1:
            raise StoreError(f"withheld: min_terms must be at least 1, not {min_terms}")
        unique = list(dict.fromkeys(t for t in terms if t))
        if len(unique) < min_terms or not acl_tokens or limit < 1:
            return []
        if corpora is not None and not corpora:
            return []
        q = tantivy.Query
        occur = tantivy.Occur
        with self._stats_lock:
            searcher = self._index.searcher()
        # The ``term`` field holds each of a chunk's distinct terms once: a term no chunk
        # holds is simply never matched.
        held = [(occur.Should, q.term_query(self.schema, "term", term)) for term in unique]
        # A nested boolean of Should clauses with a minimum: a chunk matches when at least
        # ``min_terms`` of its clauses do (checked against a brute-force count on tantivy
        # 0.27, also with several segments and a limit).
        relevant = q.boolean_query(held, minimum_number_should_match=min_terms)
        query = q.boolean_query([
            (occur.Must, self._scope(corpora, None, max_classification, None)),
            (occur.Must, relevant),
            (occur.MustNot, q.term_set_query(self.schema, "acl", list(acl_tokens))),
        ])  # fmt: skip
        hits = searcher.search(
            query, limit, count=False, order_by_field="cid", order=tantivy.Order.Asc
        ).hits
        return [int(cid) for cid, _ in hits]

    def all_chunks(self) -> dict[int, int]:
        """Every chunk id in the index with its access digest (for ``govrag index verify``)."""
        searcher = self._index.searcher()
        n = searcher.num_docs
        if n == 0:
            return {}
        addrs = [a for _, a in searcher.search(tantivy.Query.all_query(), n, count=False).hits]
        cids = searcher.fast_field_values("cid", addrs)
        digests = searcher.fast_field_values("acc", addrs)
        return {int(c or 0): int(d or 0) for c, d in zip(cids, digests, strict=True)}


def _excludes_all(
    corpora: Sequence[str] | None, acl_tokens: Sequence[str] | None, doc_ids: Sequence[int] | None
) -> bool:
    """An empty list of corpora, tokens or documents admits nothing (``None`` admits all)."""
    return any(v is not None and not v for v in (corpora, acl_tokens, doc_ids))


def _top(searcher: tantivy.Searcher, query: tantivy.Query, limit: int) -> list[tuple[int, float]]:
    """The best ``limit`` hits, ties ordered by chunk id. The engine breaks ties by where a
    document sits in its segments; so when the hit after the cut ties with the last one,
    fetch on until the score drops and cut the ordered list instead."""
    fetch = limit + 1
    while True:
        hits = searcher.search(query, fetch, count=False).hits
        if len(hits) < fetch or hits[-1][0] != hits[limit - 1][0]:
            break
        fetch *= 2
    cids = searcher.fast_field_values("cid", [addr for _, addr in hits])
    ranked = sorted(
        ((int(cid or 0), float(score)) for (score, _), cid in zip(hits, cids, strict=True)),
        key=lambda pair: (-pair[1], pair[0]),
    )
    return ranked[:limit]
