"""`healer render`: the Argo WorkflowTemplates as YAML (no config needed)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from healer.cli.common import Command
from healer.cli.output import EXIT_USAGE
from healer.settings import MAX_DEADLINE_S

EXAMPLES = (
    "healer render --chart deploy/helm/healer   (the repository's copy; deploy/argo links to it)",
    "healer render --namespace ml --deadline 120",
    "healer render --out argo/ --trace-link 'https://jaeger.example.com/trace/{trace_id}'",
)


def register(command: Command) -> None:
    render = command("render", "write the Argo WorkflowTemplates as YAML (no config needed)", EXAMPLES, config=False)
    render.add_argument("--out", metavar="DIR", help="directory to write into (default: print to stdout)")
    render.add_argument("--image", help="the healer image the steps run in (default: the released image)")
    render.add_argument("--namespace", help="namespace of the WorkflowTemplate: Triton's (default: ml)")
    render.add_argument(
        "--deadline", type=int, metavar="SECONDS", help="activeDeadlineSeconds of a rollback (default 90)"
    )
    render.add_argument(
        "--trace-link",
        metavar="URL",
        help="the trace UI's page of a trace, with {trace_id} where the id goes (e.g. "
        "https://jaeger.example.com/trace/{trace_id}): an 'Incident trace' link on each rollback's page in the "
        "Argo UI (default: none)",
    )
    render.add_argument(
        "--chart",
        metavar="DIR",
        help="also write the same files into the Helm chart at DIR, under files/argo/ (the chart sets their "
        "namespace and image from its values)",
    )


def run(args: argparse.Namespace) -> int:
    from workflows.render import render_all
    from workflows.rollback import TemplateOptions

    defaults = TemplateOptions()
    if args.deadline is not None and not 1 <= args.deadline <= MAX_DEADLINE_S:
        print(
            f"healer: render: --deadline: must be from 1 to {MAX_DEADLINE_S} seconds (as rollback.deadline_s), "
            f"got {args.deadline}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.trace_link is not None and "{trace_id}" not in args.trace_link:
        print(f"healer: render: --trace-link: must contain {{trace_id}}, got {args.trace_link!r}", file=sys.stderr)
        return EXIT_USAGE
    options = TemplateOptions(
        image=args.image or defaults.image,
        namespace=args.namespace or defaults.namespace,
        deadline_s=args.deadline or defaults.deadline_s,
        trace_link_template=args.trace_link or defaults.trace_link_template,
    )
    rendered = render_all(options)
    if not args.out and not args.chart:
        print("\n---\n".join(rendered.values()), end="")
        return 0
    # Helm reads only files inside the chart (.Files.Get), so the chart carries its own copies.
    targets = [Path(args.out)] if args.out else []
    if args.chart:
        chart = Path(args.chart)
        if not (chart / "Chart.yaml").is_file():
            print(f"healer: render: --chart {chart}: no Chart.yaml there", file=sys.stderr)
            return EXIT_USAGE
        targets.append(chart / "files" / "argo")
    written: set[Path] = set()
    for out in targets:
        out.mkdir(parents=True, exist_ok=True)
        if out.resolve() in written:
            continue  # the same folder twice (this repository's deploy/argo links to the chart's copy)
        written.add(out.resolve())
        for name, text in rendered.items():
            (out / name).write_text(text)
            print(f"wrote {out / name}")
    return 0
