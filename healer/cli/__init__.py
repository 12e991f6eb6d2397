"""healer's command line: main() and the parser tree. Each command (verb) is a module of this package with
its flags (``register``) and its handler (``run``); what they share is in common.py (flags, help) and
output.py (printing, exit codes). Heavy clients are imported inside the commands that need them."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from healer.cli import (
    check,
    demo,
    drill,
    probe,
    promote,
    release,
    render,
    rollback,
    runs,
    sidecar,
    status,
    store,
    webhook,
)
from healer.cli.cluster import cluster_mode
from healer.cli.common import (
    CONFIG_ENV,
    NO_CONFIG,
    add_config,
    add_logging,
    config_path,
    epilog,
    log_level_for,
    named_problem,
)
from healer.cli.output import EXIT_USAGE
from healer.settings import ConfigError, Settings, load_settings

DESCRIPTION = """\
healer: a self-healing controller for NVIDIA Triton Inference Server on Kubernetes.

It checks every configured model on three tiers (liveness: the server answers; readiness: the
model version is loaded; business: a golden request gets the expected answer in time), tells a
wrong answer apart from an unreachable server, and rolls a wrong model back to its last stable
version (in-process, or as an Argo workflow)."""

EPILOG = (
    "examples:\n"
    "  healer probe --config examples/healer.yaml\n"
    "  healer demo --config examples/healer.yaml\n"
    "  healer drill --config examples/healer.yaml --all\n"
    "  healer runs list -o wide          (the config from $HEALER_CONFIG)\n\n"
    "exit codes: 0 success; 1 a probe failed (or nothing found); 2 probe inconclusive, retry later;\n"
    "3 promote or rollback refused or not successful; 64 bad arguments or configuration.\n"
    "`healer COMMAND --help` shows each command's options, examples and exit codes."
)
# The commands in the order `healer --help` lists them.
COMMANDS = (probe, demo, drill, render, promote, store, runs, status, check, webhook, sidecar, rollback, release)
# Commands that work through the Kubernetes API with a kubeconfig (healer/cli/cluster.py).
CLUSTER_COMMANDS = frozenset({"runs", "rollback", "status"})


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
            raise SystemExit(drill.print_catalog())
        config_given = bool(getattr(args, "config", None) or os.environ.get(CONFIG_ENV))
        args.cluster = args.command == "status" or (
            args.command in CLUSTER_COMMANDS and cluster_mode(args, config_given=config_given)
        )
        if args.command == "runs" and args.runs_command == "watch" and not args.cluster:
            commands["runs"].error("runs watch reads the cluster's workflows: give --kubeconfig, --context or -n")
        if args.command not in NO_CONFIG and not (args.cluster and not config_given):
            args.config = config_path(args, commands[args.command])
    except SystemExit as exc:  # --help, --version and usage errors: an exit status, not an exception
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    from healer.edges.logs import configure_logging

    # The sidecar's JSON logs go to stdout (the container log); the other commands print results there.
    # The drills' log file (the sidecars' and rollbacks' logs) is read afterwards: info unless asked.
    args.file_log_level = getattr(args, "log_level", None) or ("debug" if getattr(args, "verbose", 0) > 1 else "info")
    args.log_level = log_level_for(args)
    configure_logging(level=args.log_level, stream=sys.stdout if args.command == "sidecar" else None)
    without_config = {"render": render.run, "webhook": webhook.run}.get(args.command)
    if without_config is None and args.cluster and not getattr(args, "config", None):
        without_config = _on_cluster_alone  # a kubeconfig is all it needs: no healer.yaml
    if without_config is not None:
        return without_config(args)
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print(f"healer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    problem = named_problem(settings, args)
    if problem is not None:
        command = " ".join(filter(None, (args.command, getattr(args, "store_command", None))))
        print(f"healer: {command}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if args.cluster:
        return _on_cluster(settings, args)
    handlers = {
        "probe": probe.run,
        "demo": demo.run,
        "drill": drill.run,
        "promote": promote.run,
        "store": store.run,
        "runs": runs.run,
        "check": check.run,
        "rollback": rollback.run,
        "release": release.run,
        "sidecar": sidecar.run,
    }
    return handlers[args.command](settings, args)


def _on_cluster_alone(args: argparse.Namespace) -> int:
    return _on_cluster(None, args)


def _on_cluster(settings: Settings | None, args: argparse.Namespace) -> int:
    """runs, rollback and status through the Kubernetes API (healer/cli/cluster.py). With a healer.yaml
    its rollback deadline and Argo namespace are used; without one, the defaults and the context's."""
    from healer.settings import RollbackSettings

    rollback_settings = settings.rollback if settings is not None else RollbackSettings()
    if settings is not None and not getattr(args, "namespace", None):
        args.namespace = rollback_settings.argo.namespace
    if args.command == "status":
        return status.run_on_cluster(args)
    if args.command == "runs":
        args.runs_command = args.runs_command or "list"
        return runs.run_on_cluster(args, deadline_s=rollback_settings.deadline_s)
    return rollback.run_on_cluster(args, deadline_s=rollback_settings.deadline_s)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("healer")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser, and each command's parser (for usage errors found after parsing)."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = _Parser(prog="healer", description=DESCRIPTION, epilog=EPILOG, formatter_class=formatter)
    parser.add_argument("--version", action="version", version=f"healer {_version()}")
    add_logging(parser, default=None)
    subcommands = parser.add_subparsers(
        dest="command", required=True, title="commands", metavar="COMMAND", help="one of:"
    )
    commands: dict[str, argparse.ArgumentParser] = {}

    def command(name: str, help_text: str, examples: Sequence[str], *, config: bool = True) -> argparse.ArgumentParser:
        sub = subcommands.add_parser(
            name,
            help=help_text,
            description=help_text[0].upper() + help_text[1:] + ".",
            epilog=epilog(name, examples),
            formatter_class=formatter,
        )
        if config:
            add_config(sub, default=None)
        add_logging(sub, default=argparse.SUPPRESS)  # also after the command, as kubectl takes its flags
        commands[name] = sub
        return sub

    for verb in COMMANDS:
        verb.register(command)
    return parser, commands


if __name__ == "__main__":
    sys.exit(main())
