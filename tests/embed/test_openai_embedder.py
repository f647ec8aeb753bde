"""The OpenAI-compatible embedder against a fake server (``httpx.MockTransport``): the
request it sends, batching and order, retries, every malformed reply refused (fail closed),
the key never shown, settings, and a deployment that ingests and searches through it."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from govrag.embed import available_embedders, get_embedder
from govrag.embed.openai_embed import MAX_RETRY_AFTER_S, OpenAIEmbedder, settings_options
from govrag.errors import ConfigError, InputError, MissingExtraError, StoreError
from govrag.settings import EmbedderSettings, load_settings
from govrag.types import SearchRequest, Strategy

from conftest import doc, ident, load, principal

URL = "https://embed.example/v1"
MODEL = "text-embedding-3-small"
KEY = "sk-test-0123456789abcdefSECRET"
DIM = 8
#: Word -> axis of the fake model: synonyms share an axis, so it is "semantic" enough to find
#: a document that shares no word with the query.
AXES = {"wire": 0, "transfer": 0, "payment": 0, "limit": 1, "cap": 1, "maximum": 1,
        "vacation": 2, "holiday": 2, "leave": 2, "days": 3, "allowance": 3}  # fmt: skip

Reply = httpx.Response | Exception | Callable[[list[str]], httpx.Response]


def fake_vector(text: str) -> list[float]:
    vector = [0.0] * DIM
    vector[DIM - 1] = 0.1  # never a zero vector
    for word in text.lower().replace(".", " ").replace(",", " ").split():
        if word in AXES:
            vector[AXES[word]] += 1.0
    return [v * 3.0 for v in vector]  # not unit norm: the adapter normalises


def reply_body(texts: list[str], order: list[int] | None = None) -> dict[str, Any]:
    order = list(reversed(range(len(texts)))) if order is None else order
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": fake_vector(texts[i])}
                 for i in order],
        "model": MODEL,
        "usage": {"prompt_tokens": 3 * len(texts), "total_tokens": 3 * len(texts)},
    }  # fmt: skip


class FakeServer:
    """Answers ``/v1/embeddings`` like OpenAI (items in reverse order); ``script`` replies
    (a response, an exception to raise, or a function of the inputs) are used first."""

    def __init__(self, *script: Reply) -> None:
        self.script = list(script)
        self.requests: list[httpx.Request] = []

    @property
    def inputs(self) -> list[list[str]]:
        return [json.loads(r.content)["input"] for r in self.requests]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        texts = json.loads(request.content)["input"]
        if self.script:
            step = self.script.pop(0)
            if isinstance(step, Exception):
                raise step
            return step(texts) if callable(step) else step
        return httpx.Response(200, json=reply_body(texts))


def embedder(server: FakeServer, sleeps: list[float] | None = None, **kw: Any) -> OpenAIEmbedder:
    options: dict[str, Any] = {"dim": DIM, "api_key": KEY, "max_retries": 3} | kw
    record = (sleeps if sleeps is not None else []).append
    return OpenAIEmbedder(URL, MODEL, transport=httpx.MockTransport(server), sleep=record,
                          **options)  # fmt: skip


def expected(text: str) -> np.ndarray:
    v = np.asarray(fake_vector(text), dtype=np.float64)
    return (v / np.linalg.norm(v)).astype(np.float32)


# -- the request and the vectors ----------------------------------------------------------


def test_sends_exactly_model_and_input_and_returns_unit_rows_in_input_order() -> None:
    server = FakeServer()
    texts = ["wire transfer limit", "vacation days", "unrelated words"]
    vectors = embedder(server).embed_documents(texts)
    (request,) = server.requests
    assert (request.method, str(request.url)) == ("POST", f"{URL}/embeddings")
    assert json.loads(request.content) == {"model": MODEL, "input": texts}
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert vectors.dtype == np.float32 and vectors.shape == (3, DIM)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    for row, text in zip(vectors, texts, strict=True):  # the reply came reversed
        np.testing.assert_array_equal(row, expected(text))


def test_items_in_any_order_land_on_their_index() -> None:
    texts = [f"text {i} wire" if i % 2 else f"text {i} holiday" for i in range(6)]
    server = FakeServer(lambda t: httpx.Response(200, json=reply_body(t, [3, 0, 5, 1, 4, 2])))
    vectors = embedder(server).embed_documents(texts)
    np.testing.assert_array_equal(vectors, np.stack([expected(t) for t in texts]))


def test_no_key_means_no_authorization_header() -> None:
    server = FakeServer()
    embedder(server, api_key=None).embed_query("wire")
    assert "authorization" not in server.requests[0].headers


def test_batches_of_batch_size_with_progress_after_each() -> None:
    server, done = FakeServer(), []
    texts = [f"wire {i}" for i in range(5)]
    embedder(server).embed_documents(texts, batch_size=2, progress=done.append)
    assert server.inputs == [texts[0:2], texts[2:4], texts[4:5]]
    assert done == [2, 2, 1]


def test_blank_texts_are_zero_rows_and_never_sent() -> None:
    server, done = FakeServer(), []
    emb = embedder(server)
    vectors = emb.embed_documents(["", "wire", "  \n", "", "  "], batch_size=2,
                                  progress=done.append)  # fmt: skip
    assert server.inputs == [["wire"]]  # the all-blank batches made no request
    assert done == [2, 2, 1]
    assert not vectors[[0, 2, 3, 4]].any()
    np.testing.assert_array_equal(vectors[1], expected("wire"))
    assert not emb.embed_query(" ").any() and len(server.requests) == 1
    assert emb.embed_documents([]).shape == (0, DIM)


def test_query_is_one_unit_vector() -> None:
    query = embedder(FakeServer()).embed_query("holiday allowance")
    assert query.shape == (DIM,) and query.dtype == np.float32
    np.testing.assert_array_equal(query, expected("holiday allowance"))


@pytest.mark.parametrize("texts", ["a bare string", ["ok", 3]])
def test_a_bare_string_or_a_non_string_is_refused(texts: Any) -> None:
    server = FakeServer()
    with pytest.raises(InputError):
        embedder(server).embed_documents(texts)
    assert server.requests == []


# -- retries --------------------------------------------------------------------------------


def test_429_waits_retry_after_then_succeeds() -> None:
    sleeps: list[float] = []
    limited = {"error": {"message": "Rate limit reached", "type": "requests"}}
    server = FakeServer(httpx.Response(429, headers={"Retry-After": "2"}, json=limited))
    vectors = embedder(server, sleeps).embed_documents(["wire"])
    assert sleeps == [2.0] and len(server.requests) == 2
    np.testing.assert_array_equal(vectors[0], expected("wire"))


def test_a_long_retry_after_is_capped_and_a_date_falls_back_to_backoff() -> None:
    sleeps: list[float] = []
    date = "Wed, 21 Oct 2026 07:28:00 GMT"
    server = FakeServer(httpx.Response(429, headers={"Retry-After": "3600"}),
                        httpx.Response(429, headers={"Retry-After": date}))  # fmt: skip
    embedder(server, sleeps).embed_query("wire")
    assert sleeps == [MAX_RETRY_AFTER_S, 1.0]


@pytest.mark.parametrize(
    "failure",
    [httpx.Response(503, text="upstream overloaded"), httpx.Response(500),
     httpx.ConnectError("connection refused"), httpx.ReadTimeout("timed out")],
)  # fmt: skip
def test_5xx_and_transport_faults_back_off_exponentially(failure: Reply) -> None:
    sleeps: list[float] = []
    server = FakeServer(failure, failure)
    vectors = embedder(server, sleeps).embed_documents(["wire", "holiday"])
    assert sleeps == [0.5, 1.0] and len(server.requests) == 3
    np.testing.assert_array_equal(vectors[1], expected("holiday"))


def test_gives_up_after_max_retries_with_a_clear_store_error() -> None:
    sleeps: list[float] = []
    server = FakeServer(*[httpx.Response(503, text="Service Unavailable")] * 5)
    with pytest.raises(StoreError) as info:
        embedder(server, sleeps, max_retries=2).embed_documents(["wire"])
    assert len(server.requests) == 3 and sleeps == [0.5, 1.0]
    message = str(info.value)
    for part in (f"{URL}/embeddings", MODEL, "3 time(s)", "HTTP 503", "max_retries"):
        assert part in message


@pytest.mark.parametrize(
    ("status", "advice"),
    [(400, "chunk_tokens"), (401, "api_key_env"), (403, "api_key_env"), (404, "base_url"),
     (422, "model"), (501, "base_url"), (307, "redirects are not followed")],
)  # fmt: skip
def test_other_4xx_are_config_errors_never_retried(status: int, advice: str) -> None:
    sleeps: list[float] = []
    server = FakeServer(httpx.Response(status, headers={"location": f"{URL}/elsewhere"},
                                       json={"error": {"message": f"no. key={KEY}"}}))  # fmt: skip
    with pytest.raises(ConfigError) as info:
        embedder(server, sleeps, api_key_env="EMBED_KEY").embed_query("wire")
    assert len(server.requests) == 1 and sleeps == []
    assert f"HTTP {status}" in str(info.value) and advice in str(info.value)
    assert KEY not in str(info.value) and "[redacted]" in str(info.value)


# -- fail closed -----------------------------------------------------------------------------


def _with(change: Callable[[dict[str, Any]], Any]) -> Callable[[list[str]], httpx.Response]:
    """A reply of the fake model that ``change`` altered in place."""

    def reply(texts: list[str]) -> httpx.Response:
        body = reply_body(texts, list(range(len(texts))))
        change(body)
        return httpx.Response(200, content=json.dumps(body).encode())

    return reply


def _raw(text: str) -> Callable[[list[str]], httpx.Response]:
    return lambda _: httpx.Response(200, content=text.encode())


def _set(i: int, key: str, value: Any) -> Callable[[list[str]], httpx.Response]:
    """A reply whose item ``i`` has ``key`` set to ``value``."""
    return _with(lambda b: b["data"][i].__setitem__(key, value))


MALFORMED: list[tuple[str, Callable[[list[str]], httpx.Response], str]] = [
    ("not json", _raw("<html>502 Bad Gateway</html>"), "not JSON"),
    ("a list", _raw("[]"), "no 'data' list"),
    ("no data", _with(lambda b: b.pop("data")), "no 'data' list"),
    ("error in 200", _raw('{"error": {"message": "model overloaded"}}'), "model overloaded"),
    ("data not a list", _with(lambda b: b.__setitem__("data", {"0": []})), "no 'data' list"),
    ("too few", _with(lambda b: b["data"].pop()), "1 embeddings for 2 inputs"),
    ("too many", _with(lambda b: b["data"].append(b["data"][0])), "3 embeddings for 2"),
    ("duplicate", _set(1, "index", 0), "index 0 appears twice"),
    ("out of range", _set(1, "index", 2), "data[1].index is 2"),
    ("index missing", _with(lambda b: b["data"][1].pop("index")), "data[1].index is None"),
    ("index text", _set(0, "index", "0"), "data[0].index is '0'"),
    ("index bool", _set(0, "index", False), "data[0].index is False"),
    ("no embedding", _set(0, "embedding", None), "not a list of numbers"),
    ("base64", _set(0, "embedding", "AAAAAA=="), "not a list of numbers"),
    ("string value", _set(0, "embedding", ["0.5"] * DIM), "not a list of numbers"),
    ("null value", _set(0, "embedding", [None] * DIM), "not a list of numbers"),
    ("bool value", _set(0, "embedding", [True] * DIM), "not a list of numbers"),
    ("NaN", _set(0, "embedding", [float("nan")] * DIM), "NaN or infinite"),
    ("Infinity", _set(0, "embedding", [float("inf")] + [0.0] * (DIM - 1)), "NaN or infinite"),
    ("overflow", _raw('{"data": [{"index": 0, "embedding": [1e400, 0, 0, 0, 0, 0, 0, 0]}, '
                      '{"index": 1, "embedding": [1, 0, 0, 0, 0, 0, 0, 0]}]}'), "NaN or infinite"),
    ("zero vector", _set(1, "embedding", [0.0] * DIM), "zero vector"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "reply", "what"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_reply_is_a_store_error_never_a_vector(
    case: str, reply: Callable[[list[str]], httpx.Response], what: str
) -> None:
    sleeps: list[float] = []
    server = FakeServer(reply)
    with pytest.raises(StoreError) as info:
        embedder(server, sleeps).embed_documents(["wire", "holiday"])
    message = str(info.value)
    assert what in message, message
    assert f"{URL}/embeddings" in message and MODEL in message and "base_url" in message
    assert len(server.requests) == 1 and sleeps == []  # a malformed reply is not retried


def test_huge_finite_values_are_normalised_without_overflow() -> None:
    server = FakeServer(_set(0, "embedding", [1e300] * DIM))
    vector = embedder(server).embed_query("wire")
    np.testing.assert_allclose(vector, np.full(DIM, 1 / np.sqrt(DIM)), rtol=1e-6)


def test_a_vector_of_another_length_is_a_config_error_naming_the_dim() -> None:
    server = FakeServer(_set(0, "embedding", [0.1] * 1536))
    with pytest.raises(ConfigError, match=r"1536 dimensions.*set \[embedder\] dim = 1536"):
        embedder(server).embed_documents(["wire", "holiday"])


# -- the key ----------------------------------------------------------------------------------


def test_the_key_is_in_no_repr_error_or_log_line(caplog: pytest.LogCaptureFixture) -> None:
    echo = httpx.Response(500, text=f"bad request with Authorization: Bearer {KEY}")
    server = FakeServer(echo, echo, _raw(f"<p>{KEY}</p>"))
    emb = embedder(server)
    assert KEY not in repr(emb) + repr(vars(emb)) + str(vars(emb))
    with caplog.at_level(logging.DEBUG), pytest.raises(StoreError) as info:
        emb.embed_query("wire")
    assert KEY not in str(info.value) and "[redacted]" in str(info.value)
    assert caplog.records and all(KEY not in r.getMessage() for r in caplog.records)


def test_a_named_but_missing_key_refuses_before_sending(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOVRAG_TEST_EMBED_KEY", raising=False)
    settings = EmbedderSettings(name="openai", dim=DIM, api_key_env="GOVRAG_TEST_EMBED_KEY")
    server = FakeServer()
    emb = OpenAIEmbedder(**settings_options(settings), transport=httpx.MockTransport(server))
    with pytest.raises(ConfigError, match=r"is empty.*GOVRAG_TEST_EMBED_KEY"):
        emb.embed_query("wire")
    assert server.requests == []


def test_a_key_with_a_control_character_is_never_sent() -> None:
    server = FakeServer()
    with pytest.raises(ConfigError, match="control or non-ASCII") as info:
        embedder(server, api_key=f"{KEY}\x00x").embed_query("wire")
    assert server.requests == [] and KEY not in str(info.value)


# -- construction, registry, settings ----------------------------------------------------------


def test_without_httpx_constructing_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)  # makes ``import httpx`` fail
    assert "openai" in available_embedders()  # listed all the same
    with pytest.raises(MissingExtraError) as info:
        get_embedder("openai", dim=DIM)
    assert info.value.extra == "http"
    assert "The 'openai' embedder" in str(info.value)
    assert "pip install 'govrag[http]'" in str(info.value)


def test_registry_builds_it_with_the_model_in_its_name() -> None:
    server = FakeServer()
    emb = get_embedder("openai", base_url=URL, model=MODEL, dim=DIM,
                       transport=httpx.MockTransport(server))  # fmt: skip
    assert isinstance(emb, OpenAIEmbedder)
    assert (emb.name, emb.dim) == (f"openai:{MODEL}", DIM)
    with pytest.raises(ConfigError, match="does not accept options"):
        get_embedder("openai", modle=MODEL)


@pytest.mark.parametrize(
    ("options", "message"),
    [({"dim": 0}, "dim must be"), ({"timeout_s": 0}, "timeout_s"),
     ({"max_retries": -1}, "max_retries"), ({"base_url": "ftp://u:pw@x/v1"}, r"ftp://u:\*\*\*@"),
     ({"model": " "}, "model is empty")],
)  # fmt: skip
def test_bad_constructor_arguments_are_config_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        get_embedder("openai", **options)


@pytest.mark.parametrize(
    ("toml", "field"),
    [("base_url = 'ftp://embed.example'", "embedder.base_url"),
     ("model = ''", "embedder.model"), ("model = 'two words'", "embedder.model"),
     ("timeout_s = 0", "embedder.timeout_s"), ("max_retries = 11", "embedder.max_retries"),
     ("api_key = 'sk-x'", "unknown field 'embedder.api_key'"),
     (f"api_key_env = '{KEY}-x'", "embedder.api_key_env")],
)  # fmt: skip
def test_bad_embedder_settings_name_the_field(tmp_path: Path, toml: str, field: str) -> None:
    (tmp_path / "govrag.toml").write_text(f"[embedder]\nname = 'openai'\n{toml}\n")
    with pytest.raises(ConfigError, match=r"govrag\.toml") as info:
        load_settings(tmp_path)
    assert field in str(info.value)
    assert KEY not in str(info.value)  # a key pasted into api_key_env is not echoed


def test_settings_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "govrag.toml").write_text("[embedder]\nname = 'openai'\n")
    monkeypatch.setenv("GOVRAG_EMBEDDER__MODEL", "nomic-embed-text")
    monkeypatch.setenv("GOVRAG_EMBEDDER__BASE_URL", "http://127.0.0.1:11434/v1/")
    cfg = load_settings(tmp_path).embedder
    assert (cfg.model, cfg.base_url) == ("nomic-embed-text", "http://127.0.0.1:11434/v1")
    assert cfg.api_key_env is None


# -- end to end: a deployment ------------------------------------------------------------------

RECORDS = [
    ident("ana@bank.example", "S-ana"),
    doc("wire", "The wire transfer limit is EUR 50,000 per day.", ["S-ana"], corpus="policy"),
    doc("leave", "Staff get 25 vacation days each year.", ["S-ana"], corpus="policy"),
]


def test_a_deployment_ingests_and_searches_semantically_through_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import govrag
    from govrag.deployment import Deployment

    root = tmp_path / "bank"
    govrag.init(root, tenant="bank", corpora=["policy"], embedder="openai")
    config = root / "govrag.toml"
    keys = f'base_url = "{URL}"\nmodel = "{MODEL}"\napi_key_env = "GOVRAG_TEST_EMBED_KEY"\n'
    text = config.read_text().replace("dim = 384\n", f"dim = {DIM}\n{keys}")
    assert keys in text
    config.write_text(text)
    monkeypatch.setenv("GOVRAG_TEST_EMBED_KEY", KEY)
    server = FakeServer()
    with Deployment.load(root) as dep:
        built = dep.embedder  # from govrag.toml, through the registry
        assert isinstance(built, OpenAIEmbedder)
        assert (built.name, built.dim, built.url) == (f"openai:{MODEL}", DIM, f"{URL}/embeddings")
        assert KEY not in repr(built)
        # The same settings over the fake server: no network in tests.
        options = settings_options(dep.settings.embedder)
        dep.__dict__["embedder"] = get_embedder("openai", **options,
                                                transport=httpx.MockTransport(server))  # fmt: skip
        load(dep.store, RECORDS, tenant="bank")
        ana = principal("ana@bank.example", tenant="bank")
        request = SearchRequest(query="holiday allowance", strategy=Strategy.SEMANTIC, top_k=2)
        hits = dep.store.search(ana, request).results
        assert hits[0].doc_id == "leave"  # no word in common: found by meaning
        assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in server.requests)
        assert server.inputs[-1] == ["holiday allowance"]

        # A query embedded by another model is never scored against these vectors.
        dep.store.embedder = OpenAIEmbedder(URL, "other-model", DIM,
                                            transport=httpx.MockTransport(server))  # fmt: skip
        with pytest.raises(ConfigError, match=rf"name = 'openai', model = '{MODEL}', dim = {DIM}"):
            dep.store.search(ana, request)
