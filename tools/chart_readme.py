"""The Helm chart's README (deploy/helm/healer/README.md), generated from its values.yaml: every value
with its default and the comment above it or beside it (else the schema's description), in the file's
order. `config` (healer.yaml) is documented by docs/configuration-reference.md, generated from the settings.

A development tool, not shipped; from the repository's root:

    python -m tools.chart_readme            # write it
    python -m tools.chart_readme --check    # exit 1 when stale, or a value has no description

A value added without a comment (or a schema description) fails the check, so the README never lists
a value nobody explained.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "healer"
README = CHART / "README.md"
DOCUMENTED_ELSEWHERE = {
    "config": "healer.yaml itself: every key in "
    "[docs/configuration-reference.md](../../../docs/configuration-reference.md)"
}

# What the defaults need of the cluster (templates/checks/requirements.yaml): Argo's and cert-manager's CRDs.
REQUIRED_APIS = (
    "argoproj.io/v1alpha1/Workflow",
    "argoproj.io/v1alpha1/WorkflowTemplate",
    "argoproj.io/v1alpha1/CronWorkflow",
    "cert-manager.io/v1/Certificate",
    "cert-manager.io/v1/Issuer",
)

_KEY = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z0-9_.-]+):(?P<rest>.*)$")


@dataclass(frozen=True)
class Value:
    path: str
    default: str  # as written in values.yaml ("" for a map with keys below it)
    description: str
    leaf: bool


def _split_comment(rest: str) -> tuple[str, str]:
    """A line's value and its trailing comment (a '#' outside quotes, after a space)."""
    quote = ""
    for i, char in enumerate(rest):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or rest[i - 1] == " "):
            return rest[:i].strip(), rest[i + 1 :].strip()
    return rest.strip(), ""


def read_values(text: str) -> list[Value]:
    """Every key of values.yaml in order, with the comment block above it (or its inline comment)."""
    values: list[Value] = []
    stack: list[tuple[int, str]] = []
    comments: list[str] = []
    lines = text.splitlines()
    in_list_item: int | None = None  # the indent of a "- " item whose keys belong to a list value
    for number, line in enumerate(lines):
        stripped = line.strip()
        if not stripped:
            comments = []
            continue
        if stripped.startswith("#"):
            comments.append(stripped.lstrip("#").strip())
            continue
        indent = len(line) - len(line.lstrip())
        if stripped.startswith("- "):
            in_list_item, comments = indent, []
            continue
        if in_list_item is not None and indent > in_list_item:
            continue  # a key of a list item: part of the list's default, not a value of its own
        in_list_item = None
        match = _KEY.match(line)
        if match is None:  # a continuation: belongs to the key above
            comments = []
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        path = ".".join(key for _, key in stack)
        default, inline = _split_comment(match["rest"])
        following = next((n for n in lines[number + 1 :] if n.strip() and not n.strip().startswith("#")), "")
        # A map with keys below it; a block list below is this value's default (a leaf).
        nested = (
            not default and len(following) - len(following.lstrip()) > indent and not following.strip().startswith("-")
        )
        description = " ".join([*comments, inline]).strip()
        if not default and not nested and following.strip().startswith("-"):
            default = "a list (see values.yaml)"
        values.append(Value(path, default, description, leaf=not nested))
        comments = []
    return values


def _schema_description(schema: dict[str, Any], path: str) -> tuple[str, str]:
    node: dict[str, Any] = schema
    for key in path.split("."):
        found = node.get("properties", {}).get(key)
        if not isinstance(found, dict):
            return "", ""
        node = found
    kind = node.get("type", "")
    return str(node.get("description", "")), "/".join(kind) if isinstance(kind, list) else str(kind)


def missing_descriptions(values: list[Value], schema: dict[str, Any]) -> list[str]:
    return [
        v.path
        for v in values
        if v.leaf and not _skipped(v.path) and not v.description and not _schema_description(schema, v.path)[0]
    ]


def _skipped(path: str) -> bool:
    return path.split(".", maxsplit=1)[0] in DOCUMENTED_ELSEWHERE and "." in path


def render(values: list[Value], schema: dict[str, Any], chart: dict[str, Any]) -> str:
    lines = [
        f"# {chart['name']} chart",
        "",
        "<!-- Generated by `python -m tools.chart_readme` from values.yaml; do not edit. -->",
        "",
        " ".join(str(chart.get("description", "")).split()),
        "",
        f"Chart {chart['version']}, healer {chart['appVersion']}, Kubernetes {chart.get('kubeVersion', '')}. "
        'Installing: the repository\'s README, "Run on Kubernetes"; upgrading: its "Operations"; what each '
        "piece needs: [docs/kubernetes.md](../../../docs/kubernetes.md).",
        "",
        "```sh",
        "helm install healer deploy/helm/healer -n healer --create-namespace \\",
        '  --set argo.caBundle="$(cat argo-server-ca.crt)" -f my-values.yaml',
        "helm test healer -n healer      # healer check in a pod with the sidecar's token: argo-server, RBAC",
        "```",
        "",
        "`helm install` refuses a cluster without Argo Workflows' CRDs, or without cert-manager's while "
        "`certificates.certManager.enabled` (`checkRequirements`), in one line naming what is missing. "
        "`helm template` has no cluster to ask: give it the APIs the cluster has.",
        "",
        "```sh",
        "helm template healer deploy/helm/healer -n healer -f my-values.yaml \\",
        *(f"  --api-versions {api} \\" for api in REQUIRED_APIS[:-1]),
        f"  --api-versions {REQUIRED_APIS[-1]}",
        "```",
        "",
        "## Values",
        "",
        "| key | type | default | description |",
        "|---|---|---|---|",
    ]
    for value in values:
        if _skipped(value.path):
            continue
        described, kind = _schema_description(schema, value.path)
        text = value.description or described
        if value.path in DOCUMENTED_ELSEWHERE:
            text = DOCUMENTED_ELSEWHERE[value.path] + (f". {text}" if text else "")
        default = f"`{value.default}`" if value.default else ("" if not value.leaf else "`null`")
        lines.append(f"| `{value.path}` | {kind} | {default} | {_cell(text)} |")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def build() -> tuple[str, list[str]]:
    import yaml

    values = read_values((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return render(values, schema, chart), missing_descriptions(values, schema)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail when the README is stale or a value is undescribed")
    args = parser.parse_args(argv)
    text, missing = build()
    if missing:
        where = CHART / "values.yaml"
        print(f"{where}: no comment and no schema description for: {', '.join(missing)}", file=sys.stderr)
        return 1
    if args.check:
        if not README.is_file() or README.read_text() != text:
            print(f"{README} is stale: run `python -m tools.chart_readme`", file=sys.stderr)
            return 1
        return 0
    README.write_text(text)
    print(f"{README.relative_to(ROOT)} written by `python -m tools.chart_readme`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
