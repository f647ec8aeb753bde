"""A second OS process for the stateful ACL oracle (``test_acl_oracle.py``): it sends the
machine's changes through its own store handle, as a connector process beside the others.

It reads one JSON object per line on stdin and answers one line on stdout:

- ``{"op": "open", "store": {...}}``: open a store (``kind`` ``sqlite``: ``db`` and
  ``index``; ``postgres``: ``url``, ``admin_url`` and ``index``), closing the last one;
- ``{"op": "send", "tenant": T, "record": {...}}``: ingest one record through the
  :class:`~govrag.harvest.ingest.Ingestor`; answers its report's errors, conflicts, messages;
- ``{"op": "close"}``: close the store.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, TypeAdapter

from govrag.embed.hashing import HashEmbedder
from govrag.harvest.ingest import Ingestor
from govrag.harvest.records import Record
from govrag.store.protocol import KnowledgeStore

RECORD: TypeAdapter[Record] = TypeAdapter(Annotated[Record, Field(discriminator="type")])


def _open(config: dict[str, Any]) -> KnowledgeStore:
    embedder = HashEmbedder(dim=64)
    if config["kind"] == "sqlite":
        from govrag.store.sqlite import SQLiteStore

        return SQLiteStore(Path(config["db"]), index_dir=Path(config["index"]), embedder=embedder)
    from govrag.store.postgres import PostgresStore

    return PostgresStore(config["url"], admin_url=config["admin_url"],
                         index_dir=Path(config["index"]), embedder=embedder)  # fmt: skip


def main() -> None:
    store: KnowledgeStore | None = None
    for line in sys.stdin:
        message = json.loads(line)
        answer: dict[str, Any] = {"ok": True}
        if message["op"] in ("open", "close") and store is not None:
            store.close()
            store = None
        if message["op"] == "open":
            store = _open(message["store"])
        elif message["op"] == "send":
            assert store is not None
            ingestor = Ingestor(store, message["tenant"], embedder=store.embedder)
            ingestor.add("oracle", RECORD.validate_python(message["record"]))
            ingestor.flush()
            r = ingestor.report
            answer |= {"errors": r.errors, "conflicts": r.conflicts, "messages": r.messages}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
