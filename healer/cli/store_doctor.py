"""`healer store doctor`: what blocks a model's rollbacks (its lease, its ledger's head, unreadable
snapshots, space), and the fixes (--release-lease, --repair). See runbooks/store-doctor.md."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from healer.cli.common import open_store
from healer.cli.output import EXIT_REFUSED, EXIT_USAGE, add_output, print_data
from healer.settings import ConfigError, Settings


def register(subcommand: Callable[..., argparse.ArgumentParser]) -> None:
    """`store doctor` and its flags; ``subcommand`` makes a subcommand of `healer store` (healer/cli/store.py)."""
    store_doctor = subcommand(
        "doctor",
        help="what blocks a model's rollbacks: its lease, its ledger's head, unreadable snapshots; and the fixes",
        description=(
            "Shows the model's lease (holder, incident, expiry, replicas an interrupted unload-first swap left "
            "to load again), its ledger's newest snapshot and any unreadable snapshot. --release-lease frees a "
            "lease a dead holder left (a live holder stops at its next renewal); --repair writes the newest "
            "readable ledger snapshot forward over an unreadable one (nothing is deleted). Both are recorded "
            "in the audit trail. See runbooks/store-doctor.md."
        ),
    )
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
    add_output(store_doctor, "a summary; json/yaml: what was found and done", sub=True, choices=("json", "yaml"))


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Diagnose, then (if asked) release the lease or repair the ledger, each with an audit record."""
    from healer.edges.store import StoreError

    reason = args.reason.strip()
    acting = args.release_lease or args.repair
    if acting and not reason:
        print(
            "healer: store doctor: --release-lease and --repair need --reason (kept in the audit trail)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    done: list[str] = []
    try:
        store = open_store(settings)
        _act(settings, store, args, reason, done)
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
    data = _data(settings, args.model, store.location, diagnosis, findings, done)
    blocked = data["blocked"]
    if args.output in ("json", "yaml"):
        print_data(data, args.output)
    else:
        _print_diagnosis(data, diagnosis, hint=blocked and not acting)
    return 1 if blocked and not acting else 0


def _act(settings: Settings, store: Any, args: argparse.Namespace, reason: str, done: list[str]) -> None:
    """--repair, then --release-lease: each recorded in ``done`` and the audit trail as it is done."""
    from healer.compose import finish_orphaned_releases

    who = os.environ.get("USER") or "cli"

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
            for line in finish_orphaned_releases(settings, model=args.model):
                audit(line.removeprefix("healer: "))
    if args.release_lease:
        released = store.release_lease_by_hand(
            args.model, reason=reason, by=who, force=args.force, clear_put_back=args.clear_put_back
        )
        cleared = " and its put-back duties cleared" if args.clear_put_back else ""
        audit(f"lease released by {released.holder}{cleared}")


def _data(
    settings: Settings, model: str, location: str, diagnosis: Any, findings: Any, done: list[str]
) -> dict[str, Any]:
    """What `store doctor` found, as -o json|yaml prints it; "blocked": something stops the model's rollbacks."""
    from healer.core.ledger import wall_time

    now = time.time()
    lease = diagnosis.lease
    held = lease is not None and not lease.released and lease.effective_expires_at > now
    blocked = bool(diagnosis.unreadable) or held or bool(lease is not None and lease.put_back)
    blocked = blocked or bool(findings.problems)  # a way back the ledger promises is not there
    return {
        "model": model,
        "store": location,
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
        "space": _doctor_space(settings, model),
        "blocked": blocked,
    }


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
