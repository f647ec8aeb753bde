"""A governance eval suite: ``evals/<suite_id>.jsonl`` of a deployment.

Retrieval quality on a public benchmark (``eval/beir.py``) says nothing about what a bank's
model-risk team must show: over a fixed set of questions asked *as real principals on real
routes*, that the evidence was found, nothing leaked, the system abstained when it should and
answered when it could, and every cited sentence was supported. A suite is that fixed set.

The file is JSON Lines. The first line is the header (:class:`SuiteHeader`): the suite's id,
the ``k`` of recall@k and nDCG@k, and the thresholds a run must meet, overall (``"*"``) and
per route. Every other line is a case (:class:`EvalCase`): who asks (a ``principals.json``
entry), on which route, what, with optional caller text, and what must happen: the relevant
documents (graded), ``expect`` (``answer``, ``abstain``, or ``deny`` with the corpora the
policy gate must refuse), the abstention reason, whether the answer must be grounded,
facts the answer must contain, and canary strings that must never appear anywhere in what the
caller gets back (plant them in documents the principal may not read). Blank lines and lines
starting with ``#`` are skipped. Unknown fields are refused, and a bad line is an error naming
the file, the line and the field: a typo must not quietly drop an expectation.

A suite is a deployment file and is read as one (:func:`govrag.deployfile.read_text`): a
regular file of at most :data:`MAX_SUITE_BYTES`, never a FIFO waited on or a device read
without end, and never a link leading out of the deployment directory. ``govrag config
check`` loads every suite of ``evals/`` (:func:`suite_problems`), so a suite that cannot be
read or parsed is named before ``govrag eval`` meets it.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
)

from govrag import deployfile
from govrag.errors import ConfigFileError, InputError, describe_validation
from govrag.problems import Problem

SUITES_DIR = "evals"
#: Largest suite file read, in bytes (thousands of cases; a suite is no data set).
MAX_SUITE_BYTES = 16 * 1024 * 1024
SUITE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
Text = Annotated[str, StringConstraints(min_length=1, max_length=4000)]
Outcome = Literal["answer", "abstain", "deny"]
#: A case's part of the suite: tuned on (``dev``) or held out (``test``).
Split = Literal["dev", "test"]
#: The thresholds' ``route`` key that applies to every case.
ALL_ROUTES = "*"


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Thresholds(_Record):
    """What a run must meet (each ``None``: not checked). Minimums are fractions in 0..1;
    errors, scope violations and leaks are maximums, 0 unless a suite says otherwise."""

    recall_at_k: float | None = Field(default=None, ge=0.0, le=1.0)
    ndcg_at_k: float | None = Field(default=None, ge=0.0, le=1.0)
    abstention_precision: float | None = Field(default=None, ge=0.0, le=1.0)
    abstention_recall: float | None = Field(default=None, ge=0.0, le=1.0)
    deny_correctness: float | None = Field(default=None, ge=0.0, le=1.0)
    citation_precision: float | None = Field(default=None, ge=0.0, le=1.0)
    support_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    fact_recall: float | None = Field(default=None, ge=0.0, le=1.0)
    hint_correctness: float | None = Field(default=None, ge=0.0, le=1.0)
    grounding_correctness: float | None = Field(default=None, ge=0.0, le=1.0)
    errors: int = Field(default=0, ge=0, strict=True)
    #: Cases whose answer made a ``forbidden`` claim.
    injected: int = Field(default=0, ge=0, strict=True)
    scope_violations: int = Field(default=0, ge=0, strict=True)
    leaks: int = Field(default=0, ge=0, strict=True)


class SuiteHeader(_Record):
    suite: Annotated[str, StringConstraints(pattern=SUITE_ID.pattern)]
    description: str = ""
    #: The depth of evidence recall@k and nDCG@k.
    k: int = Field(default=10, ge=1, le=1000)
    #: Per route id, and ``"*"`` for every case together.
    thresholds: dict[str, Thresholds] = Field(default_factory=dict)


class EvalCase(_Record):
    id: Annotated[str, StringConstraints(pattern=SUITE_ID.pattern)]
    #: Who asks: an entry of the deployment's ``principals.json``.
    sub: Text
    route: Text
    question: Text
    #: Caller-supplied material (``ask --text``): never evidence.
    text: str | None = None
    #: The documents that answer it (``external_id`` to a grade of 1 to 3).
    relevant: dict[str, Annotated[int, Field(ge=1, le=3)]] = Field(default_factory=dict)
    expect: Outcome = "answer"
    #: The abstention reason expected (``expect: abstain`` only), e.g. ``no_evidence``.
    reason: str | None = None
    #: ``expect: deny``: the corpora the policy gate must refuse on this request.
    denied: tuple[Text, ...] = ()
    #: Whether the hidden-item hint must appear (``True``) or must not (``False``).
    hint: bool | None = None
    #: Whether the answer must be grounded in the organisation's documents (``True``) or
    #: marked as not (``False``: a route without retrieval, or nothing in the route's scope the
    #: caller could read; then no search may be made at all).
    grounded: bool | None = None
    #: Facts the answer must contain (case and spacing aside).
    facts: tuple[Text, ...] = ()
    #: Claims the delivered answer must not make (compared as facts are): what a prompt
    #: injection in a document the caller may read tries to have the model say.
    forbidden: tuple[Text, ...] = ()
    #: Strings that must never appear in anything the caller gets back.
    canaries: tuple[Annotated[str, StringConstraints(min_length=6)], ...] = ()
    #: ``dev``: a case thresholds and rules may be tuned on; ``test``: held out, only
    #: reported (``govrag eval --split``). ``None``: in neither split.
    split: Split | None = None

    @field_validator("facts", "canaries", "forbidden")
    @classmethod
    def _visible(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            if not plain(value):
                raise ValueError(f"{value!r} is empty once case, spacing and invisible "
                                 "characters are set aside; write visible text")  # fmt: skip
        return values


class Suite(_Record):
    header: SuiteHeader
    cases: tuple[EvalCase, ...]
    path: str


def plain(text: str) -> str:
    """``text`` as facts and canaries are compared: compatibility forms folded (NFKC), case
    folded, invisible format characters (zero-width spaces, ...) dropped, every run of white
    space one space, and a comma or space between thousands dropped. A canary written one way
    is found however a document or an answer spells its spacing or case."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = "".join(c for c in text if unicodedata.category(c) != "Cf")
    text = re.sub(r"(?<=\d)[,\u202f\u00a0 ](?=\d{3}\b)", "", text)
    return " ".join(text.split())


