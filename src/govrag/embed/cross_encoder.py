"""Local cross-encoder models, loaded by path and shared per process (extra ``semantic``).

A cross-encoder reads a query and a text together and scores the pair; the gateway reranks
with one (``[gateway] cross_encoder_path``) and validation may judge answerability with one
(``[validation] cross_encoder_path``). Either way the model is a local sentence-transformers
directory loaded with ``local_files_only`` and Hugging Face offline mode, so nothing is ever
downloaded; a path that is not such a model is a :class:`~govrag.errors.ConfigError` naming
the setting that gave it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from govrag.errors import ConfigError, MissingExtraError

_MODELS: dict[tuple[str, str], Any] = {}
_LOCK = threading.Lock()


def load_cross_encoder(path: str | Path, *, setting: str, device: str = "cpu") -> Any:
    """The sentence-transformers ``CrossEncoder`` at ``path`` (one per path and device in a
    process); ``setting`` names where the path came from, for the error."""
    path = Path(path)
    if not path.is_dir():
        raise ConfigError(
            f"{setting} {str(path)!r} is not a directory; give the path of a local "
            "cross-encoder model (nothing is downloaded)"
        )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from sentence_transformers import CrossEncoder
    except ImportError as exc:
        raise MissingExtraError("sentence-transformers", "semantic",
                                f"The cross-encoder of {setting}") from exc  # fmt: skip
    key = (str(path), device)
    with _LOCK:
        model = _MODELS.get(key)
        if model is None:
            try:
                model = CrossEncoder(str(path), device=device, local_files_only=True)
            except Exception as exc:  # many loader errors; all mean "not a usable model"
                raise ConfigError(
                    f"{setting} {str(path)!r} could not be loaded as a cross-encoder "
                    f"({type(exc).__name__}: {exc}); point it at a local "
                    "sentence-transformers cross-encoder directory"
                ) from exc
            _MODELS[key] = model
    return model
