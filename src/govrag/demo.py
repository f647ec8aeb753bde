"""The bundled ``bank-eu`` deployment of ``govrag demo`` / ``make demo``, asked as its people.

The deployment (``govrag/data/bank-eu``: routes, manifests, the MSA workflow, principals and
a corpus of 44 documents with ACLs in two source systems) is copied into a directory, its
corpus ingested, and the questions of ``questions.json`` are asked through the application
API (the command is ``govrag/cli/demo.py``):

- the seed's worked example: officer-123 asks for the EU corporate wire limit on a Pattern 1
  route; the model proposes ``retrieve_documents`` on ``policy-engine``, the PDP allows it,
  and the answer cites ``policy-wire-limits-v3`` (EUR 50,000 per day);
- the DENY branch: the same officer's HR question; the PDP refuses ``hr-policies``;
- Pattern 0 (prefetch), Pattern 2 (the MSA review workflow), a route with no knowledge path;
- the hidden-item hint: analyst-207 (cleared confidential) may not read the financial-crime
  bulletin and is told whom to ask; the investigator on its list reads it; the officer
  (internal clearance) is told nothing, since a marker never points above a clearance;
- and the examiner's replay of the worked example from the audit log alone.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from govrag.audit.keys import generate_key
from govrag.embed import semantic_available
from govrag.settings import CONFIG_FILE, AuditSettings

TENANT = "bank-eu"
#: What ``list_corpora`` tells the model about each corpus (the model picks corpora by it).
DESCRIPTIONS = {
    "policy-engine": "Bank policies: wire transfer limits and approvals for corporate and "
    "retail clients, AML, KYC, sanctions and payment operations",
    # What the corpus holds, from its documents' titles: a question about one of them, asked
    # by a caller the policy gate refuses this corpus, is told where the answer would be.
    "hr-policies": "HR handbook: parental leave; annual leave and public holidays; travel "
    "and expenses; code of conduct: gifts, entertainment and conflicts of interest; personal "
    "account dealing; hybrid working; staff misconduct investigations",
    "product-faq": "Customer-facing product FAQs: accounts, cards, online banking, SEPA "
    "cut-off times and fees",
    "clause-index": "Clauses of supplier master services agreements (MSA)",
    "legal-playbook": "The bank's negotiation positions for MSA clauses",
    "credit-memos": "Credit committee memos (not harvested yet: the credit workflow's "
    "connector is pending)",
}
#: The clearance a caller needs to search each corpus at all (the PDP's classification rule):
#: the legal corpora hold only confidential clauses and positions, so an under-cleared caller
#: is refused by the policy gate, not handed an empty search (or a memo made from nothing).
CLASSIFICATIONS = {
    "policy-engine": "internal",
    "hr-policies": "internal",
    "clause-index": "confidential",
    "legal-playbook": "confidential",
    "credit-memos": "confidential",
}
FILES = ("principals.json", "routes", "manifests", "workflows", "evals", "prompts", "schemas")
_BUNDLED = resources.files("govrag") / "data" / "bank-eu"


def _toml(embedder: str) -> str:
    lines = [
        "# The bank-eu demo deployment (created by `govrag demo`).",
        f'default_tenant = "{TENANT}"',
        'default_route = "investigation"',
        "",
        "[embedder]",
        f'name = "{embedder}"',
    ]
    lines += [
        "",
        "# The routes' model_profile: each is [llm] with these keys in place.",
        "[llm.profiles.fast-standard]       # email summaries and policy Q&A: short answers",
        "max_tokens = 512",
        "",
        "[llm.profiles.reasoning-standard]  # investigation and the MSA review",
        "max_tokens = 1024",
    ]
    for corpus, about in DESCRIPTIONS.items():
        lines += ["", f"[corpora.{corpus}]", f"description = {json.dumps(about)}"]
        if corpus in CLASSIFICATIONS:
            lines.append(f'classification = "{CLASSIFICATIONS[corpus]}"')
    return "\n".join(lines) + "\n"


def create(directory: Path, embedder: str | None = None) -> bool:
    """Copy the bundled deployment into ``directory``; ``False`` when it already exists."""
    if (directory / CONFIG_FILE).exists():
        return False
    directory.mkdir(parents=True, exist_ok=True)
    chosen = embedder or ("minilm" if semantic_available() else "hash")
    with resources.as_file(_BUNDLED) as root:
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


@contextmanager
def bundled_corpus() -> Iterator[Path]:
    """The bundled corpus (44 documents with ACLs in two source systems) as a JSONL file."""
    with resources.as_file(_BUNDLED / "corpus.jsonl") as path:
        yield Path(path)


class DemoQuestion(BaseModel):
    """One question the demo asks: who asks it, on which route, and its panel's title."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    title: str
    sub: str
    route_id: str
    question: str
    text: str | None = None


def questions() -> list[DemoQuestion]:
    """The demo's questions, in the order it asks them."""
    raw = json.loads((_BUNDLED / "questions.json").read_text(encoding="utf-8"))
    return [DemoQuestion.model_validate(q) for q in raw]
