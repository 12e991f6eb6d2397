"""healer/sidecar/pipelines.py: the members' versions around each probe, the pass it records, whom an
incident blames and when nobody is, and a hung Triton costing one config read per cycle. Against a
STAND-IN for Triton (a dict of configs and served versions, labelled so): the same watch on the real
Triton is in tests/workflows/test_pipeline_triton.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from healer.core.state import Incident, Probed, Verdict
from healer.edges.triton import IndexEntry, TritonRejected, TritonUnavailable
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
        self.loading: set[str] = set()  # models whose config read Triton rejects (HTTP 400: still loading)
        self.partial: set[str] = set()  # models whose config comes back without platform or backend
        self.config_reads = 0
        self.version_reads = 0  # served-version or repository-index reads

    def model_config(self, model: str) -> dict[str, Any]:
        self.config_reads += 1
        if self.down:
            raise TritonUnavailable("connection refused")
        if model in self.loading:
            raise TritonRejected(400, f"model '{model}' is not ready")
        if model in self.partial:
            return {"name": model}
        return {"name": model, **self.configs.get(model, {"backend": "python"})}

    def served_versions(self, model: str) -> list[str]:
        self.version_reads += 1
        if self.down:
            raise TritonUnavailable("connection refused")
        return self.served[model]

    def repository_index(self) -> list[IndexEntry]:
        self.version_reads += 1
        if self.down:
            raise TritonUnavailable("connection refused")
        return [IndexEntry(m, v, "READY", "") for m, versions in self.served.items() for v in versions]


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


def test_a_config_never_read_blames_nobody_and_is_asked_again_at_once() -> None:
    """Triton not answering, or still loading the ensemble (HTTP 400), at the sidecar's start: whether a model
    configured without ``calls`` is a pipeline is unknown, so nobody is blamed (never its own version rolled
    back) and nothing is decided: asked again at the next submission, as a plain model's failure waits (the
    healing timeout escalates it). The next read is not put off CONFIG_REREAD_S, and once read the same
    incident's member is blamed."""
    for trouble in ("down", "loading", "partial"):
        triton, clock = StandInTriton(), FakeClock()
        w = watch(triton, clock)
        cycle(w, Verdict.GOOD)
        stable = {"pre": "1", "mid": "1", "ens": "1"}
        fresh = PipelineWatch([model("ens")], triton, clock=clock, stable_of=stable.get)  # type: ignore[arg-type]
        triton.served["mid"] = ["2"]
        triton.down = trouble == "down"
        (triton.loading if trouble == "loading" else triton.partial if trouble == "partial" else set()).add("ens")
        cycle(fresh, Verdict.WRONG)
        undecided = fresh.blame(incident())
        assert undecided is not None and undecided.model is None and not undecided.escalate, trouble
        assert "config not read yet" in undecided.why and "asked again" in undecided.why, trouble
        triton.down = False
        triton.loading.clear()
        triton.partial.clear()
        clock.now += 1  # well inside CONFIG_REREAD_S: a failed read set no read time
        cycle(fresh, Verdict.WRONG)  # the next cycle
        assert [m.name for m in fresh.members("ens")] == ["pre", "mid"], trouble
        decided = fresh.blame(incident())
        assert decided is not None and decided.model == "mid", trouble


def test_a_plain_model_whose_config_is_never_read_waits_and_is_not_escalated() -> None:
    # A model with no calls (not an ensemble by its config, which Triton refuses every cycle): each
    # submission asks again; nothing is decided for good, nothing escalated at once.
    triton, clock = StandInTriton(), FakeClock()
    triton.loading.add("plain")
    w = PipelineWatch([model("plain")], triton, clock=clock)  # type: ignore[arg-type]
    for key in ("inc-1", "inc-1", "inc-2"):
        w.before_probe(["plain"])
        blamed = w.blame(Incident(key, "plain", "3", "wrong-answer", "", 0, 0))
        assert blamed is not None and blamed.model is None and not blamed.escalate, blamed
        clock.now += 1
    triton.loading.clear()
    clock.now += 1
    assert w.blame(Incident("inc-1", "plain", "3", "wrong-answer", "", 0, 0)) is None  # read: not a pipeline


