"""``govrag demo`` / ``make demo``: a bundled corpus with ACLs, searched as two principals.

Ana is a risk analyst (group G-risk, clearance confidential, entitled to all three corpora);
Ben works in operations (clearance internal, not entitled to ``risk-models``). Every search
is a governed retrieve: the policy gate decides each corpus and commits an audit record
before anything is searched, so Ben is refused ``risk-models`` outright; inside the corpora
he may search, the store's ACL filter gives him less than Ana, and the hidden-item marker
tells him whom to ask about what he may not read.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from rich.console import Console
from rich.table import Table

from govrag.deployment import Deployment, scaffold
from govrag.embed import semantic_available
from govrag.harvest.ingest import ingest_jsonl
from govrag.settings import CONFIG_FILE, PRINCIPALS_FILE
from govrag.types import Strategy

PRINCIPALS = {
    "principals": [
        {
            "sub": "ana",
            "email": "ana@bank.example",
            "tenant": "bank",
            "roles": ["risk-analyst"],
            "doc_entitlements": ["policy-engine:read", "risk-models:read", "ops-runbooks:read"],
            "clearance": "confidential",
        },
        {
            "sub": "ben",
            "email": "ben@bank.example",
            "tenant": "bank",
            "roles": ["operations"],
            "doc_entitlements": ["policy-engine:read", "ops-runbooks:read"],
            "clearance": "internal",
        },
    ]
}

CORPORA = ("policy-engine", "risk-models", "ops-runbooks")
QUESTIONS = [
    "Who must approve a large wire transfer?",
    "What do we do when the payments console is down?",
    "credit default model performance",
]


def run_demo(directory: Path, console: Console) -> None:
    """Create (or reuse) a demo deployment, ingest the sample, and compare two principals."""
    if not (directory / CONFIG_FILE).exists():
        embedder = "minilm" if semantic_available() else "hash"
        scaffold(directory, embedder=embedder, tenant="bank", corpora=CORPORA)
        (directory / PRINCIPALS_FILE).write_text(json.dumps(PRINCIPALS, indent=2) + "\n")
        console.print(f"created demo deployment in [bold]{directory}[/] (embedder: {embedder})")
    dep = Deployment.load(directory)
    sample = resources.files("govrag") / "data" / "sample.jsonl"
    with resources.as_file(sample) as path:
        report = ingest_jsonl(
            dep.store, path, "bank", settings=dep.settings.ingest, embedder=dep.embedder
        )
    console.print(f"ingested sample corpus: {report.as_dict()}")
    for question in QUESTIONS:
        table = Table(title=f"[bold]{question}[/]", show_lines=False, expand=True)
        table.add_column("principal", no_wrap=True)
        table.add_column("policy gate")
        table.add_column("what they may read (hybrid search, top 3)")
        table.add_column("hidden-item marker")
        for sub in ("ana", "ben"):
            result = dep.governed.search(
                dep.principal(sub), question, strategy=Strategy.HYBRID, top_k=3
            )
            denied = [f"{d.corpus}: {d.reason}" for d in result.decisions if d.verdict != "ALLOW"]
            gate = "DENY " + "; ".join(denied) if denied else "ALLOW all"
            found = "\n".join(f"{h.doc_id} ({h.corpus})" for h in result.results) or "(nothing)"
            marker = "-"
            if result.hidden.present:
                marker = "; ".join(
                    f"in {s.source_system}, ask {s.author_email or 'the owner'}"
                    for s in result.hidden.sources
                )
            table.add_row(sub, gate, found, marker)
        console.print(table)
    chain = dep.store.verify_audit("bank")
    console.print(
        f"audit log: {chain.events} events, chain {'intact' if chain.ok else 'BROKEN'}. "
        f"Try it yourself: govrag search 'credit model' --as ben --deployment {directory} "
        f"--json; govrag audit verify --deployment {directory}"
    )
    dep.close()
