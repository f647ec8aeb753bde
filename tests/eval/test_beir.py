"""Loading BEIR-layout directories, and every way a malformed one is reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from govrag.errors import IngestError, InputError
from govrag.eval.beir import BeirDataset, BeirDoc, load_beir

SCIFACT = Path("/work/shared/data/scifact")

CORPUS = (
    b'{"_id": "d1", "title": "First", "text": "alpha beta"}\n'
    b'{"_id": 2, "text": "numeric id, no title"}\n'
    b'{"_id": "d3", "title": null, "text": "", "metadata": {}}\n'
)
QUERIES = (
    b'{"_id": "q1", "text": "what is alpha"}\n'
    b'{"_id": "q2", "text": "numeric doc"}\n'
    b'{"_id": "q9", "text": "only in train"}\n'
)
QRELS_TEST = b"query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td3\t0\nq2\t2\t2\n"
QRELS_TRAIN = b"query-id\tcorpus-id\tscore\nq9\td1\t1\n"


def make_beir(
    root: Path,
    *,
    corpus: bytes | None = CORPUS,
    queries: bytes | None = QUERIES,
    qrels: dict[str, bytes] | None = None,
) -> Path:
    """Write a tiny BEIR directory; None leaves a file out."""
    root.mkdir(parents=True, exist_ok=True)
    if corpus is not None:
        (root / "corpus.jsonl").write_bytes(corpus)
    if queries is not None:
        (root / "queries.jsonl").write_bytes(queries)
    splits = {"test": QRELS_TEST, "train": QRELS_TRAIN} if qrels is None else qrels
    if splits:
        (root / "qrels").mkdir(exist_ok=True)
    for split, content in splits.items():
        (root / "qrels" / f"{split}.tsv").write_bytes(content)
    return root


def expect_error(root: Path, file_name: str, line: int | None, *fragments: str) -> str:
    """Load ``root`` and check the error names the file, the line and each fragment."""
    with pytest.raises(InputError) as caught:
        load_beir(root)
    message = str(caught.value)
    assert file_name in message
    if line is not None:
        assert f"{file_name}:{line}:" in message
        assert isinstance(caught.value, IngestError)
        assert caught.value.line == line
    for fragment in fragments:
        assert fragment in message
    return message


# --- happy path -------------------------------------------------------------------------------


def test_load_tiny_dataset(tmp_path: Path) -> None:
    data = load_beir(make_beir(tmp_path / "tiny"))
    assert isinstance(data, BeirDataset)
    assert data.name == "tiny"
    assert data.corpus == {
        "d1": BeirDoc(doc_id="d1", title="First", text="alpha beta"),
        # a numeric JSON _id becomes a string; a missing or null title becomes ""
        "2": BeirDoc(doc_id="2", title="", text="numeric id, no title"),
        "d3": BeirDoc(doc_id="d3", title="", text=""),
    }
    # q9 is only judged in the train split, so the test split leaves it out
    assert data.queries == {"q1": "what is alpha", "q2": "numeric doc"}
    assert data.qrels == {"q1": {"d1": 1, "d3": 0}, "q2": {"2": 2}}


def test_load_other_split_and_str_path(tmp_path: Path) -> None:
    data = load_beir(str(make_beir(tmp_path / "tiny")), split="train")
    assert data.queries == {"q9": "only in train"}
    assert data.qrels == {"q9": {"d1": 1}}


def test_dataset_is_frozen(tmp_path: Path) -> None:
    data = load_beir(make_beir(tmp_path / "tiny"))
    with pytest.raises(AttributeError):
        data.name = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        data.corpus["d1"].text = "changed"  # type: ignore[misc]


def test_bom_crlf_blank_lines_and_negative_grades_are_accepted(tmp_path: Path) -> None:
    root = make_beir(
        tmp_path / "crlf",
        # BOM, CRLF, a blank line, a UTF-8 "é", and no final newline
        corpus=b'\xef\xbb\xbf{"_id": "d1", "text": "caf\xc3\xa9"}\r\n\r\n'
        b'{"_id": "d2", "text": "x"}',
        queries=b'{"_id": "q1", "text": "q"}\r\n',
        qrels={"test": b"query-id\tcorpus-id\tscore\r\nq1\td1\t1\r\n\nq1\td2\t-1\r\n"},
    )
    data = load_beir(root)
    assert data.corpus["d1"].text == "café"
    assert set(data.corpus) == {"d1", "d2"}
    assert data.qrels == {"q1": {"d1": 1, "d2": -1}}


# --- missing directory or files ---------------------------------------------------------------


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist") as caught:
        load_beir(tmp_path / "nope")
    assert "nope" in str(caught.value)
    assert "corpus.jsonl, queries.jsonl and qrels/<split>.tsv" in str(caught.value)


def test_path_is_a_file(tmp_path: Path) -> None:
    path = tmp_path / "file.txt"
    path.write_text("x")
    with pytest.raises(InputError, match="is not a directory"):
        load_beir(path)


@pytest.mark.parametrize("missing", ["corpus.jsonl", "queries.jsonl"])
def test_missing_jsonl_file(tmp_path: Path, missing: str) -> None:
    root = make_beir(
        tmp_path / "d",
        corpus=None if missing == "corpus.jsonl" else CORPUS,
        queries=None if missing == "queries.jsonl" else QUERIES,
    )
    expect_error(root, missing, None, "is missing", "corpus.jsonl, queries.jsonl and qrels/")


def test_missing_split_lists_available_splits(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "d")
    with pytest.raises(InputError) as caught:
        load_beir(root, split="dev")
    message = str(caught.value)
    assert "dev.tsv" in message
    assert "available splits: 'test', 'train'" in message


def test_missing_qrels_directory(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "d", qrels={})
    expect_error(root, "test.tsv", None, "available splits: none")


@pytest.mark.parametrize("split", ["", "../test", "a/b", ".."])
def test_split_must_be_a_plain_name(tmp_path: Path, split: str) -> None:
    with pytest.raises(InputError, match="not a plain name"):
        load_beir(make_beir(tmp_path / "d"), split=split)


# --- malformed JSONL ------------------------------------------------------------------------


def test_malformed_json_line(tmp_path: Path) -> None:
    corpus = b'{"_id": "d1", "text": "ok"}\n{"_id": "d2", "text": "unterminated}\n'
    expect_error(make_beir(tmp_path / "d", corpus=corpus), "corpus.jsonl", 2, "malformed JSON")


def test_json_line_that_is_not_an_object(tmp_path: Path) -> None:
    queries = b'{"_id": "q1", "text": "q"}\n\n["q2", "list"]\n'
    # line 2 is blank and skipped, but still counted
    expect_error(
        make_beir(tmp_path / "d", queries=queries), "queries.jsonl", 3, "expected a JSON object"
    )


@pytest.mark.parametrize(
    ("file_name", "content", "fragment"),
    [
        ("corpus.jsonl", b'{"_id": "d1", "text": "a"}\n{"text": "no id"}\n', 'missing "_id"'),
        ("queries.jsonl", b'{"_id": "q1", "text": "a"}\n{"text": "no id"}\n', 'missing "_id"'),
        ("corpus.jsonl", b'{"_id": "d1", "text": "a"}\n{"_id": "d2"}\n', "'d2' has no \"text\""),
        ("queries.jsonl", b'{"_id": "q1", "text": "a"}\n{"_id": "q2"}\n', "'q2' has no \"text\""),
        ("corpus.jsonl", b'{"_id": "d1", "text": "a"}\n{"_id": "", "text": "a"}\n', "got ''"),
        ("corpus.jsonl", b'{"_id": "d1", "text": "a"}\n{"_id": true, "text": "a"}\n', "got True"),
        ("corpus.jsonl", b'{"_id": "d1", "text": "a"}\n{"_id": 1.5, "text": "a"}\n', "got 1.5"),
        ("corpus.jsonl", b'{"_id": "d1", "text": "a"}\n{"_id": "d2", "text": 7}\n', "got 7"),
        (
            "corpus.jsonl",
            b'{"_id": "d1", "text": "a"}\n{"_id": "d2", "title": ["t"], "text": "a"}\n',
            "\"title\" of record 'd2' must be a string",
        ),
        (
            "corpus.jsonl",
            b'{"_id": "d1", "text": "a"}\n{"_id": "d1", "text": "b"}\n',
            "'d1' already appeared on line 1",
        ),
        (
            "queries.jsonl",
            b'{"_id": "q1", "text": "a"}\n{"_id": "q1", "text": "b"}\n',
            "'q1' already appeared on line 1",
        ),
    ],
)
def test_bad_records(tmp_path: Path, file_name: str, content: bytes, fragment: str) -> None:
    root = make_beir(tmp_path / "d", **{file_name.removesuffix(".jsonl"): content})  # type: ignore[arg-type]
    expect_error(root, file_name, 2, fragment)


@pytest.mark.parametrize("file_name", ["corpus.jsonl", "queries.jsonl"])
def test_non_utf8_jsonl(tmp_path: Path, file_name: str) -> None:
    content = b'{"_id": "x1", "text": "ok"}\n{"_id": "x2", "text": "caf\xe9"}\n'
    if file_name == "queries.jsonl":
        content = b'{"_id": "q1", "text": "ok"}\n{"_id": "q2", "text": "caf\xe9"}\n'
    root = make_beir(tmp_path / "d", **{file_name.removesuffix(".jsonl"): content})  # type: ignore[arg-type]
    expect_error(root, file_name, 2, "not valid UTF-8", "b'\\xe9'")


# --- malformed qrels ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "line", "fragment"),
    [
        (
            b"query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\t2\t1.5\n",
            3,
            "score '1.5' is not an integer",
        ),
        (b"query-id\tcorpus-id\tscore\nq1\td1\tyes\n", 2, "score 'yes' is not an integer"),
        (b"query-id\tcorpus-id\tscore\nq1\td1\t\n", 2, "score '' is not an integer"),
        (b"query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\t0\td1\t1\n", 3, "got 4"),
        (b"query-id\tcorpus-id\tscore\nq1 d1 1\n", 2, "got 1"),
        (b"query-id\tcorpus-id\tscore\n\td1\t1\n", 2, "empty query-id or corpus-id"),
        (b"q1\td1\t1\n", 1, "expected the header"),
        (b"query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td1\t0\n", 3, "already judged on line 2"),
        (
            b"query-id\tcorpus-id\tscore\nq1\td1\t1\nq7\td1\t1\n",
            3,
            "query id 'q7' is not in queries.jsonl",
        ),
        (b"query-id\tcorpus-id\tscore\nq1\td1\t\xff\n", 2, "not valid UTF-8"),
    ],
)
def test_bad_qrels(tmp_path: Path, content: bytes, line: int, fragment: str) -> None:
    root = make_beir(tmp_path / "d", qrels={"test": content})
    expect_error(root, "test.tsv", line, fragment)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"", "the file is empty"),
        (b"\n\n", "the file is empty"),
        (b"query-id\tcorpus-id\tscore\n", "no judgements"),
    ],
)
def test_empty_qrels(tmp_path: Path, content: bytes, fragment: str) -> None:
    root = make_beir(tmp_path / "d", qrels={"test": content})
    expect_error(root, "test.tsv", None, fragment)


def test_error_message_quotes_long_lines_briefly(tmp_path: Path) -> None:
    corpus = json.dumps({"_id": "d1", "text": "x" * 500}).encode()[:-1] + b"\n"
    message = expect_error(make_beir(tmp_path / "d", corpus=corpus), "corpus.jsonl", 1)
    assert "..." in message
    assert len(message) < 400


# --- the real SciFact collection ----------------------------------------------------------------


@pytest.mark.skipif(
    not SCIFACT.is_dir(), reason=f"SciFact BEIR copy not present at {SCIFACT} (offline data)"
)
def test_load_real_scifact() -> None:
    data = load_beir(SCIFACT)
    assert data.name == "scifact"
    assert len(data.corpus) == 5183
    assert len(data.queries) == 300
    assert set(data.queries) == set(data.qrels)
    assert sum(len(judged) for judged in data.qrels.values()) == 339
    assert all(grade == 1 for judged in data.qrels.values() for grade in judged.values())
    assert all(doc.text for doc in data.corpus.values())
    # every judged document exists in the corpus
    assert all(doc_id in data.corpus for judged in data.qrels.values() for doc_id in judged)
