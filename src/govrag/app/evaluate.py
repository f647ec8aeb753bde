"""``govrag eval --suite``: a governance eval suite run through the full governed path.

Every case is asked as its principal (a ``principals.json`` entry) on its route exactly as
``govrag ask`` asks it: a session, the PEP's decisions committed to the audit log, the
gateway, validation, synthesis with the deployment's configured model, the claim check. What
the caller got back becomes a :class:`~govrag.eval.governance.CaseObservation`, and the suite
is scored by :func:`~govrag.eval.governance.score`.

The scope check here is the eval plane's own, not the validator's: every chunk delivered (in a
pack or cited) must be of a corpus in the route's scope, of a corpus the PEP allowed on this
request, and of a document the store says this principal may read. The validator already
withholds such chunks, so a violation counted here is a failure of the path itself. A canary
is looked for in the whole answer as the caller receives it (``Answer.as_dict``: text,
citations, packs, the hidden-item hint, decisions, trace).

Before anything is asked, every case's principal and route are checked, so a typo is an
error naming the case, not a run that fails at case 57.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

from govrag.agent.answer import Answer
from govrag.deployment import Deployment
from govrag.errors import GovragError, InputError, NotFoundError
from govrag.eval.governance import CaseObservation, SuiteReport, score
from govrag.eval.suite import EvalCase, Split, Suite, load_suite, plain, suite_path
from govrag.types import ChunkOrigin, Principal, Strategy

Progress = Callable[[str], None]


def evaluate_suite(dep: Deployment, suite_id: str | None, *, route: str | None = None,
                   split: Split | None = None, progress: Progress | None = None,
                   strategy: Strategy | None = None) -> SuiteReport:  # fmt: skip
    """Run suite ``suite_id`` of the deployment (only ``route``'s cases, and only the cases
    of ``split``, if given); without ``suite_id``, the suite ``route`` binds (its
    ``eval_suite_id``). ``strategy``: the retrieves' (default ``[search]
    default_strategy``), to compare strategies on one suite."""
    if suite_id is None:
        suite_id = _bound(dep, route)
    root = dep.settings.deployment
    suite = load_suite(suite_path(root, suite_id), inside=root)
    cases = [c for c in suite.cases if route is None or c.route == route]
    if not cases:
        raise InputError(f"suite {suite_id!r} has no case on route {route!r}; its routes: "
                         f"{sorted({c.route for c in suite.cases})}")  # fmt: skip
    if split is not None:
        cases = [c for c in cases if c.split == split]
        if not cases:
            raise InputError(f"suite {suite_id!r} has no case in split {split!r}"
                             + (f" on route {route!r}" if route else "")
                             + "; mark cases with \"split\": \"dev\" or \"test\", or drop "
                             "--split")  # fmt: skip
    principals = _checked(dep, suite, cases)
    if route is not None:
        # One route's cases meet that route's thresholds (and, always, 0 violations and 0
        # leaks), not the others' or the whole suite's.
        mine = {k: v for k, v in suite.header.thresholds.items() if k == route}
        suite = suite.model_copy(update={"header": suite.header.model_copy(
            update={"thresholds": mine})})  # fmt: skip
    observed = []
    for number, case in enumerate(cases, start=1):
        if progress is not None:
            progress(f"[{number}/{len(cases)}] {case.id} ({case.sub} on {case.route})")
        observed.append(observe(dep, case, principals[case.sub], strategy))
    return score(suite.model_copy(update={"cases": tuple(cases)}), observed)


def _bound(dep: Deployment, route: str | None) -> str:
    """The suite ``route`` binds."""
    routes = dep.config.routes
    if route is None:
        raise InputError("name a suite (--suite ID) or a route whose eval_suite_id binds one "
                         "(--route ROUTE)")  # fmt: skip
    if route not in routes:
        raise InputError(f"unknown route {route!r}; known routes: {sorted(routes)}")
    bound = routes[route].eval_suite_id
    if bound is None:
        raise InputError(f"route {route!r} binds no eval suite; set its eval_suite_id, or name "
                         "one with --suite ID")  # fmt: skip
    return bound


def _checked(dep: Deployment, suite: Suite, cases: Iterable[EvalCase]) -> dict[str, Principal]:
    principals: dict[str, Principal] = {}
    routes = dep.config.routes
    for case in cases:
        where = f"{suite.path}: case {case.id!r}"
        if case.route not in routes:
            raise InputError(f"{where}: unknown route {case.route!r}; known routes: "
                             f"{sorted(routes)}")  # fmt: skip
        if case.sub not in principals:
            try:
                principals[case.sub] = dep.principal(case.sub)
            except NotFoundError as exc:
                raise InputError(f"{where}: {exc}") from None
    return principals


def observe(
    dep: Deployment, case: EvalCase, principal: Principal, strategy: Strategy | None = None
) -> CaseObservation:
    """Ask ``case`` as ``principal`` and record what came back."""
    started = time.perf_counter()
    try:
        answer = dep.orchestrator.ask(principal, case.question, route_id=case.route,
                                      session_id=None, text=case.text,
                                      strategy=strategy)  # fmt: skip
    except GovragError as exc:  # a request that failed is a fault of the run, not an outcome
        return CaseObservation(case_id=case.id, route=case.route, request_id=None,
                               abstained=True, reason="error", grounded=None,
                               errors=(f"{type(exc).__name__}: {exc}",))  # fmt: skip
    latency_ms = (time.perf_counter() - started) * 1000
    errors = [f"the model failed ({answer.llm_fault})"] if answer.reason == "llm_error" else []
    errors += [f"policy error deciding {d.corpus}" for d in answer.decisions
               if d.reason == "policy_error"]  # fmt: skip
    chunks = sorted((c for p in answer.packs for c in p.chunks if c.origin is ChunkOrigin.SOURCE),
                    key=lambda c: -c.score)  # fmt: skip
    ranking = list(dict.fromkeys(c.doc_id for c in chunks))
    cited = [c.doc_id for c in answer.citations if c.origin is ChunkOrigin.SOURCE]
    checked = [c for c in (answer.claims.claims if answer.claims else ())
               if c.asserts and (c.cited or c.unknown)]  # fmt: skip
    # Every text the caller gets back, each compared as a whole (a canary spanning a line
    # break of a chunk is found: JSON would have escaped the break).
    shown = plain(" \n ".join(_texts(answer.as_dict())))
    return CaseObservation(
        case_id=case.id,
        route=case.route,
        request_id=answer.request_id,
        abstained=answer.abstained,
        reason=answer.reason,
        denied=tuple(
            dict.fromkeys(
                d.corpus
                for d in answer.decisions
                if d.verdict != "ALLOW" and d.reason != "policy_error"
            )
        ),
        errors=tuple(errors),
        ranking=tuple(ranking),
        cited=tuple(dict.fromkeys(cited)),
        # A structured answer's facts are read in its values, not in their JSON escapes.
        answer=" \n ".join(_texts(answer.structured)) if answer.structured else answer.answer,
        claims_checked=len(checked),
        claims_supported=sum(1 for c in checked if c.supported),
        scope_violations=tuple(_out_of_scope(dep, principal, case.route, answer)),
        leaks=tuple(c for c in case.canaries if plain(c) in shown),
        hint=answer.hidden.present,
        grounded=answer.grounded,
        # A search is a pack the gateway made: a retrieve the policy gate decided on a store
        # that holds nothing the caller could read makes none.
        searched=bool(answer.packs),
        latency_ms=round(latency_ms, 2),
    )


def _texts(value: object) -> Iterator[str]:
    """Every string in a JSON-like value (keys too: nothing of it is left unlooked at)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _texts(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _texts(item)
    elif value is not None:
        yield str(value)


def _out_of_scope(dep: Deployment, principal: Principal, route: str, answer: Answer
                  ) -> list[str]:  # fmt: skip
    scope = set(dep.config.routes[route].retrieval.scope)
    # Only a retrieve's ALLOW lets a corpus's chunks be delivered (a listing's does not).
    allowed = {d.corpus for d in answer.decisions if d.verdict == "ALLOW" and d.kind == "retrieve"}
    delivered = {(c.source_system, c.doc_id, c.corpus) for p in answer.packs for c in p.chunks
                 if c.origin is ChunkOrigin.SOURCE}  # fmt: skip
    delivered |= {(c.source_system, c.doc_id, c.corpus) for c in answer.citations
                  if c.origin is ChunkOrigin.SOURCE}  # fmt: skip
    out = []
    for source_system, doc_id, corpus in sorted(delivered):
        if corpus not in scope:
            out.append(f"{doc_id}: corpus {corpus!r} is outside route {route!r}")
        elif corpus not in allowed:
            out.append(f"{doc_id}: corpus {corpus!r} was not allowed on this request")
        elif dep.store.readable_document(principal, source_system, doc_id) is None:
            out.append(f"{doc_id}: {principal.sub} may not read it")
    return out
