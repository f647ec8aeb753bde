"""A governed-search process for the audit fault tests (``test_audit_faults.py``).

``python audit_child.py <deployment> <config-json> <witness-log> <mode> <tag>``, where the
config holds the ``[store]`` overrides (``store``) and where the witness reads committed
rows (``sqlite``: the database file, or ``postgres``: a superuser's DSN).

- ``loop``: governed searches with unique queries until killed, every store search watched
  by the witness (``audit_witness.py``).
- ``fsize``: a real I/O error on the audit write. The process's file-size limit is set to
  the database files' sizes, so SQLite's next write past them fails with EFBIG ("disk I/O
  error"); governed searches must then be DENY and search nothing. The limit is lifted
  and one more search must be ALLOW. Prints one JSON line of what happened.
"""

from __future__ import annotations

import json
import resource
import signal
import sys
from pathlib import Path
from typing import Any

from govrag.app import Govrag
from govrag.deployment import Deployment
from govrag.errors import StoreError
from govrag.store.protocol import KnowledgeStore
from govrag.types import Strategy

from audit_witness import Committed, watch

STRATEGIES = (Strategy.KEYWORD, Strategy.HYBRID, Strategy.SEMANTIC)
CORPORA = (None, ("c1",), ("c2",))


def _fill_until_full(store: KnowledgeStore) -> int:
    """Append audit rows, largest first, until even an empty one no longer fits."""
    failures = 0
    for size in (65536, 4096, 256, 16, 0):
        for i in range(2000):
            try:
                store.append_audit("t1", "fill", {"x": "y" * size}, request_id=f"f{size}-{i}",
                                   session_id="fill")  # fmt: skip
            except StoreError:
                failures += 1
                break
    return failures


def main(root: Path, config: dict[str, Any], log: Path, mode: str, tag: str) -> None:
    dep = Deployment.load(root, store=config["store"], embedder={"name": "hash", "dim": 64},
                          audit={"checkpoint_every_events": 7})  # fmt: skip
    sqlite = config.get("sqlite")
    committed = Committed(Path(sqlite) if sqlite else None, config.get("postgres"))
    watch(dep.store, committed, log)
    app = Govrag(dep)
    caller = dep.principal("u0")
    if mode == "loop":
        i = 0
        while True:
            app.callers.search(caller, f"wire limit {tag} q{i}", corpora=CORPORA[i % 3],
                       strategy=STRATEGIES[i % 5 % 3])  # fmt: skip
            i += 1
    assert mode == "fsize"
    warm = app.callers.search(caller, f"wire limit {tag} warm")
    # Opened before the fault: a new session's own audit record would fail first.
    session = app.callers.open_session(caller).session_id
    db = committed.sqlite
    assert db is not None
    sizes = [p.stat().st_size for p in (db, Path(f"{db}-wal")) if p.exists()]
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG from write(), not a dead process
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (max(sizes), hard))
    fills = _fill_until_full(dep.store)
    denied = [
        app.callers.search(caller, f"wire limit {tag} io{i}", session=session) for i in range(3)
    ]
    try:
        app.callers.search(caller, f"wire limit {tag} io-new-session")
        opening = "opened"
    except StoreError as exc:
        opening = str(exc)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    after = app.callers.search(caller, f"wire limit {tag} after")
    out = {
        "warm": [d.verdict for d in warm.decisions],
        "fills_failed": fills,
        "denied": [(d.verdict, d.reason, d.audit_id) for r in denied for d in r.decisions],
        "denied_chunks": sum(len(r.results) for r in denied),
        "new_session": opening,
        "after": [d.verdict for d in after.decisions],
        "after_chunks": len(after.results),
        "warm_chunks": len(warm.results),
    }
    print(json.dumps(out))
    dep.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]), json.loads(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], sys.argv[5])
