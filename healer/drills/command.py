"""`healer drill` and the drills of `healer demo` (I/O): pick the target, run, print, write the report.

Progress goes out as it happens: a line when a scenario starts, its row when it finishes (with
why it missed, if it did). The sidecars' and rollbacks' own logs go to a log file, not the
terminal, so the table stays readable. The HTML report is written whatever happened.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from healer.core import drill_report as report
from healer.core.drill_catalog import Scenario, UnknownScenario, not_configured, not_in_mode, runnable, select
from healer.core.drill_verdict import DrillResult, Observation, Verdict, exit_code
from healer.settings import Settings

if TYPE_CHECKING:
    from healer.drills.stack import EmbeddedStack
    from workflows.steps.drill_inject import DrillTarget

EXIT_USAGE = 64
# The description's words for where the embedded stack's Tritons read their models (by repository_mode).
MODE_WHERE = {
    "shared": "",
    "object-store": ", repository_mode object-store (Triton reads the store itself)",
    "per-pod": ", repository_mode per-pod (each replica's own repository, its sidecar stages)",
}
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports it


@dataclass
class DrillOptions:
    scenarios: list[str] = field(default_factory=list)
    everything: bool = False
    fast: bool = False
    engine: str | None = None  # local | argo (None: the config's rollback.engine, local on the embedded stack)
    target: str = "embedded"  # embedded | config | cluster (the healer-drill workflow through argo-server)
    model: str | None = None
    # Where the embedded stack's Tritons read their models: shared | object-store | per-pod (None: shared;
    # another target's mode is its config's repository_mode)
    repository_mode: str | None = None
    period_s: float | None = None
    broken: Path | None = None
    report: Path | None = None
    log_file: Path | None = None
    log_level: str = "info"
    output: str | None = None  # json | yaml: the results as data on stdout
    # --target cluster through the Kubernetes API with a kubeconfig (the CLI builds it); None: the
    # config's argo-server (rollback.argo)
    engine_factory: Callable[[], Any] | None = None


def default_broken(settings: Settings) -> Path:
    """Broken variants: ``broken/`` beside the config file, else beside the embedded model repository."""
    candidates = [Path(settings.source).resolve().parent / "broken"]
    if settings.embedded is not None:
        candidates.append(settings.embedded.model_repository.parent / "broken")
    return next((c for c in candidates if c.is_dir()), candidates[0])


def default_log_file(settings: Settings) -> Path:
    return settings.rollback.state_dir.parent / "drill.log"


def run_drills(settings: Settings, options: DrillOptions, *, out: TextIO | None = None) -> int:
    """Run the chosen scenarios; 0 when every one that ran passed, 1 when one missed, 64 when the
    options, the configuration or the target's set-up are unusable."""
    out = out or sys.stdout
    err = sys.stderr
    data = options.output in ("json", "yaml")
    progress_stream = err if data else out

    def say(text: str) -> None:
        print(text, file=progress_stream, flush=True)

    try:
        scenarios = select(options.scenarios, everything=options.everything, fast=options.fast)
    except UnknownScenario as exc:
        print(f"healer: drill: {exc}", file=err)
        return EXIT_USAGE
    engine = options.engine or ("local" if options.target == "embedded" else settings.rollback.engine)
    # The mode's check before the cluster branch too: --target cluster ignored --repository without a word.
    problem = _mode_usage_error(settings, options, scenarios) or (
        "" if options.target == "cluster" else _local_usage_error(settings, options, engine)
    )
    if problem:
        print(f"healer: drill: {problem}", file=err)
        return EXIT_USAGE
    if options.target == "cluster":
        return _run_on_cluster(settings, options, scenarios, say, out)
    log_file = Path(os.path.normpath(options.log_file or default_log_file(settings)))
    log_file.parent.mkdir(parents=True, exist_ok=True)
    started_wall = dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    started = time.monotonic()
    with log_file.open("a") as log_stream, _logs_to(log_stream, options.log_level):
        try:
            with _target(settings, options, engine) as (target, description, stack):
                say(f"{description}; logs: {log_file}")
                ok, results = _runnable(scenarios, target, settings)  # results: the skipped ones, why
                from healer.drills.runner import DrillRunner

                say(report.header())
                scratch = stack.workdir if stack is not None else _scratch(log_file)
                kept: list[str] = []
                progress = _progress(
                    say, keep=lambda s: kept.extend(keep_runs(scratch, s, settings.rollback.state_dir))
                )

                runner = DrillRunner(
                    target,
                    scratch=scratch,
                    engine=engine,
                    start_replica=stack.start_replica if stack is not None else None,
                    stop_replica=stack.stop_replica if stack is not None else None,
                    recover=stack.restart if stack is not None else None,
                    reset=getattr(stack, "reset_repository", None),
                    progress=progress,
                    target_for=stack.target_for if stack is not None else _configured_target(settings, options),
                )
                with contextlib.redirect_stderr(log_stream):  # the rollback steps' own stderr lines
                    results += runner.run_all(ok)
                results.sort(key=lambda r: [s.name for s in scenarios].index(r.scenario.name))
                elapsed = time.monotonic() - started
                say(report.summary(results, elapsed))
                if kept:
                    say(f"runs: {len(kept)} rollbacks and releases kept in {shown_path(settings.rollback.state_dir)}")
                sidecar = target.settings.sidecar
                meta = report.ReportMeta(
                    target=description,
                    engine=engine,
                    when=started_wall,
                    period_s=sidecar.period_s,
                    failure_threshold=sidecar.business.failure_threshold,
                    success_threshold=sidecar.business.success_threshold,
                    elapsed_s=elapsed,
                    repository_mode=target.settings.repository_mode,
                )
        except _SetupFailed as exc:
            print(f"healer: drill: {exc}", file=err)
            return EXIT_USAGE
    _write_results(results, meta, options, say, out)
    return exit_code(results)


