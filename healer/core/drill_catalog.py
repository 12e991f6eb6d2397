"""The drill catalog (pure): each breakage, how it is injected, and what healer must do about it.

Every scenario is an action against a Triton target and its store (workflows/steps/drill_inject.py does
it) with an expected outcome; healer/core/drill_verdict.py compares what a run observed with it. No
I/O here: the catalog is data, tested as a table (tests/drills/test_drills_catalog.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum


class Outcome(StrEnum):
    """What a drill run ended in, as far as healer's behaviour goes."""

    HEALED = "healed"  # a rollback restored the stable version: the golden request passes on every replica
    DRAINED = "drained"  # not served: the pod left the Service (/readyz 503), nothing was rolled back
    NOT_LIVE = "not-live"  # Triton is down: the sidecar reports it not live and submits nothing
    ESCALATED = "escalated"  # not restored: a person was alerted; the served model stays loaded, the pod kept
    BREAKER_OPEN = "breaker-open"  # the circuit breaker opened: no further rollback, escalated
    NO_ROLLBACK = "no-rollback"  # nothing to act on: nothing submitted, the model serves and passes
    RELEASED = "released"  # `healer release`: the new version serves on every replica and is stable
    STOPPED = "stopped"  # `healer release` stopped: every replica serves the stable version again
    OBSERVED = "observed"  # observe mode (docs/observe.md): the plan recorded, nothing touched
    INCONCLUSIVE = "inconclusive"  # none of the above within the time given, or the drill itself failed


class Injection(StrEnum):
    """How a scenario breaks the target (workflows/steps/drill_inject.py)."""

    PUSH = "push"  # a new version from the broken variants, loaded: it serves
    PUSH_CONFIG = "push-config"  # a new version of good files with a broken config.pbtxt, loaded
    PUSH_WITHIN_TOLERANCE = "push-within-tolerance"  # a new version whose answers differ within tolerance
    DELETE_FILES = "delete-files"  # the served version's files deleted, then the model reloaded (a restart)
    KILL_TRITON = "kill-triton"  # SIGKILL to a Triton replica
    STORE_DOWN = "store-down"  # a broken push, then the store becomes unreachable (unmounted) for the rollback
    STABLE_BROKEN = "stable-broken"  # a broken push, and the last stable version's files in the store tampered
    FLAP = "flap"  # the same broken version pushed again after each heal
    STORM = "storm"  # the same broken push on several replicas at once
    RELEASE = "release"  # a new version released with `healer release` (the healer-release workflow)


# What a target must offer for an injection: the embedded stack offers all of it.
NEEDS: dict[Injection, frozenset[str]] = {
    Injection.KILL_TRITON: frozenset({"own-triton"}),
    Injection.STORM: frozenset({"replicas"}),
    Injection.STORE_DOWN: frozenset({"filesystem-store"}),
    Injection.STABLE_BROKEN: frozenset({"filesystem-store"}),
    Injection.DELETE_FILES: frozenset({"filesystem-store"}),
    Injection.RELEASE: frozenset({"replicas"}),
}
EMBEDDED_CAPABILITIES = frozenset({"own-triton", "replicas", "filesystem-store"})


@dataclass(frozen=True)
class Expectation:
    """The expected outcome, and what must hold besides it."""

    outcome: Outcome
    # True: the pod must have left the Service at some point; False: it must never have; None: either.
    drained: bool | None = None
    workflows: int | None = None  # exactly this many distinct rollback workflows (None: any number)
    min_ready: int = 0  # at every sample, at least this many replicas answered /readyz 200
    model_loaded: bool = False  # at the end the model is still served on every live replica
    # At least this many separate wrong answers were seen (a sidecar went suspect): a "no rollback"
    # drill in which nothing ever answered wrong proves nothing.
    wrong_answers: int = 0
    # Releases: at most this many replicas ever served the new version (None: any number).
    max_touched: int | None = None
    quarantined: bool | None = None  # the new version ends quarantined (True) or not (False); None: either
    # "metrics": the rollback was decided on Triton's own numbers (its detail says "real traffic"), not a
    # golden request (docs/traffic-signal.md); "": either.
    detected_by: str = ""
    # Observe mode: the served version, every replica's readiness and the repository's files checked unchanged.
    untouched: bool = False


