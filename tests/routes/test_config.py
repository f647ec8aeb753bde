"""Deployment config: the seed's examples load; every rejection names its file and field."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from govrag.errors import ConfigError
from govrag.routes import check_config, load_config

ROUTES = [
    {"route_id": "email_summarize", "tool_manifest": "none", "retrieval": {"mode": "none"}},
    {"route_id": "policy_qa", "tool_manifest": "none", "prompt_id": "policy_qa_grounded_v1",
     "retrieval": {"mode": "deterministic_prefetch", "scope": ["policy-engine", "product-faq"]}},
    {"route_id": "msa_risk_review", "intent": "msa_risk_review",
     "model_profile": "reasoning-standard", "tool_manifest": "msa_risk_review_v1",
     "policy_profile": "read_only_standard",
     "retrieval": {"mode": "tool", "scope": ["clause-index", "legal-playbook"]},
     "workflow_id": "msa_risk_review_v1", "prompt_id": "msa_risk_review_v1",
     "output_schema_id": "msa_memo_v1", "eval_suite_id": "msa_risk_review_golden"},
]  # fmt: skip
SEARCH = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
MANIFEST = {
    "manifest_id": "msa_risk_review_v1",
    "version": "2026.07.1",
    "tools": [
        {"name": "ocr_extract", "pdp_action": "ocr_extract"},
        {"name": "clause_search", "pdp_action": "clause_search", "kind": "retrieve",
         "parameters": SEARCH},
        {"name": "policy_search", "pdp_action": "policy_search", "kind": "retrieve",
         "parameters": SEARCH, "risk_tier": "medium"},
        {"name": "risk_engine", "pdp_action": "risk_engine"},
        {"name": "draft_memo", "pdp_action": "draft_memo"},
    ],
}  # fmt: skip
WORKFLOW = {
    "workflow_id": "msa_risk_review_v1",
    "stages": [
        {"id": "ocr", "tool": "ocr_extract", "llm_role": "none"},
        {"id": "clause_search", "tool": "clause_search", "corpus": "clause-index",
         "llm_role": "query_formulation"},
        {"id": "policy_search", "tool": "policy_search", "corpus": "legal-playbook",
         "llm_role": "query_formulation"},
        {"id": "risk_engine", "tool": "risk_engine", "llm_role": "none"},
        {"id": "memo", "tool": "draft_memo", "llm_role": "synthesis"},
    ],
}  # fmt: skip
MEMO = {"type": "object", "required": ["summary"],
        "properties": {"summary": {"type": "string"}}}  # fmt: skip
POLICY = """
permit(principal, action, resource)
when { context.entitled };
"""


def write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2))


@pytest.fixture
def deployment(tmp_path: Path) -> Path:
    write(tmp_path / "govrag.toml", '[embedder]\nname = "hash"\n')
    write(tmp_path / "routes" / "routes.json", ROUTES)
    write(tmp_path / "manifests" / "msa.json", MANIFEST)
    write(tmp_path / "workflows" / "msa.json", WORKFLOW)
    write(tmp_path / "policies" / "pgar" / "bundle.json",
          {"name": "pgar.retrieval.corpus", "version": "v2",
           "profiles": ["read_only_standard"]})  # fmt: skip
    write(tmp_path / "policies" / "pgar" / "retrieval.cedar", POLICY)
    write(
        tmp_path / "evals" / "msa_risk_review_golden.jsonl", '{"suite": "msa_risk_review_golden"}'
    )
    for prompt in ("policy_qa_grounded_v1", "msa_risk_review_v1"):
        write(tmp_path / "prompts" / f"{prompt}.txt", "Answer briefly.")
    write(tmp_path / "schemas" / "msa_memo_v1.json", MEMO)
    return tmp_path


def test_the_seed_examples_load(deployment: Path) -> None:
    config = load_config(deployment)
    assert sorted(config.routes) == ["email_summarize", "msa_risk_review", "policy_qa"]
    assert config.routes["policy_qa"].retrieval.scope == ("policy-engine", "product-faq")
    assert config.routes["email_summarize"].retrieval.mode == "none"
    assert config.bundles["pgar.retrieval.corpus"].policy_version == "pgar.retrieval.corpus/v2"
    assert config.warnings == ()
    assert config.route_table_version.startswith("sha256:")


def test_the_route_table_version_follows_the_routes(deployment: Path) -> None:
    before = load_config(deployment).route_table_version
    (deployment / "manifests" / "msa.json").write_text(json.dumps({**MANIFEST, "version": "2"}))
    assert load_config(deployment).route_table_version == before  # not a route change
    route(1, prompt_id="policy_qa_grounded_v2")(deployment)
    assert load_config(deployment).route_table_version != before


def route(index: int, **changes: Any) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        routes = json.loads((root / "routes" / "routes.json").read_text())
        routes[index] = {**routes[index], **changes}
        write(root / "routes" / "routes.json", routes)

    return apply


def edit(rel: str, change: Callable[[Any], Any]) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        path = root / rel
        write(path, change(json.loads(path.read_text())))

    return apply


def stage_corpus(wf: dict[str, Any]) -> dict[str, Any]:
    wf["stages"][1]["corpus"] = "hr-policies"
    return wf


# (mutation, file, field, message fragment)
REJECTIONS: list[tuple[str, Callable[[Path], None], str, str, str]] = [
    ("retrieval array", route(2, retrieval=[{"mode": "deterministic_prefetch", "scope": ["a"]},
                                            {"mode": "tool", "scope": ["b"]}]),
     "routes/routes.json", "[2].retrieval", "one object, not an array"),
    ("unknown mode", route(1, retrieval={"mode": "prefetch", "scope": ["policy-engine"]}),
     "routes/routes.json", "[1].retrieval.mode", "'prefetch' is not allowed"),
    ("unknown field", route(0, retreival={"mode": "none"}),
     "routes/routes.json", "[0].retreival", "unknown field"),
    ("duplicate route id", route(1, route_id="email_summarize"),
     "routes/routes.json", "[1].route_id", "duplicate route id 'email_summarize'"),
    ("missing manifest", route(2, tool_manifest="msa_v9"),
     "routes/routes.json", "tool_manifest", "no manifest 'msa_v9'"),
    ("missing workflow", route(2, workflow_id="wf_v9"),
     "routes/routes.json", "workflow_id", "no workflow 'wf_v9'"),
    ("stage corpus outside scope", edit("workflows/msa.json", stage_corpus),
     "workflows/msa.json", "stages.1.corpus", "'hr-policies' of stage 'clause_search' is not in"),
    ("stage tool not in manifest", edit("workflows/msa.json", lambda wf: {
        **wf, "stages": [*wf["stages"], {"id": "x", "tool": "web_search"}]}),
     "workflows/msa.json", "stages.5.tool", "'web_search' of stage 'x' is not in manifest"),
    ("duplicate stage id", edit("workflows/msa.json", lambda wf: {
        **wf, "stages": [*wf["stages"], {"id": "memo"}]}),
     "workflows/msa.json", "stages", "stage id 'memo' is used twice"),
    ("bad parameter schema", edit("manifests/msa.json", lambda m: {
        **m, "tools": [{**m["tools"][0], "parameters": {"type": "objekt"}}, *m["tools"][1:]]}),
     "manifests/msa.json", "tools.0.parameters", "not a valid JSON Schema"),
    ("tool without pdp_action", edit("manifests/msa.json", lambda m: {
        **m, "tools": [{"name": "t"}]}),
     "manifests/msa.json", "tools.0.pdp_action", "is required"),
    ("invalid JSON", lambda root: (root / "manifests" / "msa.json").write_text("{\"a\": }"),
     "manifests/msa.json", "", "invalid JSON: Expecting value at line 1 column 7"),
    ("bad Cedar", lambda root: write(root / "policies" / "pgar" / "retrieval.cedar",
                                     "permit(principal"),
     "policies/pgar/retrieval.cedar", "", "is not valid Cedar"),
    ("bundle without bundle.json", lambda root: (root / "policies" / "pgar" / "bundle.json")
     .unlink(), "policies/pgar", "", "has no bundle.json"),
    ("unknown policy profile", route(1, policy_profile="read_write_all"),
     "routes/routes.json", "policy_profile", "no policy bundle 'read_write_all' in policies/"),
    ("profile served twice", lambda root: write(root / "policies" / "zz" / "bundle.json",
        {"name": "other", "version": "v1", "profiles": ["read_only_standard"]}) or write(
        root / "policies" / "zz" / "p.cedar", POLICY),
     "policies/zz/bundle.json", "profiles", "'read_only_standard' is already served"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("mutate", "path", "field", "fragment"),
    [r[1:] for r in REJECTIONS],
    ids=[r[0] for r in REJECTIONS],
)
def test_each_rejection_names_file_and_field(
    deployment: Path, mutate: Callable[[Path], None], path: str, field: str, fragment: str
) -> None:
    mutate(deployment)
    config, problems = check_config(deployment)
    assert config is None
    errors = [p for p in problems if not p.warning]
    assert any(p.path == path and p.field == field and fragment in p.message for p in errors), (
        "\n".join(map(str, errors))
    )
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace("[", r"\[")):
        load_config(deployment)


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (route(2, retrieval={"mode": "tool", "scope": []}, workflow_id=None),
         "tool mode with an empty scope: every retrieve will be denied"),
        (route(0, retrieval={"mode": "none", "scope": ["policy-engine"]}),
         "has mode none: its scope is never used"),
        (route(2, eval_suite_id="absent"),
         "binds eval suite 'absent', but there is no evals/absent.jsonl"),
    ],
)  # fmt: skip
def test_warnings_do_not_stop_loading(
    deployment: Path, mutate: Callable[[Path], None], fragment: str
) -> None:
    mutate(deployment)
    config = load_config(deployment)
    assert [p.message for p in config.warnings if fragment in p.message]
    assert all(p.path == "routes/routes.json" for p in config.warnings)


def test_a_policy_profile_names_a_bundle_or_a_profile_it_serves(deployment: Path) -> None:
    config = load_config(deployment)
    assert config.bundle_for("read_only_standard") is config.bundles["pgar.retrieval.corpus"]
    assert config.bundle_for("pgar.retrieval.corpus") is config.bundles["pgar.retrieval.corpus"]
    assert config.bundle_for("nope") is None


def test_every_problem_is_reported_at_once(deployment: Path) -> None:
    for i in (3, 4, 9, 12):  # duplicate route, missing manifest, bad schema, bad Cedar
        REJECTIONS[i][1](deployment)
    _, problems = check_config(deployment)
    assert len([p for p in problems if not p.warning]) >= 4


def test_an_empty_deployment_is_valid(tmp_path: Path) -> None:
    config = load_config(tmp_path)
    assert config.routes == {}
    # The built-in bundle is always there, so a route may omit policy_profile.
    assert list(config.bundles) == ["pgar.retrieval.corpus"]


def govrag(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "govrag.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_config_check_cli(deployment: Path) -> None:
    done = govrag("config", "check", "-d", str(deployment), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["routes"] == ["email_summarize", "msa_risk_review", "policy_qa"]
    route(2, tool_manifest="msa_v9")(deployment)
    stage_corpus_edit = edit("workflows/msa.json", stage_corpus)
    stage_corpus_edit(deployment)
    done = govrag("config", "check", "-d", str(deployment))
    assert done.returncode == 2
    assert "routes/routes.json: tool_manifest: no manifest 'msa_v9'" in done.stderr
    assert "workflows/msa.json: stages.1.corpus" in done.stderr
    assert "Traceback" not in done.stderr


def scope_warnings(deployment: Path) -> list[dict[str, Any]]:
    done = govrag("config", "check", "-d", str(deployment), "--json")
    assert done.returncode == 0, done.stderr
    problems: list[dict[str, Any]] = json.loads(done.stdout)["problems"]
    return [p for p in problems if p["field"] == "retrieval.scope"]


def test_config_check_names_a_scoped_corpus_nothing_knows(deployment: Path) -> None:
    # Nothing names the four scoped corpora yet: a warning each, and no store is created.
    found = {(p["path"], p["message"].split("scopes corpus ")[1].split(",")[0])
             for p in scope_warnings(deployment)}  # fmt: skip
    assert found == {("routes (policy_qa)", "'policy-engine'"),
                     ("routes (policy_qa)", "'product-faq'"),
                     ("routes (msa_risk_review)", "'clause-index'"),
                     ("routes (msa_risk_review)", "'legal-playbook'")}  # fmt: skip
    assert not (deployment / "govrag.db").exists()
    # Each way a deployment knows a corpus: a [corpora] table, a source's corpus, a top-level
    # folder of a filesystem source, documents ingested into it.
    (deployment / "kb" / "clause-index").mkdir(parents=True)
    (deployment / "faq.jsonl").write_text("")
    with (deployment / "govrag.toml").open("a") as toml:
        toml.write('[corpora.policy-engine]\ndescription = "Bank policies"\n'
                   '[sources.faq]\nconnector = "jsonl"\npath = "faq.jsonl"\n'
                   'corpus = "product-faq"\n'
                   '[sources.kb]\nconnector = "filesystem"\npath = "kb"\n')  # fmt: skip
    doc = {
        "type": "document",
        "source_system": "dms",
        "external_id": "p1",
        "corpus": "legal-playbook",
        "title": "Caps",
        "text": "Liability caps.",
        "acl": ["*"],
        "classification": "internal",
    }
    (deployment / "feed.jsonl").write_text(json.dumps(doc) + "\n")
    done = govrag("ingest", str(deployment / "feed.jsonl"), "-d", str(deployment))
    assert done.returncode == 0, done.stderr
    assert scope_warnings(deployment) == []
    # A misspelt id (ids are case-sensitive) is named with its route and the fix.
    rows = json.loads((deployment / "routes" / "routes.json").read_text())
    rows[2]["retrieval"]["scope"].append("Legal-Playbook")
    write(deployment / "routes" / "routes.json", rows)
    [warning] = scope_warnings(deployment)
    assert warning["path"] == "routes (msa_risk_review)" and warning["severity"] == "warning"
    assert warning["message"].startswith(
        "route 'msa_risk_review' scopes corpus 'Legal-Playbook', which nothing in this "
        "deployment knows: no [corpora.Legal-Playbook] table in govrag.toml"
    )
    assert "ids are case-sensitive" in warning["message"]
    done = govrag("config", "check", "-d", str(deployment))  # the table's name survives
    assert "[corpora.Legal-Playbook]" in done.stderr and "Traceback" not in done.stderr


def test_config_check_says_serve_needs_auth(deployment: Path) -> None:
    done = govrag("config", "check", "-d", str(deployment), "--json")
    assert done.returncode == 0, done.stderr  # a warning: the CLI works without [auth]
    [auth] = [p for p in json.loads(done.stdout)["problems"] if p["field"] == "auth"]
    assert (auth["path"], auth["severity"]) == ("govrag.toml", "warning")
    assert "`govrag serve` and `govrag mcp --transport http` refuse to start" in auth["message"]
    assert "configure [auth] (docs/auth.md)" in auth["message"]
    done = govrag("config", "check", "-d", str(deployment))
    assert "warning: govrag.toml: auth: no [auth] keys" in done.stderr
    with (deployment / "govrag.toml").open("a") as toml:
        toml.write("[auth]\ndev_tokens = true\n")
    done = govrag("config", "check", "-d", str(deployment), "--json")
    assert done.returncode == 0, done.stderr
    assert [p for p in json.loads(done.stdout)["problems"] if p["field"] == "auth"] == []