def _run_on_cluster(
    settings: Settings, options: DrillOptions, scenarios: list[Scenario], say: Callable[[str], None], out: TextIO
) -> int:
    """Each scenario as the chart's healer-drill workflow, submitted to rollback.argo's argo-server."""
    from healer.drills.on_cluster import DRILL_TEMPLATE, DrillInterrupted, drill_on_cluster, skipped_here
    from healer.engines.factory import argo_engine

    model = options.model or (settings.models[0].name if settings.models else "")
    problem = _cluster_usage_error(settings, options, scenarios, model)
    if not problem:
        try:
            engine = options.engine_factory() if options.engine_factory else argo_engine(settings)
        except ValueError as exc:
            problem = f"{settings.source}: rollback.argo: {exc}"
        except Exception as exc:  # the kubeconfig's cluster: not reachable, no such context
            problem = str(exc)
    if problem:
        print(f"healer: drill: {problem}", file=sys.stderr)
        return EXIT_USAGE
    started_wall = dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    started = time.monotonic()
    where = "argo-server" if engine.via == "argo-server" else "the Kubernetes API"
    description = f"cluster: {model} through {DRILL_TEMPLATE} on {engine.host} ({where}, namespace {engine.namespace})"
    say(description)
    say(report.header())
    results: list[DrillResult] = []
    interrupted = False
    try:
        for scenario in scenarios:
            why = skipped_here(scenario) or not_configured(scenario, _configured(settings))
            if why:
                result = DrillResult(
                    scenario,
                    Observation(),
                    Verdict(scenario.expect.outcome, True),
                    settings.rollback.deadline_s,
                    skipped=why,
                )
            else:
                say(report.starting(scenario))
                try:
                    result = drill_on_cluster(
                        engine,
                        settings,
                        scenario,
                        scenario.model or model,  # a scenario that breaks a model of its own: that one
                        submitted=lambda name: say(f"   workflow {name} submitted"),
                    )
                except DrillInterrupted as exc:
                    say(f"healer: drill: {exc}")
                    interrupted = True
                    break
            say(report.row(result))
            for line in report.explain(result):
                say(line)
            results.append(result)
    except KeyboardInterrupt:  # between drills: nothing of ours is running
        interrupted = True
    finally:
        engine.close()
    elapsed = time.monotonic() - started
    say(report.summary(results, elapsed))
    sidecar = settings.sidecar
    meta = report.ReportMeta(
        target=description,
        engine="argo",
        when=started_wall,
        period_s=sidecar.period_s,
        failure_threshold=sidecar.business.failure_threshold,
        success_threshold=sidecar.business.success_threshold,
        elapsed_s=elapsed,
        repository_mode=settings.repository_mode,
    )
    _write_results(results, meta, options, say, out)
    return EXIT_INTERRUPTED if interrupted else exit_code(results)


