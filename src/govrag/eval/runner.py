"""``govrag eval``: load a BEIR dataset into a store and measure retrieval quality.

Documents are ingested as public, readable by everyone in a throw-away tenant, and every query
runs through the same governed search path a real caller uses (ACL pre-filter included), so the
figures measure the production code, not a side path. The store is a temporary SQLite file, or
a deployment's own store (any backend), where the throw-away tenant is dropped afterwards.
"""

from __future__ import annotations

import re
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from govrag.embed import get_embedder
from govrag.embed.base import Embedder
from govrag.eval.beir import BeirDataset, load_beir
from govrag.eval.metrics import evaluate, percentile
from govrag.harvest.ingest import Ingestor
from govrag.harvest.records import DocumentRecord, IdentityRecord
from govrag.settings import IngestSettings, SearchSettings
from govrag.store.protocol import KnowledgeStore
from govrag.store.sqlite import SQLiteStore
from govrag.types import Classification, Principal, SearchRequest, Strategy

TENANT = "eval"
SOURCE = "beir"
EVAL_EMAIL = "eval@govrag.local"


@dataclass(frozen=True)
class EvalPass:
    """One more run of the queries over the same store: ``strategy`` at ``top_k``, with
    ``search`` settings in place of the store's (None: the store's own). Lets settings be
    compared without embedding the corpus again."""

    strategy: Strategy
    top_k: int
    search: SearchSettings | None = None


def run_beir_eval(
    beir_dir: str | Path,
    *,
    strategy: Strategy = Strategy.KEYWORD,
    split: str = "test",
    embedder: str = "hash",
    top_k: int = 100,
    search: SearchSettings | None = None,
    ingest: IngestSettings | None = None,
    progress: Callable[[str], None] | None = None,
    store: KnowledgeStore | None = None,
) -> dict[str, Any]:
    """Run every query of ``split``; returns the figures ``govrag eval --json`` prints."""
    return run_beir_evals(
        beir_dir,
        strategies=[strategy],
        split=split,
        embedder=embedder,
        top_k=top_k,
        search=search,
        ingest=ingest,
        progress=progress,
        store=store,
    )[0]


def run_beir_evals(
    beir_dir: str | Path,
    *,
    strategies: Sequence[Strategy],
    split: str = "test",
    embedder: str = "hash",
    top_k: int = 100,
    search: SearchSettings | None = None,
    ingest: IngestSettings | None = None,
    progress: Callable[[str], None] | None = None,
    store: KnowledgeStore | None = None,
    passes: Sequence[EvalPass] = (),
) -> list[dict[str, Any]]:
    """Like :func:`run_beir_eval` for several strategies over one store (embedded once),
    then each of ``passes`` (their figures follow, in order).

    ``store``: load into this store (in a fresh tenant, dropped afterwards) with its embedder,
    instead of a temporary SQLite file.
    """
    say = progress or (lambda _msg: None)
    data = load_beir(beir_dir, split)
    corpus_id = re.sub(r"[^A-Za-z0-9_.:\-]", "-", data.name).strip("-") or "beir"
    every = [*strategies, *(extra.strategy for extra in passes)]
    dense = any(s is not Strategy.KEYWORD for s in every)
    out: list[dict[str, Any]] = []
    with _eval_store(store, embedder if dense else None, search) as (store, tenant):
        emb = store.embedder if dense else None
        say(f"loading {len(data.corpus)} documents from {data.name} ...")
        started = time.perf_counter()
        ingestor = Ingestor(
            store, tenant, settings=ingest, embedder=emb, embed_progress=_every(say, 1000)
        )
        ingestor.add(
            "eval",
            IdentityRecord(
                type="identity", email=EVAL_EMAIL, source_system=SOURCE, account_id="eval"
            ),
        )
        for doc in data.corpus.values():
            ingestor.add(
                doc.doc_id,
                DocumentRecord(
                    type="document",
                    source_system=SOURCE,
                    external_id=doc.doc_id,
                    corpus=corpus_id,
                    title=doc.title,
                    text=doc.text or doc.title or " ",
                    acl=["*"],
                    classification=Classification.PUBLIC,
                ),
            )
        ingestor.flush()
        store.sync_indexes(tenant)
        elapsed = time.perf_counter() - started
        say(f"indexed in {elapsed:.1f}s; running {len(data.queries)} queries")
        for strategy in strategies:
            out.append(_run_queries(store, tenant, data, strategy, top_k, emb))
        for extra in passes:
            with _searching_with(store, extra.search):
                figures = _run_queries(store, tenant, data, extra.strategy, extra.top_k, emb)
            if extra.search is not None:
                figures["search"] = extra.search.model_dump(mode="json", exclude_defaults=True)
            out.append(figures)
    return out


@contextmanager
def _searching_with(store: KnowledgeStore, search: SearchSettings | None) -> Iterator[None]:
    """``store`` searching with ``search`` (every search reads its settings anew)."""
    if search is None:
        yield
        return
    own = store.search_settings
    store.search_settings = search
    try:
        yield
    finally:
        store.search_settings = own


@contextmanager
def _eval_store(
    store: KnowledgeStore | None, embedder: str | None, search: SearchSettings | None
) -> Iterator[tuple[KnowledgeStore, str]]:
    """(store, throw-away tenant): the given store, or a temporary SQLite file."""
    if store is not None:
        tenant = f"{TENANT}-{secrets.token_hex(4)}"
        try:
            yield store, tenant
        finally:
            store.drop_tenant(tenant)
        return
    emb = get_embedder(embedder) if embedder else None
    with tempfile.TemporaryDirectory(prefix="govrag-eval-") as tmp:
        temp = SQLiteStore(
            Path(tmp) / "eval.db", index_dir=Path(tmp) / "index", embedder=emb, search=search
        )
        try:
            yield temp, TENANT
        finally:
            temp.close()


def _run_queries(
    store: KnowledgeStore,
    tenant: str,
    data: BeirDataset,
    strategy: Strategy,
    top_k: int,
    emb: Embedder | None,
) -> dict[str, Any]:
    principal = Principal(
        sub="eval", email=EVAL_EMAIL, tenant=tenant, clearance=Classification.PUBLIC
    )
    run: dict[str, list[str]] = {}
    latencies: list[float] = []
    for qid, text in data.queries.items():
        # Chunks are deduplicated to documents, so ask for more chunks than documents.
        request = SearchRequest(query=text, strategy=strategy, top_k=min(1000, top_k * 2))
        t0 = time.perf_counter()
        result = store.search(principal, request)
        latencies.append((time.perf_counter() - t0) * 1000)
        run[qid] = list(dict.fromkeys(hit.doc_id for hit in result.results))[:top_k]
    figures = evaluate(run, data.qrels)
    return {
        "dataset": data.name,
        "strategy": str(strategy),
        "embedder": emb.name if emb is not None and strategy is not Strategy.KEYWORD else None,
        "queries": len(data.queries),
        "top_k": top_k,
        "ndcg@10": round(figures["ndcg@10"], 4),
        "recall@100": round(figures["recall@100"], 4),
        "mrr@10": round(figures["mrr@10"], 4),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p95_ms": round(percentile(latencies, 95), 2),
    }


def _every(say: Callable[[str], None], step: int) -> Callable[[int], None]:
    """A progress callback that reports every ``step`` embedded texts."""
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        before, done = done, done + n
        if before // step != done // step:
            say(f"embedded {done} chunks")

    return tick
