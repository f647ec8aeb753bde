"""MiniLM queries through ONNX Runtime: same vectors as torch, a cache that cannot mislead.

One export is made for the module (through the ingest path, ``embed_documents``); tests that
damage or race the cache work on copies of it, so only one test pays for a second export.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sentence_transformers", reason="needs govrag[semantic]")
pytest.importorskip("onnxruntime", reason="needs govrag[semantic] (onnxruntime)")

from govrag.deployment import Deployment
from govrag.embed import get_embedder, minilm, onnx_cache
from govrag.embed.digests import file_sha256
from govrag.embed.minilm import MiniLMEmbedder
from govrag.embed.onnx_query import OnnxQueryEncoder

MODEL_DIR = minilm._model_dir()


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MiniLMEmbedder, Path]]:
    """An embedder whose cache was filled by ingest-time embedding, and its cache root."""
    cache = tmp_path_factory.mktemp("deployment") / ".govrag"
    embedder = MiniLMEmbedder(cache_dir=cache)
    embedder.embed_documents(["ingest exports the query encoder while torch is loaded"])
    yield embedder, cache


def _entry(cache: Path) -> Path:
    (entry,) = [p for p in (cache / onnx_cache.CACHE_DIR).iterdir() if p.is_dir()]
    return entry


def _copy_cache(cache: Path, tmp_path: Path) -> Path:
    copy = tmp_path / ".govrag"
    shutil.copytree(cache, copy)
    return copy


def _varied_texts(n: int) -> list[str]:
    """Deterministic texts from empty to far past the 256-word-piece window."""
    rng = random.Random(18)
    words = [
        "wire",
        "limit",
        "corporate",
        "client",
        "EU",
        "compliance",
        "policy",
        "access",
        "control",
        "list",
        "revenue",
        "grew",
        "quarterly",
        "ÜBER",
        "straße",
        "café",
        "naïve",
        "résumé",
        "東京",
        "データ",
        "Москва",
        "مرحبا",
        "🙂",
        "COVID-19",
        "p<0.05",
        "β-blocker",
        "3.14159",
        "e-mail",
        "foo_bar",
        "don't",
        "C++",
        "#hashtag",
        "@user",
        "http://example.com/a?b=c",
    ]
    texts = ["", " ", "a", "?", "\n\t", "x " * 600, "Supercalifragilisticexpialidocious"]
    while len(texts) < n:
        length = rng.choice([1, 2, 3, 5, 8, 13, 40, 120, 300])
        text = " ".join(rng.choice(words) for _ in range(length))
        texts.append(text.upper() if rng.random() < 0.1 else text)
    return texts


# 300 texts take about a minute on two cores: `make test` checks 40 of them (lengths up to the
# truncation limit included), `make test-slow` all 300.
@pytest.mark.parametrize("n", [40, pytest.param(300, marks=pytest.mark.slow)])
def test_onnx_and_torch_agree_on_hundreds_of_varied_texts(
    exported: tuple[MiniLMEmbedder, Path], n: int
) -> None:
    embedder, _ = exported
    encoder = embedder.query_encoder()
    assert isinstance(encoder, OnnxQueryEncoder)
    texts = _varied_texts(300)[:n]
    torch_vectors = embedder._encode(texts, 32)
    # Batched (padded to the longest text) and one by one, as a query is embedded.
    batched = np.concatenate([encoder.encode(texts[i : i + 32]) for i in range(0, n, 32)])
    single = np.stack([embedder.embed_query(text) for text in texts])
    for onnx_vectors in (batched, single):
        assert onnx_vectors.shape == (n, 384)
        assert onnx_vectors.dtype == np.float32
        cosines = np.sum(onnx_vectors * torch_vectors, axis=1)
        assert float(cosines.min()) >= 0.9999
        assert float(np.abs(onnx_vectors - torch_vectors).max()) < 1e-4


def test_a_fresh_process_embeds_a_query_without_torch(
    exported: tuple[MiniLMEmbedder, Path],
) -> None:
    embedder, cache = exported
    code = textwrap.dedent(
        f"""
        import json, sys
        from govrag.embed.minilm import MiniLMEmbedder
        vector = MiniLMEmbedder(cache_dir={str(cache)!r}).embed_query("wire limit for clients")
        heavy = [m for m in ("torch", "transformers", "sentence_transformers") if m in sys.modules]
        print(json.dumps({{"heavy": heavy, "vector": vector.tolist()}}))
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    result = json.loads(done.stdout)
    assert result["heavy"] == []
    expected = embedder._encode(["wire limit for clients"], 1)[0]
    np.testing.assert_allclose(np.array(result["vector"]), expected, atol=1e-5)


