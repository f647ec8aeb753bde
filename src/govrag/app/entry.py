"""Where a program starts: open a deployment, write a starter one, or measure retrieval
quality on a BEIR dataset without one (``govrag.open``, ``govrag.init``,
``govrag.evaluate_beir``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from govrag.app.api import Govrag
from govrag.deployment import Deployment
from govrag.settings import Settings, load_settings
from govrag.types import Strategy


def open(deployment: str | Path | Settings | None = None, **overrides: Any) -> Govrag:
    """Open the deployment in ``deployment`` (a directory; default ``GOVRAG_DEPLOYMENT`` or
    the current directory) or described by ready :class:`Settings`. ``overrides`` take
    precedence over the environment and ``govrag.toml`` (e.g. ``default_tenant="bank"``)."""
    if isinstance(deployment, Settings):
        if overrides:
            raise TypeError("pass overrides with a directory, not with ready Settings")
        return Govrag(Deployment(deployment))
    return Govrag(Deployment(load_settings(deployment, **overrides)))


def evaluate_beir(
    beir_dir: str | Path,
    *,
    strategy: Strategy = Strategy.KEYWORD,
    split: str = "test",
    embedder: str = "hash",
    top_k: int = 100,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Retrieval quality on a BEIR dataset loaded into a temporary SQLite store (no
    deployment needed): nDCG@10, recall@100 and latency figures."""
    from govrag.eval.runner import run_beir_eval

    return run_beir_eval(beir_dir, strategy=strategy, split=split, embedder=embedder,
                         top_k=top_k, progress=progress)  # fmt: skip


def init(
    directory: str | Path,
    *,
    embedder: str = "hash",
    tenant: str = "default",
    corpora: Sequence[str] = (),
    force: bool = False,
) -> list[Path]:
    """Write a starter deployment into ``directory`` (``govrag init``): settings, one
    principal entitled to ``corpora``, a tool route over them, seed 003's three tools, the
    audit signing key and ``sample.jsonl`` (the bundled sample's documents of ``corpora``, when
    it has any: for the operator to ingest or delete). Returns the files written; writes
    nothing when an argument could not make a working deployment, and never overwrites without
    ``force``."""
    from govrag.scaffold import scaffold

    return scaffold(Path(directory), embedder=embedder, tenant=tenant, corpora=tuple(corpora),
                    force=force)  # fmt: skip