@dataclass(frozen=True)
class Scenario:
    name: str  # the CLI's and the Argo parameter's name
    title: str  # one line: what breaks
    injection: Injection
    expect: Expectation
    why: str  # the expected behaviour, in words (the report shows it)
    variant: str = ""  # examples/broken/<model>/<variant> (PUSH, FLAP, STORM, ...)
    # The model the scenario breaks: "" is the target's own (`healer drill --model`, else the first configured
    # model with broken variants); a name is that model, which the configuration must list (else skipped).
    model: str = ""
    # A pipeline's composing model the push breaks (docs/pipelines.md): ``model`` is the pipeline, judged by
    # its suite; the broken variant is examples/broken/<member>/<variant>. "": the push breaks ``model``.
    member: str = ""
    replicas: int = 1  # Triton replicas the scenario needs (STORM: 2, one sidecar each)
    fast: bool = False  # part of `make test`'s subset
    demo: bool = True  # part of `make demo` (`healer demo --drills` without names); `healer drill` runs every one
    max_rollbacks: int | None = None  # the circuit breaker's limit for this scenario (None: the config's)
    drain_rule: bool = False  # the sidecars run with sidecar.drain (peer_urls of each other)
    bake_s: float = 0.0  # RELEASE: how long the canary bakes
    stop_halfway: bool = False  # RELEASE: the release is stopped (`argo stop`) once its bake has started
    traffic: bool = False  # clients send requests (default version) to every replica: wrong answers served are counted
    # The sidecars judge real traffic from Triton's metrics (sidecar.traffic), and the clients send single-row
    # requests, counting the failed ones (docs/traffic-signal.md).
    traffic_signal: bool = False
    mode: str = ""  # "observe": the sidecars only decide and record (sidecar.mode, docs/observe.md); "": the config's
    # RELEASE: the model released with agreement rules (healer/drills/agreement.py RULES, unless the config has
    # its own) and judged on the pushed variant's replay set (its replay/ folder, docs/agreement.md).
    agreement: bool = False
    # An outside alert starts the rollback (healer/drills/outside_alert.py; no sidecar probes the model): "wrong"
    # names the pushed broken version, "right" the stable version that answers right; "": no alert.
    alert: str = ""

    @property
    def needs(self) -> frozenset[str]:
        return NEEDS.get(self.injection, frozenset())

    @property
    def budgeted(self) -> str | None:
        """Which time the budget (rollback.deadline_s) applies to, if any."""
        return BUDGETED.get(self.expect.outcome)


# The time each outcome must reach within the budget, measured from the injection.
BUDGETED: dict[Outcome, str] = {
    Outcome.HEALED: "restore",
    Outcome.ESCALATED: "escalate",
    Outcome.BREAKER_OPEN: "escalate",
    Outcome.DRAINED: "detect",
    Outcome.NOT_LIVE: "detect",
    Outcome.OBSERVED: "detect",  # the plan recorded
}


def _healed(drained: bool | None = None) -> Expectation:
    return Expectation(Outcome.HEALED, drained=drained, workflows=1)