def _mode_usage_error(settings: Settings, options: DrillOptions, scenarios: list[Scenario]) -> str:
    """Why the repository mode asked for cannot be drilled as asked ("" when it can): --repository on a
    target it does not set up, or not one chosen scenario runnable in the mode (a drill that runs
    nothing must not pass)."""
    if options.repository_mode and options.target != "embedded":
        return (
            f"--repository sets up the embedded stack; --target {options.target} drills the "
            f"repository_mode its configuration says ({settings.source}: repository_mode: {settings.repository_mode})"
        )
    mode = options.repository_mode or settings.repository_mode
    if scenarios and all(not_in_mode(s, mode) for s in scenarios):
        why = "; ".join(f"{s.name}: {not_in_mode(s, mode)}" for s in scenarios)
        return f"none of the chosen scenarios runs in repository_mode {mode} ({why})"
    return ""


def _runnable(
    scenarios: list[Scenario], target: DrillTarget, settings: Settings
) -> tuple[list[Scenario], list[DrillResult]]:
    """The scenarios the target can run, and a skipped result for each other one (saying why)."""
    ok, skipped = runnable(scenarios, target.capabilities, target.settings.repository_mode, _configured(settings))
    return ok, _skipped(scenarios, skipped, settings)


def _configured(settings: Settings) -> list[str]:
    """The configured models' names (a scenario breaking a model of its own needs it listed)."""
    return [m.name for m in settings.models]


def _configured_target(settings: Settings, options: DrillOptions) -> Callable[[str], DrillTarget]:
    """--target config: the target aimed at another configured model (its stable version promoted)."""

    def target_for(model: str) -> DrillTarget:
        from healer.drills.stack import StackError, configured_target
        from healer.edges.store import StoreError

        try:
            return configured_target(
                settings,
                model=model,
                broken=options.broken or default_broken(settings),
                period_s=options.period_s or settings.sidecar.period_s,
                state_dir=settings.rollback.state_dir,
            )
        except (StoreError, ValueError, OSError) as exc:
            raise StackError(str(exc)) from exc

    return target_for


def _local_usage_error(settings: Settings, options: DrillOptions, engine: str) -> str:
    """Why the drills cannot run in this process as asked ("" when they can)."""
    if options.target == "embedded" and engine != "local":
        return (
            "the embedded stack has no Argo; --engine argo drills the configured target "
            "(--target config), whose sidecars submit to rollback.argo"
        )
    return ""


def _cluster_usage_error(settings: Settings, options: DrillOptions, scenarios: list[Scenario], model: str) -> str:
    """Why `--target cluster` cannot start ("" when it can), naming the file and key."""
    from healer.drills.on_cluster import skipped_here

    if options.engine == "local":
        return "--target cluster runs the drills as Argo workflows: --engine argo (or none)"
    try:
        settings.model(model)
    except KeyError:
        return f"{settings.source}: no model {model!r} in models:"
    if all(skipped_here(s) for s in scenarios):
        return f"none of {', '.join(s.name for s in scenarios)} can run on a cluster ({skipped_here(scenarios[0])})"
    argo = settings.rollback.argo
    for key, path in (("rollback.argo.token_file", argo.token_file), ("rollback.argo.ca_file", argo.ca_file)):
        if path is not None and not path.is_file():
            return f"{settings.source}: {key}: {path} is not a readable file"
    return ""


def _write_results(
    results: list[DrillResult], meta: report.ReportMeta, options: DrillOptions, say: Callable[[str], None], out: TextIO
) -> None:
    """The HTML report (if asked) and the results as data on stdout (-o json|yaml)."""
    if options.report is not None:
        options.report.parent.mkdir(parents=True, exist_ok=True)
        options.report.write_text(report.render_html(results, meta))
        say(f"report: {options.report}")
    if options.output in ("json", "yaml"):
        _print_data([r.to_dict() for r in results], options.output, out)


def _print_data(payload: list[dict[str, object]], output: str, out: TextIO) -> None:
    if output == "yaml":
        import yaml

        print(yaml.safe_dump(payload, sort_keys=False), end="", file=out)
    else:
        print(json.dumps(payload, indent=2), file=out)


class _SetupFailed(Exception):
    pass


@contextlib.contextmanager
def _logs_to(stream: TextIO, level: str) -> Iterator[None]:
    from healer.edges.logs import configure_logging

    configure_logging(stream=stream, level=level)
    try:
        yield
    finally:
        configure_logging(level=level)


