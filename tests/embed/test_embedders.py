"""Embedders: the hashing embedder's contract, the registry, and the real MiniLM model."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import numpy as np
import pytest

from govrag.embed import (
    Embedder,
    available_embedders,
    get_embedder,
    hashing,
    minilm,
    semantic_available,
)
from govrag.embed.hashing import HashEmbedder
from govrag.errors import ConfigError, InputError, MissingExtraError

TEXTS = [
    "The colour of the sky is blue.",
    "Quarterly revenue grew 5% on strong demand.",
    "Access control lists restrict who may read a document.",
    "ÜBER straße café — unicode words survive lower-casing",
    "a",
    "x " * 300,
]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    # Vectors are unit-norm by contract, so the dot product is the cosine.
    return float(np.dot(a, b))


# --- hash embedder -----------------------------------------------------------------------------


def test_hash_shape_dtype_and_unit_norm() -> None:
    emb = HashEmbedder()
    vectors = emb.embed_documents(TEXTS)
    assert vectors.shape == (len(TEXTS), 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    query = emb.embed_query("blue sky")
    assert query.shape == (384,)
    assert query.dtype == np.float32
    assert abs(float(np.linalg.norm(query)) - 1.0) < 1e-6


def test_hash_is_deterministic_across_instances_batches_and_history() -> None:
    expected = HashEmbedder().embed_documents(TEXTS)
    # A second instance, different batching, and a cache warmed by unrelated text first: the
    # vectors must be identical to the bit, not merely close.
    other = HashEmbedder()
    other.embed_documents(["unrelated warm-up text about revenue and colour", "sky sky sky"])
    assert other.embed_documents(TEXTS, batch_size=1).tobytes() == expected.tobytes()
    assert other.embed_documents(TEXTS[::-1], batch_size=4)[::-1].tobytes() == expected.tobytes()
    for i, text in enumerate(TEXTS):
        assert other.embed_query(text).tobytes() == expected[i].tobytes()


def test_hash_is_deterministic_after_cache_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = HashEmbedder().embed_documents(TEXTS)
    monkeypatch.setattr(hashing, "_MAX_CACHE_ENTRIES", 10)
    emb = HashEmbedder()
    for _ in range(3):  # every batch now starts with a cache reset
        assert emb.embed_documents(TEXTS, batch_size=2).tobytes() == expected.tobytes()


def test_hash_is_deterministic_across_processes() -> None:
    expected = HashEmbedder(dim=128).embed_documents(TEXTS)
    code = textwrap.dedent(
        f"""
        import sys
        from govrag.embed.hashing import HashEmbedder
        sys.stdout.write(HashEmbedder(dim=128).embed_documents({TEXTS!r}).tobytes().hex())
        """
    )
    # A fixed, different hash seed in the child: any use of Python's salted hash() would show.
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert bytes.fromhex(result.stdout) == expected.tobytes()


@pytest.mark.parametrize("text", ["", "   \n\t", "!?—…"])
def test_hash_text_without_words_is_the_zero_vector(text: str) -> None:
    emb = HashEmbedder(dim=32)
    assert not emb.embed_query(text).any()
    vectors = emb.embed_documents(["real words here", text])
    assert not vectors[1].any()
    assert abs(float(np.linalg.norm(vectors[0])) - 1.0) < 1e-6


def test_hash_empty_input_list() -> None:
    vectors = HashEmbedder(dim=16).embed_documents([])
    assert vectors.shape == (0, 16)
    assert vectors.dtype == np.float32


def test_hash_similar_spellings_are_closer_than_unrelated_text() -> None:
    emb = HashEmbedder()
    anchor = emb.embed_query("the colour of the embedder")
    near = emb.embed_query("the color of the embeddings")
    far = emb.embed_query("quarterly revenue grew five percent")
    assert cosine(anchor, near) > cosine(anchor, far) + 0.3
    # Trigrams alone (no shared whole word) still make a misspelling close.
    assert cosine(emb.embed_query("authorisation"), emb.embed_query("authorization")) > 0.5
    assert cosine(emb.embed_query("authorisation"), emb.embed_query("quarterly")) < 0.2


def test_hash_is_case_insensitive_and_ignores_punctuation() -> None:
    emb = HashEmbedder()
    a = emb.embed_query("Hello, World!")
    b = emb.embed_query("hello world")
    assert a.tobytes() == b.tobytes()


def test_hash_term_frequency_is_log_scaled() -> None:
    emb = HashEmbedder()
    once = emb.embed_query("cat dog")
    many = emb.embed_query("cat cat cat cat cat cat cat cat dog")
    # Linear counts would make "cat" swamp "dog" (cosine with "dog" ≈ 0.12); log scaling keeps
    # the repeated word dominant but bounded.
    dog = emb.embed_query("dog")
    assert cosine(many, dog) < cosine(once, dog)
    assert cosine(many, dog) > 0.25


def test_hash_progress_is_reported_per_batch() -> None:
    calls: list[int] = []
    HashEmbedder().embed_documents(TEXTS + TEXTS[:1], batch_size=3, progress=calls.append)
    assert calls == [3, 3, 1]
    calls.clear()
    # Caller batches above the internal chunk size are still reported as one batch.
    HashEmbedder().embed_documents(["t"] * 150, batch_size=100, progress=calls.append)
    assert calls == [100, 50]


def test_hash_rejects_bad_arguments() -> None:
    emb = HashEmbedder()
    with pytest.raises(InputError, match="single string"):
        emb.embed_documents("not a list")
    with pytest.raises(InputError, match="batch_size"):
        emb.embed_documents(["x"], batch_size=0)
    for bad in (0, -3, True, 2.5):
        with pytest.raises(ConfigError, match="dim"):
            HashEmbedder(dim=bad)  # type: ignore[arg-type]


def test_hash_satisfies_the_protocol() -> None:
    emb = HashEmbedder(dim=8)
    assert isinstance(emb, Embedder)
    assert (emb.name, emb.dim) == ("hash", 8)


# --- registry ----------------------------------------------------------------------------------


def test_registry_lists_and_builds_embedders() -> None:
    assert available_embedders() == ["hash", "minilm", "openai"]
    emb = get_embedder("hash", dim=48)
    assert isinstance(emb, HashEmbedder)
    assert emb.dim == 48
    assert emb.embed_query("x").shape == (48,)


def test_registry_unknown_name_is_a_config_error_listing_valid_names() -> None:
    with pytest.raises(ConfigError) as info:
        get_embedder("word2vec")
    message = str(info.value)
    assert "'word2vec'" in message
    assert "hash" in message
    assert "minilm" in message


def test_registry_unknown_option_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="dimension") as info:
        get_embedder("hash", dimension=32)
    assert "dim" in str(info.value)


def test_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes `import sentence_transformers` raise ImportError, even
    # when the package is installed; the empty model cache forces a fresh load attempt.
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    monkeypatch.setattr(minilm, "_MODELS", {})
    assert not semantic_available()
    with pytest.raises(MissingExtraError) as info:
        get_embedder("minilm")
    assert "govrag[semantic]" in str(info.value)
    assert "sentence-transformers" in str(info.value)
    assert info.value.extra == "semantic"
    assert isinstance(info.value.__cause__, ImportError)


# --- MiniLM (the real model, loaded once for this module) --------------------------------------


@pytest.fixture(scope="module")
def minilm_embedder() -> Iterator[Embedder]:
    pytest.importorskip(
        "sentence_transformers",
        reason="sentence-transformers is not installed (pip install 'govrag[semantic]')",
    )
    yield get_embedder("minilm")


def test_minilm_shape_dtype_and_unit_norm(minilm_embedder: Embedder) -> None:
    assert (minilm_embedder.name, minilm_embedder.dim) == ("minilm", 384)
    vectors = minilm_embedder.embed_documents(TEXTS)
    assert vectors.shape == (len(TEXTS), 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    query = minilm_embedder.embed_query("")
    assert query.shape == (384,)
    assert query.dtype == np.float32
    assert abs(float(np.linalg.norm(query)) - 1.0) < 1e-5


def test_minilm_is_semantic(minilm_embedder: Embedder) -> None:
    cat, kitten, revenue = minilm_embedder.embed_documents(
        ["a cat sits on the mat", "a kitten is on the rug", "quarterly revenue grew 5%"]
    )
    assert cosine(cat, kitten) > cosine(cat, revenue) + 0.2
    # The query path embeds into the same space as the document path.
    assert cosine(minilm_embedder.embed_query("a small cat"), cat) > cosine(
        minilm_embedder.embed_query("a small cat"), revenue
    )


def test_minilm_keeps_input_order_and_reports_progress(minilm_embedder: Embedder) -> None:
    # Texts of very different lengths: the embedder encodes longest-first internally and must
    # put every row back where it came from.
    texts = ["short", "a much longer sentence about access control " * 5, "medium sized text"]
    calls: list[int] = []
    vectors = minilm_embedder.embed_documents(texts, batch_size=2, progress=calls.append)
    assert calls == [2, 1]
    for text, row in zip(texts, vectors, strict=True):
        np.testing.assert_allclose(row, minilm_embedder.embed_query(text), atol=1e-5)


def test_minilm_model_is_loaded_once_per_device(minilm_embedder: Embedder) -> None:
    again = minilm.MiniLMEmbedder()
    assert again._model is minilm_embedder._model  # type: ignore[attr-defined]
