"""`healer release`: a new model version staged, served on one replica beside the stable one, baked, then on
every replica in waves, verified and promoted; any failure puts every replica back on the stable version."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any

from healer.cli.common import Command
from healer.cli.output import EXIT_REFUSED, EXIT_USAGE, add_output, print_data, run_status
from healer.cli.reach import unreachable
from healer.settings import Settings

EXAMPLES = (
    "healer release --config healer.yaml linear_scorer 3",
    "healer release linear_scorer 3 --bake 300 --approve      (then: healer runs resume NAME)",
    "healer release linear_scorer 3 -o json",
)


def register(command: Command) -> None:
    release = command(
        "release",
        "release a new model version: staged, served on one replica beside the stable one, baked, then every "
        "replica in waves, verified, and promoted; any failure puts every replica back on the stable version",
        EXAMPLES,
    )
    release.add_argument("model", metavar="MODEL", help="the model's name")
    release.add_argument("version", metavar="VERSION", help="the version to release (in the store, newer than stable)")
    release.add_argument(
        "--bake",
        type=float,
        metavar="SECONDS",
        default=None,
        help="how long the canary bakes (default: release.bake_s)",
    )
    release.add_argument(
        "--approve", action="store_true", help="wait for a person after the bake (`healer runs resume NAME`, Argo UI)"
    )
    release.add_argument(
        "--release", dest="release_id", help="release id, label-safe (default: rel-<model>-<version>-<time>)"
    )
    release.add_argument(
        "--wait",
        type=float,
        metavar="SECONDS",
        default=None,
        help="how long to wait for the outcome (default: an hour)",
    )
    add_output(
        release,
        "text, a line per step; json/yaml: the run's final status; name: only the run's name",
        choices=("json", "yaml", "name"),
    )


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Run a release with the configured engine and print each step as it ends. With the local
    engine the release runs in this process, so this command stays until the run has ended, put-back
    included: Ctrl-C, SIGTERM, SIGHUP or --wait running out stop the release (every replica goes back
    on the stable version) and wait for that; only a third Ctrl-C leaves at once."""
    from healer.edges import tracing
    from healer.engines import EngineError
    from healer.vocabulary import ReleaseRequest, model_slug

    progress = sys.stderr if args.output in ("json", "yaml", "name") else sys.stdout
    release_id = args.release_id or f"rel-{model_slug(args.model)}-{args.version}-{int(time.time())}"[:63].rstrip("-.")
    try:  # the model itself was checked against the config with every MODEL argument
        request = ReleaseRequest(
            model=args.model, version=args.version, release=release_id, bake_s=args.bake, approve=args.approve
        )
    except ValueError as exc:
        print(f"healer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    local = settings.rollback.engine != "argo"
    tracing.configure(settings.tracing)
    try:
        with tracing.start_release_span(model=request.model, version=request.version, release=release_id) as span:
            request = dataclasses.replace(request, traceparent=tracing.current_traceparent())
            try:
                engine, name, verb = _submit_release(settings, request, local=local)
            except (EngineError, ValueError, OSError) as exc:
                span.fail(str(exc))
                line = unreachable("argo-server", settings.rollback.argo.host, exc) if not local else None
                said = (
                    f"{line}; release {release_id} not submitted"
                    if line
                    else f"release {release_id} not submitted: {exc}"
                )
                print(f"healer: {said}", file=sys.stderr)
                return EXIT_REFUSED
            print(f"{verb} {name} ({settings.rollback.engine}): release {release_id}", file=progress, flush=True)
            try:
                status = _follow_release(engine, name, args.wait, progress, local=local and verb == "submitted")
            except (EngineError, OSError) as exc:
                span.fail(str(exc))
                print(f"healer: {name} was {verb}, but its outcome could not be read: {exc}", file=sys.stderr)
                return EXIT_REFUSED
            if not status.succeeded:
                span.fail(f"{status.phase}: {status.message}")
    finally:
        tracing.flush()
    return _report_release(args, status, release_id)


def _submit_release(settings: Settings, request: Any, *, local: bool) -> tuple[Any, str, str]:
    """(the engine, the run's name, "submitted" | "joined")."""
    from healer.compose import finish_orphaned_releases
    from healer.engines import EngineRejected
    from healer.vocabulary import RELEASE_TEMPLATE_NAME, release_workflow_name

    if not local:
        from healer.engines.factory import argo_engine

        engine: Any = argo_engine(settings)
        name = release_workflow_name(request)
        try:
            engine.submit_template(RELEASE_TEMPLATE_NAME, request.parameters(), name=name)
        except EngineRejected as exc:
            if "exists already" not in str(exc):
                raise
            return engine, name, "joined"
        return engine, name, "submitted"
    from healer.engines.factory import local_release_engine

    engine = local_release_engine(settings)
    # A release this host started in a process that died (killed) never ran its put-back: run it now,
    # before this one reads the fleet (every model's: each waits at most its dead holder's lease).
    finish_orphaned_releases(settings, model=None, engine=engine)
    submission = engine.submit_release(request)
    return engine, submission.name, "submitted" if submission.created else "joined"


def _report_release(args: argparse.Namespace, status: Any, release_id: str) -> int:
    if args.output in ("json", "yaml"):
        head = {"name": status.name, "release": release_id, "model": args.model, "version": args.version}
        print_data({**head, **run_status(status)}, args.output)
    elif args.output == "name":
        print(status.name)
    else:
        print(f"{status.name}: {status.phase} {status.message}".rstrip())
        if status.succeeded:
            print(f"released {args.model} v{args.version}: every replica serves it, promoted stable")
        elif not status.done:
            print(f"{status.name} has not ended: follow it with `healer runs get {status.name}` or `argo get`")
    return 0 if status.succeeded else EXIT_REFUSED


RELEASE_WAIT_MARGIN_S = 120.0


def _follow_release(engine: Any, name: str, wait_s: float | None, out: Any, *, local: bool) -> Any:
    """Wait for the run, printing each step as it ends (and a suspended step as it waits). A local
    run (this process runs it) is stopped, not abandoned, on a signal or when the wait runs out."""
    import signal

    from healer.vocabulary import RELEASE_DEADLINE_S
    from workflows.release import PUT_BACK_DEADLINE_S

    # After a stop: the put-back's own deadline; unbounded by --wait: the release's, then that.
    stop_wait_s = PUT_BACK_DEADLINE_S + RELEASE_WAIT_MARGIN_S
    deadline = time.monotonic() + (RELEASE_DEADLINE_S + stop_wait_s if wait_s is None else wait_s)
    shown: set[str] = set()
    signals = {"count": 0}

    def on_signal(signum: int, _frame: Any) -> None:
        signals["count"] += 1
        if signals["count"] >= 3:
            raise KeyboardInterrupt
        if signals["count"] == 2:
            print(
                f"{name} is putting its replicas back; leaving now leaves them as they are (again to leave)", file=out
            )
            return
        print(
            f"stopping {name} ({signal.Signals(signum).name}): every replica goes back on the stable version", file=out
        )
        engine.stop(name)

    previous = (
        {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)} if local else {}
    )
    try:
        stopped = False
        # Bounded: by the wait (and, once stopped, the put-back's deadline); every pass sleeps or returns.
        while True:
            status = engine.status(name)
            _print_release_steps(engine.get(name), name, shown, out)
            if status.done:
                return status
            if time.monotonic() >= deadline:
                if not local or stopped:
                    return status
                print(f"stopping {name}: --wait ran out; every replica goes back on the stable version", file=out)
                engine.stop(name)
                stopped, deadline = True, time.monotonic() + stop_wait_s
            time.sleep(0.5)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _print_release_steps(record: dict[str, Any], name: str, shown: set[str], out: Any) -> None:
    nodes = (record.get("status") or {}).get("nodes") or {}
    for node in sorted(nodes.values(), key=lambda n: str(n.get("startedAt", ""))):
        kind, phase = node.get("type"), node.get("phase")
        key = f"{node.get('id', node.get('name'))}:{phase}"
        if kind not in {"Retry", "Suspend", "Skipped"} or key in shown:
            continue
        if kind == "Suspend" and phase == "Running":
            shown.add(key)
            print(
                f"  {node.get('displayName')}: waiting for a person: `healer runs resume {name}` "
                "(on Argo: the UI's Resume, or `argo resume`)",
                file=out,
            )
        elif phase in {"Succeeded", "Failed", "Error", "Skipped"}:
            shown.add(key)
            message = " ".join(str(node.get("message", "")).split())
            print(f"  {node.get('displayName')}: {phase} {message}".rstrip(), file=out, flush=True)
