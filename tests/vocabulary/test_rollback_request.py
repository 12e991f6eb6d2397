"""RollbackRequest refuses a version that is not a version number (issue 15, item 9): whoever builds
one (the CLI, the sidecar, a workflow's parameters), a name like ``../../2`` never reaches the ledger
as a quarantine that `healer store unquarantine` could not lift."""

from __future__ import annotations

import pytest

from healer.vocabulary import AUTO, RollbackRequest, model_slug


@pytest.mark.parametrize("version", ["../../2", "2/../1", "v3", "0", "01", "", " 3", "3\n", "1" * 20])
def test_a_from_version_that_is_not_a_version_number_is_refused(version: str) -> None:
    with pytest.raises(ValueError, match=r"^from_version must be a version number \(a positive integer\) or "):
        RollbackRequest(model="m", from_version=version, incident="inc-1")


@pytest.mark.parametrize("version", ["../1", "latest", "0", ""])
def test_a_to_version_that_is_neither_auto_nor_a_version_number_is_refused(version: str) -> None:
    with pytest.raises(ValueError, match=r"^to_version must be a version number \(a positive integer\) or 'auto'"):
        RollbackRequest(model="m", from_version="3", incident="inc-1", to_version=version)


@pytest.mark.parametrize(("from_version", "to_version"), [("3", AUTO), ("12", "2"), ("unknown", AUTO)])
def test_version_numbers_auto_and_the_sidecars_unknown_version_are_accepted(from_version: str, to_version: str) -> None:
    """ "unknown": a model failing before any version was seen (healer/core/state.py): it is healed, and
    the heal step moves no files for it (workflows/steps/records.py quarantine_files)."""
    request = RollbackRequest(model="m", from_version=from_version, incident="inc-1", to_version=to_version)
    assert request.parameters()["from-version"] == from_version


@pytest.mark.parametrize(
    ("model", "slug"),
    [("linear_scorer", "linear-scorer"), ("Modèle_v2", "mod-le-v2"), ("ééé", "model"), ("x" * 40, "x" * 30)],
)
def test_a_model_slug_is_label_safe_for_any_model_name(model: str, slug: str) -> None:
    """The workflow name's and `healer rollback`'s incident's piece of the model name (a non-ASCII
    letter used to pass str.isalnum() into the incident, which the request then refused)."""
    assert model_slug(model) == slug
    RollbackRequest(model=model, from_version="2", incident=f"manual-{model_slug(model)}-2-1700000000")
