"""`healer store`: the model store and its stable ledger: list, stage, lift a quarantine; `store doctor`
is healer/cli/store_doctor.py."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

from healer.cli import store_doctor
from healer.cli.common import Command, add_subcommand, open_store
from healer.cli.output import EXIT_REFUSED, EXIT_USAGE, add_output, print_data, print_table
from healer.settings import ConfigError, Settings

EXAMPLES = (
    "healer store --config healer.yaml ls",
    "healer store list linear_scorer -o yaml",
    "healer store unquarantine linear_scorer 3 --reason 'bad golden file, checked by hand'",
    "healer store doctor linear_scorer",
    "healer store doctor linear_scorer --release-lease --reason 'rollback pod gone, checked by hand'",
)


def register(command: Command) -> None:
    store = command("store", "inspect the model store and its stable ledger; lift a quarantine", EXAMPLES)
    store.set_defaults(output=None)  # only `store list` and `store doctor` have -o
    store_commands = store.add_subparsers(
        dest="store_command", required=True, title="subcommands", metavar="SUB", help="one of:"
    )

    def subcommand(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return add_subcommand(store_commands, name, "store", EXAMPLES, **kwargs)

    store_ls = subcommand(
        "list",
        aliases=["ls"],
        help="models, versions, stable and quarantined (also: ls)",
    )
    store_ls.add_argument("model", metavar="MODEL", nargs="?", help="only this model (default: every model)")
    add_output(store_ls, "a table; wide adds who promoted or quarantined each version, and when", sub=True)
    store_unquarantine = subcommand(
        "unquarantine",
        help="lift a version's quarantine: ledger, audit record, and its files back into the live repository",
    )
    store_unquarantine.add_argument("model", metavar="MODEL", help="the model's name")
    store_unquarantine.add_argument("version", metavar="VERSION", help="the quarantined version")
    store_unquarantine.add_argument(
        "--reason", required=True, help="why the version is safe again (kept in the ledger and the audit trail)"
    )

    store_stage = subcommand(
        "stage",
        help="read the stable versions a rollback may restore in full and stamp them (run it in the background)",
        description=(
            "Puts the two newest stable versions of each model (not quarantined) in the live repository, "
            "fetching from the store what is missing or different (the old copy is moved aside), and reads "
            "each in full against the ledger. A version that matches is stamped: a rollback then checks it "
            "from its files' identities instead of hashing it on its 90 s budget. Run it after promoting "
            "and in the background (e.g. hourly); exit 3 when a version could not be staged."
        ),
    )
    store_stage.add_argument(
        "model", metavar="MODEL", nargs="?", help="only this model (default: every configured model)"
    )
    add_output(store_stage, "a line per version; json/yaml: the results", sub=True, choices=("json", "yaml"))
    store_doctor.register(subcommand)


def run(settings: Settings, args: argparse.Namespace) -> int:
    if args.store_command == "unquarantine":
        return _cmd_store_unquarantine(settings, args)
    if args.store_command == "doctor":
        return store_doctor.run(settings, args)
    if args.store_command == "stage":
        return _cmd_store_stage(settings, args)
    return _cmd_store_ls(settings, args)


def _cmd_store_ls(settings: Settings, args: argparse.Namespace) -> int:
    from healer.edges.store import StoreError

    try:
        store = open_store(settings)
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
    except (ConfigError, StoreError, ValueError) as exc:
        return _store_failed(exc, settings.store)
    if args.output in ("json", "yaml"):
        print_data(listing, args.output)
        return 0
    wide = args.output == "wide"
    rows = _store_rows(listing, {model: ledger.stable for model, ledger in ledgers.items()}, wide=wide)
    if args.output == "name":
        for row in rows[1:]:
            print(f"{row[0]}/{row[1]}")
        return 0
    print(f"store {store.location}")
    if wide:
        print_table(rows)
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


def _version_order(version: str) -> tuple[int, str]:
    # Numeric order; a ledger record with a non-numeric version (never a Triton one) sorts last.
    return (int(version), "") if version.isdigit() else (1 << 63, version)


def _store_failed(exc: Exception, location: object) -> int:
    """A bad configuration is a usage error (EXIT_USAGE); the store failing, or a bad value in it, a refusal."""
    if isinstance(exc, ConfigError):
        print(f"healer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"healer: store {location}: {exc}", file=sys.stderr)
    return EXIT_REFUSED


def _cmd_store_stage(settings: Settings, args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from healer.edges.store import StoreError
    from workflows.steps.stage import stage_configured

    try:
        _location, results = stage_configured(settings, args.model)
    except (ConfigError, StoreError, ValueError) as exc:
        return _store_failed(exc, _store_location(settings))
    if args.output in ("json", "yaml"):
        print_data([asdict(r) for r in results], args.output)
    else:
        for r in results:
            detail = f": {r.detail}" if r.detail else ""
            print(f"{r.model} v{r.version}: {r.outcome} ({r.bytes / 1e6:.1f} MB in {r.seconds:.2f} s){detail}")
        if not results:
            print("nothing to stage: no stable version in the store's ledgers")
    return 0 if all(r.ok for r in results) else EXIT_REFUSED


def _store_location(settings: Settings) -> str:
    store = settings.store
    if store is None:
        return "(none)"
    return str(store.filesystem) if store.filesystem is not None else f"s3://{store.s3.bucket if store.s3 else '?'}"


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
        store = open_store(settings)
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
