"""`healer demo`: a real Triton on the config's embedded repository, every model probed (and, with
--drills, broken on purpose and healed)."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

from healer.cli.common import Command
from healer.cli.drill import scenario_problem
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
        help="then break the model on purpose and watch healer heal it: the drill catalog's demo scenarios (or these) "
        "on the embedded stack with the LocalEngine, a row per scenario as it finishes (see `healer drill`)",
    )
    demo.add_argument("--report", metavar="FILE", help="with --drills: write the HTML report (timelines, chart) here")


def run(settings: Settings, args: argparse.Namespace) -> int:
    from healer.edges.embedded import EmbeddedTriton, EmbeddedTritonError

    if settings.embedded is None:
        print(f"healer: {settings.source}: embedded: is required for the demo", file=sys.stderr)
        return EXIT_USAGE
    problem = scenario_problem(list(args.drills or []))
    if problem:
        print(f"healer: demo: --drills: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if args.drills is not None and args.output in ("name", "wide"):
        print(
            f"healer: demo: -o {args.output}: with --drills, -o is json or yaml (the drills have no {args.output})",
            file=sys.stderr,
        )
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
    from healer.core.drill_catalog import DEMO
    from healer.drills.command import DrillOptions, run_drills

    print("", file=sys.stderr if args.output in ("json", "yaml", "name") else sys.stdout)
    drilled = run_drills(
        settings,
        DrillOptions(
            scenarios=list(args.drills or DEMO),  # none named: the catalog's demo scenarios (docs/drills.md)
            report=Path(args.report) if args.report else None,
            log_level=args.file_log_level,
            output=args.output if args.output in ("json", "yaml") else None,
        ),
    )
    if drilled != EXIT_USAGE and args.output not in ("json", "yaml", "name"):
        for line in closing_lines(settings, args.config or settings.source, args.report):
            print(line)
    return drilled if drilled == EXIT_USAGE else max(code, drilled)


def invoked_as(argv0: str | None = None) -> str:
    """How to type healer again: ``healer`` when that name on PATH is this program, else the path it was
    started by, relative to the working directory when under it (``.venv/bin/healer`` after `make demo`)."""
    argv0 = argv0 if argv0 is not None else sys.argv[0]
    on_path = shutil.which("healer")
    if on_path and os.path.exists(argv0) and os.path.samefile(on_path, argv0):
        return "healer"
    if os.path.basename(argv0) != "healer" or not os.path.exists(argv0):  # python -m healer.cli, a test
        return "healer" if on_path else f"{shlex.quote(sys.executable)} -m healer.cli"
    path = os.path.abspath(argv0)
    relative = os.path.relpath(path)
    return shlex.quote(path if relative.startswith("..") else relative)


def closing_lines(settings: Settings, config: str, report: str | None, *, healer: str | None = None) -> list[str]:
    """The demo's last lines: the commands that open what it kept, typed as they will work here."""
    from healer.drills.command import default_log_file, shown_path

    healer = healer or invoked_as()
    config = shlex.quote(config)
    lines = [
        "",
        "Next: the runs above are kept.",
        f"  {healer} runs list --config {config}",
        f"  {healer} runs get NAME --config {config}    # one of them, step by step",
    ]
    if report:
        lines.append(f"  the report: {shlex.quote(report)} (open it in a browser)")
    if healer != "healer" and os.path.basename(healer) == "healer":
        activate = shlex.quote(os.path.join(os.path.dirname(healer), "activate"))
        lines.append(f"  source {activate}    # then type `healer ...` as in the README")
    kept = [Path(os.path.abspath(settings.rollback.state_dir)), Path(os.path.abspath(default_log_file(settings)))]
    kept += [Path(os.path.abspath(report))] if report else []
    folder = kept[0].parent
    if folder != Path.cwd() and all(path.is_relative_to(folder) for path in kept):
        kept = [folder]
    lines.append(f"Clean up: rm -rf {' '.join(shlex.quote(shown_path(path)) for path in kept)}")
    return lines