def test_a_second_embedder_reuses_the_export(
    exported: tuple[MiniLMEmbedder, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, cache = exported
    entry = _entry(cache)
    before = (entry / onnx_cache.MODEL_FILE).stat().st_mtime_ns

    def no_export(*args: object) -> str:
        raise AssertionError("a valid cache must not be exported again")

    monkeypatch.setattr(minilm, "export_onnx", no_export)
    assert MiniLMEmbedder(cache_dir=cache).query_encoder() is not None
    assert (entry / onnx_cache.MODEL_FILE).stat().st_mtime_ns == before


def _damage_truncate(entry: Path) -> None:
    model = entry / onnx_cache.MODEL_FILE
    model.write_bytes(model.read_bytes()[: 1 << 20])


def _damage_flip_a_byte(entry: Path) -> None:
    # Same size, one weight byte changed: only the checksum can tell.
    model = entry / onnx_cache.MODEL_FILE
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF
    model.write_bytes(bytes(data))


def _damage_manifest(entry: Path) -> None:
    (entry / onnx_cache.MANIFEST_FILE).write_text("{not json", encoding="utf-8")


def _damage_remove_model(entry: Path) -> None:
    (entry / onnx_cache.MODEL_FILE).unlink()


def _damage_garbage_model(entry: Path) -> None:
    # A file that matches its (rewritten) manifest but is no ONNX model at all.
    model = entry / onnx_cache.MODEL_FILE
    model.write_bytes(b"\x00garbage" * 1000)
    manifest = json.loads((entry / onnx_cache.MANIFEST_FILE).read_text(encoding="utf-8"))
    manifest.update(onnx_bytes=8000, onnx_sha256=file_sha256(model))
    (entry / onnx_cache.MANIFEST_FILE).write_text(json.dumps(manifest), encoding="utf-8")


def _damage_probe(entry: Path) -> None:
    # An intact file whose outputs disagree with what torch recorded: the probe catches it.
    manifest = json.loads((entry / onnx_cache.MANIFEST_FILE).read_text(encoding="utf-8"))
    manifest["probe_vectors"][0][0] += 0.01
    (entry / onnx_cache.MANIFEST_FILE).write_text(json.dumps(manifest), encoding="utf-8")


@pytest.mark.parametrize(
    "damage",
    [
        _damage_truncate,
        _damage_flip_a_byte,
        _damage_manifest,
        _damage_remove_model,
        _damage_garbage_model,
        _damage_probe,
    ],
)
def test_a_damaged_cache_entry_is_detected_never_used(
    exported: tuple[MiniLMEmbedder, Path],
    tmp_path: Path,
    damage: object,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, cache = exported
    copy = _copy_cache(cache, tmp_path)
    entry = _entry(copy)
    key = entry.name
    assert onnx_cache.open_entry(entry, MODEL_DIR, key) is not None
    damage(entry)  # type: ignore[operator]
    with caplog.at_level(logging.WARNING, logger="govrag.embed"):
        assert onnx_cache.open_entry(entry, MODEL_DIR, key) is None
    assert "re-exporting" in caplog.text


def test_a_damaged_cache_is_re_exported_and_queries_stay_exact(
    exported: tuple[MiniLMEmbedder, Path], tmp_path: Path
) -> None:
    embedder, cache = exported
    copy = _copy_cache(cache, tmp_path)
    _damage_truncate(_entry(copy))
    fresh = MiniLMEmbedder(cache_dir=copy)  # the real export runs again
    vector = fresh.embed_query("wire limit")
    assert fresh.query_encoder() is not None
    assert onnx_cache.open_entry(_entry(copy), MODEL_DIR, _entry(copy).name) is not None
    np.testing.assert_allclose(vector, embedder._encode(["wire limit"], 1)[0], atol=1e-5)


def test_concurrent_publishers_leave_one_valid_entry(
    exported: tuple[MiniLMEmbedder, Path], tmp_path: Path
) -> None:
    _, cache = exported
    good = _entry(cache)
    key = good.name
    manifest = onnx_cache.ExportManifest.model_validate_json(
        (good / onnx_cache.MANIFEST_FILE).read_bytes()
    )
    both_built = threading.Barrier(2)

    def build(staging: Path) -> onnx_cache.ExportManifest:
        shutil.copyfile(good / onnx_cache.MODEL_FILE, staging / onnx_cache.MODEL_FILE)
        both_built.wait(timeout=30)  # both renames race for the same entry
        return manifest

    target = tmp_path / ".govrag"
    results: list[Path] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(onnx_cache.publish(target, key, build, MODEL_DIR))
        )
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results == [target / onnx_cache.CACHE_DIR / key] * 2
    assert onnx_cache.open_entry(results[0], MODEL_DIR, key) is not None
    # No staging directory is left behind by the loser.
    assert sorted(p.name for p in (target / onnx_cache.CACHE_DIR).iterdir()) == sorted(
        [key, onnx_cache.MEMO_FILE]
    )


def test_publish_replaces_a_damaged_entry(
    exported: tuple[MiniLMEmbedder, Path], tmp_path: Path
) -> None:
    _, cache = exported
    copy = _copy_cache(cache, tmp_path)
    entry = _entry(copy)
    good_model = (entry / onnx_cache.MODEL_FILE).read_bytes()
    manifest = onnx_cache.ExportManifest.model_validate_json(
        (entry / onnx_cache.MANIFEST_FILE).read_bytes()
    )
    _damage_flip_a_byte(entry)

    def build(staging: Path) -> onnx_cache.ExportManifest:
        (staging / onnx_cache.MODEL_FILE).write_bytes(good_model)
        return manifest

    assert onnx_cache.publish(copy, entry.name, build, MODEL_DIR) == entry
    assert onnx_cache.open_entry(entry, MODEL_DIR, entry.name) is not None
    assert sorted(p.name for p in entry.parent.iterdir()) == sorted(
        [entry.name, onnx_cache.MEMO_FILE]
    )


def test_stale_exports_are_keyed_away_and_pruned(
    exported: tuple[MiniLMEmbedder, Path], tmp_path: Path
) -> None:
    _, cache = exported
    copy = _copy_cache(cache, tmp_path)
    key = _entry(copy).name
    assert onnx_cache.cache_key(MODEL_DIR, copy) == key
    stale = copy / onnx_cache.CACHE_DIR / ("0" * 32)
    shutil.copytree(_entry(copy), stale)
    # An entry is only opened under its own key: a stale one is never mistaken for it.
    assert onnx_cache.open_entry(stale, MODEL_DIR, key) is None
    onnx_cache.prune(copy, key)
    assert not stale.exists()
    assert _entry(copy).name == key


def test_the_key_memo_is_a_cache_not_a_source_of_truth(
    exported: tuple[MiniLMEmbedder, Path], tmp_path: Path
) -> None:
    _, cache = exported
    copy = _copy_cache(cache, tmp_path)
    key = _entry(copy).name
    memo = copy / onnx_cache.CACHE_DIR / onnx_cache.MEMO_FILE
    for garbage in ("{broken", "[]", json.dumps({str(MODEL_DIR / "config.json"): [1, 2, "x"]})):
        memo.write_text(garbage, encoding="utf-8")
        assert onnx_cache.cache_key(MODEL_DIR, copy) == key
    # A model file whose size or time changed is hashed again, not trusted from the memo.
    entries = json.loads(memo.read_text(encoding="utf-8"))
    for value in entries.values():
        value[2] = "0" * 64
        value[1] += 1
    memo.write_text(json.dumps(entries), encoding="utf-8")
    assert onnx_cache.cache_key(MODEL_DIR, copy) == key


def test_an_unwritable_cache_falls_back_to_torch_with_a_warning(
    exported: tuple[MiniLMEmbedder, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    embedder, _ = exported
    # A regular file where the cache directory should be: no directory can be created there
    # (chmod cannot make a directory unwritable for root, which the tests may run as).
    blocked = tmp_path / "deployment" / ".govrag"
    blocked.parent.mkdir()
    blocked.write_text("not a directory", encoding="utf-8")
    fallback = MiniLMEmbedder(cache_dir=blocked)
    with caplog.at_level(logging.WARNING, logger="govrag.embed"):
        vector = fallback.embed_query("wire limit")
        again = fallback.embed_query("wire limit")
    assert fallback.query_encoder() is None
    assert caplog.text.count("torch instead") == 1  # warned once, not per query
    assert str(blocked) in caplog.text
    expected = embedder._encode(["wire limit"], 1)[0]
    np.testing.assert_allclose(vector, expected, atol=1e-6)
    np.testing.assert_array_equal(vector, again)


def test_a_missing_onnxruntime_names_the_extra_and_falls_back(
    exported: tuple[MiniLMEmbedder, Path],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    embedder, cache = exported
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    fallback = MiniLMEmbedder(cache_dir=cache)
    with caplog.at_level(logging.WARNING, logger="govrag.embed"):
        vector = fallback.embed_query("wire limit")
    assert "govrag[semantic]" in caplog.text
    assert "onnxruntime" in caplog.text
    np.testing.assert_allclose(vector, embedder._encode(["wire limit"], 1)[0], atol=1e-6)


def test_without_a_cache_dir_queries_use_torch_and_write_nothing(tmp_path: Path) -> None:
    embedder = MiniLMEmbedder()
    assert embedder.query_encoder() is None
    assert embedder.embed_query("wire limit").shape == (384,)


def test_deployments_pass_their_cache_dir_to_minilm_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The default, not the suite's shared cache (conftest sets GOVRAG_EMBEDDER__CACHE_DIR).
    monkeypatch.delenv("GOVRAG_EMBEDDER__CACHE_DIR", raising=False)
    minilm_deployment = Deployment.load(tmp_path, embedder={"name": "minilm"})
    emb = minilm_deployment.embedder
    assert isinstance(emb, MiniLMEmbedder)
    assert emb.cache_dir == minilm_deployment.settings.deployment / ".govrag"
    hashed = Deployment.load(tmp_path, embedder={"name": "hash", "dim": 32}).embedder
    assert hashed.embed_query("wire limit").shape == (32,)
    assert not (tmp_path / ".govrag").exists()  # nothing is exported or cached for `hash`


def test_a_configured_cache_dir_is_shared_by_deployments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GOVRAG_EMBEDDER__CACHE_DIR", raising=False)
    shared = tmp_path / "shared-cache"
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
    for name in ("a", "b"):
        dep = Deployment.load(
            tmp_path / name, embedder={"name": "minilm", "cache_dir": str(shared)}
        )
        assert isinstance(dep.embedder, MiniLMEmbedder) and dep.embedder.cache_dir == shared
    relative = Deployment.load(tmp_path / "c", embedder={"name": "minilm", "cache_dir": "cache"})
    assert relative.embedder.cache_dir == tmp_path / "c" / "cache"  # type: ignore[attr-defined]


def test_the_registry_accepts_the_cache_dir_option(tmp_path: Path) -> None:
    emb = get_embedder("minilm", cache_dir=tmp_path)
    assert isinstance(emb, MiniLMEmbedder)
    assert emb.cache_dir == tmp_path
