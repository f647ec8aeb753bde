"""A cross-encoder reranker: reads the query and each candidate together (extra ``semantic``).

Available when sentence-transformers is installed and ``[gateway] cross_encoder_path`` names
a local cross-encoder model directory (e.g. a copy of ``cross-encoder/ms-marco-MiniLM-L-6-v2``);
it is loaded with ``local_files_only``, so nothing is downloaded. Its score replaces the
store's fused score; near-duplicate removal and per-document diversity then apply exactly as
in the deterministic reranker. Like every reranker it only reorders and thins the store's
ACL-filtered candidates.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from govrag.embed.cross_encoder import load_cross_encoder
from govrag.gateway.rerank import DeterministicReranker
from govrag.types import SearchHit


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
        self._model = load_cross_encoder(path, setting="gateway.cross_encoder_path",
                                         device=device)  # fmt: skip
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
