"""healer/sidecar/pipelines.py: the members' versions around each probe, the pass it records, whom an
incident blames and when nobody is, and a hung Triton costing one config read per cycle. Against a
STAND-IN for Triton (a dict of configs and served versions, labelled so): the same watch on the real
Triton is in tests/workflows/test_pipeline_triton.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from healer.core.state import Incident, Probed, Verdict
from healer.edges.triton import TritonUnavailable
from healer.settings import GoldenRequest, ModelSettings, parse_section
from healer.sidecar.pipelines import CONFIG_REREAD_S, PipelineWatch
from tests.support.settings_files import minimal_model
from tests.support.sidecar_fleet import FakeClock

ENSEMBLE = {
    "platform": "ensemble",
    "ensemble_scheduling": {"step": [{"model_name": "pre", "model_version": -1}, {"model_name": "mid"}]},
}


class StandInTriton:
    """A STAND-IN for Triton's config and served versions (no process): what the watch reads, counted."""

    def __init__(self) -> None:
        self.configs: dict[str, dict[str, Any]] = {"ens": ENSEMBLE, "plain": {"backend": "python"}}
        self.served: dict[str, list[str]] = {"pre": ["1"], "mid": ["1"]}
        self.down = False
        self.config_reads = 0

    def model_config(self, model: str) -> dict[str, Any]:
        self.config_reads += 1
        if self.down:
            raise TritonUnavailable("connection refused")
        return self.configs.get(model, {"backend": "python"})

    def served_versions(self, model: str) -> list[str]:
        if self.down:
            raise TritonUnavailable("connection refused")
        return self.served[model]


def model(name: str, **entry: Any) -> ModelSettings:
    request = parse_section(GoldenRequest, minimal_model(name)["golden"], source="test", base_dir=Path("."))
    return ModelSettings(name=name, golden=request, **entry)


def incident(key: str = "inc-1", version: str = "1") -> Incident:
    return Incident(
        key=key, model="ens", version=version, reason="wrong-answer", detail="", first_bad_at=0, detected_at=0
    )


def watch(triton: StandInTriton, clock: FakeClock) -> PipelineWatch:
    return PipelineWatch([model("ens"), model("plain"), model("bls", calls=("tok",))], triton, clock=clock)  # type: ignore[arg-type]


def cycle(w: PipelineWatch, verdict: Verdict, version: str = "1") -> None:
    w.before_probe(["ens", "plain"])
    w.after_probe("ens", Probed(0.0, verdict, version))


def test_members_come_from_triton_for_an_ensemble_and_from_calls_for_a_bls_model() -> None:
    triton, clock = StandInTriton(), FakeClock()
    w = watch(triton, clock)
    assert [m.name for m in w.members("ens")] == ["pre", "mid"]
    assert w.members("plain") == ()
    triton.configs["bls"] = {"backend": "python"}
    assert [m.name for m in w.members("bls")] == ["tok"]
    assert w.view("plain") is None


def test_a_member_that_changed_since_the_pass_is_blamed_once_per_incident() -> None:
    triton, clock = StandInTriton(), FakeClock()
    w = watch(triton, clock)
    cycle(w, Verdict.GOOD)
    triton.served["mid"] = ["1", "2"]  # v2 loaded: the newest runs
    clock.now += 5
    cycle(w, Verdict.WRONG)
    decided = w.blame(incident())
    assert decided is not None and (decided.model, decided.version, decided.member) == ("mid", "2", True)
    triton.served["pre"] = ["3"]  # later changes do not move an incident's blame
    cycle(w, Verdict.WRONG)
    assert w.blame(incident()) == decided
    view = w.view("ens")
    assert view is not None and (view["blamed"], view["blamed_incident"]) == ("mid", "inc-1")


def test_a_pass_counts_only_when_the_members_did_not_change_during_the_probe() -> None:
    triton, clock = StandInTriton(), FakeClock()
    w = watch(triton, clock)
    cycle(w, Verdict.GOOD)
    w.before_probe(["ens"])
    triton.served["mid"] = ["2"]  # pushed while the pipeline was being probed
    w.after_probe("ens", Probed(0.0, Verdict.GOOD, "1"))
    view = w.view("ens")
    assert view is not None and {m["model"]: m["passed"] for m in view["members"]} == {"pre": "1", "mid": "1"}
    cycle(w, Verdict.WRONG)
    decided = w.blame(incident())
    assert decided is not None and decided.model == "mid"


def test_nothing_learnt_blames_nobody_and_decides_later() -> None:
    triton, clock = StandInTriton(), FakeClock()
    w = watch(triton, clock)
    cycle(w, Verdict.GOOD)
    triton.down = True
    cycle(w, Verdict.WRONG)
    undecided = w.blame(incident())
    assert undecided is not None and undecided.model is None and "nothing learnt" in undecided.why
    triton.down = False
    triton.served["mid"] = ["2"]
    cycle(w, Verdict.WRONG)
    decided = w.blame(incident())
    assert decided is not None and decided.model == "mid"


def test_a_model_that_is_no_pipeline_is_not_blamed_through_the_watch() -> None:
    w = watch(StandInTriton(), FakeClock())
    assert w.blame(Incident("inc-2", "plain", "1", "wrong-answer", "", 0, 0)) is None


def test_a_triton_that_does_not_answer_costs_one_config_read_per_cycle() -> None:
    triton, clock = StandInTriton(), FakeClock()
    w = PipelineWatch([model(f"m{i}") for i in range(20)], triton, clock=clock)  # type: ignore[arg-type]
    triton.down = True
    w.before_probe([f"m{i}" for i in range(20)])
    assert triton.config_reads == 1
    triton.down = False
    clock.now += CONFIG_REREAD_S
    w.before_probe([f"m{i}" for i in range(20)])
    assert triton.config_reads == 1 + 20


def test_a_member_never_seen_passing_is_weighed_against_its_stable_version() -> None:
    """A sidecar that starts with the pipeline already failing has seen no pass: each member's newest stable
    version (its ledger) is the baseline; a ledger that cannot be read is nothing learnt about that member."""
    triton, clock = StandInTriton(), FakeClock()
    triton.served["mid"] = ["2"]
    ledgers = {"pre": "1", "mid": "1"}

    w = PipelineWatch([model("ens")], triton, clock=clock, stable_of=ledgers.get)  # type: ignore[arg-type]
    cycle(w, Verdict.WRONG)
    decided = w.blame(incident())
    assert decided is not None and (decided.model, decided.version) == ("mid", "2")
    assert decided.why.endswith("; mid, pre: its stable version (ens not seen passing here)")
    without = PipelineWatch([model("ens")], triton, clock=clock)  # type: ignore[arg-type]
    cycle(without, Verdict.WRONG)
    blamed_itself = without.blame(incident())
    assert blamed_itself is not None and blamed_itself.model == "ens" and "never seen passing" in blamed_itself.why

    def unreadable(member: str) -> str | None:
        raise OSError("store not mounted")

    failing = PipelineWatch([model("ens")], triton, clock=clock, stable_of=unreadable)  # type: ignore[arg-type]
    cycle(failing, Verdict.WRONG)
    not_read = failing.blame(incident())  # the store's trouble is logged, never raised: no baseline
    assert not_read is not None and not_read.model == "ens" and "never seen passing: pre, mid" in not_read.why
