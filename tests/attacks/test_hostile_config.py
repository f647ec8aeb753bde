"""Attack: break the CLI with bad bytes, deep nesting and typos in arguments and config files.

A careless operator (or a hostile file in a deployment directory) must get one line on
stderr naming the argument or file and field, exit code 2, and never a traceback (or, for
Cedar, a segmentation fault); a mistyped store URL must leave nothing behind. Each row runs
the real ``govrag`` command line in a subprocess on a fresh copy of a scaffolded deployment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

Edit = Callable[[Path], None]
SAMPLE = Path(__file__).resolve().parents[2] / "src" / "govrag" / "data" / "sample.jsonl"
BAD = b"\xff"


def nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


def write(relative: str, content: str | bytes) -> Edit:
    def edit(root: Path) -> None:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")

    return edit


def bundle(policy: str | bytes = "permit(principal, action, resource);",
           schema: bytes | None = None,
           meta: bytes = b'{"name": "b", "version": "1"}') -> Edit:  # fmt: skip
    def edit(root: Path) -> None:
        write("policies/b/bundle.json", meta)(root)
        write("policies/b/p.cedar", policy)(root)
        if schema is not None:
            write("policies/b/s.cedarschema", schema)(root)

    return edit


def store_url(url: str) -> Edit:
    def edit(root: Path) -> None:
        text = (root / "govrag.toml").read_text(encoding="utf-8")
        (root / "govrag.toml").write_text(
            text.replace('url = "sqlite:///govrag.db"', f"url = {json.dumps(url)}", 1),
            encoding="utf-8",
        )

    return edit


def route(**fields: object) -> str:
    row = {"route_id": "search", "intent": "search", "tool_manifest": "retrieval",
           "retrieval": {"mode": "tool", "scope": ["main"]}, **fields}  # fmt: skip
    return json.dumps(row)


def no_change(root: Path) -> None:
    pass


SEARCH = ["search", "wire", "--as", "ana", "--json"]
#: (id, edit of the deployment, command line, what stderr must name)
CASES: list[tuple[str, Edit, list[str | bytes], str]] = [
    # arguments that are not UTF-8 (and the environment)
    ("query not UTF-8", no_change, ["search", b"wire" + BAD, "--as", "ana"], "QUERY"),
    ("--as not UTF-8", no_change, ["search", "wire", "--as", BAD], "--as"),
    ("--filter not UTF-8", no_change, [*SEARCH, "--filter", b"doc_type=" + BAD], "--filter"),
    ("--corpus= not UTF-8", no_change, [*SEARCH, b"--corpus=" + BAD], "--corpus"),
    ("--text not UTF-8", no_change, ["ask", "hi", "--as", "ana", "--text", BAD], "--text"),
    ("ingest path not UTF-8", no_change, ["ingest", b"/tmp/" + BAD + b".jsonl"], "SOURCE|PATH"),
    ("question not UTF-8", no_change, ["ask", BAD, "--as", "ana"], "QUESTION"),
    # click's usage errors, one line
    ("unknown --strategy", no_change, [*SEARCH, "--strategy", "bm25"], "'--strategy'"),
    ("unknown eval --strategy", no_change, ["eval", "x", "--strategy", "dense"], "'--strategy'"),
    ("--top-k not a number", no_change, [*SEARCH, "--top-k", "ten"], "'--top-k'"),
    ("unknown option", no_change, [*SEARCH, "--stratgey", "keyword"], "--stratgey"),
    ("unknown --connector", no_change, ["ingest", "x", "--connector", "csv"], "'--connector'"),
    # config files that are not UTF-8
    ("govrag.toml not UTF-8", write("govrag.toml", b'default_tenant = "t' + BAD + b'"\n'),
     SEARCH, "govrag.toml: is not valid UTF-8 (byte 0xff at offset 19, line 1 column 20)"),
    ("route not UTF-8", write("routes/search.json", b'{"route_id": "' + BAD + b'"}'), SEARCH,
     "routes/search.json: is not valid UTF-8"),
    ("manifest not UTF-8", write("manifests/retrieval.json", b'{"x": "' + BAD + b'"}'), SEARCH,
     "manifests/retrieval.json: is not valid UTF-8"),
    ("workflow not UTF-8", write("workflows/w.json", b'{"workflow_id": "' + BAD + b'"}'),
     SEARCH, "workflows/w.json: is not valid UTF-8"),
    ("principals not UTF-8", write("principals.json", b'{"principals": [' + BAD + b"]}"), SEARCH,
     "principals.json: is not valid UTF-8"),
    ("bundle.json not UTF-8", bundle(meta=b'{"name": "' + BAD + b'"}'), SEARCH,
     "policies/b/bundle.json: is not valid UTF-8"),
    ("policy not UTF-8", bundle(b"permit(principal, action, resource); // " + BAD), SEARCH,
     "policies/b/p.cedar: is not valid UTF-8"),
    ("schema not UTF-8", bundle(schema=b"entity User; // " + BAD), SEARCH,
     "policies/b/s.cedarschema: is not valid UTF-8"),
    # deep nesting: RecursionError (or a crashed Cedar parser) must never escape
    ("route nested 100k deep", write("routes/search.json", nested(100_000)), SEARCH,
     "routes/search.json: nests deeper than 64 levels"),
    ("route field nested deep",
     write("routes/search.json", route()[:-1] + ', "model_profile": ' + nested(70) + "}"), SEARCH,
     "routes/search.json: nests deeper than 64 levels at line 1 column"),
    ("manifest nested deep", write("manifests/retrieval.json",
                                   '{"manifest_id": "retrieval", "tools": '
                                   + nested(5000, "{}") + "}"), SEARCH,
     "manifests/retrieval.json: nests deeper"),
    ("principals nested deep", write("principals.json", '{"principals": ' + nested(50_000) + "}"),
     SEARCH, "principals.json: nests deeper"),
    ("workflow nested deep", write("workflows/w.json", nested(3000)), SEARCH,
     "workflows/w.json: nests deeper"),
    ("govrag.toml nested deep", write("govrag.toml", "x = " + nested(100_000)), SEARCH,
     "govrag.toml: nests deeper"),
    ("policy nested deep", bundle("permit(principal, action, resource) when { "
                                  + "(" * 3000 + "true" + ")" * 3000 + " };"), SEARCH,
     "policies/b/p.cedar: nests deeper than 64 levels"),
    ("policy chain too long", bundle("permit(principal, action, resource) when { "
                                     + " && ".join(["true"] * 20_000) + " };"), SEARCH,
     "policies/b/p.cedar: has a policy of"),
    # JSON a parser accepts but nobody meant
    ("route key repeated", write("routes/search.json",
                                 route()[:-1] + ', "retrieval": {"mode": "none"}}'), SEARCH,
     "routes/search.json: key 'retrieval' appears twice in one JSON object"),
    ("route NaN", write("routes/search.json", '{"route_id": NaN}'), SEARCH,
     "routes/search.json: field 'route_id': NaN is not a JSON number"),
    ("route 1e999", write("routes/search.json", '{"route_id": 1e999}'), SEARCH,
     "routes/search.json: field 'route_id': the number 1e999 is too large"),
    ("route huge integer", write("routes/search.json", '{"route_id": ' + "9" * 5000 + "}"),
     SEARCH, "routes/search.json: field 'route_id': an integer of 5000 digits is too large"),
    ("principal lone surrogate", write("principals.json",
                                       '{"principals": [{"sub": "\\udc00", "email": "a@b.c",'
                                       ' "tenant": "t"}]}'), SEARCH,
     "principals.json: field 'principals[0].sub': holds a lone surrogate ('\\udc00')"),
]  # fmt: skip

#: Mistyped store URLs: refused with the accepted forms, nothing created anywhere.
URLS: list[tuple[str, str]] = [
    ("sqlite:/x.db", "needs 'sqlite:///'"),
    ("sqlite://x.db", "has a host part ('x.db')"),
    ("sqllite:///x.db", "unsupported scheme 'sqllite' (did you mean 'sqlite'?)"),
    ("SQLite:///x.db", "write it in lower case"),
    ("sqlite:x.db", "needs 'sqlite:///'"),
    ("sqlite:///", "names no file"),
    ("sqlite:///data/", "names a directory"),
    ("sqlite:///x.db?mode=ro", "has a query or fragment"),
    ("postgresql:/app:s3cret@db/govrag", "needs '//' after 'postgresql:'"),
    ("sqlite:///no/such/dir/x.db", "does not exist (nothing was created)"),
    ("sqlite:///principals.json", "is not an SQLite database"),
]
URL_COMMANDS = [["ingest", str(SAMPLE)], SEARCH, ["index", "verify"], ["config", "check"]]


def govrag(args: list[str | bytes], root: Path, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "govrag.cli", *args, "-d", str(root)],
        cwd=root,
        capture_output=True,
        text=True,
        errors="backslashreplace",
        timeout=300,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile") / "dep"
    done = subprocess.run(
        [sys.executable, "-m", "govrag.cli", "init", str(root), "--embedder", "hash",
         "--corpus", "main"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return root


@pytest.fixture
def deployment(scaffolded: Path, tmp_path: Path) -> Path:
    root = tmp_path / "dep"
    shutil.copytree(scaffolded, root)
    return root


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def assert_one_line(done: subprocess.CompletedProcess[str], *names: str) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])
    assert done.stdout == ""


@pytest.mark.parametrize(("edit", "args", "names"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_bad_input_is_one_line_naming_it(
    deployment: Path, edit: Edit, args: list[str | bytes], names: str
) -> None:
    edit(deployment)
    before = files(deployment)
    done = govrag(args, deployment)
    assert_one_line(done, names)
    assert files(deployment) == before  # nothing written on the way to the refusal


def test_a_non_utf8_environment_variable_is_named(deployment: Path) -> None:
    done = govrag(SEARCH, deployment, env={"GOVRAG_DEFAULT_TENANT": os.fsdecode(b"t" + BAD)})
    assert_one_line(done, "environment variable GOVRAG_DEFAULT_TENANT", "byte 0xff")


#: Every URL under one of the commands in turn: the URL is checked where settings load, which
#: every command shares, so each URL needs one command and each command some URLs.
URL_CASES = [(url, problem, URL_COMMANDS[i % len(URL_COMMANDS)])
             for i, (url, problem) in enumerate(URLS)]  # fmt: skip


@pytest.mark.parametrize(("url", "problem", "command"), URL_CASES,
                         ids=[f"{c[0]}-{u}" for u, _, c in URL_CASES])  # fmt: skip
def test_a_mistyped_store_url_is_refused_and_creates_nothing(
    deployment: Path, url: str, problem: str, command: list[str | bytes]
) -> None:
    store_url(url)(deployment)
    (deployment / "data").mkdir()  # for sqlite:///data/
    before = files(deployment)
    done = govrag(command, deployment)
    assert_one_line(done, problem)
    if "nothing was created" not in problem and "SQLite database" not in problem:
        assert "accepted forms: sqlite:///relative/path.db" in done.stderr
    assert "s3cret" not in done.stderr  # a password in a refused URL is masked
    assert files(deployment) == before
    assert not (deployment / "no").exists()


def test_a_mistyped_url_from_the_environment_is_refused(deployment: Path) -> None:
    before = files(deployment)
    done = govrag(SEARCH, deployment, env={"GOVRAG_STORE__URL": "sqlite://x.db"})
    assert_one_line(done, "environment (GOVRAG_* variables): field 'store.url'", "host part")
    assert files(deployment) == before


def test_a_deep_filter_value_is_a_plain_string(deployment: Path) -> None:
    """``--filter k=[[[...`` is not JSON to decode (no RecursionError): a string to match."""
    records = deployment / "docs.jsonl"
    records.write_text(json.dumps({"type": "document", "source_system": "sp", "corpus": "main",
                                   "external_id": "d", "text": "wire", "acl": ["*"],
                                   "classification": "public"}) + "\n")  # fmt: skip
    assert govrag(["ingest", str(records)], deployment).returncode == 0
    done = govrag([*SEARCH, "--filter", "doc_type=" + "[" * 100_000], deployment)
    assert done.returncode == 0, done.stderr[-500:]
    assert json.loads(done.stdout)["results"] == []


@pytest.mark.parametrize("command", [["index", "verify"], ["index", "rebuild"], ["curate"]])
def test_a_mistyped_tenant_is_an_error_not_a_clean_report(
    deployment: Path, command: list[str]
) -> None:
    # A clean "0 chunks, 0 differences" for a tenant that is not there would tell the
    # operator the index they meant to check is sound.
    assert govrag(["ingest", str(SAMPLE)], deployment).returncode == 0
    done = govrag([*command, "--tenant", "bnak"], deployment)
    assert_one_line(done, "tenant 'bnak' holds nothing in this deployment's store",
                    "check --tenant")  # fmt: skip
    tenant = json.loads(govrag(["index", "verify", "--json"], deployment).stdout)["tenants"][0]
    assert govrag([*command, "--tenant", tenant["tenant"]], deployment).returncode == 0
