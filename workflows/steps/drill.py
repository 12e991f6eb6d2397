"""What the Argo drill's pods run (I/O): inject and watch, judge, clean up, report.

On a cluster the sidecars are already there, one per Triton pod, submitting rollbacks to Argo:
the drill only breaks the model and watches them (their /status and /readyz over HTTP) and the
golden request on every replica. The steps share a record in the live repository,
``<live>/<model>/.healer-drill/current.json`` (what was pushed, what to undo, what was observed),
so the exit handler can restore the stable version whatever happened; it is kept as
``last.json`` for the report. One drill per model at a time (the template's mutex).

Injection and watching happen in one pod: Argo starts a pod in seconds, and a watch that starts
late would miss the detection and report a restore too late. Supported here: the pushes (a
broken variant, a broken config.pbtxt, a version within tolerance); the scenarios that kill a
Triton, start replicas or take the store away run on the embedded stack.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from healer.core.drill_catalog import BY_NAME, Injection, Outcome, Scenario, UnknownScenario
from healer.core.drill_report import explain, header, row
from healer.core.drill_verdict import DrillResult, Mark, Observation, PhaseSpan, Verdict, finished, judge
from healer.edges.logs import iso_utc
from healer.settings import Settings
from workflows.steps.drill_inject import (
    DrillTarget,
    Injected,
    push_and_serve,
    push_with_config,
    restore_stable,
    retrain_source,
    stable_record,
)
from workflows.steps.drill_observe import GoldenWatch, HttpView, SidecarView, Watch, sample

log = structlog.get_logger(__name__)

CLUSTER_INJECTIONS = frozenset({Injection.PUSH, Injection.PUSH_CONFIG, Injection.PUSH_WITHIN_TOLERANCE})
RECORD_DIR = ".healer-drill"
INTERVAL_S = 0.05


class DrillStepError(Exception):
    """The drill step cannot go on (bad parameters, nothing to drill): the node fails with this message."""


@dataclass(frozen=True)
class ClusterTarget:
    target: DrillTarget
    sidecars: list[str]  # base URLs of the sidecars' endpoints


def cluster_scenario(name: str) -> Scenario:
    scenario = BY_NAME.get(name)
    if scenario is None:
        raise DrillStepError(str(UnknownScenario(f"unknown scenario {name!r}; known: {', '.join(BY_NAME)}")))
    if scenario.injection not in CLUSTER_INJECTIONS:
        supported = ", ".join(s.name for s in BY_NAME.values() if s.injection in CLUSTER_INJECTIONS)
        raise DrillStepError(f"{name} runs on the embedded stack (`healer drill {name}`); on a cluster: {supported}")
    return scenario


def cluster_target(settings: Settings, model: str, broken: Path) -> ClusterTarget:
    """The replicas (rollback.replicas: the Kubernetes API or its addresses; else triton.url) and their sidecars
    (sidecar.drain.peer_urls, else each replica's address on the sidecar's listen port)."""
    from healer.edges.store import store_from_settings
    from workflows.steps.context import replica_lister

    if not model:
        model = next((m.name for m in settings.models if (broken / m.name).is_dir()), settings.models[0].name)
    try:
        settings.model(model)
    except KeyError:
        raise DrillStepError(f"{settings.source}: no model {model!r}") from None
    live = settings.live_repository_path
    store_settings = settings.store
    if store_settings is None or live is None:
        raise DrillStepError(f"{settings.source}: store: and live_repository: are required to drill")
    port = settings.sidecar.listen.rpartition(":")[2]
    list_replicas = replica_lister(settings)
    urls = [t.url for t in list_replicas() if not t.skip] if list_replicas is not None else [settings.triton.url]
    drain = settings.sidecar.drain
    if drain is not None and drain.peer_urls:
        sidecars = list(drain.peer_urls)
    else:
        sidecars = [f"http://{url.rpartition(':')[0]}:{port}" for url in urls]
    settings = _only(settings, model)
    target = DrillTarget(
        settings=settings,
        model=model,
        live=live,
        store=store_from_settings(store_settings),
        replicas=urls,
        broken=broken,
    )
    return ClusterTarget(target, sidecars)


def _only(settings: Settings, model: str) -> Settings:
    import dataclasses

    return dataclasses.replace(settings, models=(settings.model(model),))


def record_path(target: DrillTarget, name: str = "current.json") -> Path:
    return target.live / target.model / RECORD_DIR / name


def _write_record(target: DrillTarget, record: dict[str, Any], name: str = "current.json") -> None:
    path = record_path(target, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(".tmp")
    temp.write_text(json.dumps(record, indent=2, sort_keys=True))
    temp.replace(path)


def _read_record(target: DrillTarget, name: str = "current.json") -> dict[str, Any] | None:
    try:
        record: dict[str, Any] = json.loads(record_path(target, name).read_text())
    except (OSError, ValueError):
        return None
    return record


# ---- the steps -------------------------------------------------------------------------------------------


def inject_and_wait(settings: Settings, scenario_name: str, model: str, broken: Path) -> dict[str, Any]:
    """Push the scenario's breakage, then watch the sidecars and the replicas until the outcome is
    known (bounded by the budget). The record keeps what to undo, for the exit handler."""
    scenario = cluster_scenario(scenario_name)
    if scenario.model and model != scenario.model:  # its broken variants are that model's (`healer drill` says so)
        raise DrillStepError(
            f"{scenario.name} breaks the model {scenario.model}: submit it with -p model={scenario.model}"
        )
    where = cluster_target(settings, model, broken)
    target = where.target
    if _read_record(target) is not None:
        raise DrillStepError(
            f"another drill of {target.model} has not been cleaned up ({record_path(target)}); run its cleanup first"
        )
    views: list[SidecarView] = [HttpView(f"sidecar-{i}", url) for i, url in enumerate(where.sidecars)]
    silent = [view.name for view in views if not view.status()]
    if silent:  # its wrong answers could not be told apart from this drill's
        raise DrillStepError(f"sidecar(s) {', '.join(silent)} did not answer /status before the injection")
    wrong_before = sample(views, target.model).wrong_answers  # before the push: the count starts here
    injected = Injected(stable_record(target))
    record: dict[str, Any] = {"scenario": scenario.name, "model": target.model, "stable": injected.stable.version}
    _write_record(target, record)
    config_backup = {}
    if scenario.injection is Injection.PUSH_CONFIG:
        for where_, path in _config_paths(target).items():
            if path.exists():
                config_backup[where_] = path.read_text()
    record["config_backup"] = config_backup
    try:
        if scenario.injection is Injection.PUSH_CONFIG:
            push_with_config(target, target.variant(scenario.variant), injected)
        elif scenario.injection is Injection.PUSH_WITHIN_TOLERANCE:
            push_and_serve(target, retrain_source(target, injected), injected)
        else:
            push_and_serve(target, target.variant(scenario.variant), injected)
    finally:
        record["pushed"] = injected.pushed
        record["version"] = injected.version
        record["injected_wall"] = injected.wall
        injected.undo.clear()  # the exit handler undoes from the record, whichever pod runs it
        _write_record(target, record)
    observation = watch(target, scenario, views, injected, wrong_before=wrong_before)
    record["observation"] = observation_to_dict(observation)
    _write_record(target, record)
    injection = {k: record[k] for k in ("scenario", "model", "stable", "version", "injected_wall")}
    return {"injection": injection, "observation": record["observation"]}


def watch(
    target: DrillTarget, scenario: Scenario, views: list[SidecarView], injected: Injected, *, wrong_before: int = 0
) -> Observation:
    """Watch the sidecars and every replica's golden request from the injection until the outcome."""
    sidecar = target.settings.sidecar
    period = sidecar.period_s
    quiet_s = max(2.0, (sidecar.business.failure_threshold + 2) * period)
    give_up_s = target.settings.rollback.deadline_s + 60.0 + (sidecar.business.failure_threshold + 2) * period
    # The injection's moment on this pod's monotonic clock.
    at = time.monotonic() - (time.time() - injected.wall) if injected.wall else time.monotonic()
    seen = Watch(at, wrong_before=wrong_before)
    golden = GoldenWatch(target.replicas, target.model_settings, suite_of=target.suite)
    try:
        while True:
            seen.see(sample(views, target.model))
            if seen.workflows and seen.restore_s is None and golden.restored(injected.version):
                seen.restored()
            elapsed = seen.now_s()
            obs = seen.observation()
            if finished(scenario, obs, elapsed_s=elapsed, quiet_s=quiet_s, give_up_s=give_up_s):
                break
            time.sleep(INTERVAL_S)
        seen.model_loaded = golden.loaded()
        seen.mark("end", "the watch ended")
    finally:
        golden.close()
    return seen.observation()


