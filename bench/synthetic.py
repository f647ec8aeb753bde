"""A deterministic synthetic enterprise corpus, and the govrag store built from it.

Everything is derived from one seed through independent numpy ``Generator`` streams (one each
for the vocabulary, the texts, the access structure and the queries), so changing the corpus
size does not change the vocabulary or the queries, and a cached store can be trusted to match
the corpus regenerated in memory for the baselines.

Shape of the data:

* a vocabulary of pseudo-words (consonant-vowel syllables), each mapping to its own distinct
  analyzer term, used with Zipfian frequencies so both very common and rare terms exist;
* one chunk per document, 40-80 words;
* 1,000 accounts and 200 groups in one source system; the groups form a binary tree in heap
  order (group ``i > 0`` is a member of group ``(i - 1) // 2``), so a member of a group is
  transitively a member of every ancestor of that group;
* each document's ACL names one group (uniform) and its author account;
* three probe users whose direct group memberships are chosen so that they can read about 1%,
  10% and 50% of the documents.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.common import TOP_K, System
from govrag.embed.hashing import HashEmbedder
from govrag.harvest.ingest import Ingestor
from govrag.harvest.records import DocumentRecord, GroupRecord, IdentityRecord, Record
from govrag.settings import SearchSettings
from govrag.store.analyzer import default_analyzer
from govrag.store.sqlite import SQLiteStore
from govrag.types import Classification, Principal, SearchRequest, Strategy

#: Bump whenever the generated data for a given (size, seed) changes: cached stores built by an
#: older generator are then rebuilt instead of being compared with different baseline data.
GENERATOR_VERSION = 1

TENANT = "bench"
SOURCE = "corp"
CORPUS = "enterprise"
EMBED_DIM = 384
N_ACCOUNTS = 1_000
N_GROUPS = 200
VOCAB_SIZE = 20_000
ZIPF_EXPONENT = 1.0
MIN_WORDS, MAX_WORDS = 40, 80
#: Target readable fractions of the three probe users.
PROBE_TARGETS = (0.01, 0.10, 0.50)
#: Vocabulary rank bands queries draw from: "frequent" terms match many documents (up to about
#: a third of them), "mid" terms a few percent down to about a tenth of a percent. The top five
#: ranks are left out: they occur in nearly every document, like stopwords the analyzer keeps.
FREQUENT_BAND = (5, 200)
MID_BAND = (200, 5_000)

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_BUILD_MARKER = "build.json"

Say = Callable[[str], None]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def group_id(index: int) -> str:
    return f"g{index:03d}"


def account_id(index: int) -> str:
    return f"u{index:04d}"


def doc_external_id(index: int) -> str:
    return f"d{index:07d}"


def doc_index(external_id: str) -> int:
    """Inverse of :func:`doc_external_id` (search hits carry the external id)."""
    return int(external_id[1:])


def search_system(
    store: Any, principal: Principal, strategy: Strategy, truncated: list[bool] | None = None
) -> System:
    """A timed system over ``store.search`` (either backend) returning document numbers;
    appends each result's ``truncated`` flag to ``truncated`` when given."""

    def search(query: str) -> tuple[list[int], bool]:
        result = store.search(principal, SearchRequest(query=query, strategy=strategy, top_k=TOP_K))
        if truncated is not None:
            truncated.append(result.truncated)
        return [doc_index(h.doc_id) for h in result.results], result.hidden.present

    return search


def ancestors(group: int) -> list[int]:
    """``group`` followed by every group it is (transitively) a member of, up to the root."""
    chain = [group]
    while group > 0:
        group = (group - 1) // 2
        chain.append(group)
    return chain


@dataclass(frozen=True)
class Probe:
    """A user whose searches are timed; sees a chosen fraction of the corpus."""

    name: str
    target: float
    email: str
    account: str
    groups: tuple[int, ...]  # direct memberships

    def principal(self) -> Principal:
        return Principal(
            sub=self.name, email=self.email, tenant=TENANT, clearance=Classification.INTERNAL
        )


@dataclass(frozen=True)
class Corpus:
    """The generated data, held in memory so baselines can index exactly what govrag stores."""

    n_docs: int
    seed: int
    vocab: list[str]  # most frequent first
    texts: list[str]
    doc_group: IntArray  # group index of each document's ACL
    doc_author: IntArray  # account index of each document's author
    account_groups: tuple[tuple[int, ...], ...]  # direct memberships per account
    probes: tuple[Probe, ...]


def _streams(seed: int) -> dict[str, np.random.Generator]:
    # Spawned streams are independent, so e.g. the queries do not shift when n_docs changes.
    names = ("vocab", "text", "access", "queries")
    children = np.random.SeedSequence(seed).spawn(len(names))
    return {name: np.random.default_rng(child) for name, child in zip(names, children, strict=True)}


