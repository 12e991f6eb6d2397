"""What the commands share: --config and the log flags, the help's epilog (examples, exit codes, environment),
the MODEL and VERSION arguments main checks before any command acts, and the store a config names."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from typing import Any

from healer.cli.output import EXIT_CODES
from healer.settings import ConfigError, Settings

CONFIG_ENV = "HEALER_CONFIG"  # the config's default location, as in the rollback pods
NO_CONFIG = frozenset({"render", "webhook", "status", "completion"})  # commands that do not read healer.yaml
DAEMONS = frozenset({"sidecar", "webhook"})  # their logs are their output: info by default
LOG_LEVELS = ("debug", "info", "warning", "error")
# A command's parser, made by healer/cli/__init__.py: command(name, help_text, examples, *, config=True).
Command = Callable[..., argparse.ArgumentParser]


def epilog(command: str, examples: Sequence[str]) -> str:
    lines = "\n".join(f"  {line}" for line in examples)
    codes = "\n".join(f"  {code:<4}{meaning}" for code, meaning in EXIT_CODES[command])
    text = f"examples:\n{lines}\n\nexit codes:\n{codes}"
    if command not in NO_CONFIG:
        text += f"\n\nenvironment:\n  {CONFIG_ENV}  the config file when --config is not given"
    return text


def add_subcommand(
    subcommands: Any, name: str, command: str, examples: Sequence[str], **kwargs: Any
) -> argparse.ArgumentParser:
    """A subcommand of ``command`` (store, runs) with the command's epilog; its shared options (-h,
    --config with a SUPPRESS default, logging) are added with every command's (healer/cli/parser.py)."""
    sub: argparse.ArgumentParser = subcommands.add_parser(
        name,
        epilog=epilog(command, examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
        **kwargs,
    )
    return sub


def add_logging(parser: argparse.ArgumentParser) -> None:
    """healer's own --log-level and -v, before the command (each command takes them too, shorter: parser.py)."""
    parser.add_argument(
        "--log-level",
        default=None,
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
        default=0,
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


# The arguments that name a model or a version, wherever a command takes them (MODEL, VERSION,
# FROM_VERSION, drill --model): checked once, in main, before any command acts on them.
NAMED_ARGUMENTS = ("model", "version", "from_version")


def named_problem(settings: Settings, args: argparse.Namespace) -> str | None:
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


def config_path(args: argparse.Namespace, parser: argparse.ArgumentParser, *, on_cluster: str = "") -> str:
    """--config, else $HEALER_CONFIG; neither: a usage error that says both (and, for a command that
    also works through the Kubernetes API, ``on_cluster``: how to do that instead)."""
    config = getattr(args, "config", None) or os.environ.get(CONFIG_ENV)
    if not config:
        also = f", or, to work on a cluster, {on_cluster}" if on_cluster else ""
        parser.error(f"no configuration: give --config FILE or set the {CONFIG_ENV} environment variable{also}")
    return config


def open_store(settings: Settings) -> Any:
    from healer.edges.store import store_from_settings

    if settings.store is None:
        raise ConfigError(settings.source, "store", "is required for this command")
    return store_from_settings(settings.store)
