"""A cross-encoder reranker: reads the query and each candidate together (extra ``semantic``).

Available when sentence-transformers is installed and ``[gateway] cross_encoder_path`` names
a local cross-encoder model directory (e.g. a copy of ``cross-encoder/ms-marco-MiniLM-L-6-v2``);
it is loaded with ``local_files_only``, so nothing is downloaded. Its score replaces the
store's fused score; near-duplicate removal and per-document diversity then apply exactly as
in the deterministic reranker. Like every reranker it only reorders and thins the store's
ACL-filtered candidates.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from govrag.errors import ConfigError, MissingExtraError
from govrag.gateway.rerank import DeterministicReranker
from govrag.types import SearchHit

_MODELS: dict[tuple[str, str], Any] = {}
_LOCK = threading.Lock()


def _load(path: Path, device: str) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from sentence_transformers import CrossEncoder
    except ImportError as exc:
        raise MissingExtraError("sentence-transformers", "semantic", "The cross-encoder "
                                "reranker") from exc  # fmt: skip
    key = (str(path), device)
    with _LOCK:
        model = _MODELS.get(key)
        if model is None:
            try:
                model = CrossEncoder(str(path), device=device, local_files_only=True)
            except Exception as exc:  # many loader errors; all mean "not a usable model"
                raise ConfigError(
                    f"gateway.cross_encoder_path {str(path)!r} could not be loaded as a "
                    f"cross-encoder ({type(exc).__name__}: {exc}); point it at a local "
                    "sentence-transformers cross-encoder directory"
                ) from exc
            _MODELS[key] = model
    return model


class CrossEncoderReranker:
    """Scores ``(query, chunk text)`` pairs with a local cross-encoder, then thins."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        device: str = "cpu",
        batch_size: int = 32,
        duplicate_jaccard: float = 0.9,
        max_per_document: int = 2,
    ) -> None:
        path = Path(model_path)
        if not path.is_dir():
            raise ConfigError(
                f"gateway.cross_encoder_path {str(path)!r} is not a directory; give the path "
                "of a local cross-encoder model (nothing is downloaded)"
            )
        self._model = _load(path, device)
        self.batch_size = batch_size
        # Trust does not nudge a cross-encoder's logits: they are not on the fused scale.
        self._thinner = DeterministicReranker(
            trust_weight=0.0, duplicate_jaccard=duplicate_jaccard,
            max_per_document=max_per_document,
        )  # fmt: skip
        self.version = (
            f"cross-encoder-v1({path.name},dup={duplicate_jaccard:g},per_doc={max_per_document})"
        )

    def rerank(self, query: str, hits: Sequence[SearchHit], limit: int) -> list[SearchHit]:
        if not hits:
            return []
        scores = self._model.predict(
            [(query, h.text) for h in hits],
            batch_size=self.batch_size,
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        rescored = [
            h.model_copy(update={"score": float(s)}) for h, s in zip(hits, scores, strict=True)
        ]
        return self._thinner.thin(rescored, limit)
