"""`healer promote`: record a version as stable, only if it passes its golden request now."""

from __future__ import annotations

import argparse
import getpass
import sys

from healer.cli.common import Command, open_store
from healer.cli.output import EXIT_REFUSED, EXIT_USAGE
from healer.cli.reach import unreachable
from healer.settings import ConfigError, Settings

EXAMPLES = (
    "healer promote --config healer.yaml linear_scorer 2 --by alice",
    "healer promote --config healer.yaml tiny_classifier 3 --agreement   # only if v3 agrees with the stable version",
)


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
    promote.add_argument(
        "--agreement",
        action="store_true",
        help="promote only if VERSION agrees with the stable version on the model's replay set (models[].agreement; "
        "both versions served by triton.url; docs/agreement.md)",
    )


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
        if args.agreement:
            refused = _disagrees(settings, triton, store, args.model, args.version)
            if refused:
                print(f"healer: promote refused: {refused}; nothing promoted", file=sys.stderr)
                return EXIT_REFUSED
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


def _disagrees(settings: Settings, triton: object, store: object, model: str, version: str) -> str:
    """Why ``version`` may not be promoted by the agreement gate ("" when it agrees with the stable version)."""
    from healer.core.agreement import Agreement
    from healer.core.ledger import choose_restore_version
    from workflows.steps.agreement import agreement_gate

    try:
        model_settings = settings.model(model)
    except KeyError:
        return f"{model} is not in {settings.source}"
    if model_settings.agreement is None:
        return f"--agreement: {model} has no agreement rules in {settings.source} (models[].agreement)"
    ledger = store.ledger(model)  # type: ignore[attr-defined]
    choice = choose_restore_version(ledger, failing_version=version, available=store.versions(model))  # type: ignore[attr-defined]
    if choice.record is None:
        return f"--agreement: no stable version of {model} to compare v{version} with ({choice.reason})"
    stable = choice.record.version
    verdict = agreement_gate(model_settings, store, triton, stable=stable, candidate=version)
    if verdict.status is Agreement.AGREES:
        print(f"{model} v{version} agrees with the stable v{stable}: {verdict.why}")
        return ""
    if verdict.status is Agreement.ERROR:
        return f"agreement of v{version} with the stable v{stable}: {verdict.why}"
    return f"v{version} disagrees with the stable v{stable} on the replay set: {verdict.why}"
