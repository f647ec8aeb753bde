"""The on-disk shape of a lexical index: its tantivy schema, what a chunk becomes, its format.

A chunk is stored as govrag's BM25 tokens (``term␟tf␟dl``, see ``bm25.py``) and its quantised
length, with what the access predicate reads beside it: ACL principal tokens, corpus and
classification as indexed fields, plus a digest of them (:func:`access_digest`) that
``govrag index verify`` compares with the truth store. The format marker names this shape; an
index of another format is discarded on open and rebuilt from the truth store.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import tantivy

from govrag.errors import StoreError
from govrag.store import bm25
from govrag.store.records import IndexedChunk

FORMAT_FILE = "format"
#: Bump when the schema or the meaning of a field changes: an index of another format is
#: discarded on open and rebuilt from the truth store.
FORMAT = "3"


def schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_unsigned_field("cid", indexed=True, fast=True)
    sb.add_unsigned_field("did", indexed=True, fast=True)
    # One token per distinct term, ``term␟tf␟dl``, and the quantised length (see bm25.py).
    sb.add_text_field("tf", tokenizer_name="raw", index_option="basic")
    sb.add_text_field("dl", tokenizer_name="raw", index_option="basic")
    # Each distinct term once, as itself: whether a chunk holds a term is one posting list
    # (the hidden-item marker's rule, document frequencies), not hundreds of ``tf`` tokens.
    sb.add_text_field("term", tokenizer_name="raw", index_option="basic")
    sb.add_text_field("acl", tokenizer_name="raw", index_option="basic")
    sb.add_text_field("corpus", tokenizer_name="raw", index_option="basic")
    sb.add_unsigned_field("cls", indexed=True, fast=True)
    # A digest of what the access predicate reads, for ``govrag index verify``.
    sb.add_unsigned_field("acc", fast=True)
    return sb.build()


def access_digest(doc_id: int, corpus: str, classification: int, acl: Iterable[str]) -> int:
    """64 bits of a digest of a chunk's document, corpus, classification and ACL tokens."""
    body = "\x1e".join([str(doc_id), corpus, str(classification), *sorted(acl)])
    return int.from_bytes(hashlib.sha256(body.encode()).digest()[:8], "big")


def to_tantivy(doc: IndexedChunk) -> tantivy.Document:
    out = tantivy.Document()
    out.add_unsigned("cid", doc.chunk_id)
    out.add_unsigned("did", doc.doc_id)
    terms = doc.terms.split()
    tokens, dl = bm25.chunk_tokens(terms)
    for token in tokens:
        out.add_text("tf", token)
    for term in dict.fromkeys(terms):
        out.add_text("term", term)
    out.add_text("dl", str(dl))
    for token in doc.acl_tokens:
        out.add_text("acl", token)
    out.add_text("corpus", doc.corpus)
    out.add_unsigned("cls", doc.classification)
    out.add_unsigned(
        "acc", access_digest(doc.doc_id, doc.corpus, doc.classification, doc.acl_tokens)
    )
    return out


def discard_other_format(path: Path) -> bool:
    """Empty ``path`` when it holds an index of another format; returns whether it did.
    The index is derived: the next sync rebuilds it from the truth store."""
    marker = path / FORMAT_FILE
    try:
        if marker.read_text().strip() == FORMAT:
            return False
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise StoreError(f"cannot read {marker}: {exc.strerror}") from exc
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    tmp = path / f"{FORMAT_FILE}.{os.getpid()}.tmp"
    tmp.write_text(FORMAT)
    os.replace(tmp, marker)
    return True