def test_a_pipeline_by_its_calls_whose_config_is_never_read_escalates_at_once() -> None:
    """A BLS model (``calls``) whose config is never read whole: whether it is also an ensemble, of what, is
    unknown; nobody blamed, a person decides (escalate: decided for good for that incident)."""
    triton, clock = StandInTriton(), FakeClock()
    triton.served["tok"] = ["1"]
    triton.loading.add("bls")
    w = PipelineWatch([model("bls", calls=("tok",))], triton, clock=clock)  # type: ignore[arg-type]
    w.before_probe(["bls"])
    first = w.blame(Incident("inc-1", "bls", "2", "wrong-answer", "", 0, 0))
    assert first is not None and first.model is None and first.escalate
    assert "config not read whole" in first.why and "a person decides" in first.why
    triton.loading.clear()
    clock.now += 1
    assert w.blame(Incident("inc-1", "bls", "2", "wrong-answer", "", 0, 0)) == first  # decided once


def test_a_known_pipeline_is_not_dropped_on_one_read() -> None:
    triton, clock = StandInTriton(), FakeClock()
    w = watch(triton, clock)
    cycle(w, Verdict.GOOD)
    triton.partial.add("ens")  # a partial answer: not a read at all
    clock.now += CONFIG_REREAD_S
    assert [m.name for m in w.members("ens")] == ["pre", "mid"]
    triton.partial.clear()
    triton.configs["ens"] = {"backend": "python"}  # one whole answer says it is a plain model
    clock.now += CONFIG_REREAD_S
    assert [m.name for m in w.members("ens")] == ["pre", "mid"]
    clock.now += CONFIG_REREAD_S  # the second in a row: believed
    assert w.members("ens") == ()


def test_a_config_naming_another_model_is_not_read() -> None:
    triton, clock = StandInTriton(), FakeClock()
    triton.configs["plain"] = {"name": "other", "backend": "python"}
    w = watch(triton, clock)
    assert w.members("plain") == () and not w.known("plain")
    assert w.known("ens") is False and w.members("ens") and w.known("ens")


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
    version (its ledger), and the pipeline's own, is the baseline. Without one (no store, no stable record,
    a ledger that cannot be read) there is no evidence: nobody is blamed, never the pipeline's own version."""
    triton, clock = StandInTriton(), FakeClock()
    triton.served["mid"] = ["2"]
    ledgers = {"pre": "1", "mid": "1", "ens": "1"}

    w = PipelineWatch([model("ens")], triton, clock=clock, stable_of=ledgers.get)  # type: ignore[arg-type]
    cycle(w, Verdict.WRONG)
    decided = w.blame(incident())
    assert decided is not None and (decided.model, decided.version) == ("mid", "2")
    assert decided.why.endswith("; ens, mid, pre: its stable version (ens not seen passing here)")
    without = PipelineWatch([model("ens")], triton, clock=clock)  # type: ignore[arg-type]
    cycle(without, Verdict.WRONG)
    nobody = without.blame(incident())
    assert nobody is not None and nobody.model is None and "no evidence" in nobody.why

    for missing in ("mid", "ens"):  # a member without a stable record; the pipeline's own unknown
        partial = {m: v for m, v in ledgers.items() if m != missing}
        half = PipelineWatch([model("ens")], triton, clock=clock, stable_of=partial.get)  # type: ignore[arg-type]
        cycle(half, Verdict.WRONG)
        undecided = half.blame(incident())
        assert undecided is not None and undecided.model is None and "no evidence" in undecided.why, missing

    def unreadable(member: str) -> str | None:
        raise OSError("store not mounted")

    failing = PipelineWatch([model("ens")], triton, clock=clock, stable_of=unreadable)  # type: ignore[arg-type]
    cycle(failing, Verdict.WRONG)
    not_read = failing.blame(incident())  # the store's trouble is logged, never raised: nothing learnt yet
    assert not_read is not None and not_read.model is None and not not_read.escalate
    assert "pre, mid, ens: stable version in the ledger not read; nobody blamed yet" in not_read.why


