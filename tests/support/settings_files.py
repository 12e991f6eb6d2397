"""Pieces of a healer.yaml for loader tests: the smallest model entry the loader accepts."""

from __future__ import annotations

from typing import Any


def minimal_model(name: str = "m") -> dict[str, Any]:
    """One model with one golden request (FP32 [1, 2] in, [1, 1] out), as a config file would hold it."""
    return {
        "name": name,
        "golden": {
            "latency_slo_ms": 100,
            "timeout_s": 2.0,
            "inputs": [{"name": "IN", "datatype": "FP32", "shape": [1, 2], "data": [[1.0, 2.0]]}],
            "outputs": [{"name": "OUT", "datatype": "FP32", "shape": [1, 1], "data": [[3.0]]}],
        },
    }
