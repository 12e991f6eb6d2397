"""healer's command line. Heavy clients are imported inside the commands that need them."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence

from healer.settings import ConfigError, Settings, load_settings

EXIT_USAGE = 64  # bad configuration or arguments (sysexits EX_USAGE); 0/1/2 are the probe verdicts


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    from healer.logs import configure_logging

    configure_logging(level=args.log_level)
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print(f"healer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    handler = {"probe": _cmd_probe, "demo": _cmd_demo}[args.command]
    return handler(settings, args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="healer", description=__doc__)
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="JSON logs go to stderr (default: warning)",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    probe = commands.add_parser("probe", help="run the three tiers once for every configured model")
    probe.add_argument("--config", required=True, help="healer YAML file")
    probe.add_argument("--json", action="store_true", help="print a JSON list of results instead of a table")
    probe.add_argument("--url", help="Triton host:port (overrides triton.url)")

    demo = commands.add_parser("demo", help="start a real Triton on the embedded default and probe every model")
    demo.add_argument("--config", required=True, help="healer YAML file with an 'embedded' section")
    demo.add_argument("--json", action="store_true", help="print a JSON list of results instead of a table")
    return parser


def _cmd_probe(settings: Settings, args: argparse.Namespace) -> int:
    if args.url:
        settings = dataclasses.replace(settings, triton=dataclasses.replace(settings.triton, url=args.url))
    return _probe_and_print(settings, settings.triton.url, as_json=args.json)


def _probe_and_print(settings: Settings, url: str, *, as_json: bool) -> int:
    from healer.report import format_table
    from healer.triton import TritonHttp
    from probes.runner import exit_code, probe_all

    triton = TritonHttp(url, timeout_s=settings.triton.timeout_s)
    try:
        results = probe_all(settings, triton)
    finally:
        triton.close()
    if as_json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        print(format_table(results))
    return exit_code(results)


def _cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    from healer.embedded import EmbeddedTriton, EmbeddedTritonError

    if settings.embedded is None:
        print(f"healer: {settings.source}: embedded: is required for the demo", file=sys.stderr)
        return EXIT_USAGE
    names = [m.name for m in settings.models]
    started = time.monotonic()
    try:
        triton = EmbeddedTriton(
            settings.embedded.model_repository,
            tritonserver=settings.embedded.tritonserver,
            load_models=names,
            startup_timeout_s=settings.embedded.startup_timeout_s,
        )
        with triton:
            say = (lambda text: print(text, file=sys.stderr)) if args.json else print
            say(
                f"Triton {triton.url} (pid {triton.pid}) live with {', '.join(names)} "
                f"in {time.monotonic() - started:.1f} s; repository {triton.model_repository}"
            )
            say("")
            return _probe_and_print(settings, triton.url, as_json=args.json)
    except EmbeddedTritonError as exc:
        print(f"healer: embedded Triton failed: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if "triton" in locals():
            triton.cleanup()


if __name__ == "__main__":
    sys.exit(main())