def make_vocabulary(rng: np.random.Generator, size: int = VOCAB_SIZE) -> list[str]:
    """``size`` pseudo-words of 2-4 syllables, each analysed to its own single term.

    Words whose stem collides with an earlier word's (the English stemmer folds e.g. ``-as``
    and ``-a``) are skipped, so a term's document frequency is exactly its word's.
    """
    analyzer = default_analyzer()
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < size:
        n_syllables = rng.integers(2, 5, size=4096)
        consonants = rng.integers(0, len(_CONSONANTS), size=(4096, 4))
        vowels = rng.integers(0, len(_VOWELS), size=(4096, 4))
        for n, cs, vs in zip(n_syllables, consonants, vowels, strict=True):
            word = "".join(_CONSONANTS[c] + _VOWELS[v] for c, v in zip(cs[:n], vs[:n], strict=True))
            terms = analyzer.analyze(word)
            if len(terms) != 1 or terms[0] in seen:
                continue
            seen.add(terms[0])
            words.append(word)
            if len(words) == size:
                break
    return words


def _choose_groups(target_groups: int) -> tuple[int, ...]:
    """Greedy direct memberships whose ancestor closure covers exactly ``target_groups`` groups.

    Documents are spread uniformly over the groups, so covering ``k`` groups reads about
    ``k / N_GROUPS`` of the corpus. Each step takes the group that adds the most uncovered
    groups without overshooting (deep leaves first); adding a child of a covered group adds
    exactly one, so the target is always met.
    """
    covered: set[int] = set()
    chosen: list[int] = []
    while len(covered) < target_groups:
        best, best_gain = -1, 0
        for g in range(N_GROUPS):
            gain = len(set(ancestors(g)) - covered)
            if best_gain < gain <= target_groups - len(covered):
                best, best_gain = g, gain
        if best < 0:
            break
        chosen.append(best)
        covered.update(ancestors(best))
    return tuple(chosen)


def generate(n_docs: int, seed: int = 0) -> Corpus:
    """Generate the corpus; the same (n_docs, seed) always gives identical data."""
    rng = _streams(seed)
    vocab = make_vocabulary(rng["vocab"])

    text_rng = rng["text"]
    lengths = text_rng.integers(MIN_WORDS, MAX_WORDS + 1, size=n_docs)
    ranks = np.arange(1, len(vocab) + 1, dtype=np.float64)
    weights = ranks**-ZIPF_EXPONENT
    draws = text_rng.choice(len(vocab), size=int(lengths.sum()), p=weights / weights.sum())
    words = np.asarray(vocab, dtype=object)[draws]
    bounds = np.concatenate(([0], np.cumsum(lengths)))
    texts = [" ".join(words[bounds[i] : bounds[i + 1]]) for i in range(n_docs)]

    access = rng["access"]
    doc_group = access.integers(0, N_GROUPS, size=n_docs).astype(np.int64)
    doc_author = access.integers(0, N_ACCOUNTS, size=n_docs).astype(np.int64)
    # Most accounts sit in one group, some in two: enough structure for group resolution to
    # have real work, without affecting what the probes can read.
    account_groups = tuple(
        tuple(sorted({int(g) for g in access.integers(0, N_GROUPS, size=1 + (r < 0.3))}))
        for r in access.random(N_ACCOUNTS)
    )
    probes = tuple(
        Probe(
            name=f"p{i + 1}",
            target=target,
            email=f"p{i + 1}@bench.example",
            account=f"p{i + 1}",
            groups=_choose_groups(round(target * N_GROUPS)),
        )
        for i, target in enumerate(PROBE_TARGETS)
    )
    return Corpus(
        n_docs=n_docs,
        seed=seed,
        vocab=vocab,
        texts=texts,
        doc_group=doc_group,
        doc_author=doc_author,
        account_groups=account_groups,
        probes=probes,
    )


