"""`healer demo`: a real Triton on the config's embedded repository, every model probed (and, with
--drills, broken on purpose and healed)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from healer.cli.common import Command
from healer.cli.output import EXIT_USAGE, add_output
from healer.cli.probe import probe_and_print
from healer.settings import Settings

EXAMPLES = (
    "healer demo --config examples/healer.yaml",
    "healer demo --config examples/healer.yaml --drills --report .healer/demo-report.html",
)


def register(command: Command) -> None:
    demo = command("demo", "start a real Triton on the config's embedded repository and probe every model", EXAMPLES)
    add_output(demo, "as for probe")
    demo.add_argument(
        "--drills",
        nargs="*",
        metavar="SCENARIO",
        help="then break the model on purpose and watch healer heal it: the drill catalog (or these scenarios) "
        "on the embedded stack with the LocalEngine, a row per scenario as it finishes (see `healer drill`)",
    )
    demo.add_argument("--report", metavar="FILE", help="with --drills: write the HTML report (timelines, chart) here")


def run(settings: Settings, args: argparse.Namespace) -> int:
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
        code = probe_and_print(settings, triton.url, output=args.output)
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
