"""Local cross-encoder models, loaded by path and shared per process (extra ``semantic``).

A cross-encoder reads a query and a text together and scores the pair; the gateway reranks
with one (``[gateway] cross_encoder_path``) and validation may judge answerability with one
(``[validation] cross_encoder_path``). Either way the model is a local sentence-transformers
directory loaded with ``local_files_only`` and Hugging Face offline mode, so nothing is ever
downloaded; a path that is not such a model is a :class:`~govrag.errors.ConfigError` naming
the setting that gave it.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from govrag.errors import ConfigError, MissingExtraError

_MODELS: dict[tuple[str, str], Any] = {}
_LOCK = threading.Lock()


def cross_encoder_problem(path: str | Path, *, setting: str) -> str | None:
    """What is wrong with ``path`` as a cross-encoder directory, read from its files alone
    (no model is loaded: ``govrag config check`` asks this too), or ``None``. An embedding
    model (its ``config.json`` names no ``...ForSequenceClassification`` architecture) is
    refused: sentence-transformers would load it with a scoring head of random weights, drawn
    anew in each process, and every judgement would be noise."""
    path = Path(path)
    if not path.is_dir():
        return (f"{setting} {str(path)!r} is not a directory; give the path of a local "
                "cross-encoder model (nothing is downloaded)")  # fmt: skip
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # not a transformers layout: the loader says what is wrong with it
    names = config.get("architectures") if isinstance(config, dict) else None
    if isinstance(names, list) and not any(
        isinstance(n, str) and n.endswith("ForSequenceClassification") for n in names
    ):
        return (
            f"{setting} {str(path)!r} is not a cross-encoder: its config.json names {names} "
            "(an embedding model), and a cross-encoder is a sequence classification model "
            "that scores a question and a text together; give the directory of one (e.g. a "
            "copy of cross-encoder/ms-marco-MiniLM-L-6-v2)"
        )
    return None


def load_cross_encoder(path: str | Path, *, setting: str, device: str = "cpu") -> Any:
    """The sentence-transformers ``CrossEncoder`` at ``path`` (one per path and device in a
    process); ``setting`` names where the path came from, for the error."""
    path = Path(path)
    problem = cross_encoder_problem(path, setting=setting)
    if problem is not None:
        raise ConfigError(problem)
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