@contextlib.contextmanager
def _target(
    settings: Settings, options: DrillOptions, engine: str
) -> Iterator[tuple[DrillTarget, str, EmbeddedStack | None]]:
    """(the DrillTarget, a one-line description, the EmbeddedStack or None); everything stopped after."""
    from healer.drills.stack import (
        DEFAULT_PERIOD_S,
        EmbeddedStack,
        StackError,
        configured_target,
        default_model,
    )
    from healer.edges.embedded import EmbeddedTritonError
    from healer.edges.store import StoreError
    from healer.settings import REPOSITORY_SHARED

    broken = options.broken or default_broken(settings)
    try:
        model = options.model or default_model(settings, broken)
        settings.model(model)
    except KeyError:
        raise _SetupFailed(f"{settings.source}: no model {options.model!r} in models:") from None
    except StackError as exc:
        raise _SetupFailed(str(exc)) from exc
    if options.target == "config":
        try:
            target = configured_target(
                settings,
                model=model,
                broken=broken,
                period_s=options.period_s or settings.sidecar.period_s,
                state_dir=settings.rollback.state_dir,
            )
        except (StackError, StoreError, ValueError, OSError) as exc:
            raise _SetupFailed(str(exc)) from exc
        yield target, f"target {model} on Triton {settings.triton.url} ({engine} engine)", None
        return
    stack = EmbeddedStack(
        settings,
        model=model,
        broken=broken,
        period_s=options.period_s or DEFAULT_PERIOD_S,
        repository_mode=options.repository_mode or REPOSITORY_SHARED,
    )
    try:
        try:
            target = stack.start()
        except (StackError, EmbeddedTritonError, OSError) as exc:
            raise _SetupFailed(f"the embedded stack did not start: {exc}") from exc
        where = MODE_WHERE[stack.mode]
        description = (
            f"embedded stack: {model} on Triton {target.replicas[0]}{where} "
            f"(started and promoted in {stack.started_s:.1f} s)"
        )
        yield target, description, stack
    finally:
        stack.close()


def _progress(say: Callable[[str], None], *, keep: Callable[[str], object]) -> Callable[..., None]:
    """A line as a scenario starts; as it ends, its runs kept (``keep``), its row and why it missed."""

    def progress(what: str, scenario: Scenario, result: DrillResult | None) -> None:
        if what == "start":
            say(report.starting(scenario))
            return
        keep(scenario.name)
        if result is not None:
            say(report.row(result))
            for line in report.explain(result):
                say(line)

    return progress


def keep_runs(scratch: Path, scenario: str, state_dir: Path) -> list[str]:
    """Copy a scenario's run records (its rollbacks and its release) from the drill's scratch folder,
    which is deleted afterwards, into ``state_dir`` (``rollback.state_dir``), where ``healer runs
    list/get --config`` reads them. A drill's run names repeat from one demo to the next (its incidents
    are the same): the newest record replaces the one of the same name, so the name just printed opens
    the run just seen. Returns the names copied."""
    from healer.engines.records import RunRecords, write_record
    from healer.vocabulary import RELEASE_TEMPLATE_NAME, TEMPLATE_NAME

    copied = []
    folders = (scratch / "runs" / scenario, scratch / "releases" / scenario)
    for folder, prefix in itertools.product(folders, (TEMPLATE_NAME, RELEASE_TEMPLATE_NAME)):
        for path in sorted(folder.glob(f"{prefix}-*.json")):
            target = Path(state_dir) / path.name
            try:
                record = RunRecords(folder).get(path.stem)
                target.parent.mkdir(parents=True, exist_ok=True)
                write_record(target, record)
            except Exception:  # noqa: S112 - a record not readable or not writable is not kept; the drill stands
                continue
            copied.append(path.stem)
    return copied


def shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it is under it (as a user would type it)."""
    path = Path(os.path.abspath(path))
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _scratch(log_file: Path) -> Path:
    path = log_file.parent / "drill-scratch"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _skipped(scenarios: list[Scenario], skipped: list[str], settings: Settings) -> list[DrillResult]:
    reasons = dict(line.split(": ", 1) for line in skipped)
    return [
        DrillResult(
            s,
            Observation(),
            Verdict(s.expect.outcome, True),
            settings.rollback.deadline_s,
            skipped=reasons[s.name],
        )
        for s in scenarios
        if s.name in reasons
    ]