def test_nobody_blamed_is_decided_once_and_the_ledger_read_once() -> None:
    """An incident that blames nobody for good (no evidence, several changed) is not decided again each cycle:
    the members' ledgers are read once, at its first blame, and /status shows why nobody is blamed."""
    triton, clock = StandInTriton(), FakeClock()
    triton.served["mid"] = ["2"]
    triton.served["pre"] = ["2"]
    reads: list[str] = []

    def stable(member: str) -> str | None:
        reads.append(member)
        return "1"

    w = PipelineWatch([model("ens")], triton, clock=clock, stable_of=stable)  # type: ignore[arg-type]
    cycle(w, Verdict.WRONG)
    first = w.blame(incident())
    assert first is not None and first.model is None and first.escalate
    assert "2 changed since ens last passed (pre v1->v2, mid v1->v2)" in first.why
    assert sorted(reads) == ["ens", "mid", "pre"]
    for _ in range(3):
        cycle(w, Verdict.WRONG)
        assert w.blame(incident()) == first
    assert len(reads) == 3
    view = w.view("ens")
    assert view is not None and (view["blamed"], view["blamed_incident"]) == ("", "inc-1")
    assert view["blamed_why"] == first.why


def test_two_members_changed_blames_nobody_even_after_an_unread_cycle() -> None:
    """Two members changed since the pass: a person decides (the why names both). A member unread for one
    cycle and then read again at the same version does not make it look like the newest change."""
    triton, clock = StandInTriton(), FakeClock()
    w = watch(triton, clock)
    cycle(w, Verdict.GOOD)
    triton.served["pre"] = ["2"]
    clock.now += 5
    cycle(w, Verdict.WRONG)
    triton.served["mid"] = ["2"]
    clock.now += 5
    cycle(w, Verdict.WRONG)
    triton.down = True  # one cycle where nothing is read
    cycle(w, Verdict.WRONG)
    triton.down = False
    clock.now += 5
    cycle(w, Verdict.WRONG)
    decided = w.blame(incident())
    assert decided is not None and decided.model is None
    assert "pre v1->v2" in decided.why and "mid v1->v2" in decided.why and "a person decides" in decided.why


def test_the_members_versions_cost_one_index_read_and_a_hung_triton_one_per_cycle() -> None:
    """Every pipeline's members read from one repository index before the probes; after a TritonUnavailable
    nothing more is asked that cycle (a hung Triton: one timeout per cycle, not pipelines x members)."""
    triton, clock = StandInTriton(), FakeClock()
    names = [f"ens{i}" for i in range(5)]
    for name in names:
        triton.configs[name] = ENSEMBLE
    w = PipelineWatch([model(n) for n in names], triton, clock=clock)  # type: ignore[arg-type]
    w.before_probe(names)
    assert triton.version_reads == 1
    triton.down = True
    before = triton.version_reads
    w.before_probe(names)
    for name in names:
        w.after_probe(name, Probed(0.0, Verdict.WRONG, "1"))
    assert triton.version_reads - before == 1


def test_a_nested_ensemble_is_not_expanded_and_blames_nobody() -> None:
    """An ensemble whose step is an ensemble: blaming the inner one (or the outer) would be a guess."""
    triton, clock = StandInTriton(), FakeClock()
    triton.configs["ens"] = {
        "platform": "ensemble",
        "ensemble_scheduling": {"step": [{"model_name": "pre"}, {"model_name": "inner"}]},
    }
    triton.configs["inner"] = {"platform": "ensemble", "ensemble_scheduling": {"step": [{"model_name": "mid"}]}}
    triton.served["inner"] = ["1"]
    stable = {"pre": "1", "inner": "1", "ens": "1"}
    w = PipelineWatch([model("ens")], triton, clock=clock, stable_of=stable.get)  # type: ignore[arg-type]
    cycle(w, Verdict.GOOD)
    triton.served["inner"] = ["2"]
    cycle(w, Verdict.WRONG)
    decided = w.blame(incident())
    assert decided is not None and decided.model is None
    assert "inner: an ensemble inside ens; nested pipelines are not expanded" in decided.why
    assert decided.escalate