CATALOG: tuple[Scenario, ...] = (
    Scenario(
        "wrong-weights",
        "a new version with wrong weights is pushed and served",
        Injection.PUSH,
        _healed(),
        "wrong answers: detected after failure_threshold probes, rolled back to the last stable version",
        variant="wrong_weights",
        fast=True,
    ),
    Scenario(
        "nan",
        "a new version answers NaN",
        Injection.PUSH,
        _healed(),
        "non-finite outputs are wrong answers: rolled back",
        variant="nan",
    ),
    Scenario(
        "raises",
        "a new version raises on every request",
        Injection.PUSH,
        _healed(),
        "HTTP 500 with the model's exception is the model failing: rolled back",
        variant="raises",
    ),
    Scenario(
        "slow",
        "a new version answers right but slower than its latency SLO",
        Injection.PUSH,
        _healed(),
        "a right answer over the SLO fails the business tier: rolled back",
        variant="slow",
    ),
    Scenario(
        "hang",
        "a new version hangs: every request times out while Triton stays live",
        Injection.PUSH,
        _healed(drained=True),
        "a timeout with Triton live and the version ready is a hang: drained, then rolled back",
        variant="hang",
    ),
    Scenario(
        "bad-config",
        "a new version with a broken config.pbtxt (wrong input shape) is pushed and loads",
        Injection.PUSH_CONFIG,
        _healed(),
        "every request is refused (HTTP 400): rolled back; the stable version comes back with its own config "
        "from the ledger (a config that does not even parse is refused by Triton, which keeps the old one)",
        variant="bad_config.pbtxt",
    ),
    Scenario(
        "files-deleted",
        "the served version's files are deleted, then the model is reloaded (a restart)",
        Injection.DELETE_FILES,
        Expectation(Outcome.DRAINED, drained=True, workflows=0),
        "by design a model that is not served is not-ready, not wrong: the pod is drained and nothing is "
        "rolled back (an unload or a slow load is not a wrong answer); a person restores the files",
    ),
    Scenario(
        "triton-killed",
        "a Triton replica is killed (SIGKILL)",
        Injection.KILL_TRITON,
        Expectation(Outcome.NOT_LIVE, workflows=0),
        "a dead server says nothing about the model: the sidecar reports not live (/livez 503) and submits "
        "no rollback; Kubernetes restarts the container",
        fast=True,
    ),
    Scenario(
        "store-down",
        "a broken push, and the store is unreachable during the rollback",
        Injection.STORE_DOWN,
        Expectation(Outcome.ESCALATED, workflows=1, model_loaded=True),
        "the rollback retries, changes nothing and escalates within the budget: the served model stays loaded",
        variant="wrong_weights",
    ),
    Scenario(
        "stable-broken",
        "a broken push, and the last stable version's files are corrupted in the store too",
        Injection.STABLE_BROKEN,
        Expectation(Outcome.ESCALATED, workflows=1, model_loaded=True),
        "fetch-stable refuses files that differ from the ledger: escalated within the budget, the pod kept "
        "and the served model still loaded",
        variant="nan",
    ),
    Scenario(
        "flapping",
        "the same broken version is pushed again after every heal",
        Injection.FLAP,
        Expectation(Outcome.BREAKER_OPEN, workflows=2),
        "after max_rollbacks rollbacks in the window the circuit breaker opens: no third rollback, escalated",
        variant="wrong_weights",
        max_rollbacks=2,
    ),
    Scenario(
        "one-off",
        "one wrong answer: a new version answers its first request wrong, then right",
        Injection.PUSH,
        Expectation(Outcome.NO_ROLLBACK, drained=False, workflows=0, wrong_answers=1),
        "one bad answer is not an incident: it is re-probed at once (fast confirmation), and only "
        "failure_threshold wrong answers in a row are",
        variant="one_off",
        fast=True,
    ),
    Scenario(
        "one-in-five",
        "a new version answers every fifth request wrong",
        Injection.PUSH,
        Expectation(Outcome.NO_ROLLBACK, drained=False, workflows=0, wrong_answers=2),
        "isolated wrong answers never add up: each is re-probed, the re-probe passes, the streak resets",
        variant="one_in_five",
    ),
    Scenario(
        "fails-one-in-ten",
        "a new version fails one real (single-row) request in ten and passes every golden request",
        Injection.PUSH,
        Expectation(Outcome.HEALED, drained=True, workflows=1, detected_by="metrics"),
        "the golden request never sees it; Triton's own numbers do: real traffic over max_failure_ratio in one "
        "window and again in the next (sidecar.traffic), and the version is rolled back (docs/traffic-signal.md)",
        variant="fails_one_in_ten",
        traffic_signal=True,
        demo=False,
    ),
    Scenario(
        "within-tolerance",
        "a retrained version whose answers differ from the golden values within tolerance",
        Injection.PUSH_WITHIN_TOLERANCE,
        Expectation(Outcome.NO_ROLLBACK, drained=False, workflows=0),
        "within atol + rtol·|expected| is a pass: nothing to do",
    ),
    Scenario(
        "observe",
        "a new version with wrong weights is pushed to a model in observe mode",
        Injection.PUSH,
        Expectation(Outcome.OBSERVED, drained=False, workflows=0, untouched=True),
        "observed: plan recorded, nothing touched: detected as in act mode and the plan recorded (the version it "
        "would restore, the drain, the replicas and waves, no escalation), while the broken version keeps "
        "serving, /readyz stays 200 and the repository's files stay as pushed",
        variant="wrong_weights",
        mode="observe",
        demo=False,  # docs/drills.md: `make drills` runs it; the demo shows healer acting
    ),
    Scenario(
        "long-input",
        "a new version of a variable-length model answers wrong only past position 32",
        Injection.PUSH,
        _healed(),
        "its golden suite sends 1, 7 and 64 tokens each cycle: the 64-token request fails (the why names it), "
        "rolled back; one golden request of 7 tokens would have passed it",
        variant="wrong_past_32",
        model="sequence_scorer",
        demo=False,  # docs/drills.md: the demo already shows this heal (wrong-weights) and probes the suite
    ),
    # The LLM stand-in (examples/model_repository/llm_stand_in, a stand-in for an LLM backend such as vLLM
    # or TensorRT-LLM), probed over generate_stream (probes/stream.py): its answer, its timing, its hangs.
    Scenario(
        "llm-degenerate",
        "a new version of the LLM stand-in streams one word over and over",
        Injection.PUSH,
        _healed(),
        "the streamed answer fails its comparators (normalised, not_degenerate): a wrong answer, rolled back",
        variant="degenerate",
        model="llm_stand_in",
        demo=False,
    ),
    Scenario(
        "slow-first-token",
        "a new version of the LLM stand-in streams the right answer, its first token 700 ms late",
        Injection.PUSH,
        _healed(),
        "time to first token over first_token_slo_ms fails the business tier (slow) though the answer is "
        "right: rolled back",
        variant="slow_first_token",
        model="llm_stand_in",
        demo=False,
    ),
    Scenario(
        "stream-stall",
        "a new version of the LLM stand-in stalls mid-stream: 3 s without a token after the third",
        Injection.PUSH,
        _healed(),
        "no event for stall_s while the stream is open, Triton live and the version ready: a hang (code "
        "timeout), rolled back",
        variant="stall",
        model="llm_stand_in",
        demo=False,
    ),
    Scenario(
        "llm-rephrased",
        "a new version of the LLM stand-in answers in lower case, its words 60 ms apart",
        Injection.PUSH,
        Expectation(Outcome.NO_ROLLBACK, drained=False, workflows=0),
        "within its comparators (the normalised text, not degenerate) and its SLOs: nothing to do",
        variant="rephrased",
        model="llm_stand_in",
        demo=False,
    ),
    # An ensemble (examples/model_repository/scoring_pipeline): its middle model's new version breaks it.
    Scenario(
        "ensemble-broken",
        "a new version of the ensemble's middle model is pushed and served: the ensemble answers wrong",
        Injection.PUSH,
        _healed(),
        "the ensemble's suite fails after scoring_pipeline_mid changed version: that composing model is blamed "
        "and restored to its stable version (not the ensemble), and the ensemble answers right again",
        variant="wrong_factor",
        model="scoring_pipeline",
        member="scoring_pipeline_mid",
        demo=False,
    ),
    Scenario(
        "storm",
        "the same broken push reaches two replicas at once",
        Injection.STORM,
        Expectation(Outcome.HEALED, drained=True, workflows=1, min_ready=1),
        "both sidecars compute the same incident: one workflow heals every replica; the draining rule "
        "(sidecar.drain) lets one pod leave the Service and keeps the other in it at every moment",
        variant="wrong_weights",
        replicas=2,
        drain_rule=True,
        traffic=True,
    ),
    Scenario(
        "good-release",
        "a good new version is released with `healer release`",
        Injection.RELEASE,
        Expectation(Outcome.RELEASED, drained=False, workflows=0, quarantined=False),
        "staged, served on one replica beside the stable version, baked, then every replica in waves, each "
        "verified, and promoted stable; no wrong answer, no rollback",
        replicas=2,
        bake_s=3.0,
        traffic=True,
    ),
    Scenario(
        "bad-release",
        "a new version with wrong weights is released with `healer release`",
        Injection.RELEASE,
        Expectation(Outcome.STOPPED, max_touched=1, quarantined=True),
        "stopped at the canary: its golden request fails there, the other replicas never serve it; the canary "
        "goes back on the stable version, the version is quarantined and a person told (compare the wrong "
        "answers served with the storm drill's unguarded push)",
        variant="wrong_weights",
        replicas=2,
        bake_s=3.0,
        traffic=True,
    ),
    Scenario(
        "slow-release",
        "a new version that answers in time at first, then over its SLO, is released",
        Injection.RELEASE,
        Expectation(Outcome.STOPPED, max_touched=1, quarantined=True),
        "it passes the canary's first check and slows down while it serves: the bake (or the canary's "
        "sidecar) catches it, only the canary ever served it, quarantined",
        variant="slow_later",
        replicas=2,
        bake_s=20.0,
        traffic=True,
    ),
    Scenario(
        "release-interrupted",
        "a release of a good version is stopped halfway (`argo stop` during the bake)",
        Injection.RELEASE,
        Expectation(Outcome.STOPPED, max_touched=1, quarantined=False),
        "the exit handler puts every replica back on the stable version: all end on one known version, and "
        "the version is not quarantined (stopping it says nothing against it)",
        replicas=2,
        bake_s=60.0,
        stop_halfway=True,
    ),
    Scenario(
        "replay-disagrees",
        "a release whose new version flips 5 % of its replay set's labels and passes every golden request",
        Injection.RELEASE,
        Expectation(Outcome.STOPPED, max_touched=1, quarantined=False),
        "release stopped at the canary, stable serving everywhere: the agreement gate (its bake's first step, "
        "both versions on the canary) finds the labels of 5 of 100 replay inputs changed, below label_min_ratio; "
        "put back, not quarantined (disagreeing is not proof of wrong), the inputs named (docs/agreement.md)",
        variant="flips_five_percent",
        model="tiny_classifier",
        replicas=2,
        bake_s=2.0,
        agreement=True,
        demo=False,
    ),
    Scenario(
        "outside-alert",
        "an outside alert (Alertmanager's webhook) names a pushed version that answers wrong",
        Injection.PUSH,
        Expectation(Outcome.HEALED, workflows=1),
        "the receiver (POST /alerts/v1/alertmanager, its bearer token) turns the alert into one incident and one "
        "rollback, whose confirmation finds the version failing: the stable version restored on every replica, "
        "with no sidecar probing the model (docs/alerts.md)",
        variant="wrong_weights",
        alert="wrong",
        demo=False,
    ),
    Scenario(
        "outside-alert-right",
        "an outside alert names the served version, which answers right",
        Injection.PUSH,
        Expectation(Outcome.NO_ROLLBACK, drained=False, workflows=0, untouched=True),
        "the alert's rollback confirms before it touches anything: the version passes its golden requests, so "
        "nothing is unloaded, restored or quarantined; an alert alone is no evidence (docs/alerts.md)",
        alert="right",
        demo=False,
    ),
)

