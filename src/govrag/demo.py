"""``govrag demo`` / ``make demo``: the bundled ``bank-eu`` deployment, asked as its people.

The deployment (``govrag/data/bank-eu``: routes, manifests, the MSA workflow, principals and
a corpus of 42 documents with ACLs in two source systems) is copied into a directory, its
corpus ingested, and the questions of ``questions.json`` are asked through the orchestrator:

- the seed's worked example: officer-123 asks for the EU corporate wire limit on a Pattern 1
  route; the model proposes ``retrieve_documents`` on ``policy-engine``, the PDP allows it,
  and the answer cites ``policy-wire-limits-v3`` (EUR 50,000 per day);
- the DENY branch: the same officer's HR question; the PDP refuses ``hr-policies``;
- Pattern 0 (prefetch), Pattern 2 (the MSA review workflow), a route with no knowledge path;
- the hidden-item hint: a confidential review exists that the officer may not read;
- and the examiner's replay of the worked example from the audit log alone.
"""

from __future__ import annotations

import json
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

from govrag.agent.answer import Answer
from govrag.audit.keys import generate_key
from govrag.cli_agent import print_replay
from govrag.deployment import Deployment
from govrag.embed import semantic_available
from govrag.harvest.ingest import ingest_jsonl
from govrag.settings import CONFIG_FILE, AuditSettings

TENANT = "bank-eu"
#: What ``list_corpora`` tells the model about each corpus (the model picks corpora by it).
DESCRIPTIONS = {
    "policy-engine": "Bank policies: wire transfer limits and approvals for corporate and "
    "retail clients, AML, KYC, sanctions and payment operations",
    "hr-policies": "HR handbook: parental leave, holidays, expenses, working time, conduct",
    "product-faq": "Customer-facing product FAQs: accounts, cards, online banking, SEPA "
    "cut-off times and fees",
    "clause-index": "Clauses of supplier master services agreements (MSA)",
    "legal-playbook": "The bank's negotiation positions for MSA clauses",
}
FILES = ("principals.json", "routes", "manifests", "workflows")


def _toml(embedder: str) -> str:
    lines = [
        "# The bank-eu demo deployment (created by `govrag demo`).",
        f'default_tenant = "{TENANT}"',
        'default_route = "investigation"',
        "",
        "[embedder]",
        f'name = "{embedder}"',
    ]
    for corpus, about in DESCRIPTIONS.items():
        lines += ["", f"[corpora.{corpus}]", f"description = {json.dumps(about)}"]
    return "\n".join(lines) + "\n"


def create(directory: Path, embedder: str | None = None) -> bool:
    """Copy the bundled deployment into ``directory``; ``False`` when it already exists."""
    if (directory / CONFIG_FILE).exists():
        return False
    directory.mkdir(parents=True, exist_ok=True)
    chosen = embedder or ("minilm" if semantic_available() else "hash")
    source = resources.files("govrag") / "data" / "bank-eu"
    with resources.as_file(source) as root:
        for name in FILES:
            path = Path(root) / name
            if path.is_dir():
                shutil.copytree(path, directory / name, dirs_exist_ok=True)
            else:
                shutil.copy2(path, directory / name)
    (directory / CONFIG_FILE).write_text(_toml(chosen))
    key = directory / AuditSettings().signing_key  # signs the audit log's checkpoints
    if not key.exists():
        generate_key(key)
    return True


def run_demo(directory: Path, console: Console, *, embedder: str | None = None) -> None:
    """Create (or reuse) the demo deployment, ingest its corpus, and ask its questions."""
    if create(directory, embedder):
        console.print(f"created the bank-eu demo deployment in [bold]{directory}[/]")
    dep = Deployment.load(directory)
    try:
        bundled = resources.files("govrag") / "data" / "bank-eu"
        with resources.as_file(bundled / "corpus.jsonl") as path:
            report = ingest_jsonl(dep.store, path, TENANT, settings=dep.settings.ingest,
                                  embedder=dep.embedder)  # fmt: skip
        counts = report.as_dict()
        console.print(f"ingested the corpus (embedder {dep.settings.embedder.name}): "
                      f"{counts['added']} added, {counts['unchanged']} unchanged, "
                      f"{counts['errors']} errors")  # fmt: skip
        questions = json.loads((bundled / "questions.json").read_text(encoding="utf-8"))
        first: Answer | None = None
        for q in questions:
            answer = dep.orchestrator.ask(dep.principal(q["sub"]), q["question"],
                                          route_id=q["route_id"], text=q.get("text"))  # fmt: skip
            first = first or answer
            console.print(_panel(q, answer))
        if first is not None:
            from govrag.audit import replay

            console.rule(f"Examiner replay of {first.request_id} (audit log only)")
            print_replay(replay(dep.store, TENANT, first.request_id), console)
        chain = dep.store.verify_audit(TENANT)
        console.print(f"\naudit log: {chain.events} events, chain "
                      f"{'intact' if chain.ok else 'BROKEN'}. Try it yourself:\n"
                      f"  govrag ask \"What's our wire limit for corporate clients in the EU?\" "
                      f"--as officer-123 -d {directory}\n"
                      f"  govrag replay REQUEST_ID -d {directory}")  # fmt: skip
    finally:
        dep.close()


def _panel(q: dict[str, Any], a: Answer) -> Panel:
    lines = [f"[dim]{q['sub']} on route {a.route_id} (pattern {a.pattern}):[/] "
             f"{escape(q['question'])}"]  # fmt: skip
    if q.get("text"):
        lines.append(f"[dim]text:[/] {escape(q['text'])}")
    for d in a.decisions:
        colour = "green" if d.verdict == "ALLOW" else "red"
        lines.append(f"  [{colour}]{d.verdict}[/] {d.corpus} ({d.reason}, {d.policy_version}, "
                     f"audit {d.audit_id})")  # fmt: skip
    if not a.decisions:
        lines.append("  [dim]no retrieval on this route[/]")
    label = "[yellow]abstained[/]" if a.abstained else "[bold green]answer[/]"
    why = f" ({a.reason.replace('_', ' ')})" if a.reason else ""
    lines.append(f"{label}{why}: {escape(a.answer)}")
    for c in a.citations:
        lines.append(f"  [cyan]cites[/] {c.doc_id} ({c.corpus}, {c.source_system})")
    if a.hint:
        lines.append(f"  [yellow]hint:[/] {escape(a.hint)}")
    return Panel("\n".join(lines), title=q["title"], title_align="left", expand=True)