def assert_outcome(settings: Settings, scenario_name: str, model: str, broken: Path) -> DrillResult:
    """Judge what inject-and-wait observed; the record keeps the result for the report."""
    scenario = BY_NAME.get(scenario_name)
    if scenario is None:
        raise DrillStepError(f"unknown scenario {scenario_name!r}")
    target = cluster_target(settings, model, broken).target
    record = _read_record(target) or {}
    observation = observation_from_dict(record.get("observation") or {"error": "nothing was observed"})
    result = DrillResult(
        scenario,
        observation,
        judge(scenario, observation, settings.rollback.deadline_s),
        settings.rollback.deadline_s,
        started_at=iso_utc(record["injected_wall"]) if record.get("injected_wall") else "",
    )
    record["result"] = result.to_dict()
    if record:
        _write_record(target, record)
    return result


def cleanup(settings: Settings, model: str, broken: Path) -> list[str]:
    """The exit handler: undo the injection from the record, every replica back on the stable version.
    Keeps the record as last.json. Returns what could not be done."""
    target = cluster_target(settings, model, broken).target
    record = _read_record(target)
    if record is None:
        return []  # nothing was injected (or it was cleaned up already)
    problems: list[str] = []
    for where, text in (record.get("config_backup") or {}).items():
        path = _config_paths(target).get(where)
        if path is not None:
            try:
                path.write_text(text)
            except OSError as exc:
                problems.append(f"restore {path}: {exc}")
    injected = Injected(stable_record(target), version=record.get("version"), pushed=list(record.get("pushed") or []))
    problems += restore_stable(target, injected)
    record["cleanup"] = problems
    _write_record(target, record, "last.json")
    record_path(target).unlink(missing_ok=True)
    return problems