BY_NAME = {scenario.name: scenario for scenario in CATALOG}
FAST: tuple[str, ...] = tuple(s.name for s in CATALOG if s.fast)
DEMO: tuple[str, ...] = tuple(s.name for s in CATALOG if s.demo)


class UnknownScenario(ValueError):
    pass


def select(names: Sequence[str], *, everything: bool = False, fast: bool = False) -> list[Scenario]:
    """The scenarios to run, in catalog order: ``names`` (each once), or all of them, or the fast subset.
    Nothing named and no flag: the whole catalog."""
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise UnknownScenario(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    if everything or (not names and not fast):
        return list(CATALOG)
    wanted = set(names) | (set(FAST) if fast else set())
    return [s for s in CATALOG if s.name in wanted]


# What makes no sense where Triton does not read one shared directory (repository_mode): the scenario's
# name -> why, per mode. Every other scenario runs in every mode (`healer drill --repository MODE`).
_PINNED = (
    "after a heal the model's config.pbtxt in the store is pinned to the stable version (the quarantine that "
    "survives a restart{where}), so the same version deployed again is not served by a plain load: there is no "
    "flapping to count; a version serves again only under a new number or through `healer release`"
)
# (The modes' names are settings' REPOSITORY_MODES, written out: the catalog imports nothing but data.)
REPOSITORY_SHARED = "shared"
NOT_IN_MODE: dict[str, dict[str, str]] = {
    REPOSITORY_SHARED: {},
    "object-store": {"flapping": _PINNED.format(where=": Triton reads that file itself")},
    "per-pod": {"flapping": _PINNED.format(where=", as every new pod copies it")},
}


def not_in_mode(scenario: Scenario, mode: str) -> str:
    """Why ``scenario`` does not run in ``mode`` ("" when it does)."""
    return NOT_IN_MODE.get(mode, {}).get(scenario.name, "")


def not_configured(scenario: Scenario, models: Iterable[str] | None) -> str:
    """Why ``scenario`` cannot run against a configuration listing ``models`` ("" when it can; None: the
    models are not known, nothing to say)."""
    if not scenario.model or models is None or scenario.model in set(models):
        return ""
    return f"breaks the model {scenario.model}, which the configuration does not list (models:)"


def runnable(
    scenarios: Iterable[Scenario],
    capabilities: frozenset[str],
    mode: str = REPOSITORY_SHARED,
    models: Iterable[str] | None = None,
) -> tuple[list[Scenario], list[str]]:
    """Split into the scenarios the target can run and one line per scenario it cannot (why). ``models``:
    the configured models' names, for the scenarios that break a model of their own."""
    ok: list[Scenario] = []
    skipped: list[str] = []
    models = None if models is None else tuple(models)
    for scenario in scenarios:
        missing = scenario.needs - capabilities
        if not_configured(scenario, models):
            skipped.append(f"{scenario.name}: {not_configured(scenario, models)}")
        elif missing:
            skipped.append(f"{scenario.name}: needs {', '.join(sorted(missing))} (the embedded stack has it)")
        elif not_in_mode(scenario, mode):
            skipped.append(f"{scenario.name}: not in repository_mode {mode}: {not_in_mode(scenario, mode)}")
        else:
            ok.append(scenario)
    return ok, skipped
