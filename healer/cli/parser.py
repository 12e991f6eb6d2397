"""healer's argument parser, as kubectl users expect it: usage errors exit 64 (2 is `healer probe`'s
"inconclusive"), an unknown command, flag or choice names the closest one ("did you mean"), and each
command's help lists its own options first and the shared ones (--config, logging, -h) in one short
group at the end."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from healer.cli.output import EXIT_USAGE

SHARED_TITLE = "global options"  # the group every command's help ends with


class HealerParser(argparse.ArgumentParser):
    """argparse's parser with healer's usage errors and help layout; subcommands get the same class."""

    def error(self, message: str) -> NoReturn:
        if "did you mean" not in message:  # with a suggestion, the one line says enough
            self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is None or value in action.choices:
            return
        choices = [str(choice) for choice in action.choices]
        hint = did_you_mean(str(value), choices)
        if isinstance(action, argparse._SubParsersAction):
            what = "command" if " " not in self.prog else "subcommand"
            raise argparse.ArgumentError(
                None, f"unknown {what} {value!r}{hint} (`{self.prog} --help` lists them: {', '.join(choices)})"
            )
        listed = ", ".join(repr(choice) for choice in choices)
        raise argparse.ArgumentError(action, f"invalid choice: {value!r}{hint} (choose from {listed})")

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """As argparse's, but a flag no parser knew is refused by the command it was given to, with the
        closest of that command's flags (argparse would refuse it at the top, knowing only its own)."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            owner = chosen_parser(self, parsed)
            flags = [flag for action in owner._actions for flag in action.option_strings]
            hints = [did_you_mean(extra.partition("=")[0], flags) for extra in extras if extra.startswith("-")]
            hint = next((h for h in hints if h), "")
            owner.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return parsed

    def format_help(self) -> str:
        # The shared group last, whenever it was added: the command's own options come first.
        self._action_groups.sort(key=lambda group: group.title == SHARED_TITLE)
        return super().format_help()


def did_you_mean(word: str, candidates: Sequence[str]) -> str:
    """ "; did you mean 'status'?" for the candidate closest to ``word`` (difflib), or ""."""
    close = difflib.get_close_matches(word, list(candidates), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def subparsers_of(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:  # type: ignore[type-arg]
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def chosen_parser(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the deepest (sub)command the parsed line chose."""
    while (sub := subparsers_of(parser)) is not None:
        name = getattr(parsed, sub.dest, None) if sub.dest != argparse.SUPPRESS else None
        if name not in sub.choices:
            break
        parser = sub.choices[name]
    return parser


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every parser of the tree once, with its path of command names (an alias: its own path, the same parser)."""
    yield path, parser
    sub = subparsers_of(parser)
    if sub is None:
        return
    for name, child in sub.choices.items():
        yield from walk(child, (*path, name))


def add_shared(parser: argparse.ArgumentParser, *, config: Any, logging: bool = True) -> None:
    """The shared options in the group at the end of a command's help. ``config``: --config's default
    (None for a command, SUPPRESS for a nested subcommand, so that a value given before it stands), or
    False: the command reads no healer.yaml."""
    from healer.cli.common import CONFIG_ENV, LOG_LEVELS

    group = parser.add_argument_group(SHARED_TITLE)
    group.add_argument("-h", "--help", action="help", help="show this help and exit")
    if config is not False:
        group.add_argument(
            "--config", metavar="FILE", default=config, help=f"healer YAML file (default: ${CONFIG_ENV})"
        )
    if logging:
        group.add_argument(
            "--log-level",
            metavar="LEVEL",
            choices=LOG_LEVELS,
            default=argparse.SUPPRESS,
            help=f"least severe log event to write: {', '.join(LOG_LEVELS)} (`healer --help` says the default and "
            "where logs go)",
        )
        group.add_argument(
            "-v", "--verbose", action="count", default=argparse.SUPPRESS, help="log more: -v info, -vv debug"
        )
