"""A suite report as Markdown (``govrag eval --suite --report FILE.md``): the figures per
route and overall, the thresholds missed, and every case that missed its expectation, for a
model-risk file or a pull request."""

from __future__ import annotations

from govrag.eval.governance import Figures, SuiteReport

#: (column title, figure) in the order of the tables.
COLUMNS = [
    ("cases", "cases"),
    ("errors", "errors"),
    ("injected", "injected"),
    ("recall@k", "recall_at_k"),
    ("nDCG@k", "ndcg_at_k"),
    ("scope violations", "scope_violations"),
    ("leaks", "leaks"),
    ("abstention P", "abstention_precision"),
    ("abstention R", "abstention_recall"),
    ("deny correct", "deny_correctness"),
    ("citation P", "citation_precision"),
    ("support", "support_rate"),
    ("fact recall", "fact_recall"),
    ("hint", "hint_correctness"),
    ("grounding", "grounding_correctness"),
    ("p50 ms", "latency_p50_ms"),
    ("p95 ms", "latency_p95_ms"),
]


def _cell(value: object) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.3f}" if value <= 1.0 else f"{value:.1f}"
    return str(value)


def _row(name: str, figures: Figures) -> str:
    return "| " + " | ".join([name, *(_cell(getattr(figures, f)) for _, f in COLUMNS)]) + " |"


def markdown(report: SuiteReport) -> str:
    verdict = "passed" if report.passed else "FAILED"
    lines = [
        f"# Eval suite `{report.suite}`: {verdict}",
        "",
        f"{report.overall.cases} cases through the governed path; k = {report.k}.",
        "",
        "| route | " + " | ".join(title for title, _ in COLUMNS) + " |",
        "|---" * (len(COLUMNS) + 1) + "|",
        *(_row(f"`{route}`", figures) for route, figures in sorted(report.routes.items())),
        _row("**all**", report.overall),
        "",
    ]
    if report.failures:
        lines += ["## Thresholds missed", "", *(f"- {f}" for f in report.failures), ""]
    missed = [r for r in report.cases if r.misses]
    lines += [f"## Cases that missed their expectation ({len(missed)})", ""]
    if not missed:
        lines.append("None.")
    for result in missed:
        observed = result.observed
        lines.append(f"- `{result.case.id}` ({result.case.sub} on `{result.case.route}`, "
                     f"request `{observed.request_id}`): {'; '.join(result.misses)}")  # fmt: skip
    return "\n".join(lines) + "\n"
