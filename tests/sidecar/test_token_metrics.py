"""Time to first token and the largest inter-token gap of each streamed golden request, as the sidecar
exports them (healer/sidecar/token_metrics.py): which results carry them (table), and on the real Triton
2.51 against the STAND-IN for an LLM backend (examples/model_repository/llm_stand_in, a decoupled Python
model streaming a canned answer; no language model) the exposition's series, the slow-first-token variant's
first token later than the healthy version's."""

from __future__ import annotations

import re
from typing import Any

import pytest

from healer.core.results import ProbeResult, Status, Tier
from healer.edges.metrics import sidecar_registry
from healer.edges.triton import TritonHttp
from healer.settings import Settings
from healer.sidecar.token_metrics import observe_token_times, token_times
from probes.tiers import check_business
from tests.probes.test_generate_triton import stand_in  # noqa: F401 (the fixture: every variant served)


def business(details: dict[str, Any], tier: Tier = Tier.BUSINESS) -> ProbeResult:
    return ProbeResult(tier=tier, status=Status.PASS, model="m", version="2", latency_ms=1.0, details=details)


STREAMED = {"endpoint": "generate_stream", "first_token_ms": 40.0, "max_gap_ms": 12.5, "request_name": "capital"}


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (business(STREAMED), [("capital", 0.04, 0.0125)]),  # a suite of one: the request's own details
        (  # a suite: each streamed request of it, the others (generate, infer) not
            business(
                {
                    "requests": [
                        {"name": "capital", "status": "pass", "first_token_ms": 40.0, "max_gap_ms": 12.5},
                        {"name": "count", "status": "pass", "latency_ms": 3.0},
                        {"name": "one", "status": "fail", "first_token_ms": 900.0},  # one token: no gap
                    ]
                }
            ),
            [("capital", 0.04, 0.0125), ("one", 0.9, None)],
        ),
        (business({"endpoint": "infer", "input_hash": "h"}), []),  # nothing streamed
        (business({**STREAMED, "first_token_ms": None, "max_gap_ms": None}), []),  # no token came (a stall)
        (business(STREAMED, tier=Tier.READINESS), []),
    ],
)
def test_which_results_carry_token_times(result: ProbeResult, expected: list[tuple[str, Any, Any]]) -> None:
    assert list(token_times(result)) == expected


def count(text: str, metric: str, model: str, version: str) -> tuple[float, float]:
    """(_count, _sum) of one series of a histogram in an exposition."""
    labels = f'{{model="{model}",request="capital",version="{version}"}}'
    found = {
        m.group(1): float(m.group(2))
        for m in re.finditer(rf"^{metric}_(count|sum){re.escape(labels)} (\S+)$", text, re.MULTILINE)
    }
    return found.get("count", 0.0), found.get("sum", 0.0)


@pytest.mark.triton
def test_the_stand_ins_token_times_are_exported_per_model_version_and_request(
    stand_in: str,  # noqa: F811
    triton: TritonHttp,
    example_settings: Settings,
) -> None:
    registry = sidecar_registry()
    suite = example_settings.model("llm_stand_in").suite
    for version in ("1", "4"):  # the healthy version, and the variant whose first token comes late
        result = check_business(triton, stand_in, version, suite, serving_confirmed=True)
        observe_token_times(registry, [result])
    text = registry.expose()
    healthy, slow = (count(text, "healer_golden_first_token_seconds", stand_in, v) for v in ("1", "4"))
    assert healthy[0] == 1 and slow[0] == 1, text
    assert slow[1] > healthy[1], (healthy, slow)  # the slow variant's first token later
    assert count(text, "healer_golden_inter_token_gap_seconds", stand_in, "1")[0] == 1
    assert 'request="count"' not in text  # the generate request (one answer) has no token times


def test_the_sidecars_book_observes_them_with_each_cycles_results(example_settings: Settings) -> None:
    """The hook: ModelBook.record, which every probe cycle calls with its results, observes the token times."""
    from healer.sidecar.book import ModelBook

    registry = sidecar_registry()
    book = ModelBook(example_settings.models, registry)
    book.record([business(STREAMED)], "trace")
    assert count(registry.expose(), "healer_golden_first_token_seconds", "m", "2") == (1.0, 0.04)
