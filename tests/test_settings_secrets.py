"""Secrets in the settings never show: a store URL's password stays out of ``repr``, dumps,
every error message, ``govrag config check`` and the log records of a failed connection.

The password is planted in every source a URL can come from (the file, the environment,
init arguments) and looked for everywhere a careless line could print it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pydantic import SecretStr

from govrag.errors import ConfigError, GovragError
from govrag.scaffold import scaffold
from govrag.settings import Settings, StoreSettings, load_settings
from govrag.store_url import SecretUrl, parse_store_url, redact

from conftest import PG_APP_ROLE, drop_pg_database, new_pg_database

if TYPE_CHECKING:
    from govrag.testing import PgServer

PASSWORD = "s3cr3t-Pa55"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again on return: nothing listens there


def pg_url(port: int = 5432, user: str = "app") -> str:
    return f"postgresql://{user}:{PASSWORD}@127.0.0.1:{port}/govrag"


def set_store(root: Path, url: str, admin_url: str | None = None) -> None:
    text = (root / "govrag.toml").read_text(encoding="utf-8")
    admin = f"\nadmin_url = {json.dumps(admin_url)}" if admin_url else ""
    text = text.replace('url = "sqlite:///govrag.db"', f"url = {json.dumps(url)}{admin}", 1)
    assert json.dumps(url) in text
    (root / "govrag.toml").write_text(text, encoding="utf-8")


def shown(settings: Settings) -> list[str]:
    """Every rendering of the settings a log line or a message could use."""
    return [
        repr(settings),
        str(settings),
        repr(settings.store),
        str(settings.store.url),
        f"{settings.store.url}",
        f"{settings.store.url!r}",
        repr(settings.model_dump()),
        settings.model_dump_json(),
        json.dumps(settings.model_dump(mode="json")),
    ]


def chain(exc: BaseException) -> str:
    """The whole traceback of ``exc`` with its causes, as a crash report would print it."""
    return "".join(traceback.format_exception(exc))


def test_a_password_from_the_file_is_masked_wherever_the_settings_are_shown(
    tmp_path: Path,
) -> None:
    scaffold(tmp_path, embedder="hash")
    set_store(tmp_path, pg_url(user="app"), admin_url=pg_url(user="owner"))
    settings = load_settings(tmp_path)
    for text in shown(settings):
        assert PASSWORD not in text, text
    assert "postgresql://app:***@127.0.0.1:5432/govrag" in repr(settings)
    # ... while the code that connects still gets the URL itself.
    assert settings.store.url.get_secret_value() == pg_url(user="app")
    assert settings.store.admin_url is not None
    assert settings.store.admin_url.get_secret_value() == pg_url(user="owner")


def test_a_password_from_the_environment_or_the_caller_is_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOVRAG_STORE__ADMIN_URL", pg_url(user="owner"))
    settings = load_settings(tmp_path, store={"url": pg_url(user="app")})
    for text in shown(settings):
        assert PASSWORD not in text, text
    assert settings.store.url == pg_url(user="app")  # compares with the URL as text
    assert isinstance(settings.store.url, SecretStr)
    # A whole table in one variable (JSON) is masked as well.
    monkeypatch.setenv("GOVRAG_STORE", json.dumps({"url": pg_url(user="env")}))
    settings = load_settings(tmp_path)
    assert settings.store.url == pg_url(user="env")
    assert all(PASSWORD not in text for text in shown(settings))


def test_a_sqlite_url_stays_readable() -> None:
    store = StoreSettings(url="sqlite:///data/govrag.db")  # type: ignore[arg-type]
    assert str(store.url) == "sqlite:///data/govrag.db"
    assert "sqlite:///data/govrag.db" in repr(store)
    assert StoreSettings().url == "sqlite:///govrag.db"


#: URLs holding the password that the grammar refuses (and where they are set).
BAD_URLS = [
    ("url", f"postgresql:/app:{PASSWORD}@db/govrag"),
    ("url", f"postgres:app:{PASSWORD}@db/govrag"),
    ("url", f"mysql://app:{PASSWORD}@db/govrag"),
    ("url", f"PostgreSQL://app:{PASSWORD}@db/govrag"),
    ("url", f"sqlite://app:{PASSWORD}@x.db"),
    ("url", f"app:{PASSWORD}@db:5432/govrag"),
    ("url", f"postgresql//app:{PASSWORD}@db/govrag"),
    ("admin_url", f"sqlite:///owner:{PASSWORD}@x.db"),
    ("admin_url", f"mysql://owner:{PASSWORD}@db/govrag"),
]


@pytest.mark.parametrize(("field", "url"), BAD_URLS)
@pytest.mark.parametrize("source", ["file", "environment", "arguments"])
def test_no_error_for_a_bad_url_shows_its_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str, url: str, source: str
) -> None:
    overrides: dict[str, object] = {}
    if source == "file":
        (tmp_path / "govrag.toml").write_text(f"[store]\n{field} = {json.dumps(url)}\n")
    elif source == "environment":
        monkeypatch.setenv(f"GOVRAG_STORE__{field.upper()}", url)
    else:
        overrides["store"] = {field: url}
    with pytest.raises(ConfigError, match=rf"field 'store\.{field}'") as info:
        load_settings(tmp_path, **overrides)
    assert PASSWORD not in str(info.value)
    assert PASSWORD not in chain(info.value)  # the pydantic cause does not echo the input
    assert "***" in str(info.value)
    named = {"file": "govrag.toml", "environment": "environment (GOVRAG_* variables)",
             "arguments": "settings: "}[source]  # fmt: skip
    assert named in str(info.value)


@pytest.mark.parametrize("url", [u for _, u in BAD_URLS])
def test_the_url_grammar_masks_what_it_quotes(url: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_store_url(url if not url.startswith("sqlite:///") else "mysql" + url[6:])
    assert PASSWORD not in str(info.value)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u:pw@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("postgresql://:pw@h/db", "postgresql://:***@h/db"),
        # unescaped @ / ? in a password: masked up to the last @, never partly shown
        ("postgresql://u:p@w/x?y@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:/pw@h/db", "postgresql://u:***@h/db"),
        ("u:pw@h/db", "u:***@h/db"),  # the scheme forgotten
        ("host=h user=u password=pw dbname=d", "host=h user=u password=*** dbname=d"),
        ("host=h password='p w\\' x' dbname=d", "host=h password=*** dbname=d"),
        ("postgresql://u@h/db?password=pw&sslmode=require", "postgresql://u@h/db?password=***"),
        ("sqlite:///govrag.db", "sqlite:///govrag.db"),
        ("sqlite:////abs/x.db", "sqlite:////abs/x.db"),
        ("sqlite://:memory:", "sqlite://:memory:"),
    ],
)
def test_redact(url: str, expected: str) -> None:
    assert redact(url) == expected


def test_a_secret_url_validates_what_it_wraps() -> None:
    # The sources wrap text in SecretUrl before validation: wrapping must not skip the grammar.
    with pytest.raises(ValueError, match="unsupported scheme 'mysql'"):
        StoreSettings(url=SecretUrl(f"mysql://u:{PASSWORD}@h/db"))
    with pytest.raises(ValueError, match="a store URL is text, not int"):
        StoreSettings(url=5)  # type: ignore[arg-type]
    assert SecretUrl("sqlite:///a.db") == SecretUrl("sqlite:///a.db") == "sqlite:///a.db"
    assert SecretUrl("sqlite:///a.db") != "sqlite:///b.db"
    assert hash(SecretUrl("sqlite:///a.db")) == hash("sqlite:///a.db")


def test_the_settings_debug_log_of_pydantic_settings_masks_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``PYDANTIC_SETTINGS_DEBUG`` logs what every source returned: secrets are wrapped as
    they leave each source, so that log shows them masked too."""
    (tmp_path / "govrag.toml").write_text(f'[store]\nadmin_url = "{pg_url(user="owner")}"\n')
    monkeypatch.setenv("PYDANTIC_SETTINGS_DEBUG", "1")
    monkeypatch.setenv("GOVRAG_STORE__URL", pg_url(user="env"))
    with caplog.at_level(logging.DEBUG):
        load_settings(tmp_path, store={"pool_size": 2})
        load_settings(tmp_path, store={"url": pg_url(user="init")})
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "postgresql://owner:***@" in logged  # the log is there, and masked
    assert PASSWORD not in logged


