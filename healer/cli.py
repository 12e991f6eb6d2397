"""healer's command line. Heavy clients are imported inside the commands that need them."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import getpass
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from healer.settings import ConfigError, Settings, load_settings

EXIT_USAGE = 64  # bad configuration or arguments (sysexits EX_USAGE); 0/1/2 are the probe verdicts
EXIT_REFUSED = 3  # promote refused, rollback did not succeed


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    from healer.logs import configure_logging

    # The sidecar's JSON logs go to stdout (the container log); the other commands print results there.
    configure_logging(level=args.log_level, stream=sys.stdout if args.command == "sidecar" else None)
    if args.command == "render":
        return _cmd_render(args)
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print(f"healer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    handlers = {
        "probe": _cmd_probe,
        "demo": _cmd_demo,
        "promote": _cmd_promote,
        "store": _cmd_store,
        "runs": _cmd_runs,
        "rollback": _cmd_rollback,
        "sidecar": _cmd_sidecar,
    }
    return handlers[args.command](settings, args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="healer", description=__doc__)
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="JSON logs go to stderr (default: warning)",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    def with_config(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text)
        sub.add_argument("--config", required=True, help="healer YAML file")
        return sub

    probe = with_config("probe", "run the three tiers once for every configured model")
    probe.add_argument("--json", action="store_true", help="print a JSON list of results instead of a table")
    probe.add_argument("--url", help="Triton host:port (overrides triton.url)")

    demo = with_config("demo", "start a real Triton on the embedded default and probe every model")
    demo.add_argument("--json", action="store_true", help="print a JSON list of results instead of a table")

    render = commands.add_parser("render", help="write the Argo WorkflowTemplates as YAML")
    render.add_argument("--out", help="directory to write into (default: print to stdout)")
    render.add_argument("--image", help="the healer image the steps run in")
    render.add_argument("--namespace", help="namespace of the WorkflowTemplate")
    render.add_argument("--deadline", type=int, help="activeDeadlineSeconds of a rollback (default 90)")

    promote = with_config("promote", "record a version as stable (only if it passes its golden request now)")
    promote.add_argument("model")
    promote.add_argument("version")
    promote.add_argument("--by", default=None, help="who promotes (default: the current user)")

    store = with_config("store", "inspect the model store and its stable ledger; lift a quarantine")
    store_commands = store.add_subparsers(dest="store_command", required=True)
    store_ls = store_commands.add_parser("ls", help="models, versions, stable and quarantined")
    store_ls.add_argument("model", nargs="?")
    store_ls.add_argument("--json", action="store_true")
    store_unquarantine = store_commands.add_parser(
        "unquarantine",
        help="lift a version's quarantine: ledger, audit record, and its files back into the live repository",
    )
    store_unquarantine.add_argument("model")
    store_unquarantine.add_argument("version")
    store_unquarantine.add_argument(
        "--reason", required=True, help="why the version is safe again (kept in the ledger and the audit trail)"
    )

    runs = with_config("runs", "list rollback runs of the local engine (like `argo list`)")
    runs_commands = runs.add_subparsers(dest="runs_command")
    runs_show = runs_commands.add_parser("show", help="one run, node by node (like `argo get`)")
    runs_show.add_argument("name")
    runs_show.add_argument("--json", action="store_true")

    sidecar = with_config("sidecar", "probe every model each period, drain, roll back (runs next to Triton)")
    sidecar.add_argument("--listen", help="host:port for /livez /readyz /metrics /status (overrides sidecar.listen)")

    rollback = with_config("rollback", "roll a model back to its last stable version now")
    rollback.add_argument("model")
    rollback.add_argument("from_version", metavar="FROM_VERSION", help="the failing version")
    rollback.add_argument("--incident", help="incident id (default: manual-<model>-<version>-<time>)")
    rollback.add_argument("--detail", default="manual rollback from the command line")
    rollback.add_argument("--wait", type=float, default=None, help="seconds to wait (default: deadline + 30)")
    return parser


def _cmd_probe(settings: Settings, args: argparse.Namespace) -> int:
    if args.url:
        settings = dataclasses.replace(settings, triton=dataclasses.replace(settings.triton, url=args.url))
    return _probe_and_print(settings, settings.triton.url, as_json=args.json)


def _probe_and_print(settings: Settings, url: str, *, as_json: bool) -> int:
    from healer.report import format_table
    from healer.triton import TritonHttp
    from probes.runner import exit_code, probe_all

    triton = TritonHttp(url, timeout_s=settings.triton.timeout_s)
    try:
        results = probe_all(settings, triton)
    finally:
        triton.close()
    if as_json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        print(format_table(results))
    return exit_code(results)


def _cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    from healer.embedded import EmbeddedTriton, EmbeddedTritonError

    if settings.embedded is None:
        print(f"healer: {settings.source}: embedded: is required for the demo", file=sys.stderr)
        return EXIT_USAGE
    names = [m.name for m in settings.models]
    started = time.monotonic()
    triton = None
    try:
        triton = EmbeddedTriton(
            settings.embedded.model_repository,
            tritonserver=settings.embedded.tritonserver,
            load_models=names,
            startup_timeout_s=settings.embedded.startup_timeout_s,
        )
        triton.start()
        say = (lambda text: print(text, file=sys.stderr)) if args.json else print
        say(
            f"Triton {triton.url} (pid {triton.pid}) live with {', '.join(names)} "
            f"in {time.monotonic() - started:.1f} s; repository {triton.model_repository}"
        )
        say("")
        return _probe_and_print(settings, triton.url, as_json=args.json)
    except EmbeddedTritonError as exc:
        print(f"healer: embedded Triton failed: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if triton is not None:
            triton.cleanup()


def _cmd_render(args: argparse.Namespace) -> int:
    from workflows.rollback import TemplateOptions, render_all

    defaults = TemplateOptions()
    options = TemplateOptions(
        image=args.image or defaults.image,
        namespace=args.namespace or defaults.namespace,
        deadline_s=args.deadline or defaults.deadline_s,
    )
    rendered = render_all(options)
    if not args.out:
        print("\n---\n".join(rendered.values()), end="")
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in rendered.items():
        (out / name).write_text(text)
        print(f"wrote {out / name}")
    return 0


def _store(settings: Settings) -> Any:
    from healer.store import store_from_settings

    if settings.store is None:
        raise ConfigError(settings.source, "store", "is required for this command")
    return store_from_settings(settings.store)


def _cmd_promote(settings: Settings, args: argparse.Namespace) -> int:
    from healer.promote import PromotionRefused, promote
    from healer.store import StoreError
    from healer.triton import TritonHttp

    try:
        store = _store(settings)
    except ConfigError as exc:
        print(f"healer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    triton = TritonHttp(settings.triton.url, timeout_s=settings.triton.timeout_s)
    try:
        record = promote(settings, triton, store, args.model, args.version, by=args.by or getpass.getuser())
    except (PromotionRefused, StoreError, ValueError) as exc:
        print(f"healer: promote refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    finally:
        triton.close()
    print(f"{args.model} v{record.version} promoted stable by {record.promoted_by} at {record.promoted_at}")
    for name, digest in sorted(record.files.items()):
        print(f"  {digest}  {name}")
    return 0


def _cmd_store(settings: Settings, args: argparse.Namespace) -> int:
    if args.store_command == "unquarantine":
        return _cmd_store_unquarantine(settings, args)
    return _cmd_store_ls(settings, args)


def _cmd_store_ls(settings: Settings, args: argparse.Namespace) -> int:
    from healer.store import StoreError

    try:
        store = _store(settings)
        models = [args.model] if args.model else store.models()
        listing = []
        for model in models:
            ledger = store.ledger(model)
            listing.append(
                {
                    "model": model,
                    "versions": store.versions(model),
                    "stable": [r.version for r in ledger.stable],
                    "quarantined": [q.to_dict() for q in ledger.quarantined],
                    "ledger_generation": ledger.generation,
                }
            )
    except ConfigError as exc:
        print(f"healer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (StoreError, ValueError) as exc:
        print(f"healer: store {settings.store}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    if args.json:
        print(json.dumps(listing, indent=2))
        return 0
    print(f"store {store.location}")
    print(f"{'MODEL':<24}{'VERSION':<9}STATE")
    for entry in listing:
        quarantined = {q["version"]: q for q in entry["quarantined"]}
        # A quarantined version moved out of a store that is also the live repository is listed too.
        for version in sorted(set(entry["versions"]) | set(quarantined), key=_version_order):
            if version in quarantined:
                q = quarantined[version]
                state = f"quarantined ({q['incident']}: {q['reason']})"
                if version not in entry["versions"]:
                    state += " [files moved aside]"
            elif version in entry["stable"]:
                state = "stable"
            else:
                state = "-"
            print(f"{entry['model']:<24}{version:<9}{state}".rstrip())
    return 0


def _version_order(version: str) -> tuple[int, str]:
    # Numeric order; a ledger record with a non-numeric version (never a Triton one) sorts last.
    return (int(version), "") if version.isdigit() else (1 << 63, version)


class _NotQuarantined(Exception):
    """Raised inside the ledger update: the version has no quarantine to lift."""


def _cmd_store_unquarantine(settings: Settings, args: argparse.Namespace) -> int:
    """Lift a quarantine: the ledger first (the truth), then the audit record, then the files."""
    from healer.ledger import Ledger
    from healer.store import StoreError, check_name, quarantined_copies, utc_now

    model, version, reason = args.model, args.version, args.reason.strip()
    try:
        check_name(model, version)
    except ValueError as exc:
        print(f"healer: store unquarantine: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not reason:
        print("healer: store unquarantine: --reason must say why the version is safe again", file=sys.stderr)
        return EXIT_USAGE
    who = os.environ.get("USER") or "cli"
    live = settings.live_repository_path

    def lift(current: Ledger) -> Ledger:
        if not current.is_quarantined(version):
            raise _NotQuarantined
        return current.with_lifted(version, reason, utc_now(), who)

    try:
        store = _store(settings)
        ledger = store.update_ledger(model, lift)
    except ConfigError as exc:
        print(f"healer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except _NotQuarantined:
        left: list[Path] = []
        if live is not None:
            with contextlib.suppress(OSError):
                left = quarantined_copies(live, model, version)
        hint = f"; a quarantined copy is still at {left[-1]}" if left else ""
        print(
            f"healer: {model} v{version} is not quarantined in {store.location}: nothing lifted{hint}", file=sys.stderr
        )
        return 1
    except (StoreError, ValueError) as exc:
        print(f"healer: store {settings.store}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    record = ledger.lifted[-1]
    print(f"{model} v{version}: quarantine lifted by {who} (incidents {', '.join(record.incidents)}): {reason}")
    print(f"  ledger {store.location} generation {ledger.generation}")
    code = 0
    try:
        audit_key = store.append_audit(
            model,
            {
                "incident": "+".join(record.incidents),
                "event": "unquarantined",
                "version": version,
                "who": who,
                "reason": reason,
                "incidents": list(record.incidents),
                "ledger_generation": ledger.generation,
            },
        )
        print(f"  audit record {audit_key}")
    except (StoreError, ValueError) as exc:
        print(f"healer: the ledger is lifted but no audit record was written: {exc}", file=sys.stderr)
        code = EXIT_REFUSED
    return _move_back(live, model, version) or code


def _move_back(live: Path | None, model: str, version: str) -> int:
    """The files part of unquarantine: the newest quarantined copy back where Triton reads it."""
    from healer.store import quarantined_copies, restore_quarantined_version

    if live is None:
        print("  no live repository configured: no files moved")
        return 0
    try:
        copies = quarantined_copies(live, model, version)
        restored = restore_quarantined_version(live, model, version)
    except OSError as exc:
        print(f"healer: the ledger is lifted but the files were not moved back: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    if restored is not None:
        print(f"  moved {copies[-1]} back to {restored}")
    elif copies:
        print(f"  {live / model / version} exists: left it, and the quarantined copy {copies[-1]}, alone")
    else:
        print(f"  no quarantined copy in {live}: no files moved")
    print("  Triton was not asked to load it; promote it again once it serves correctly")
    return 0


def _cmd_runs(settings: Settings, args: argparse.Namespace) -> int:
    from healer.engines.factory import local_engine
    from healer.runs import format_run, format_runs

    engine = local_engine(settings)
    if getattr(args, "runs_command", None) == "show":
        try:
            record = engine.get(args.name)
        except KeyError:
            print(f"healer: no run {args.name!r} in {settings.rollback.state_dir}", file=sys.stderr)
            return EXIT_USAGE
        print(json.dumps(record, indent=2) if args.json else format_run(record))
        return 0
    print(format_runs(engine.list_runs()))
    return 0


def _cmd_rollback(settings: Settings, args: argparse.Namespace) -> int:
    from healer.engines import EngineError, RollbackRequest
    from healer.engines.factory import engine_from_settings

    stamp = int(time.time())
    model_slug = "".join(c if c.isalnum() else "-" for c in args.model.lower())[:30].strip("-") or "model"
    incident = args.incident or f"manual-{model_slug}-{args.from_version}-{stamp}"[:63].rstrip("-.")
    try:
        request = RollbackRequest(
            model=args.model,
            from_version=args.from_version,
            incident=incident,
            reason="manual",
            detail=args.detail,
        )
        engine = engine_from_settings(settings)
        submission = engine.submit(request)
        print(f"{'submitted' if submission.created else 'joined'} {submission.name} ({settings.rollback.engine})")
        status = engine.wait(submission.name, args.wait or settings.rollback.deadline_s + 30)
    except (EngineError, ValueError, OSError) as exc:
        print(f"healer: rollback not submitted: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    print(f"{status.name}: {status.phase} {status.message}".rstrip())
    if status.outputs.get("to-version"):
        print(f"restored {args.model} v{status.outputs['to-version']}")
    return 0 if status.succeeded else EXIT_REFUSED


def _cmd_sidecar(settings: Settings, args: argparse.Namespace) -> int:
    import signal
    import threading

    from healer import kube
    from healer.engines.factory import argo_engine, local_engine
    from healer.sidecar import Sidecar, SidecarServer, pod_identity, pod_triton_url
    from healer.triton import TritonHttp

    if settings.store is None and (settings.rollback.engine == "local" or settings.sidecar.fallback_to_local):
        print(
            f"healer: {settings.source}: store: is required to roll back in the pod (engine local or "
            "sidecar.fallback_to_local)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    submit_bound = min(settings.rollback.argo.request_timeout_s, settings.sidecar.argo_submit_timeout_s)

    def primary(settings: Settings) -> Any:
        if settings.rollback.engine == "argo":
            return argo_engine(settings, request_timeout_s=submit_bound)
        return local_engine(settings)

    fallback = local_engine if settings.rollback.engine == "argo" and settings.sidecar.fallback_to_local else None
    kube_client = None
    if kube.in_cluster():
        try:
            kube_client = kube.KubeClient.in_cluster()
        except Exception as exc:  # no service account token: run without Events rather than not at all
            print(f"healer: Kubernetes API unavailable, running without Events: {exc}", file=sys.stderr)
    triton = TritonHttp(settings.triton.url, timeout_s=settings.triton.timeout_s)
    sidecar = Sidecar(
        settings,
        triton,
        engine_factory=lambda: primary(settings),
        fallback_factory=(lambda: fallback(settings)) if fallback else None,
        pod=pod_identity(),
        triton_url=pod_triton_url(settings.triton.url),
        kube=kube_client,
    )
    if settings.rollback.engine == "argo" and settings.rollback.replicas is None:
        print(
            f"healer: warning: {settings.source}: rollback.replicas is not set: an Argo rollback heals only the "
            "pod that submitted it, and replicas that join it stay drained until it escalates",
            file=sys.stderr,
        )
    server = SidecarServer(sidecar, args.listen or settings.sidecar.listen)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server.start()
    from healer.logs import get_logger

    get_logger("healer.sidecar").info(
        "sidecar_started",
        listen=server.address,
        triton=settings.triton.url,
        engine=settings.rollback.engine,
        models=[m.name for m in settings.models],
        period_s=settings.sidecar.period_s,
    )
    try:
        sidecar.run(stop)
    finally:
        # Kubernetes waits terminationGracePeriodSeconds after SIGTERM: let a local rollback finish.
        sidecar.drain(settings.rollback.deadline_s)
        server.stop()
        triton.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
