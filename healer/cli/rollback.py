"""`healer rollback`: roll a model back to its last stable version now, and wait for the outcome: with the
config's engine, or as an Argo workflow created through the Kubernetes API (healer/cli/cluster.py)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from healer.cli.cluster import access, add_cluster_flags, one_line, refuse_all_namespaces
from healer.cli.cluster import engine as cluster_engine
from healer.cli.common import Command
from healer.cli.output import EXIT_REFUSED, EXIT_USAGE, add_output, print_data, run_status
from healer.cli.reach import unreachable
from healer.edges.cluster import ClusterError
from healer.engines import EngineError
from healer.settings import Settings

EXAMPLES = (
    "healer rollback -n ml linear_scorer 3   (a Workflow created with your kubeconfig's credentials)",
    "healer rollback --config healer.yaml linear_scorer 3",
    "healer rollback linear_scorer 3 --incident inc-42 -o json",
    "healer rollback linear_scorer 3 --quarantine   (keep v3 off every replica, even one restarted)",
)


def register(command: Command) -> None:
    rollback = command(
        "rollback", "roll a model back to its last stable version now, and wait for the outcome", EXAMPLES
    )
    rollback.description = (
        f"{rollback.description}\n\nWhere it runs: with --kubeconfig, --context or -n, or with no healer.yaml "
        "(no --config,\nno $HEALER_CONFIG) and a kubeconfig found: an Argo Workflow created through the "
        "Kubernetes API\nwith your credentials (a kubeconfig is all it needs); otherwise the config's "
        "rollback.engine."
    )
    rollback.add_argument("model", metavar="MODEL", help="the model's name")
    rollback.add_argument("from_version", metavar="FROM_VERSION", help="the failing version")
    rollback.add_argument("--incident", help="incident id, label-safe (default: manual-<model>-<version>-<time>)")
    rollback.add_argument(
        "--detail", default="manual rollback from the command line", help="why, for the run's description"
    )
    rollback.add_argument(
        "--quarantine",
        action="store_true",
        help="quarantine FROM_VERSION too, even if it answers right or the ledger lists it stable (default: only "
        "when the rollback's own check of it fails)",
    )
    rollback.add_argument(
        "--wait", type=float, metavar="SECONDS", default=None, help="how long to wait (default: deadline + 30)"
    )
    add_output(rollback, "text; json/yaml: the run's final status; name: only the run's name")
    add_cluster_flags(rollback, across=False)


def run(settings: Settings, args: argparse.Namespace) -> int:
    from healer.compose import finish_orphaned_releases
    from healer.engines import EngineError
    from healer.engines.factory import engine_from_settings

    incident = _incident(args)
    # Machine-readable output keeps stdout for the result alone; progress goes to stderr.
    progress = sys.stderr if args.output in ("json", "yaml", "name") else sys.stdout
    if settings.rollback.engine != "argo":
        # A release of this model killed on this host: its own put-back first (a version it promoted
        # before it was killed is finished, not reverted), then the rollback asked for.
        finish_orphaned_releases(settings, model=args.model)
    try:
        request = _request(args, incident)
        engine = engine_from_settings(settings)
        submission = engine.submit(request)
    except (EngineError, ValueError, OSError) as exc:
        maybe = getattr(exc, "maybe_delivered", False)
        what = f"the rollback for incident {incident} may have been created" if maybe else "rollback not submitted"
        line = unreachable("argo-server", settings.rollback.argo.host, exc) if not maybe else None
        print(f"healer: {line}; {what}" if line else f"healer: {what}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    verb = "submitted" if submission.created else "joined"
    print(f"{verb} {submission.name} ({settings.rollback.engine})", file=progress, flush=True)
    try:
        status = engine.wait(submission.name, args.wait or settings.rollback.deadline_s + 30)
    except (EngineError, OSError) as exc:
        print(f"healer: {submission.name} was {verb}, but its outcome could not be read: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    return _report_rollback(args, submission, status, settings.rollback.engine, incident)


def run_on_cluster(args: argparse.Namespace, *, deadline_s: float) -> int:
    """The rollback as an Argo workflow created through the Kubernetes API with the caller's credentials."""
    problem = refuse_all_namespaces(args, "a rollback is created")
    if problem:
        print(f"healer: rollback: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        request = _request(args, _incident(args))
    except ValueError as exc:
        print(f"healer: rollback not submitted: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return _cmd_rollback_on_cluster(args, request, deadline_s=deadline_s)


def _request(args: argparse.Namespace, incident: str) -> Any:
    from healer.vocabulary import MANUAL, MANUAL_QUARANTINE, RollbackRequest

    return RollbackRequest(
        model=args.model,
        from_version=args.from_version,
        incident=incident,
        reason=MANUAL_QUARANTINE if args.quarantine else MANUAL,
        detail=args.detail,
    )


def _cmd_rollback_on_cluster(args: argparse.Namespace, request: Any, *, deadline_s: float) -> int:
    """Create (or join) the incident's rollback workflow with the caller's credentials, then wait.
    What is said on failure depends on what is known: not created, maybe created, or created and not
    followed; the incident is named so that running the command again with it joins, not duplicates."""
    from healer.engines import EngineUnavailable

    progress = sys.stderr if args.output in ("json", "yaml", "name") else sys.stdout
    again = f"`healer rollback ... --incident {request.incident}` joins it rather than creating another"
    try:
        cluster = access(args)
    except ClusterError as exc:
        print(f"healer: {one_line(exc)}; rollback not submitted", file=sys.stderr)
        return EXIT_REFUSED
    with cluster_engine(cluster, deadline_s) as argo:
        try:
            argo.template_exists()  # a wrong -n says so here, not as a Workflow the controller fails later
        except EngineError as exc:
            line = unreachable("the Kubernetes API server", cluster.host, exc, source=cluster.source)
            said = line or f"no usable template in {cluster.namespace}: {exc}"
            print(f"healer: {said}; rollback not submitted", file=sys.stderr)
            return EXIT_REFUSED
        try:
            submission = argo.submit(request)
        except EngineUnavailable as exc:
            if not exc.maybe_delivered:
                print(f"healer: {one_line(exc, cluster)}; rollback not submitted", file=sys.stderr)
            else:
                print(
                    f"healer: the rollback for incident {request.incident} may have been created: "
                    f"{one_line(exc, cluster)}; `healer runs list -n {cluster.namespace}` shows it; {again}",
                    file=sys.stderr,
                )
            return EXIT_REFUSED
        except EngineError as exc:
            print(f"healer: rollback not submitted: {exc}", file=sys.stderr)
            return EXIT_REFUSED
        verb = "submitted" if submission.created else "joined"
        print(f"{verb} {submission.name} (Argo, through the Kubernetes API at {cluster.host})", file=progress)
        try:
            status = argo.wait(submission.name, args.wait or deadline_s + 30)
        except EngineError as exc:
            print(
                f"healer: {submission.name} was {verb}, but its outcome could not be read: {one_line(exc, cluster)}; "
                f"`healer runs get {submission.name} -n {cluster.namespace}` follows it",
                file=sys.stderr,
            )
            return EXIT_REFUSED
    return _report_rollback(args, submission, status, "argo", request.incident)


def _incident(args: argparse.Namespace) -> str:
    from healer.vocabulary import model_slug

    stamp = int(time.time())
    return str(args.incident or f"manual-{model_slug(args.model)}-{args.from_version}-{stamp}"[:63].rstrip("-."))


def _nothing_to_do(outputs: Any) -> str:
    """Why a rollback that succeeded restored nothing (its lease phase's confirmation), or ""."""
    try:
        phases = json.loads(outputs.get("phases") or "[]")
        confirm = next(p for p in phases if p.get("name") == "lease")["outputs"]["confirm"]
    except (ValueError, TypeError, KeyError, AttributeError, StopIteration):
        return ""
    return "" if confirm.get("act", True) else str(confirm.get("why", ""))


def _report_rollback(args: argparse.Namespace, submission: Any, status: Any, engine: str, incident: str) -> int:
    """A rollback's final status as the command prints it; 0 only when it succeeded."""
    if args.output in ("json", "yaml"):
        head = {"name": status.name, "engine": engine, "created": submission.created, "model": args.model}
        head |= {"from_version": args.from_version, "incident": incident}
        print_data({**head, **run_status(status)}, args.output)
    elif args.output == "name":
        print(status.name)
    else:
        print(f"{status.name}: {status.phase} {status.message}".rstrip())
        if status.outputs.get("to-version"):
            print(f"restored {args.model} v{status.outputs['to-version']}")
        elif status.succeeded and (why := _nothing_to_do(status.outputs)):
            print(f"nothing to do: {why}")
        if args.output == "wide":
            for key, value in sorted(status.outputs.items()):
                print(f"  {key}: {' '.join(value.split())}")
    return 0 if status.succeeded else EXIT_REFUSED
