"""healer's command line: main() and the parser tree. Each command (verb) is a module of this package with
its flags (``register``) and its handler (``run``); what they share is in common.py (flags, help) and
output.py (printing, exit codes). Heavy clients are imported inside the commands that need them."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
from collections.abc import Callable, Sequence

from healer.cli import (
    check,
    completion,
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
    add_logging,
    config_path,
    epilog,
    log_level_for,
    named_problem,
)
from healer.cli.output import EXIT_INTERRUPTED, EXIT_USAGE
from healer.cli.parser import HealerParser, add_shared, walk
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
    "3 promote or rollback refused or not successful; 64 bad arguments or configuration;\n"
    "130 ended by Ctrl-C (a watch, -w, ends so).\n"
    "`healer COMMAND --help` shows each command's options, examples and exit codes;\n"
    "`healer completion --help` how to get tab completion in bash, zsh or fish."
)
# The commands in the order `healer --help` lists them.
COMMANDS = (
    probe,
    demo,
    drill,
    render,
    promote,
    store,
    runs,
    status,
    check,
    webhook,
    sidecar,
    rollback,
    release,
    completion,
)
# Commands that work through the Kubernetes API with a kubeconfig (healer/cli/cluster.py).
CLUSTER_COMMANDS = frozenset({"runs", "rollback", "status"})
# What runs and rollback say they also take, when neither a healer.yaml nor a kubeconfig was found.
NO_KUBECONFIG = "a kubeconfig (none found in $KUBECONFIG or ~/.kube/config: give --kubeconfig FILE)"


def main(argv: Sequence[str] | None = None) -> int:
    started: dict[str, str] = {}  # the command, once parsed: what Ctrl-C may have left behind
    try:
        code = _main(argv, started)
        sys.stdout.flush()  # here, not at exit, where a reader that left would print a traceback
        return code
    except KeyboardInterrupt:  # Ctrl-C: one line, as a shell tool, not the client's 90-line traceback
        print(f"healer: {interrupted_line(started.get('command'))}", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `healer ... | head`: the reader left; no traceback, as any Unix tool
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader left


def interrupted_line(command: str | None) -> str:
    """What Ctrl-C says: for rollback and release, that the workflow may already be on its way."""
    if command in ("rollback", "release"):
        return f"interrupted (Ctrl-C); the {command} workflow may have been submitted: check `healer runs list`"
    return "interrupted (Ctrl-C)"


def _main(argv: Sequence[str] | None, started: dict[str, str]) -> int:
    parser, commands = _parser()
    try:
        args = parser.parse_args(argv)
        started["command"] = args.command
        if args.command == "drill" and args.list:  # the catalog is healer's own: no config needed, as --help
            raise SystemExit(drill.print_catalog(args.output))
        config_given = bool(getattr(args, "config", None) or os.environ.get(CONFIG_ENV))
        args.cluster = args.command == "status" or (
            args.command in CLUSTER_COMMANDS and cluster_mode(args, config_given=config_given)
        )
        if args.command == "runs" and (problem := runs.watch_problem(args)):
            print(f"healer: runs {args.runs_command}: {problem}", file=sys.stderr)  # one line, no usage block
            raise SystemExit(EXIT_USAGE)
        if args.command not in NO_CONFIG and not (args.cluster and not config_given):
            on_cluster = NO_KUBECONFIG if args.command in CLUSTER_COMMANDS else ""
            args.config = config_path(args, commands[args.command], on_cluster=on_cluster)
    except SystemExit as exc:  # --help, --version and usage errors: an exit status, not an exception
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    from healer.edges.logs import configure_logging

    # The sidecar's JSON logs go to stdout (the container log); the other commands print results there.
    # The drills' log file (the sidecars' and rollbacks' logs) is read afterwards: info unless asked.
    args.file_log_level = getattr(args, "log_level", None) or ("debug" if getattr(args, "verbose", 0) > 1 else "info")
    args.log_level = log_level_for(args)
    configure_logging(level=args.log_level, stream=sys.stdout if args.command == "sidecar" else None)
    alone: dict[str, Callable[[argparse.Namespace], int]] = {
        "render": render.run,
        "webhook": webhook.run,
        "completion": functools.partial(completion.run, parser=parser),
    }
    without_config = alone.get(args.command)
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
    parser = HealerParser(prog="healer", description=DESCRIPTION, epilog=EPILOG, formatter_class=formatter)
    parser.add_argument("--version", action="version", version=f"healer {_version()}")
    add_logging(parser)
    subcommands = parser.add_subparsers(
        dest="command", required=True, title="commands", metavar="COMMAND", help="one of:"
    )
    commands: dict[str, argparse.ArgumentParser] = {}
    reads_config: dict[str, bool] = {}

    def command(name: str, help_text: str, examples: Sequence[str], *, config: bool = True) -> argparse.ArgumentParser:
        sub = subcommands.add_parser(
            name,
            help=help_text,
            description=help_text[0].upper() + help_text[1:] + ".",
            epilog=epilog(name, examples),
            formatter_class=formatter,
            add_help=False,  # -h goes in the shared group, at the end of the help
        )
        commands[name] = sub
        reads_config[name] = config
        return sub

    for verb in COMMANDS:
        verb.register(command)
    # The shared options last (also after the command, as kubectl takes its flags): --config on the
    # commands that read healer.yaml (SUPPRESS on a nested one: a value given before it stands).
    shared: set[int] = set()
    for path, each in walk(parser):
        if path and id(each) not in shared:
            shared.add(id(each))
            config = (None if len(path) == 1 else argparse.SUPPRESS) if reads_config[path[0]] else False
            add_shared(each, config=config)
    return parser, commands


if __name__ == "__main__":
    sys.exit(main())
