"""Attack (careless operator): keep a corpus to one tenant with a misspelt id, and every
tenant still has it, without a word from ``govrag config check``.

The promise (README, "Tenants never meet"): an id kept to some tenants
(``[corpora.<id>] tenants``) does not exist for the others; the settings refuse a tenant id
with surrounding white space, an empty list, and ``tenant`` beside ``tenants``, so a slip in
the list is loud. A slip in the table's *name* is not: the route scopes ``hr-policies`` and
the operator writes ``[corpora.HR-Policies]`` (or ``hr_policies``, the spelling an
environment variable such as ``GOVRAG_CORPORA__HR_POLICIES__TENANTS`` gives). The
restriction then applies to an id no route, document or session has, and ``hr-policies``
stays every tenant's: ``t2``'s sessions pin it and its listing names it, the very thing the
setting was written to prevent, while ``config check`` reports the deployment clean. A
``[corpora.<id>]`` whose id no route scopes is a finding: an error when it restricts
(tenants, a classification), so the deployment does not serve; a warning when it only
describes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_world import MakeDeployment, deployment_factory

from govrag.app.api import Govrag
from govrag.errors import ConfigError


@pytest.fixture
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeDeployment]:
    yield from deployment_factory(request, tmp_path, "sqlite")


@pytest.mark.parametrize("misspelt", ["HR-Policies", "hr_policies"])
def test_a_kept_corpus_under_a_misspelt_id_is_refused(make: MakeDeployment, misspelt: str) -> None:
    # The restriction guards nothing, so the deployment does not serve until it is fixed.
    dep = make(corpora={misspelt: {"tenants": ["t1"]}})
    with pytest.raises(ConfigError, match=f"corpora.{misspelt}: no route's scope names"):
        Govrag(dep).callers.open_session(dep.principal("intruder"))


def test_a_description_under_an_unrouted_id_is_a_warning(make: MakeDeployment) -> None:
    dep = make(corpora={"hr_policies": {"description": "Leave rules"}})
    problems = Govrag(dep).operators.config_check().problems
    # (Besides the warning every deployment without [auth] gets: it could not be served.)
    assert [(p.field, p.warning) for p in problems if p.field != "auth"] == [
        ("corpora.hr_policies", True)
    ]
