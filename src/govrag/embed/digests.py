"""SHA-256 digests of large files, memoised against their size and modification time.

The ONNX query cache checks ~180 MB of files (the bundled weights it is keyed by, the export it
opens). Hashing them costs ~0.2 s on an idle machine and more on a busy one, on every query of
a fresh CLI process. So each digest is remembered beside the cache with the file's size and
``mtime_ns``, and recomputed whenever either differs: rewriting, truncating or replacing a file
changes them. A change that keeps both (a same-size in-place edit that resets the time) is not
seen here; the cache's probe check (:mod:`govrag.embed.onnx_cache`) is the second line.

The memo is a cache, never a source of truth: a missing, unreadable or malformed one just means
hashing again, and failing to write it (a read-only deployment) costs only time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path


def file_sha256(path: Path) -> str:
    """The hex SHA-256 of ``path``'s content."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp makes the file private; the cache holds public model data, and a service
        # account reading what an administrator's ingest exported must be able to open it.
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class DigestMemo:
    """Digests of files by resolved path, remembered in the JSON file ``memo_path``."""

    def __init__(self, memo_path: Path) -> None:
        self.path = memo_path
        try:
            loaded = json.loads(memo_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            loaded = None
        self._memo: dict[str, object] = loaded if isinstance(loaded, dict) else {}
        self._changed = False

    def digest(self, path: Path) -> str:
        """``path``'s SHA-256, from the memo when its size and time are unchanged.

        Raises:
            OSError: ``path`` cannot be read.
        """
        resolved = str(path.resolve())
        stat = os.stat(resolved)
        signature = [stat.st_size, stat.st_mtime_ns]
        known = self._memo.get(resolved)
        if isinstance(known, list) and len(known) == 3 and known[:2] == signature:
            return str(known[2])
        digest = file_sha256(Path(resolved))
        self._memo[resolved] = [*signature, digest]
        self._changed = True
        return digest

    def save(self) -> None:
        """Write the memo if it learned anything; never raises (it is only a cache)."""
        if not self._changed:
            return
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, json.dumps(self._memo, indent=1))
        self._changed = False