def test_opening_an_unreachable_store_logs_and_raises_no_password(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("psycopg")
    from govrag.store import open_store

    port = closed_port()
    settings = load_settings(
        tmp_path, store={"url": pg_url(port, "app"), "admin_url": pg_url(port, "owner")}
    )
    with caplog.at_level(logging.DEBUG), pytest.raises(GovragError) as info:
        open_store(settings)
    assert "unreachable" in str(info.value)
    assert PASSWORD not in chain(info.value)
    for record in caplog.records:
        text = record.getMessage() + "".join(
            traceback.format_exception(*record.exc_info) if record.exc_info else ()
        )
        assert PASSWORD not in text, text


def govrag(args: list[str], root: Path, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "govrag.cli", *args, "-d", str(root)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def pg_deployment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scaffolded deployment whose store is a PostgreSQL server nobody runs."""
    root = tmp_path_factory.mktemp("secret") / "dep"
    scaffold(root, embedder="hash", corpora=("main",))
    port = closed_port()
    set_store(root, pg_url(port, "app"), admin_url=pg_url(port, "owner"))
    return root


def test_config_check_never_prints_the_password(pg_deployment: Path) -> None:
    for args in (["config", "check", "--json"], ["config", "check"]):
        done = govrag(args, pg_deployment)
        assert PASSWORD not in done.stdout + done.stderr, args
    done = govrag(["config", "check", "--json"], pg_deployment)
    assert json.loads(done.stdout)["ok"] is True, done.stdout
    # A bad URL from the environment: refused, named, masked.
    env = {"GOVRAG_STORE__URL": f"postgres:app:{PASSWORD}@db/govrag"}
    done = govrag(["config", "check", "--json"], pg_deployment, env=env)
    assert done.returncode == 2 and "field 'store.url'" in done.stderr, done.stderr
    assert PASSWORD not in done.stdout + done.stderr


def test_a_command_on_an_unreachable_store_never_prints_the_password(
    pg_deployment: Path,
) -> None:
    pytest.importorskip("psycopg")
    done = govrag(["search", "wire", "--as", "ana", "--json"], pg_deployment)
    assert done.returncode != 0 and "unreachable" in done.stderr, done.stderr
    assert PASSWORD not in done.stdout + done.stderr


def test_a_pool_that_cannot_connect_logs_no_password(
    pg_cluster: PgServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The schema owner connects (the store migrates), the application role's URL points
    nowhere: the pool's reconnect attempts log warnings, and the first read fails."""
    from govrag.store import open_store

    admin = new_pg_database(pg_cluster)
    user = admin.split("://", 1)[1].split("@", 1)[0].split(":", 1)[0]
    owner = admin.replace(f"://{user}@", f"://{user}:{PASSWORD}@", 1)  # trust auth: ignored
    settings = load_settings(
        tmp_path,
        store={"url": pg_url(closed_port(), PG_APP_ROLE), "admin_url": owner},
        embedder={"name": "hash", "dim": 64},
    )
    try:
        with caplog.at_level(logging.DEBUG):
            store = open_store(settings)
            try:
                with pytest.raises(GovragError) as info:
                    store.is_empty("t")
            finally:
                store.close()
        assert PASSWORD not in chain(info.value)
        assert caplog.records  # the pool did log its failed attempts
        for record in caplog.records:
            text = record.getMessage() + "".join(
                traceback.format_exception(*record.exc_info) if record.exc_info else ()
            )
            assert PASSWORD not in text, text
    finally:
        drop_pg_database(pg_cluster, admin)


def test_the_llm_key_read_from_the_environment_is_held_masked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from govrag.agent.openai_chat import OpenAIChatClient
    from govrag.settings import LlmSettings

    monkeypatch.setenv("GOVRAG_TEST_LLM_KEY", f"sk-{PASSWORD}")
    settings = LlmSettings(provider="openai", api_key_env="GOVRAG_TEST_LLM_KEY")
    with OpenAIChatClient.from_settings(settings) as llm:
        assert PASSWORD not in repr(llm) + repr(vars(llm)) + str(vars(llm))
        assert PASSWORD not in repr(llm._client.headers)  # httpx masks Authorization
    with OpenAIChatClient("http://llm.test/v1", "m", api_key=SecretStr(f"sk-{PASSWORD}")) as llm:
        assert PASSWORD not in repr(vars(llm))


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        (f'[llm]\nbase_url = "ftp://u:{PASSWORD}@llm.internal/v1"\n', "llm.base_url"),
        (f'[rights.default]\nkind = "http"\nurl = "ftp://u:{PASSWORD}@rights"\n', "rights.default"),
    ],
)
def test_other_urls_refused_with_credentials_are_masked(
    tmp_path: Path, toml: str, field: str
) -> None:
    (tmp_path / "govrag.toml").write_text(toml)
    with pytest.raises(ConfigError, match=rf"field '{field}'.*is not an http\(s\) URL") as info:
        load_settings(tmp_path)
    assert PASSWORD not in chain(info.value)


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://app:%zz{PASSWORD}@127.0.0.1:1/govrag",  # libpq quotes the token
        f"postgresql://app:{PASSWORD}@[::1/govrag",  # libpq quotes the whole URI
        f"postgresql://app:{PASSWORD}@127.0.0.1:1/govrag?nosuchoption=1",
    ],
)
@pytest.mark.parametrize("field", ["url", "admin_url"])
def test_a_url_libpq_cannot_parse_is_refused_masked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, url: str, field: str
) -> None:
    pytest.importorskip("psycopg")
    from govrag.store import open_store

    store = {"url": pg_url(closed_port()), field: url}
    settings = load_settings(tmp_path, store=store)
    with caplog.at_level(logging.DEBUG), pytest.raises(ConfigError) as info:
        open_store(settings)
    assert f"[store] {field} " in str(info.value) and "cannot be parsed" in str(info.value)
    assert "***" in str(info.value)
    assert PASSWORD not in chain(info.value)
    assert all(PASSWORD not in r.getMessage() for r in caplog.records)
