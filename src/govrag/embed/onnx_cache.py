"""The exported MiniLM query encoder, cached beside the deployment and trusted only when checked.

Layout, under the cache root (a deployment's ``.govrag/``)::

    minilm-onnx/digests.json         memo: file -> (size, mtime, sha256), see digests.py
    minilm-onnx/<key>/model.onnx     the exported encoder
    minilm-onnx/<key>/export.json    its manifest (ExportManifest)

``<key>`` hashes the model files the export and its probe are made of, plus the export
recipe's version: new weights or a new recipe give a new key, so a stale export is never
opened, only replaced.

An entry is opened only if its manifest parses, the model file has the recorded size and
SHA-256 (a truncated or altered file is caught before ONNX Runtime reads it), ONNX Runtime
loads it, and its embeddings of the probe texts match the vectors torch computed at export.
Anything else is a miss: the caller re-exports, or falls back to torch; never a crash.

Writes are atomic and lock-free: an export is built in a private staging directory and renamed
into place as a whole, so readers see a complete entry or none. Two processes exporting at
once both build; the first rename wins and the loser discards its copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from govrag.embed.digests import DigestMemo, write_atomic
from govrag.embed.onnx_export import EXPORT_VERSION, OPSET, PROBE_TEXTS
from govrag.embed.onnx_query import OnnxQueryEncoder
from govrag.errors import MissingExtraError

log = logging.getLogger("govrag.embed")

CACHE_DIR = "minilm-onnx"
MODEL_FILE = "model.onnx"
MANIFEST_FILE = "export.json"
MEMO_FILE = "digests.json"
#: The bundled files the export and its probe vectors depend on.
KEYED_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "sentence_bert_config.json",
    "modules.json",
    "1_Pooling/config.json",
)
#: ONNX Runtime and torch differ by float rounding (~1e-7 here); a damaged graph by far more.
PROBE_ATOL = 1e-4
#: Staging directories older than this were left by a crashed export.
_ABANDONED_S = 3600.0


class ExportManifest(BaseModel):
    """What an export was made from and what it must compute."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal[1] = 1
    key: str
    onnx_sha256: str
    onnx_bytes: int
    torch_version: str
    probe_texts: list[str]
    probe_vectors: list[list[float]]


def cache_key(model_dir: Path, cache_root: Path) -> str:
    """The key of an export of ``model_dir``: its keyed files' digests and the recipe version."""
    memo = DigestMemo(cache_root / CACHE_DIR / MEMO_FILE)
    key = hashlib.sha256(f"govrag-minilm-onnx v{EXPORT_VERSION} opset {OPSET}\n".encode())
    for name in KEYED_FILES:
        key.update(f"{name} {memo.digest(model_dir / name)}\n".encode())
    memo.save()
    return key.hexdigest()[:32]


def _probe_matches(encoder: OnnxQueryEncoder, manifest: ExportManifest) -> bool:
    if manifest.probe_texts != list(PROBE_TEXTS):
        return False
    got = encoder.encode(manifest.probe_texts)
    want = np.asarray(manifest.probe_vectors, dtype=np.float32)
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=0.0, atol=PROBE_ATOL))


def open_entry(entry: Path, model_dir: Path, key: str) -> OnnxQueryEncoder | None:
    """The checked encoder of the cache entry ``entry``, or None (logged) if it is unusable.

    Raises:
        MissingExtraError: onnxruntime or tokenizers is not installed (not a cache problem).
    """
    if not entry.is_dir():
        return None
    model = entry / MODEL_FILE
    try:
        manifest = ExportManifest.model_validate_json((entry / MANIFEST_FILE).read_bytes())
        memo = DigestMemo(entry.parent / MEMO_FILE)
        intact = (
            manifest.key == key == entry.name
            and model.stat().st_size == manifest.onnx_bytes
            and memo.digest(model) == manifest.onnx_sha256
        )
        memo.save()
    except (OSError, ValidationError) as exc:
        log.warning("ONNX query encoder cache %s is damaged (%s); re-exporting", entry, exc)
        return None
    if not intact:
        log.warning("ONNX query encoder cache %s does not match its manifest; re-exporting", entry)
        return None
    try:
        encoder = OnnxQueryEncoder(model, model_dir)
        agrees = _probe_matches(encoder, manifest)
    except MissingExtraError:
        raise
    except Exception as exc:
        # onnxruntime's errors (InvalidProtobuf, InvalidGraph, Fail, ...) share no base below
        # Exception; whatever they are, this entry cannot serve queries.
        log.warning("ONNX Runtime cannot use %s (%r); re-exporting", model, exc)
        return None
    if not agrees:
        log.warning("ONNX query encoder %s disagrees with torch on its probe; re-exporting", model)
        return None
    return encoder


def publish(
    cache_root: Path, key: str, build: Callable[[Path], ExportManifest], model_dir: Path
) -> Path:
    """Build an entry for ``key`` in a staging directory and move it into place atomically.

    ``build(staging)`` writes :data:`MODEL_FILE` into ``staging`` and returns its manifest.
    If a usable entry appeared meanwhile (another process won), it is kept and ours dropped;
    an unusable one is moved aside and replaced. Returns the entry's directory.

    Raises:
        OSError: the cache directory cannot be written (e.g. a read-only deployment).
    """
    parent = cache_root / CACHE_DIR
    parent.mkdir(parents=True, exist_ok=True)
    entry = parent / key
    staging = Path(tempfile.mkdtemp(prefix=f".staging-{key}-", dir=parent))
    try:
        manifest = build(staging)
        with (staging / MODEL_FILE).open("rb") as handle:
            os.fsync(handle.fileno())
        write_atomic(staging / MANIFEST_FILE, manifest.model_dump_json(indent=1))
        os.chmod(staging, 0o755)  # mkdtemp's 0o700 would hide the entry from other accounts
        for _ in range(3):
            try:
                os.rename(staging, entry)  # fails if entry exists (and is not empty)
                return entry
            except OSError:
                if not entry.exists():
                    raise
            if open_entry(entry, model_dir, key) is not None:
                return entry  # another process published a good one first
            # Damaged: rename it aside (atomic, so no reader sees it half-deleted), then drop.
            trash = Path(tempfile.mkdtemp(prefix=f".trash-{key}-", dir=parent))
            with contextlib.suppress(OSError):
                os.rename(entry, trash / "entry")
            shutil.rmtree(trash, ignore_errors=True)
        raise OSError(f"could not publish the ONNX export to {entry}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def prune(cache_root: Path, keep: str) -> None:
    """Remove entries of other keys (stale exports) and abandoned staging directories.

    Best effort: never raises. A staging directory is removed only when it is old enough that
    no export can still be writing it.
    """
    parent = cache_root / CACHE_DIR
    with contextlib.suppress(OSError):
        for child in parent.iterdir():
            if not child.is_dir() or child.name == keep:
                continue
            if child.name.startswith("."):
                with contextlib.suppress(OSError):
                    if time.time() - child.stat().st_mtime < _ABANDONED_S:
                        continue
            shutil.rmtree(child, ignore_errors=True)