class _Duplicate(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def suite_path(deployment: Path, suite_id: str) -> Path:
    """Where suite ``suite_id`` of a deployment lives (the id checked first: never a path)."""
    if not SUITE_ID.fullmatch(suite_id):
        raise InputError(f"suite id {suite_id!r} is not a name (letters, digits, '_', '-', "
                         "'.'); give the file name under evals/ without '.jsonl'")  # fmt: skip
    return deployment / SUITES_DIR / f"{suite_id}.jsonl"


def load_suite(path: Path, *, inside: Path | None = None) -> Suite:
    """The suite in ``path`` (a file within the directory ``inside`` once links are resolved,
    when it is given: the deployment's); any bad line is an :class:`InputError` naming it."""
    return parse_suite(read_suite(path, inside=inside), path)


def read_suite(path: Path, *, inside: Path | None = None) -> str:
    """The text of the suite file ``path``, read as a deployment file (see the module); an
    :class:`InputError` naming the file when it cannot be."""
    if not os.path.lexists(path):
        raise InputError(f"no eval suite {path}; write one (docs/eval.md) or pick another "
                         f"--suite from {path.parent}")  # fmt: skip
    try:
        return deployfile.read_text(path, max_bytes=MAX_SUITE_BYTES, inside=inside)
    except ConfigFileError as exc:
        raise InputError(f"cannot read eval suite {exc}") from None


def parse_suite(text: str, path: Path) -> Suite:
    """The suite ``text`` (of the file ``path``) holds; any bad line is an
    :class:`InputError` naming it."""
    # JSON Lines end at "\n" only (a U+2028 inside a string is text, not a line break).
    lines = text.split("\n")
    header: SuiteHeader | None = None
    cases: list[EvalCase] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{path}, line {number}"
        try:
            record = json.loads(line, object_pairs_hook=_no_duplicates)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not JSON ({exc.msg}); one JSON object a line") from None
        except _Duplicate as exc:
            raise InputError(f"{where}: key {exc.args[0]!r} is given twice; give each once "
                             "(the second would silently win)") from None  # fmt: skip
        except RecursionError:
            raise InputError(f"{where}: nested too deeply to be a case") from None
        try:
            if header is None:
                header = SuiteHeader.model_validate(record)
                continue
            case = EvalCase.model_validate(record)
        except ValidationError as exc:
            what = "the header" if header is None else "a case"
            raise InputError(f"{where} ({what}): {describe_validation(exc)}") from None
        if case.id in seen:
            raise InputError(f"{where}: case id {case.id!r} is used twice; ids are unique")
        if case.reason is not None and case.expect != "abstain":
            raise InputError(f"{where}: field 'reason' is for 'expect: abstain' only")
        if (case.expect == "deny") != bool(case.denied):
            raise InputError(f"{where}: 'expect: deny' names the corpora the gate must refuse "
                             "in 'denied', and only it does")  # fmt: skip
        seen.add(case.id)
        cases.append(case)
    if header is None:
        raise InputError(f"{path} is empty; its first line is the suite header "
                         '({"suite": "ID", "k": 10, "thresholds": {...}})')  # fmt: skip
    if header.suite != path.stem:
        raise InputError(f"{path}: the header names suite {header.suite!r}, the file "
                         f"{path.stem!r}; make them the same")  # fmt: skip
    if not cases:
        raise InputError(f"{path} has a header and no case; add one case a line")
    return Suite(header=header, cases=tuple(cases), path=str(path))


def suite_problems(deployment: Path) -> list[Problem]:
    """The problems of every ``evals/*.jsonl`` suite of ``deployment`` (``govrag config
    check``), each naming the file: one that cannot be read (a FIFO, a device, too large, a
    link out of the deployment) is an error; one that can but holds a bad line is a warning
    (``govrag eval`` refuses it; serving does not use it)."""
    folder = deployment / SUITES_DIR
    problems: list[Problem] = []
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        where = f"{SUITES_DIR}/{path.name}"
        try:
            text = read_suite(path, inside=deployment)
        except InputError as exc:
            problems.append(Problem(where, "", str(exc)))
            continue
        try:
            parse_suite(text, path)
        except InputError as exc:
            message = str(exc)
            if message.startswith(str(path)):  # the problem names the file already
                message = message[len(str(path)) :].lstrip(":, ")
            problems.append(Problem(where, "", f"govrag eval would refuse it: {message}",
                                    warning=True))  # fmt: skip
    return problems