def report(settings: Settings, model: str, broken: Path, workflow_status: str) -> dict[str, Any]:
    """The drill's result as the table prints it, from the record the other steps kept."""
    target = cluster_target(settings, model, broken).target
    record = _read_record(target, "last.json") or _read_record(target) or {}
    result = record.get("result") or {}
    lines = [f"drill of {target.model}: workflow {workflow_status}"]
    if result:
        scenario = BY_NAME[result["scenario"]]
        observation = observation_from_dict(record.get("observation") or {})
        verdict = Verdict(Outcome(result["outcome"]), bool(result["passed"]), tuple(result.get("missed", [])))
        rebuilt = DrillResult(
            scenario, observation, verdict, float(result["budget_s"]), notes=tuple(record.get("cleanup") or [])
        )
        lines += [header(), row(rebuilt), *explain(rebuilt)]
    else:
        lines.append("no result: the drill did not get as far as its assertion")
        lines += [f"  cleanup: {p}" for p in record.get("cleanup") or []]
    return {"result": result, "cleanup": record.get("cleanup") or [], "text": "\n".join(lines)}


# ---- helpers ---------------------------------------------------------------------------------------------


def _config_paths(target: DrillTarget) -> dict[str, Path]:
    paths = {"live": target.live / target.model / "config.pbtxt"}
    root = target.store_root
    if root is not None and (root / target.model / "config.pbtxt").resolve() != paths["live"].resolve():
        paths["store"] = root / target.model / "config.pbtxt"
    return paths


def observation_to_dict(o: Observation) -> dict[str, Any]:
    return {
        "detect_s": o.detect_s,
        "restore_s": o.restore_s,
        "escalate_s": o.escalate_s,
        "workflows": list(o.workflows),
        "drained": o.drained,
        "not_live": o.not_live,
        "breaker_open": o.breaker_open,
        "min_ready": o.min_ready,
        "model_loaded": o.model_loaded,
        "final_state": o.final_state,
        "wrong_answers": o.wrong_answers,
        "marks": [[m.at_s, m.kind, m.text] for m in o.marks],
        "phases": [[p.workflow, p.name, p.start_s, p.end_s, p.outcome, p.error] for p in o.phases],
        "error": o.error,
    }


def observation_from_dict(d: dict[str, Any]) -> Observation:
    return Observation(
        detect_s=d.get("detect_s"),
        restore_s=d.get("restore_s"),
        escalate_s=d.get("escalate_s"),
        workflows=tuple(d.get("workflows") or ()),
        drained=bool(d.get("drained", False)),
        not_live=bool(d.get("not_live", False)),
        breaker_open=bool(d.get("breaker_open", False)),
        min_ready=d.get("min_ready"),
        model_loaded=d.get("model_loaded"),
        final_state=str(d.get("final_state", "")),
        wrong_answers=int(d.get("wrong_answers", 0) or 0),
        marks=tuple(Mark(float(m[0]), str(m[1]), str(m[2])) for m in d.get("marks") or ()),
        phases=tuple(
            PhaseSpan(str(p[0]), str(p[1]), float(p[2]), float(p[3]), str(p[4]), str(p[5]))
            for p in d.get("phases") or ()
        ),
        error=str(d.get("error", "")),
    )
