"""healer's command line. Heavy clients are imported inside the commands that need them."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import getpass
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from healer.cli.cluster import add_cluster_flags, cluster_mode, show_run, show_runs
from healer.settings import MAX_DEADLINE_S, ConfigError, Settings, load_settings, parse_address

EXIT_USAGE = 64  # bad arguments or configuration (sysexits EX_USAGE); 0/1/2 are the probe verdicts
EXIT_REFUSED = 3  # promote refused, rollback did not succeed
CONFIG_ENV = "HEALER_CONFIG"  # the config's default location, as in the rollback pods
OUTPUTS = ("json", "yaml", "wide", "name")

DESCRIPTION = """\
healer: a self-healing controller for NVIDIA Triton Inference Server on Kubernetes.

It checks every configured model on three tiers (liveness: the server answers; readiness: the
model version is loaded; business: a golden request gets the expected answer in time), tells a
wrong answer apart from an unreachable server, and rolls a wrong model back to its last stable
version (in-process, or as an Argo workflow)."""

# Exit codes per command: the epilogs, the README's "Exit codes" table and the tests read this.
EXIT_CODES: Mapping[str, Sequence[tuple[int, str]]] = {
    "probe": (
        (0, "every tier of every model passed"),
        (1, "at least one fail (a wrong answer, a model not ready, Triton not live)"),
        (2, "errors only: inconclusive (timeouts, 5xx), retry later and do not act"),
        (EXIT_USAGE, "bad arguments or configuration"),
    ),
    "demo": (
        (0, "every tier of every model passed (with --drills: and every drill passed)"),
        (1, "at least one fail (with --drills: or a drill missed its outcome or budget)"),
        (2, "errors only: inconclusive"),
        (EXIT_USAGE, "bad arguments or configuration, or the embedded Triton did not start"),
    ),
    "drill": (
        (0, "every scenario that ran got its expected outcome within the budget"),
        (1, "at least one scenario missed its expected outcome or the budget"),
        (EXIT_USAGE, "bad arguments or configuration (a model not in it), or the target could not be set up"),
    ),
    "promote": (
        (0, "promoted"),
        (EXIT_REFUSED, "refused: quarantined, not served, or its golden request did not pass"),
        (EXIT_USAGE, "bad arguments or configuration (no store, a model not in it, a bad version)"),
    ),
    "store": (
        (0, "listed; quarantine lifted; doctor: nothing blocks the model, or the fix asked for was written"),
        (1, "unquarantine: the version is not quarantined; doctor: something blocks the model (see its output)"),
        (EXIT_REFUSED, "the store could not be read or written"),
        (EXIT_USAGE, "bad arguments or configuration (no store, a model not in it, a bad name or version)"),
    ),
    "rollback": (
        (0, "the rollback succeeded: the stable version is restored and verified, or nothing was left to do"),
        (EXIT_REFUSED, "not submitted, failed, or not finished within --wait"),
        (EXIT_USAGE, "bad arguments or configuration (a model not in it, a bad version)"),
    ),
    "release": (
        (0, "released: every replica serves the version, verified, and it is promoted stable"),
        (
            EXIT_REFUSED,
            "refused, stopped (every replica put back on the stable version), or not finished within --wait",
        ),
        (EXIT_USAGE, "bad arguments or configuration (a model not in it, a bad version)"),
    ),
    "runs": (
        (0, "listed or shown"),
        (
            1,
            "runs get: no such run; on the cluster: unreachable, or refused (the message names the missing right)",
        ),
        (EXIT_USAGE, "bad arguments or configuration"),
    ),
    "check": (
        (0, "every check passed"),
        (1, "a check failed (the line says what was tried and what came back)"),
        (EXIT_USAGE, "bad arguments or configuration"),
    ),
    "status": (
        (0, "every pod × model healthy and in service"),
        (1, "some are not (the rows say which and why), or the cluster was not reachable or refused"),
        (EXIT_USAGE, "bad arguments"),
    ),
    "sidecar": (
        (0, "stopped by SIGTERM or SIGINT (after letting an in-pod rollback finish)"),
        (EXIT_USAGE, "bad arguments or configuration"),
    ),
    "render": (
        (0, "written"),
        (EXIT_USAGE, "bad arguments"),
    ),
    "webhook": (
        (0, "stopped by SIGTERM or SIGINT"),
        (EXIT_USAGE, "bad arguments, injection settings or TLS files"),
    ),
}

EXAMPLES: Mapping[str, Sequence[str]] = {
    "probe": (
        "healer probe --config examples/healer.yaml",
        "healer probe --config examples/healer.yaml -o json",
        "HEALER_CONFIG=examples/healer.yaml healer probe --url 127.0.0.1:8000 -o wide",
    ),
    "demo": (
        "healer demo --config examples/healer.yaml",
        "healer demo --config examples/healer.yaml --drills --report .healer/demo-report.html",
    ),
    "drill": (
        "healer drill --config examples/healer.yaml                  (the whole catalog, embedded stack)",
        "healer drill --config examples/healer.yaml wrong-weights storm -o json",
        "healer drill --config healer.yaml --target config --engine argo wrong-weights",
        "healer drill --config operator.yaml --target cluster wrong-weights bad-config -o json",
        "healer drill --config examples/healer.yaml --list",
    ),
    "promote": ("healer promote --config healer.yaml linear_scorer 2 --by alice",),
    "store": (
        "healer store --config healer.yaml ls",
        "healer store list linear_scorer -o yaml",
        "healer store unquarantine linear_scorer 3 --reason 'bad golden file, checked by hand'",
        "healer store doctor linear_scorer",
        "healer store doctor linear_scorer --release-lease --reason 'rollback pod gone, checked by hand'",
    ),
    "rollback": (
        "healer rollback -n ml linear_scorer 3   (a Workflow created with your kubeconfig's credentials)",
        "healer rollback --config healer.yaml linear_scorer 3",
        "healer rollback linear_scorer 3 --incident inc-42 -o json",
        "healer rollback linear_scorer 3 --quarantine   (keep v3 off every replica, even one restarted)",
    ),
    "release": (
        "healer release --config healer.yaml linear_scorer 3",
        "healer release linear_scorer 3 --bake 300 --approve      (then: healer runs resume NAME)",
        "healer release linear_scorer 3 -o json",
    ),
    "check": (
        "kubectl -n ml exec deploy/triton -c healer -- healer check",
        "helm test healer -n healer        (the chart's test pod runs `healer check` as a sidecar would)",
    ),
    "status": (
        "healer status                                  (the kubeconfig's current context and namespace)",
        "healer status -n ml --context prod -o wide",
        "healer status -n ml -w",
        "healer status -n ml -l app.kubernetes.io/name=triton -o json",
    ),
    "runs": (
        "healer runs list -n ml                  (the cluster's rollbacks, through the Kubernetes API)",
        "healer runs watch -n ml --context prod",
        "healer runs list --config healer.yaml   (the local engine's records)",
        "healer runs get healer-rollback-linear-scorer-0123456789 -o wide",
        "healer runs list -o name",
    ),
    "sidecar": ("HEALER_CONFIG=/etc/healer/healer.yaml healer sidecar --listen 0.0.0.0:8080",),
    "render": (
        "healer render --chart deploy/helm/healer   (the repository's copy; deploy/argo links to it)",
        "healer render --namespace ml --deadline 120",
        "healer render --out argo/ --trace-link 'https://jaeger.example.com/trace/{trace_id}'",
    ),
    "webhook": (
        "healer webhook --tls-cert /tls/tls.crt --tls-key /tls/tls.key --injection /etc/healer-webhook/injection.yaml",
    ),
}

NO_CONFIG = frozenset({"render", "webhook", "status"})  # commands that do not read healer.yaml
# Commands that work through the Kubernetes API with a kubeconfig (healer/cli/cluster.py).
CLUSTER_COMMANDS = frozenset({"runs", "rollback", "status"})


def _epilog(command: str) -> str:
    examples = "\n".join(f"  {line}" for line in EXAMPLES[command])
    codes = "\n".join(f"  {code:<4}{meaning}" for code, meaning in EXIT_CODES[command])
    text = f"examples:\n{examples}\n\nexit codes:\n{codes}"
    if command not in NO_CONFIG:
        text += f"\n\nenvironment:\n  {CONFIG_ENV}  the config file when --config is not given"
    return text


class _Parser(argparse.ArgumentParser):
    """Usage errors exit 64, not argparse's 2: 2 is `healer probe`'s "inconclusive, retry later"."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser, commands = _parser()
    try:
        args = parser.parse_args(argv)
        if args.command == "drill" and args.list:  # the catalog is healer's own: no config needed, as --help
            raise SystemExit(_print_catalog())
        config_given = bool(getattr(args, "config", None) or os.environ.get(CONFIG_ENV))
        args.cluster = args.command == "status" or (
            args.command in CLUSTER_COMMANDS and cluster_mode(args, config_given=config_given)
        )
        if args.command == "runs" and args.runs_command == "watch" and not args.cluster:
            commands["runs"].error("runs watch reads the cluster's workflows: give --kubeconfig, --context or -n")
        if args.command not in NO_CONFIG and not (args.cluster and not config_given):
            args.config = _config_path(args, commands[args.command])
    except SystemExit as exc:  # --help, --version and usage errors: an exit status, not an exception
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    from healer.edges.logs import configure_logging

    # The sidecar's JSON logs go to stdout (the container log); the other commands print results there.
    # The drills' log file (the sidecars' and rollbacks' logs) is read afterwards: info unless asked.
    args.file_log_level = getattr(args, "log_level", None) or ("debug" if getattr(args, "verbose", 0) > 1 else "info")
    args.log_level = log_level_for(args)
    configure_logging(level=args.log_level, stream=sys.stdout if args.command == "sidecar" else None)
    without_config = {"render": _cmd_render, "webhook": _cmd_webhook}.get(args.command)
    if without_config is None and args.cluster and not getattr(args, "config", None):
        without_config = _cmd_on_cluster_alone  # a kubeconfig is all it needs: no healer.yaml
    if without_config is not None:
        return without_config(args)
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print(f"healer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    problem = _named_problem(settings, args)
    if problem is not None:
        command = " ".join(filter(None, (args.command, getattr(args, "store_command", None))))
        print(f"healer: {command}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if args.cluster:
        return _cmd_on_cluster(settings, args)
    handlers = {
        "probe": _cmd_probe,
        "demo": _cmd_demo,
        "drill": _cmd_drill,
        "promote": _cmd_promote,
        "store": _cmd_store,
        "runs": _cmd_runs,
        "check": _cmd_check,
        "rollback": _cmd_rollback,
        "release": _cmd_release,
        "sidecar": _cmd_sidecar,
    }
    return handlers[args.command](settings, args)


# The arguments that name a model or a version, wherever a command takes them (MODEL, VERSION,
# FROM_VERSION, drill --model): checked once, in main, before any command acts on them.
NAMED_ARGUMENTS = ("model", "version", "from_version")


def _named_problem(settings: Settings, args: argparse.Namespace) -> str | None:
    """What is wrong with the model and version the command line names, or None. The name rules
    first (healer.edges.store.check_name: a model name and a version number that cannot steer a path), then
    the configuration: a command acts only on a model of the config's models, never on a name it was
    only given (a rollback of it would quarantine, escalate and alert about a model nobody runs)."""
    from healer.edges.store import check_name

    model = getattr(args, "model", None)
    version = getattr(args, "version", None)
    if version is None:
        version = getattr(args, "from_version", None)  # "" is checked (and refused), not skipped
    if model is None:
        return None
    try:
        check_name(model, version)
    except ValueError as exc:
        return str(exc)
    configured = [m.name for m in settings.models]
    if model not in configured:
        return f"unknown model {model!r}: {settings.source} configures {', '.join(configured)}"
    return None


def _cmd_webhook(args: argparse.Namespace) -> int:
    import signal
    import ssl
    import threading

    from healer.webhook import InjectionConfigError, serve

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        serve(args.listen, Path(args.tls_cert), Path(args.tls_key), Path(args.injection), stop)
    except InjectionConfigError as exc:
        print(f"healer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, ssl.SSLError) as exc:  # unreadable or mismatched TLS files, a taken port
        print(f"healer: webhook: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def _config_path(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str:
    config = getattr(args, "config", None) or os.environ.get(CONFIG_ENV)
    if not config:
        parser.error(f"no configuration: give --config FILE or set the {CONFIG_ENV} environment variable")
    return config


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("healer")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


DAEMONS = frozenset({"sidecar", "webhook"})  # their logs are their output: info by default
LOG_LEVELS = ("debug", "info", "warning", "error")


def _add_logging(parser: argparse.ArgumentParser, *, default: Any) -> None:
    parser.add_argument(
        "--log-level",
        default=default,
        choices=LOG_LEVELS,
        help=(
            "least severe log event to write (default: warning, so a person's output is the results; "
            "info for `healer sidecar` and `healer webhook`). Logs are JSON lines: on stdout for "
            "`healer sidecar` (the container log), on stderr for every other command, whose stdout "
            "carries its results"
        ),
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0 if default is None else argparse.SUPPRESS,
        help="log more: -v info, -vv debug (--log-level wins)",
    )


def log_level_for(args: argparse.Namespace) -> str:
    """--log-level if given (before or after the command), else -v/-vv, else the command's default."""
    if getattr(args, "log_level", None):
        return str(args.log_level)
    verbose = int(getattr(args, "verbose", 0) or 0)
    if verbose:
        return "debug" if verbose > 1 else "info"
    return "info" if args.command in DAEMONS else "warning"


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser, and each command's parser (for usage errors found after parsing)."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = _Parser(
        prog="healer",
        description=DESCRIPTION,
        epilog=(
            "examples:\n"
            "  healer probe --config examples/healer.yaml\n"
            "  healer demo --config examples/healer.yaml\n"
            "  healer drill --config examples/healer.yaml --all\n"
            "  healer runs list -o wide          (the config from $HEALER_CONFIG)\n\n"
            "exit codes: 0 success; 1 a probe failed (or nothing found); 2 probe inconclusive, retry later;\n"
            "3 promote or rollback refused or not successful; 64 bad arguments or configuration.\n"
            "`healer COMMAND --help` shows each command's options, examples and exit codes."
        ),
        formatter_class=formatter,
    )
    parser.add_argument("--version", action="version", version=f"healer {_version()}")
    _add_logging(parser, default=None)
    subcommands = parser.add_subparsers(
        dest="command", required=True, title="commands", metavar="COMMAND", help="one of:"
    )
    commands: dict[str, argparse.ArgumentParser] = {}

    def command(name: str, help_text: str, *, config: bool = True) -> argparse.ArgumentParser:
        sub = subcommands.add_parser(
            name,
            help=help_text,
            description=help_text[0].upper() + help_text[1:] + ".",
            epilog=_epilog(name),
            formatter_class=formatter,
        )
        if config:
            _add_config(sub, default=None)
        _add_logging(sub, default=argparse.SUPPRESS)  # also after the command, as kubectl takes its flags
        commands[name] = sub
        return sub

    probe = command("probe", "run the three tiers once for every configured model and print the verdicts")
    _add_output(probe, "a table, one row per model version; wide: one row per tier with its failure code and reason")
    probe.add_argument("--url", metavar="HOST:PORT", help="Triton's HTTP endpoint (overrides triton.url)")

    demo = command("demo", "start a real Triton on the config's embedded repository and probe every model")
    _add_output(demo, "as for probe")
    demo.add_argument(
        "--drills",
        nargs="*",
        metavar="SCENARIO",
        help="then break the model on purpose and watch healer heal it: the drill catalog (or these scenarios) "
        "on the embedded stack with the LocalEngine, a row per scenario as it finishes (see `healer drill`)",
    )
    demo.add_argument("--report", metavar="FILE", help="with --drills: write the HTML report (timelines, chart) here")

    _drill_arguments(
        command("drill", "break a Triton target on purpose and check that healer heals it within the budget")
    )

    _render_command(command)

    promote = command(
        "promote",
        "record a version as stable (only if it passes its golden request now); unlike `kubectl argo "
        "rollouts promote` it changes nothing that serves: it writes the stable ledger a rollback restores from",
    )
    promote.add_argument("model", metavar="MODEL", help="the model's name, as in the config")
    promote.add_argument("version", metavar="VERSION", help="the version Triton serves now, to record as stable")
    promote.add_argument("--by", default=None, help="who promotes, kept in the ledger (default: the current user)")

    _store_subcommands(command("store", "inspect the model store and its stable ledger; lift a quarantine"))
    _runs_subcommands(
        command(
            "runs",
            "list, show or watch rollback runs (like `argo list` / `argo get`): the cluster's Argo workflows "
            "through the Kubernetes API (a kubeconfig, --context, -n), or the local engine's records (--config)",
        )
    )

    _operator_commands(command)

    webhook = command(
        "webhook", "serve the admission webhook that injects the sidecar into opted-in pods (HTTPS)", config=False
    )
    webhook.add_argument(
        "--listen", default="0.0.0.0:8443", metavar="HOST:PORT", help="HTTPS address (default: 0.0.0.0:8443)"
    )
    webhook.add_argument(
        "--tls-cert", required=True, metavar="FILE", help="serving certificate (PEM), reloaded when it changes"
    )
    webhook.add_argument(
        "--tls-key", required=True, metavar="FILE", help="its private key (PEM), reloaded when it changes"
    )
    webhook.add_argument(
        "--injection", required=True, metavar="FILE", help="what to inject: image, ConfigMap, resources (YAML)"
    )

    sidecar = command("sidecar", "probe every model each period, drain, roll back (runs next to Triton)")
    sidecar.add_argument(
        "--listen", metavar="HOST:PORT", help="address of /livez /readyz /metrics /status (overrides sidecar.listen)"
    )

    rollback = command("rollback", "roll a model back to its last stable version now, and wait for the outcome")
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
    _add_output(rollback, "text; json/yaml: the run's final status; name: only the run's name")
    add_cluster_flags(rollback)

    _release_command(command)
    return parser, commands


def _render_command(command: Callable[..., argparse.ArgumentParser]) -> None:
    render = command("render", "write the Argo WorkflowTemplates as YAML (no config needed)", config=False)
    render.add_argument("--out", metavar="DIR", help="directory to write into (default: print to stdout)")
    render.add_argument("--image", help="the healer image the steps run in (default: the released image)")
    render.add_argument("--namespace", help="namespace of the WorkflowTemplate: Triton's (default: ml)")
    render.add_argument(
        "--deadline", type=int, metavar="SECONDS", help="activeDeadlineSeconds of a rollback (default 90)"
    )
    render.add_argument(
        "--trace-link",
        metavar="URL",
        help="the trace UI's page of a trace, with {trace_id} where the id goes (e.g. "
        "https://jaeger.example.com/trace/{trace_id}): an 'Incident trace' link on each rollback's page in the "
        "Argo UI (default: none)",
    )
    render.add_argument(
        "--chart",
        metavar="DIR",
        help="also write the same files into the Helm chart at DIR, under files/argo/ (the chart sets their "
        "namespace and image from its values)",
    )


def _release_command(command: Callable[..., argparse.ArgumentParser]) -> None:
    release = command(
        "release",
        "release a new model version: staged, served on one replica beside the stable one, baked, then every "
        "replica in waves, verified, and promoted; any failure puts every replica back on the stable version",
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
    _add_output(release, "text, a line per step; json/yaml: the run's final status; name: only the run's name")


def _operator_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """healer status and healer check: the fleet's view, and what a sidecar needs from the cluster."""
    status = command(
        "status",
        "what healer is doing across the fleet now: every pod with a healer sidecar × model, its tiers, state, "
        "drain, incident and rollback, through the Kubernetes API (like `kubectl argo rollouts get`)",
        config=False,
    )
    _status_arguments(status)
    _add_output(
        command(
            "check",
            "check, from a pod with the sidecar's service account, what the sidecar needs: healer.yaml, argo-server "
            "(reachable, its certificate trusted, the rollback template readable with this token), the replica pods",
        ),
        "a line per check; json/yaml: the checks",
        choices=("text", "json", "yaml"),
    )


def _status_arguments(status: argparse.ArgumentParser) -> None:
    add_cluster_flags(status)
    status.add_argument(
        "-l", "--selector", help="only pods matching this label selector (default: every pod with a sidecar)"
    )
    status.add_argument("-w", "--watch", action="store_true", help="print the view again every 2 s until Ctrl-C")
    _add_output(
        status,
        "a table, one row per pod × model; wide adds the circuit breaker",
        choices=("text", "wide", "json", "yaml"),
    )


def _drill_arguments(drill: argparse.ArgumentParser) -> None:
    add_cluster_flags(drill)  # --target cluster through the Kubernetes API
    drill.add_argument(
        "scenarios",
        nargs="*",
        metavar="SCENARIO",
        help="scenarios to run (default: the whole catalog; --list shows them)",
    )
    drill.add_argument("--all", action="store_true", help="the whole catalog")
    drill.add_argument("--fast", action="store_true", help="add the fast subset (what `make test` runs)")
    drill.add_argument("--list", action="store_true", help="list the catalog: each scenario and its expected outcome")
    drill.add_argument(
        "--engine",
        choices=["local", "argo"],
        help="the rollback engine the sidecars submit to (default: local on the embedded stack, else rollback.engine)",
    )
    drill.add_argument(
        "--target",
        choices=["embedded", "config", "cluster"],
        default="embedded",
        help="embedded (default): a tritonserver started on a scratch copy of embedded.model_repository, a "
        "filesystem store, stable versions promoted; config: Triton at triton.url with the config's store; "
        "cluster: each scenario as the chart's healer-drill workflow on rollback.argo's argo-server, timed "
        "in the cluster (the rollbacks' pods and phases from Argo)",
    )
    drill.add_argument("--model", help="the model to break (default: the first configured one with broken variants)")
    drill.add_argument(
        "--period",
        type=float,
        metavar="SECONDS",
        help="the sidecars' probe period (default: 0.5 on the embedded stack, else sidecar.period_s)",
    )
    drill.add_argument(
        "--broken",
        metavar="DIR",
        help="the broken variants, DIR/<model>/<variant> (default: broken/ beside the config or the repository)",
    )
    drill.add_argument("--report", metavar="FILE", help="write the HTML report (timelines, chart) here")
    drill.add_argument(
        "--log-file",
        metavar="FILE",
        help="the sidecars' and rollbacks' JSON logs during the drills (default: drill.log beside rollback.state_dir)",
    )
    _add_output(
        drill, "a table, a row per scenario as it finishes; json/yaml: the results", choices=("json", "yaml", "wide")
    )


def _store_subcommands(store: argparse.ArgumentParser) -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    store.set_defaults(output=None)  # only `store list` and `store doctor` have -o
    store_commands = store.add_subparsers(
        dest="store_command", required=True, title="subcommands", metavar="SUB", help="one of:"
    )
    store_ls = store_commands.add_parser(
        "list",
        aliases=["ls"],
        help="models, versions, stable and quarantined (also: ls)",
        epilog=_epilog("store"),
        formatter_class=formatter,
    )
    _add_config(store_ls, default=argparse.SUPPRESS)
    store_ls.add_argument("model", metavar="MODEL", nargs="?", help="only this model (default: every model)")
    _add_output(store_ls, "a table; wide adds who promoted or quarantined each version, and when", sub=True)
    store_unquarantine = store_commands.add_parser(
        "unquarantine",
        help="lift a version's quarantine: ledger, audit record, and its files back into the live repository",
        epilog=_epilog("store"),
        formatter_class=formatter,
    )
    _add_config(store_unquarantine, default=argparse.SUPPRESS)
    store_unquarantine.add_argument("model", metavar="MODEL", help="the model's name")
    store_unquarantine.add_argument("version", metavar="VERSION", help="the quarantined version")
    store_unquarantine.add_argument(
        "--reason", required=True, help="why the version is safe again (kept in the ledger and the audit trail)"
    )

    store_stage = store_commands.add_parser(
        "stage",
        help="read the stable versions a rollback may restore in full and stamp them (run it in the background)",
        description=(
            "Puts the two newest stable versions of each model (not quarantined) in the live repository, "
            "fetching from the store what is missing or different (the old copy is moved aside), and reads "
            "each in full against the ledger. A version that matches is stamped: a rollback then checks it "
            "from its files' identities instead of hashing it on its 90 s budget. Run it after promoting "
            "and in the background (e.g. hourly); exit 3 when a version could not be staged."
        ),
        epilog=_epilog("store"),
        formatter_class=formatter,
    )
    _add_config(store_stage, default=argparse.SUPPRESS)
    store_stage.add_argument(
        "model", metavar="MODEL", nargs="?", help="only this model (default: every configured model)"
    )
    _add_output(store_stage, "a line per version; json/yaml: the results", sub=True)

    store_doctor = store_commands.add_parser(
        "doctor",
        help="what blocks a model's rollbacks: its lease, its ledger's head, unreadable snapshots; and the fixes",
        description=(
            "Shows the model's lease (holder, incident, expiry, replicas an interrupted unload-first swap left "
            "to load again), its ledger's newest snapshot and any unreadable snapshot. --release-lease frees a "
            "lease a dead holder left (a live holder stops at its next renewal); --repair writes the newest "
            "readable ledger snapshot forward over an unreadable one (nothing is deleted). Both are recorded "
            "in the audit trail. See runbooks/store-doctor.md."
        ),
        epilog=_epilog("store"),
        formatter_class=formatter,
    )
    _add_config(store_doctor, default=argparse.SUPPRESS)
    store_doctor.add_argument("model", metavar="MODEL", help="the model's name")
    store_doctor.add_argument(
        "--release-lease", action="store_true", help="free the model's lease once expired or released (needs --reason)"
    )
    store_doctor.add_argument(
        "--force",
        action="store_true",
        help="with --release-lease: free it even while unexpired (its holder may be at work)",
    )
    store_doctor.add_argument(
        "--clear-put-back",
        action="store_true",
        help="with --release-lease: drop the replicas left to load again (a replica that is gone for good)",
    )
    store_doctor.add_argument(
        "--repair",
        action="store_true",
        help="write the newest readable ledger snapshot forward, and finish or put back a release of the model "
        "that a killed process left on this host (needs --reason)",
    )
    store_doctor.add_argument("--reason", default="", help="why (kept in the lease and the audit trail)")
    _add_output(store_doctor, "a summary", sub=True)


def _runs_subcommands(runs: argparse.ArgumentParser) -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    _add_output(runs, "a table, as `runs list`")
    add_cluster_flags(runs)
    runs_commands = runs.add_subparsers(
        dest="runs_command", title="subcommands", metavar="SUB", help="one of (default: list):"
    )
    runs_list = runs_commands.add_parser(
        "list", help="every run, newest first (the default)", epilog=_epilog("runs"), formatter_class=formatter
    )
    _add_config(runs_list, default=argparse.SUPPRESS)
    add_cluster_flags(runs_list, sub=True)
    _add_output(runs_list, "a table; wide adds the detecting pod and the message; json/yaml: the records", sub=True)
    runs_get = runs_commands.add_parser(
        "get",
        aliases=["show"],
        help="one run, node by node, with each phase",
        epilog=_epilog("runs"),
        formatter_class=formatter,
    )
    _add_config(runs_get, default=argparse.SUPPRESS)
    add_cluster_flags(runs_get, sub=True)
    runs_get.add_argument("name", metavar="NAME", help="the run's name, as `runs list` prints it")
    _add_output(runs_get, "text; wide adds node ids and start times; json/yaml: the record", sub=True)
    runs_resume = runs_commands.add_parser(
        "resume",
        help="let a release that waits for a person go on (`argo resume`; on Argo: the UI's Resume, or argo resume)",
        epilog=_epilog("runs"),
        formatter_class=formatter,
    )
    _add_config(runs_resume, default=argparse.SUPPRESS)
    runs_resume.add_argument("name", metavar="NAME", help="the run's name, as `runs list` prints it")
    runs_watch = runs_commands.add_parser(
        "watch",
        help="the cluster's rollbacks, printed again every 2 s until Ctrl-C (like `argo list --watch`)",
        epilog=_epilog("runs"),
        formatter_class=formatter,
    )
    _add_config(runs_watch, default=argparse.SUPPRESS)
    add_cluster_flags(runs_watch, sub=True)
    _add_output(runs_watch, "a table; wide adds the detecting pod and the message", sub=True, choices=("text", "wide"))


def _add_config(parser: argparse.ArgumentParser, *, default: Any) -> None:
    # Nested subcommands take --config with a SUPPRESS default, so they never overwrite the parent's value.
    parser.add_argument("--config", metavar="FILE", default=default, help=f"healer YAML file (default: ${CONFIG_ENV})")


def _add_output(
    parser: argparse.ArgumentParser, what: str, *, sub: bool = False, choices: Sequence[str] = OUTPUTS
) -> None:
    default = argparse.SUPPRESS if sub else None
    parser.add_argument(
        "-o",
        "--output",
        choices=choices,
        default=default,
        help=f"output format (default: {what})" + ("; name: one object name per line" if "name" in choices else ""),
    )
    # The flag before -o existed: kept working, not advertised.
    parser.add_argument(
        "--json", dest="output", action="store_const", const="json", default=default, help=argparse.SUPPRESS
    )


def _print_data(data: Any, output: str) -> None:
    """json or yaml of plain data on stdout."""
    if output == "yaml":
        import yaml

        print(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), end="")
    else:
        print(json.dumps(data, indent=2))


def _cmd_probe(settings: Settings, args: argparse.Namespace) -> int:
    if args.url:
        try:
            parse_address(args.url, url=False)  # as triton.url is checked: a port, no credentials to print
        except ValueError as exc:
            print(f"healer: probe: --url: {exc}", file=sys.stderr)
            return EXIT_USAGE
        settings = dataclasses.replace(settings, triton=dataclasses.replace(settings.triton, url=args.url))
    return _probe_and_print(settings, settings.triton.url, output=args.output)


def _probe_and_print(settings: Settings, url: str, *, output: str | None) -> int:
    from healer.edges.triton import TritonHttp
    from probes.report import format_table
    from probes.runner import ONE_SHOT_BEST_OF, exit_code, probe_all

    triton = TritonHttp(url, timeout_s=settings.triton.timeout_s)
    try:
        # One slow answer is a sample, not a verdict (the first request after a start, a busy machine):
        # a correct but slow answer is asked again, best of ONE_SHOT_BEST_OF; a wrong one never is.
        results = probe_all(settings, triton, best_of=ONE_SHOT_BEST_OF)
    finally:
        triton.close()
    if output in ("json", "yaml"):
        _print_data([r.to_dict() for r in results], output)
    elif output == "name":
        # One line per model version probed: model/version (a model with no version seen: model).
        names = [f"{r.model}/{r.version}" if r.version else str(r.model) for r in results if r.model]
        versioned = {name.partition("/")[0] for name in names if "/" in name}
        for name in dict.fromkeys(names):
            if "/" in name or name not in versioned:
                print(name)
    elif output == "wide":
        rows = [("MODEL", "VERSION", "TIER", "STATUS", "LATENCY", "CODE", "REASON")]
        for r in results:
            latency = f"{r.latency_ms:.1f} ms" if r.latency_ms else "-"
            rows.append(
                (r.model or "-", r.version or "-", r.tier.value, r.status.value, latency, r.code or "-", r.reason)
            )
        _print_table(rows)
    else:
        print(format_table(results))
    return exit_code(results)


def _cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    from healer.edges.embedded import EmbeddedTriton, EmbeddedTritonError

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
        # Machine-readable output keeps stdout for the results alone.
        say = (lambda text: print(text, file=sys.stderr)) if args.output in ("json", "yaml", "name") else print
        say(
            f"Triton {triton.url} (pid {triton.pid}) live with {', '.join(names)} "
            f"in {time.monotonic() - started:.1f} s; repository {triton.model_repository}"
        )
        say("")
        code = _probe_and_print(settings, triton.url, output=args.output)
    except EmbeddedTritonError as exc:
        print(f"healer: embedded Triton failed: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if triton is not None:
            triton.cleanup()
    if args.drills is None:
        return code
    from healer.drills.command import DrillOptions, run_drills

    print("", file=sys.stderr if args.output in ("json", "yaml", "name") else sys.stdout)
    drilled = run_drills(
        settings,
        DrillOptions(
            scenarios=list(args.drills),
            everything=not args.drills,
            report=Path(args.report) if args.report else None,
            log_level=args.file_log_level,
            output=args.output if args.output in ("json", "yaml") else None,
        ),
    )
    return drilled if drilled == EXIT_USAGE else max(code, drilled)


def _print_catalog() -> int:
    from healer.core.drill_catalog import CATALOG

    for scenario in CATALOG:
        print(f"{scenario.name:<21}{scenario.expect.outcome.value:<13}{scenario.title}")
    return 0


def _cmd_drill(settings: Settings, args: argparse.Namespace) -> int:
    from healer.drills.command import DrillOptions, run_drills

    return run_drills(
        settings,
        DrillOptions(
            scenarios=list(args.scenarios),
            everything=args.all,
            fast=args.fast,
            engine=args.engine,
            target=args.target,
            model=args.model,
            period_s=args.period,
            broken=Path(args.broken) if args.broken else None,
            report=Path(args.report) if args.report else None,
            log_file=Path(args.log_file) if args.log_file else None,
            log_level=args.file_log_level,
            output=args.output if args.output in ("json", "yaml") else None,
            engine_factory=_drill_engine_factory(settings, args),
        ),
    )


def _drill_engine_factory(settings: Settings, args: argparse.Namespace) -> Any:
    """--target cluster with --kubeconfig, --context or -n: the drill workflows through the Kubernetes
    API with the caller's credentials (no argo-server); None: the config's argo-server."""
    from healer.cli import cluster as cli_cluster

    if not any(getattr(args, flag, None) for flag in cli_cluster.CLUSTER_FLAGS):
        return None

    def build() -> Any:
        cluster = cli_cluster.access(args, default_namespace=settings.rollback.argo.namespace)
        return cli_cluster.engine(cluster, settings.rollback.deadline_s)

    return build


def _cmd_render(args: argparse.Namespace) -> int:
    from workflows.render import render_all
    from workflows.rollback import TemplateOptions

    defaults = TemplateOptions()
    if args.deadline is not None and not 1 <= args.deadline <= MAX_DEADLINE_S:
        print(
            f"healer: render: --deadline: must be from 1 to {MAX_DEADLINE_S} seconds (as rollback.deadline_s), "
            f"got {args.deadline}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.trace_link is not None and "{trace_id}" not in args.trace_link:
        print(f"healer: render: --trace-link: must contain {{trace_id}}, got {args.trace_link!r}", file=sys.stderr)
        return EXIT_USAGE
    options = TemplateOptions(
        image=args.image or defaults.image,
        namespace=args.namespace or defaults.namespace,
        deadline_s=args.deadline or defaults.deadline_s,
        trace_link_template=args.trace_link or defaults.trace_link_template,
    )
    rendered = render_all(options)
    if not args.out and not args.chart:
        print("\n---\n".join(rendered.values()), end="")
        return 0
    # Helm reads only files inside the chart (.Files.Get), so the chart carries its own copies.
    targets = [Path(args.out)] if args.out else []
    if args.chart:
        chart = Path(args.chart)
        if not (chart / "Chart.yaml").is_file():
            print(f"healer: render: --chart {chart}: no Chart.yaml there", file=sys.stderr)
            return EXIT_USAGE
        targets.append(chart / "files" / "argo")
    written: set[Path] = set()
    for out in targets:
        out.mkdir(parents=True, exist_ok=True)
        if out.resolve() in written:
            continue  # the same folder twice (this repository's deploy/argo links to the chart's copy)
        written.add(out.resolve())
        for name, text in rendered.items():
            (out / name).write_text(text)
            print(f"wrote {out / name}")
    return 0


def _store_location(settings: Settings) -> str:
    store = settings.store
    if store is None:
        return "(none)"
    return str(store.filesystem) if store.filesystem is not None else f"s3://{store.s3.bucket if store.s3 else '?'}"


def _store(settings: Settings) -> Any:
    from healer.edges.store import store_from_settings

    if settings.store is None:
        raise ConfigError(settings.source, "store", "is required for this command")
    return store_from_settings(settings.store)


def _cmd_promote(settings: Settings, args: argparse.Namespace) -> int:
    from healer.edges.store import StoreError
    from healer.edges.triton import TritonHttp
    from workflows.steps.promote import PromotionRefused, promote

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
    if args.store_command == "doctor":
        return _cmd_store_doctor(settings, args)
    if args.store_command == "stage":
        return _cmd_store_stage(settings, args)
    return _cmd_store_ls(settings, args)


def _cmd_store_doctor(settings: Settings, args: argparse.Namespace) -> int:
    """Diagnose, then (if asked) release the lease or repair the ledger, each with an audit record."""
    import time

    from healer.core.ledger import wall_time
    from healer.edges.store import StoreError

    reason = args.reason.strip()
    acting = args.release_lease or args.repair
    if acting and not reason:
        print(
            "healer: store doctor: --release-lease and --repair need --reason (kept in the audit trail)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    who = os.environ.get("USER") or "cli"
    done: list[str] = []
    try:
        store = _store(settings)

        def audit(what: str) -> None:  # after each action: a later one failing must not lose its record
            done.append(what)
            store.append_audit(
                args.model, {"incident": "doctor", "event": "doctor", "done": what, "who": who, "reason": reason}
            )

        if args.repair:
            repaired = store.repair_ledger(args.model)
            if repaired is not None:
                audit(f"ledger repaired: generation {repaired.generation} written from the newest readable one")
            if settings.rollback.engine != "argo":  # a release of the model killed on this host: its put-back
                for line in _finish_orphaned_releases(settings, model=args.model):
                    audit(line.removeprefix("healer: "))
        if args.release_lease:
            released = store.release_lease_by_hand(
                args.model, reason=reason, by=who, force=args.force, clear_put_back=args.clear_put_back
            )
            cleared = " and its put-back duties cleared" if args.clear_put_back else ""
            audit(f"lease released by {released.holder}{cleared}")
        diagnosis = store.diagnose(args.model)
        findings = store.examine(args.model, diagnosis.ledger, settings.live_repository_path)
    except ConfigError as exc:
        print(f"healer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (StoreError, ValueError) as exc:
        for what in done:
            print(what)
        print(f"healer: store {settings.store}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    now = time.time()
    lease = diagnosis.lease
    held = lease is not None and not lease.released and lease.effective_expires_at > now
    blocked = bool(diagnosis.unreadable) or held or bool(lease is not None and lease.put_back)
    blocked = blocked or bool(findings.problems)  # a way back the ledger promises is not there
    data = {
        "model": args.model,
        "store": store.location,
        "done": done,
        "ledger": {
            "generation": diagnosis.ledger_generation,
            "readable_generation": diagnosis.ledger_readable_generation,
            "stable": [r.version for r in diagnosis.ledger.stable] if diagnosis.ledger else [],
            "quarantined": sorted({q.version for q in diagnosis.ledger.quarantined}) if diagnosis.ledger else [],
        },
        "lease": {
            "generation": diagnosis.lease_generation,
            "readable_generation": diagnosis.lease_readable_generation,
            "holder": lease.holder if lease else None,
            "incident": lease.incident if lease else None,
            "state": _lease_state(lease, now),
            "expires_at": wall_time(lease.effective_expires_at) if lease else None,
            "put_back": [{"replica": d.replica, "versions": list(d.versions)} for d in lease.put_back] if lease else [],
            "note": lease.note if lease else "",
        },
        "unreadable": [{"where": where, "error": error} for where, error in diagnosis.unreadable],
        "problems": list(findings.problems),
        "notes": list(findings.notes),
        "space": _doctor_space(settings, args.model),
        "blocked": blocked,
    }
    if args.output in ("json", "yaml"):
        _print_data(data, args.output)
    else:
        _print_diagnosis(data, diagnosis, hint=blocked and not acting)
    return 1 if blocked and not acting else 0


def _print_diagnosis(data: dict[str, Any], diagnosis: Any, *, hint: bool) -> None:
    for what in data["done"]:
        print(what)
    ledger_line = f"generation {diagnosis.ledger_generation}"
    if diagnosis.ledger_readable_generation != diagnosis.ledger_generation:
        ledger_line += f" UNREADABLE (newest readable: {diagnosis.ledger_readable_generation or 'none'})"
    stable = ", ".join(f"v{v}" for v in data["ledger"]["stable"]) or "none"
    quarantined = ", ".join(f"v{v}" for v in data["ledger"]["quarantined"]) or "none"
    print(f"model   {data['model']} in {data['store']}")
    print(f"ledger  {ledger_line}; stable {stable}; quarantined {quarantined}")
    print(f"lease   generation {diagnosis.lease_generation}: {data['lease']['state']}")
    for duty in data["lease"]["put_back"]:
        versions = ", ".join(f"v{v}" for v in duty["versions"])
        print(f"        to load again on {duty['replica']}: {versions} (an unload-first swap was cut off)")
    for where, error in diagnosis.unreadable:
        print(f"unreadable {where}: {error}")
    for problem in data["problems"]:
        print(f"problem {problem}")
    for note in data["notes"]:
        print(f"note    {note}")
    for where in data["space"]:
        aside = where.get("kept_aside")
        kept = f"; kept aside for the model: {aside['entries']} ({_size(aside['bytes'])})" if aside else ""
        free = f"{_size(where['free_bytes'])} free of {_size(where['total_bytes'])}"
        print(f"space   {where['what']} {where['path']}: {free}{kept}")
    if hint:
        print("next: runbooks/store-doctor.md (--release-lease / --repair with --reason)")


def _doctor_space(settings: Settings, model: str) -> list[dict[str, Any]]:
    """Free space where healer writes (the filesystem store, the live repository) and what the live
    repository keeps aside for ``model`` (bounded by rollback.keep_aside): a full disk stops rollbacks."""
    import shutil

    from healer.edges.store import aside_usage

    places: list[tuple[str, Path | None]] = [
        ("store", settings.store.filesystem if settings.store else None),
        ("live", settings.live_repository_path),
    ]
    shown: list[dict[str, Any]] = []
    for what, path in places:
        if path is None or not path.is_dir():
            continue
        entry = next((s for s in shown if Path(s["path"]).resolve() == path.resolve()), None)
        if entry is None:
            try:
                usage = shutil.disk_usage(path)
            except OSError:
                continue
            entry = {"what": what, "path": str(path), "free_bytes": usage.free, "total_bytes": usage.total}
            shown.append(entry)
        else:
            entry["what"] = f"{entry['what']} and {what}"  # the store is the live repository
        if what == "live":
            with contextlib.suppress(OSError, ValueError):
                entry["kept_aside"] = aside_usage(path, model) | {"keep_aside": settings.rollback.keep_aside}
    return shown


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def _lease_state(lease: Any, now: float) -> str:
    from healer.core.ledger import wall_time

    if lease is None:
        return "free (never taken, or unreadable)"
    who = f"{lease.holder}" + (f" for incident {lease.incident}" if lease.incident else "")
    if lease.released:
        note = f": {lease.note}" if lease.note else ""
        return f"free: released by {who} at {lease.at}{note}"
    expires_at = lease.effective_expires_at  # bounded by the store's time of the snapshot (LeaseSnapshot)
    if expires_at <= now:
        return f"free: {who}'s lease expired at {wall_time(expires_at)}"
    return f"HELD by {who} until {wall_time(expires_at)} ({expires_at - now:.1f} s from now)"


def _cmd_store_stage(settings: Settings, args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from healer.edges.store import StoreError
    from workflows.steps.stage import stage_configured

    try:
        _location, results = stage_configured(settings, args.model)
    except ConfigError as exc:
        print(f"healer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (StoreError, ValueError) as exc:
        print(f"healer: store {_store_location(settings)}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    if args.output in ("json", "yaml"):
        _print_data([asdict(r) for r in results], args.output)
    else:
        for r in results:
            detail = f": {r.detail}" if r.detail else ""
            print(f"{r.model} v{r.version}: {r.outcome} ({r.bytes / 1e6:.1f} MB in {r.seconds:.2f} s){detail}")
        if not results:
            print("nothing to stage: no stable version in the store's ledgers")
    return 0 if all(r.ok for r in results) else EXIT_REFUSED


def _cmd_store_ls(settings: Settings, args: argparse.Namespace) -> int:
    from healer.edges.store import StoreError

    try:
        store = _store(settings)
        models = [args.model] if args.model else store.models()
        listing = []
        ledgers = {}
        for model in models:
            ledger = ledgers[model] = store.ledger(model)
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
    if args.output in ("json", "yaml"):
        _print_data(listing, args.output)
        return 0
    wide = args.output == "wide"
    rows = _store_rows(listing, {model: ledger.stable for model, ledger in ledgers.items()}, wide=wide)
    if args.output == "name":
        for row in rows[1:]:
            print(f"{row[0]}/{row[1]}")
        return 0
    print(f"store {store.location}")
    if wide:
        _print_table(rows)
        return 0
    for model, version, state in rows:
        print(f"{model:<24}{version:<9}{state}".rstrip())
    return 0


def _store_rows(listing: list[dict[str, Any]], stable: dict[str, Any], *, wide: bool) -> list[list[str]]:
    """MODEL VERSION STATE rows (wide: BY AT as well) of `store ls`, header first."""
    rows = [["MODEL", "VERSION", "STATE", *(["BY", "AT"] if wide else [])]]
    for entry in listing:
        quarantined = {q["version"]: q for q in entry["quarantined"]}
        promoted = {r.version: r for r in stable[entry["model"]]}
        # A quarantined version moved out of a store that is also the live repository is listed too.
        for version in sorted(set(entry["versions"]) | set(quarantined), key=_version_order):
            by = at = "-"
            if version in quarantined:
                q = quarantined[version]
                state = f"quarantined ({q['incident']}: {q['reason']})"
                if version not in entry["versions"]:
                    state += " [files moved aside]"
                by, at = q["by"], q["at"]
            elif version in promoted:
                state = "stable"
                by, at = promoted[version].promoted_by, promoted[version].promoted_at
            else:
                state = "-"
            rows.append([entry["model"], version, state, *([by, at] if wide else [])])
    return rows


def _print_table(rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _version_order(version: str) -> tuple[int, str]:
    # Numeric order; a ledger record with a non-numeric version (never a Triton one) sorts last.
    return (int(version), "") if version.isdigit() else (1 << 63, version)


class _NotQuarantined(Exception):
    """Raised inside the ledger update: the version has no quarantine to lift."""


def _cmd_store_unquarantine(settings: Settings, args: argparse.Namespace) -> int:
    """Lift a quarantine: the ledger first (the truth), then the audit record, then the files."""
    from healer.core.ledger import Ledger
    from healer.edges.logs import iso_utc
    from healer.edges.store import StoreError, quarantined_copies

    model, version, reason = args.model, args.version, args.reason.strip()  # names checked in main
    if not reason:
        print("healer: store unquarantine: --reason must say why the version is safe again", file=sys.stderr)
        return EXIT_USAGE
    who = os.environ.get("USER") or "cli"
    live = settings.live_repository_path

    def lift(current: Ledger) -> Ledger:
        if not current.is_quarantined(version):
            raise _NotQuarantined
        return current.with_lifted(version, reason, iso_utc(time.time()), who)

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
    from healer.edges.store import quarantined_copies, restore_quarantined_version

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


def _cmd_check(settings: Settings, args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from healer.cli.install_check import run_checks

    checks = run_checks(settings)
    if args.output in ("json", "yaml"):
        _print_data([asdict(c) for c in checks], args.output)
    else:
        for c in checks:
            print(f"{'ok' if c.ok else 'FAILED':<7}{c.name}: {c.detail}")
    return 0 if all(c.ok for c in checks) else 1


def _cmd_on_cluster_alone(args: argparse.Namespace) -> int:
    return _cmd_on_cluster(None, args)


def _cmd_on_cluster(settings: Settings | None, args: argparse.Namespace) -> int:
    """runs, rollback and status through the Kubernetes API (healer/cli/cluster.py). With a healer.yaml
    its rollback deadline and Argo namespace are used; without one, the defaults and the context's."""
    from healer.cli import cluster as cli_cluster
    from healer.settings import RollbackSettings
    from healer.vocabulary import MANUAL, MANUAL_QUARANTINE, RollbackRequest

    rollback = settings.rollback if settings is not None else RollbackSettings()
    if settings is not None and not getattr(args, "namespace", None):
        args.namespace = rollback.argo.namespace
    if args.command == "status":
        return cli_cluster.cmd_status(args, print_data=_print_data)
    if args.command == "runs":
        args.runs_command = args.runs_command or "list"
        return cli_cluster.cmd_runs(args, print_data=_print_data, deadline_s=rollback.deadline_s)
    try:
        request = RollbackRequest(
            model=args.model,
            from_version=args.from_version,
            incident=_incident(args),
            reason=MANUAL_QUARANTINE if args.quarantine else MANUAL,
            detail=args.detail,
        )
    except ValueError as exc:
        print(f"healer: rollback not submitted: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return cli_cluster.cmd_rollback(
        args,
        request,
        deadline_s=rollback.deadline_s,
        report=lambda submission, status, engine: _report_rollback(args, submission, status, engine, request.incident),
    )


def _incident(args: argparse.Namespace) -> str:
    from healer.vocabulary import model_slug

    stamp = int(time.time())
    return str(args.incident or f"manual-{model_slug(args.model)}-{args.from_version}-{stamp}"[:63].rstrip("-."))


def _cmd_runs_resume(settings: Settings, records: Any, name: str) -> int:
    from healer.engines import EngineError
    from healer.engines.records import resume_suspended

    try:
        resumed = resume_suspended(records, name)
    except (KeyError, EngineError) as exc:
        print(f"healer: no run {name!r} in {settings.rollback.state_dir}: {exc}", file=sys.stderr)
        return 1
    if not resumed:
        print(f"healer: {name} is not waiting for a person", file=sys.stderr)
        return 1
    print(f"resumed {name} ({', '.join(resumed)})")
    return 0


def _cmd_runs(settings: Settings, args: argparse.Namespace) -> int:
    from healer.engines import EngineError
    from healer.engines.records import RunRecords

    # Only reads: no engine, no template, no folder created, no record marked.
    records = RunRecords(settings.rollback.state_dir)
    output = args.output
    if args.runs_command == "resume":
        return _cmd_runs_resume(settings, records, args.name)
    if args.runs_command in ("get", "show"):
        try:
            record = records.get(args.name)
        except KeyError:
            print(f"healer: no run {args.name!r} in {settings.rollback.state_dir}", file=sys.stderr)
            return 1
        except EngineError as exc:  # a file of that name that is not a run record
            print(f"healer: {exc}", file=sys.stderr)
            return 1
        show_run(record, output, _print_data)
        return 0
    show_runs(records.runs(), output, _print_data)
    return 0


def _cmd_rollback(settings: Settings, args: argparse.Namespace) -> int:
    from healer.engines import EngineError
    from healer.engines.factory import engine_from_settings
    from healer.vocabulary import MANUAL, MANUAL_QUARANTINE, RollbackRequest

    incident = _incident(args)
    # Machine-readable output keeps stdout for the result alone; progress goes to stderr.
    progress = sys.stderr if args.output in ("json", "yaml", "name") else sys.stdout
    if settings.rollback.engine != "argo":
        # A release of this model killed on this host: its own put-back first (a version it promoted
        # before it was killed is finished, not reverted), then the rollback asked for.
        _finish_orphaned_releases(settings, model=args.model)
    try:
        request = RollbackRequest(
            model=args.model,
            from_version=args.from_version,
            incident=incident,
            reason=MANUAL_QUARANTINE if args.quarantine else MANUAL,
            detail=args.detail,
        )
        engine = engine_from_settings(settings)
        submission = engine.submit(request)
    except (EngineError, ValueError, OSError) as exc:
        maybe = getattr(exc, "maybe_delivered", False)
        what = f"the rollback for incident {incident} may have been created" if maybe else "rollback not submitted"
        print(f"healer: {what}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    verb = "submitted" if submission.created else "joined"
    print(f"{verb} {submission.name} ({settings.rollback.engine})", file=progress, flush=True)
    try:
        status = engine.wait(submission.name, args.wait or settings.rollback.deadline_s + 30)
    except (EngineError, OSError) as exc:
        print(f"healer: {submission.name} was {verb}, but its outcome could not be read: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    return _report_rollback(args, submission, status, settings.rollback.engine, incident)


def _cmd_release(settings: Settings, args: argparse.Namespace) -> int:
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
                print(f"healer: release {release_id} not submitted: {exc}", file=sys.stderr)
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
    _finish_orphaned_releases(settings, model=None, engine=engine)
    submission = engine.submit_release(request)
    return engine, submission.name, "submitted" if submission.created else "joined"


def finish_orphaned_releases_in_background(
    settings: Settings, *, finish: Callable[..., list[str]] | None = None
) -> threading.Thread | None:
    """A daemon thread finishing or putting back the orphaned releases of the configured models (the
    sidecar's start-up); None when there are none. Killed meanwhile, the next start finds them again."""
    from healer.engines.local import orphaned_releases

    models = [m.name for m in settings.models if orphaned_releases(settings.rollback.state_dir, model=m.name)]
    if not models:
        return None
    run = finish or _finish_orphaned_releases

    def finish_all() -> None:
        for model in models:
            try:
                run(settings, model=model)
            except Exception:  # a bug must not kill the sidecar: said, and the next start tries again
                from healer.edges.logs import get_logger

                get_logger("healer.sidecar").exception("orphaned_releases_not_finished", model=model)

    thread = threading.Thread(target=finish_all, name="orphaned-releases", daemon=True)
    thread.start()
    return thread


def _finish_orphaned_releases(settings: Settings, *, model: str | None, engine: Any = None) -> list[str]:
    """Finish or put back the releases this host started in a process that has since died (of
    ``model``, or every model's): each run's own exit handler, the put-back, run here (it takes the dead
    process's lease over at once: the run's record says its engine died), then one line per run on
    stderr saying what it did, read from
    its outcome and the ledger (returned too). Never fails the command: a release that could not be
    finished is said so."""
    from healer.engines import EngineError
    from healer.engines.local import orphaned_releases

    names = orphaned_releases(settings.rollback.state_dir, model=model)
    lines: list[str] = []
    if not names:
        return lines
    if engine is None:
        from healer.engines.factory import local_release_engine

        try:
            engine = local_release_engine(settings)
        except (EngineError, ValueError, OSError) as exc:
            lines.append(f"healer: warning: {', '.join(names)} left running by a process that ended: {exc}")
            print(lines[-1], file=sys.stderr)
            return lines
    for name in names:
        print(
            f"healer: {name} was left running by a process that ended: running its put-back here",
            file=sys.stderr,
            flush=True,
        )
        try:
            status = engine.finish_orphaned_release(name)
            parameters = {p["name"]: p.get("value", "") for p in engine.get(name)["spec"]["arguments"]["parameters"]}
        except (EngineError, OSError, KeyError, TypeError) as exc:
            lines.append(f"healer: warning: {name} could not be finished here: {exc}")
            print(lines[-1], file=sys.stderr)
            continue
        if status is None:
            lines.append(f"healer: {name}: another process is finishing it, or has")
            print(lines[-1], file=sys.stderr)
            continue
        model_, version = parameters.get("model", "?"), parameters.get("version", "?")
        try:
            ledger: Any = _store(settings).ledger(model_)
        except Exception as exc:  # the line still says what the put-back did
            ledger = None
            print(f"healer: warning: the ledger of {model_} could not be read: {exc}", file=sys.stderr)
        lines.append(orphan_release_line(name, model_, version, status, ledger))
        print(lines[-1], file=sys.stderr, flush=True)
    return lines


def orphan_release_line(name: str, model: str, version: str, status: Any, ledger: Any) -> str:
    """What finishing an orphaned release did, from its put-back's outcome and the ledger (None:
    unreadable). It never advises a rollback: the put-back is the rollback of a release, and a version
    the ledger lists stable must stay."""
    import json

    try:
        put_back = json.loads(status.outputs.get("put-back") or "{}")
    except ValueError:
        put_back = {}
    promoted = ledger is not None and ledger.stable_record(version) is not None
    quarantined = ledger is not None and ledger.is_quarantined(version)
    if status.succeeded:
        return (
            f"healer: {name}: finished: {model} v{version} was promoted stable before its process ended; left serving"
        )
    if put_back.get("nothing"):
        return f"healer: {name}: nothing to put back: {put_back['nothing']}"
    if put_back.get("stable") and not put_back.get("put_back_error"):  # "stable" is there once it put back
        state = "quarantined" if quarantined else "not quarantined (nothing was learnt against it)"
        return (
            f"healer: {name}: put back: every replica serves the stable {model} v{put_back['stable']} again; "
            f"v{version} {state}"
        )
    if promoted:  # stable in the ledger: whatever the put-back said, v{version} stays
        return f"healer: warning: {name}: {status.message}; {model} v{version} is stable in the ledger: leave it"
    return (
        f"healer: warning: {name}: {status.message}; a replica may still serve {model} v{version} "
        "(healer status); runbooks/release-stopped.md"
    )


def _report_release(args: argparse.Namespace, status: Any, release_id: str) -> int:
    if args.output in ("json", "yaml"):
        head = {"name": status.name, "release": release_id, "model": args.model, "version": args.version}
        _print_data({**head, **_run_status(status)}, args.output)
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


def _run_status(status: Any) -> dict[str, Any]:
    """A run's final status as `-o json|yaml` prints it after what the command adds."""
    return {
        "phase": status.phase,
        "message": status.message,
        "started_at": status.started_at,
        "finished_at": status.finished_at,
        "outputs": dict(status.outputs),
    }


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
        _print_data({**head, **_run_status(status)}, args.output)
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


def _cmd_sidecar(settings: Settings, args: argparse.Namespace) -> int:
    import signal
    import threading

    from healer.compose import build_sidecar, drain_peers, sidecar_problem
    from healer.edges import kube
    from healer.sidecar.views import SidecarServer

    problem = sidecar_problem(settings, listen=args.listen)
    if problem is not None:
        print(f"healer: {problem}", file=sys.stderr)
        return EXIT_USAGE
    kube_client = None
    if kube.in_cluster():
        try:
            kube_client = kube.KubeClient.in_cluster()
            import structlog

            structlog.get_logger("healer.sidecar").info("kubernetes_api", host=kube_client.host)
        except Exception as exc:  # no service account token: run without Events rather than not at all
            print(f"healer: Kubernetes API unavailable, running without Events: {exc}", file=sys.stderr)
    sidecar = build_sidecar(settings, kube_client=kube_client, peers=drain_peers(settings, kube_client))
    triton = sidecar.triton
    if settings.rollback.engine == "argo" and settings.rollback.replicas is None:
        print(
            f"healer: warning: {settings.source}: rollback.replicas is not set: an Argo rollback heals only the "
            "pod that submitted it, and replicas that join it stay drained until it escalates",
            file=sys.stderr,
        )
    if settings.rollback.engine == "local" or settings.sidecar.fallback_to_local:
        # In-pod rollbacks a previous run of this container left unfinished (it was killed): marked
        # Error here, before any engine is built (no hera import), and escalated for our models.
        from healer.engines.records import mark_orphaned_runs

        sidecar.escalate_orphans(mark_orphaned_runs(settings.rollback.state_dir))
        # Releases of its models a killed `healer release` on this host left half-done: put back (or
        # finished, when promoted) beside the probe loop, which must not wait for them.
        finish_orphaned_releases_in_background(settings)
    server = SidecarServer(sidecar, args.listen or settings.sidecar.listen)
    stop = threading.Event()

    def on_signal(*_: object) -> None:
        sidecar.begin_stop()  # /readyz 503 and /status stopping at once: the peers stop counting this pod
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    server.start()
    from healer.edges.logs import get_logger

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
        # Kubernetes sends SIGKILL terminationGracePeriodSeconds after SIGTERM: leave the drain set, let an
        # in-pod rollback finish in part of that time, then cancel it so that it stops cleanly and alerts.
        sidecar.shutdown(settings.sidecar.termination_grace_s)
        server.stop()
        triton.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