def _group_members(corpus: Corpus) -> dict[int, list[str]]:
    """Direct members (child groups, accounts, probe accounts) of every group."""
    members: dict[int, list[str]] = {g: [] for g in range(N_GROUPS)}
    for g in range(1, N_GROUPS):
        members[(g - 1) // 2].append(group_id(g))
    for a, groups in enumerate(corpus.account_groups):
        for g in groups:
            members[g].append(account_id(a))
    for probe in corpus.probes:
        for g in probe.groups:
            members[g].append(probe.account)
    return members


def records(corpus: Corpus) -> Iterator[Record]:
    """Every ingest record: identities, then groups, then documents."""
    for a in range(N_ACCOUNTS):
        yield IdentityRecord(
            type="identity",
            email=f"{account_id(a)}@corp.example",
            source_system=SOURCE,
            account_id=account_id(a),
        )
    for probe in corpus.probes:
        yield IdentityRecord(
            type="identity", email=probe.email, source_system=SOURCE, account_id=probe.account
        )
    for g, members in _group_members(corpus).items():
        yield GroupRecord(type="group", source_system=SOURCE, group_id=group_id(g), members=members)
    for i, text in enumerate(corpus.texts):
        author = account_id(int(corpus.doc_author[i]))
        yield DocumentRecord(
            type="document",
            source_system=SOURCE,
            external_id=doc_external_id(i),
            corpus=CORPUS,
            text=text,
            author=author,
            acl=[group_id(int(corpus.doc_group[i])), author],
            classification=Classification.INTERNAL,
        )


def readable_mask(corpus: Corpus, probe: Probe) -> BoolArray:
    """Which documents ``probe`` may read, by brute force over the membership records.

    Deliberately independent of :func:`ancestors` and of govrag: it walks the same member lists
    that were ingested until no new group is reached, then tests every document's ACL.
    """
    members = _group_members(corpus)
    reach = {probe.account}
    changed = True
    while changed:
        changed = False
        for g, member_ids in members.items():
            gid = group_id(g)
            if gid not in reach and reach.intersection(member_ids):
                reach.add(gid)
                changed = True
    group_ok = np.array([group_id(g) in reach for g in range(N_GROUPS)])
    author_ok = np.array([account_id(a) in reach for a in range(N_ACCOUNTS)])
    mask: BoolArray = group_ok[corpus.doc_group] | author_ok[corpus.doc_author]
    return mask


def make_queries(vocab: list[str], n: int, seed: int = 0) -> list[str]:
    """``n`` queries of 2-4 distinct terms: one frequent, one mid-frequency, the rest either."""
    rng = _streams(seed)["queries"]
    out: list[str] = []
    for _ in range(n):
        size = int(rng.integers(2, 5))
        picks = [int(rng.integers(*FREQUENT_BAND)), int(rng.integers(*MID_BAND))]
        while len(picks) < size:
            band = FREQUENT_BAND if rng.random() < 0.5 else MID_BAND
            rank = int(rng.integers(*band))
            if rank not in picks:
                picks.append(rank)
        rng.shuffle(picks)
        out.append(" ".join(vocab[r] for r in picks))
    return out


def open_store(root: Path, *, hidden_marker: bool = True) -> SQLiteStore:
    """A store on the cached files, with the embedder the corpus was built with."""
    return SQLiteStore(
        root / "govrag.db",
        index_dir=root / "index",
        embedder=HashEmbedder(dim=EMBED_DIM),
        search=SearchSettings(hidden_marker=hidden_marker),
    )


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def build_store(corpus: Corpus, root: Path, say: Say) -> dict[str, object]:
    """Ingest ``corpus`` into a fresh store under ``root``; returns the build figures.

    The marker file is written last, so an interrupted build is never mistaken for a cache.
    """
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    started = time.perf_counter()
    store = open_store(root)
    try:
        ingestor = Ingestor(store, TENANT, embedder=store.embedder)
        n_done = 0
        for i, record in enumerate(records(corpus)):
            ingestor.add(f"record {i}", record)
            if isinstance(record, DocumentRecord):
                n_done += 1
                if n_done % 10_000 == 0:
                    say(f"  {n_done:>7} docs ingested, {time.perf_counter() - started:6.1f}s")
        ingestor.flush()
        ingested = time.perf_counter()
        if ingestor.report.errors:
            raise RuntimeError(f"ingest errors: {ingestor.report.messages[:5]}")
        say(f"  ingest done in {ingested - started:.1f}s; building derived indexes")
        store.sync_indexes(TENANT)
        finished = time.perf_counter()
    finally:
        store.close()
    info: dict[str, object] = {
        "generator_version": GENERATOR_VERSION,
        "code": _code_fingerprint(),
        "n_docs": corpus.n_docs,
        "seed": corpus.seed,
        "ingest_s": round(ingested - started, 2),
        "index_s": round(finished - ingested, 2),
        "build_s": round(finished - started, 2),
        "report": ingestor.report.as_dict(),
        "db_bytes": sum(p.stat().st_size for p in root.iterdir() if p.name.startswith("govrag.db")),
        "index_bytes": _dir_bytes(root / "index"),
    }
    (root / _BUILD_MARKER).write_text(json.dumps(info, indent=2))
    return info


def _code_fingerprint() -> str:
    """Hash of the code that shapes a built store (schema, ingest, chunking, analyzer, the
    graph's extraction)."""
    import govrag
    from govrag.store.migrations import migrations

    src = Path(govrag.__file__).parent
    digest = hashlib.sha256()
    for migration in migrations("sqlite"):
        digest.update(migration.sql.encode())
    for rel in (
        "store/analyzer.py",
        "harvest/ingest.py",
        "harvest/chunking.py",
        "store/graph_extract.py",
        "store/graph.py",
    ):
        digest.update((src / rel).read_bytes())
    return digest.hexdigest()[:16]


def cached_store(corpus: Corpus, out_dir: Path, say: Say) -> tuple[Path, dict[str, object], bool]:
    """The store directory for ``corpus`` (built if not cached), its build figures, and
    whether it came from the cache."""
    root = out_dir / f"synthetic-{corpus.n_docs}-{corpus.seed}"
    marker = root / _BUILD_MARKER
    if marker.exists():
        info = json.loads(marker.read_text())
        if (info.get("generator_version"), info.get("code")) == (
            GENERATOR_VERSION,
            _code_fingerprint(),
        ):
            return root, info, True
        say(f"cached store {root} was built by other generator or store code; rebuilding")
    say(f"building {root} ({corpus.n_docs} docs)")
    return root, build_store(corpus, root, say), False
