"""`healer promote`: record a version as stable, only if it passes its golden request now."""

from __future__ import annotations

import argparse
import getpass
import sys

from healer.cli.common import Command, open_store
from healer.cli.output import EXIT_REFUSED, EXIT_USAGE
from healer.cli.reach import unreachable
from healer.settings import ConfigError, Settings

EXAMPLES = ("healer promote --config healer.yaml linear_scorer 2 --by alice",)


def register(command: Command) -> None:
    promote = command(
        "promote",
        "record a version as stable (only if it passes its golden request now); unlike `kubectl argo "
        "rollouts promote` it changes nothing that serves: it writes the stable ledger a rollback restores from",
        EXAMPLES,
    )
    promote.add_argument("model", metavar="MODEL", help="the model's name, as in the config")
    promote.add_argument("version", metavar="VERSION", help="the version Triton serves now, to record as stable")
    promote.add_argument("--by", default=None, help="who promotes, kept in the ledger (default: the current user)")


def run(settings: Settings, args: argparse.Namespace) -> int:
    from healer.edges.store import StoreError
    from healer.edges.triton import TritonHttp
    from workflows.steps.promote import PromotionRefused, promote

    try:
        store = open_store(settings)
    except ConfigError as exc:
        print(f"healer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    triton = TritonHttp(settings.triton.url, timeout_s=settings.triton.timeout_s)
    try:
        record = promote(settings, triton, store, args.model, args.version, by=args.by or getpass.getuser())
    except (PromotionRefused, StoreError, ValueError) as exc:
        line = unreachable("Triton", settings.triton.url, exc)
        print(f"healer: {line}; nothing promoted" if line else f"healer: promote refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    finally:
        triton.close()
    print(f"{args.model} v{record.version} promoted stable by {record.promoted_by} at {record.promoted_at}")
    for name, digest in sorted(record.files.items()):
        print(f"  {digest}  {name}")
    return 0
