"""The replay-disagrees drill's agreement rules (docs/agreement.md, docs/drills.md): its release is judged by
the model's own ``models[].agreement`` when the configuration sets one, else by ``RULES`` here; the replay
set is the pushed variant's own (examples/broken/<model>/flips_five_percent/replay/inputs.npy: 100 inputs,
5 of them flipped), copied with the version."""

from __future__ import annotations

import dataclasses

from healer.core.drill_catalog import Scenario
from healer.settings import Settings
from healer.settings.sections import AgreementSettings

# Labels (LABEL) and classes (PROBS' argmax) must agree on 99 % of the inputs, the probabilities within 0.01
# at the 99th percentile: 5 flipped inputs in 100 are under it, a retrain within tolerance is not.
RULES = AgreementSettings(label_min_ratio=0.99, argmax_min_ratio=0.99, max_abs_diff=0.01, at_quantile=0.99)


def with_agreement(settings: Settings, scenario: Scenario, model: str) -> Settings:
    """``settings`` with ``model`` judged by agreement rules when ``scenario`` asks for them (its own kept)."""
    if not scenario.agreement:
        return settings
    models = tuple(
        dataclasses.replace(m, agreement=m.agreement or RULES) if m.name == model else m for m in settings.models
    )
    return dataclasses.replace(settings, models=models)


def release_settings(settings: Settings, scenario: Scenario, model: str, *, check_interval_s: float) -> Settings:
    """A drill's release settings: its checks every ``check_interval_s``, and agreement rules when asked."""
    checked = dataclasses.replace(
        settings, release=dataclasses.replace(settings.release, check_interval_s=check_interval_s)
    )
    return with_agreement(checked, scenario, model)
