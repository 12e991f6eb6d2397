"""The chart's alert rules (deploy/helm/healer/files/prometheus-rules.yaml) as its PrometheusRule
template renders them: its five placeholders replaced, parsed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "helm" / "healer" / "files" / "prometheus-rules.yaml"
PLACEHOLDER = re.compile(r"__[A-Z_]+__")
BASE_URL = "https://example.com/healer/runbooks"


def rendered_rules(base_url: str = BASE_URL) -> dict[str, Any]:
    """The rules as the template renders them (release "healer" in namespace "healer")."""
    values = {
        "__RUNBOOK_BASE_URL__": base_url.rstrip("/"),
        "__SIDECAR_JOB__": "healer/healer-sidecars",
        "__RELEASE_NAMESPACE__": "healer",
        "__WEBHOOK_DEPLOYMENT__": "healer-webhook",
        "__CLUSTER_BY__": "",
    }
    text = PLACEHOLDER.sub(lambda m: values[m.group(0)], RULES.read_text())
    rendered: dict[str, Any] = yaml.safe_load(text)
    return rendered
