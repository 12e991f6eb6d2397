"""Pure comparison of a model's output against the golden expectation.

Rules (the business tier's contract):
* outputs are matched by name; a missing output is a failure;
* datatype and shape must match exactly;
* values match when |actual - expected| <= atol + rtol * |expected| (numpy.isclose);
* NaN matches only where NaN is expected, +Inf/-Inf only where the same infinity is expected.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from healer.core.results import Status
from healer.settings import ExpectedOutput
from healer.vocabulary import NON_FINITE, WRONG_ANSWER
from probes.comparators import judge

NON_FINITE_VALUES = frozenset({"nan", "inf", "-inf"})


def timeout_status(*, liveness_passed: bool, readiness_passed: bool) -> Status:
    """A golden request that got no answer in time. With Triton live and this version ready in the
    same cycle, the model is hanging: FAIL (the loader keeps timeout_s >= the SLO, so a timeout is
    over the SLO by definition). Without both, nothing was learnt: ERROR."""
    return Status.FAIL if liveness_passed and readiness_passed else Status.ERROR


def wrong_answer_code(worst_actuals: Iterable[Any]) -> str:
    """Wrong outputs: ``non-finite`` when any output's worst element is NaN or ±Inf."""
    if any(str(actual) in NON_FINITE_VALUES for actual in worst_actuals):
        return NON_FINITE
    return WRONG_ANSWER


@dataclass(frozen=True)
class Mismatch:
    """The single worst element, the one a person should look at first."""

    index: tuple[int, ...]
    expected: Any
    actual: Any
    abs_error: float | None
    allowed: float | None


@dataclass(frozen=True)
class Comparison:
    name: str
    ok: bool
    reason: str
    mismatched: int = 0
    total: int = 0
    worst: Mismatch | None = None

    def to_dict(self) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "name": self.name,
            "ok": self.ok,
            "mismatched": self.mismatched,
            "total": self.total,
        }
        if self.reason:
            summary["reason"] = self.reason
        if self.worst is not None:
            summary["worst"] = {
                "index": list(self.worst.index),
                "expected": self.worst.expected,
                "actual": self.worst.actual,
                "abs_error": self.worst.abs_error,
                "allowed": self.worst.allowed,
            }
        return summary


def compare_output(
    expected: ExpectedOutput, actual: npt.NDArray[Any] | None, actual_datatype: str | None
) -> Comparison:
    spec = expected.tensor
    name = spec.name
    if actual is None:
        return Comparison(name, False, f"output {name!r} missing from the response")
    if actual_datatype != spec.datatype:
        return Comparison(name, False, f"output {name!r} datatype {actual_datatype}, expected {spec.datatype}")
    if spec.shape is not None and not _shape_fits(tuple(actual.shape), spec.shape):
        return Comparison(name, False, f"output {name!r} shape {list(actual.shape)}, expected {list(spec.shape)}")
    if expected.expect is not None:
        return _compare_expect(name, expected, actual)
    assert spec.values is not None  # the loader requires values without an expect
    if spec.datatype == "BYTES":
        return _compare_exact(name, spec.values, actual)
    return _compare_numeric(name, spec.values, actual, expected.atol, expected.rtol)


def _shape_fits(actual: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    """-1 in an expected shape takes any size (an answer of varying length)."""
    return len(actual) == len(expected) and all(e in (-1, a) for a, e in zip(actual, expected, strict=True))


def _compare_expect(name: str, expected: ExpectedOutput, actual: npt.NDArray[Any]) -> Comparison:
    """An output judged by its comparators (probes/comparators.py): the first that fails is the why."""
    assert expected.expect is not None
    verdicts = judge(expected.expect, expected.tensor.values, actual)
    failed = [v for v in verdicts if not v.ok]
    if not failed:
        return Comparison(name, True, "", 0, len(verdicts))
    first = failed[0]
    worst = Mismatch((), first.expected, first.actual, None, None)
    more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    return Comparison(name, False, f"output {name!r} {first.why()}{more}", len(failed), len(verdicts), worst)


def _compare_exact(name: str, expected: npt.NDArray[Any], actual: npt.NDArray[Any]) -> Comparison:
    bad = np.array([a != e for a, e in zip(actual.reshape(-1), expected.reshape(-1), strict=True)], dtype=bool)
    total = int(bad.size)
    if not bad.any():
        return Comparison(name, True, "", 0, total)
    flat = int(np.argmax(bad))
    index = tuple(int(i) for i in np.unravel_index(flat, expected.shape))
    worst = Mismatch(index, _plain(expected[index]), _plain(actual[index]), None, None)
    return Comparison(name, False, _mismatch_reason(name, int(bad.sum()), total, worst), int(bad.sum()), total, worst)


def _compare_numeric(
    name: str, expected: npt.NDArray[Any], actual: npt.NDArray[Any], atol: float, rtol: float
) -> Comparison:
    exp = expected.astype(np.float64)
    act = actual.astype(np.float64)
    total = int(exp.size)
    if total == 0:
        return Comparison(name, True, "", 0, 0)
    with np.errstate(invalid="ignore", over="ignore"):
        allowed = atol + rtol * np.abs(exp)
        abs_error = np.abs(act - exp)
        finite_both = np.isfinite(exp) & np.isfinite(act)
        close = finite_both & (abs_error <= allowed)
        # Non-finite values match only their own kind: NaN to NaN, +Inf to +Inf, -Inf to -Inf.
        same_nan = np.isnan(exp) & np.isnan(act)
        same_inf = np.isinf(exp) & np.isinf(act) & (np.sign(exp) == np.sign(act))
    if expected.dtype.kind in "iub" and actual.dtype.kind in "iub":
        # float64 cannot tell 2**53 from 2**53 + 1: integers are compared exactly, as Python ints.
        exact_error = np.abs(actual.astype(object) - expected.astype(object))
        close = (exact_error <= allowed.astype(object)).astype(bool)
        abs_error = exact_error.astype(np.float64)
    good = close | same_nan | same_inf
    bad_count = int((~good).sum())
    if bad_count == 0:
        return Comparison(name, True, "", 0, total)
    # Worst element: a non-finite surprise beats any finite error; then the largest excess over tolerance.
    with np.errstate(invalid="ignore"):
        excess = np.where(finite_both, abs_error - allowed, np.inf)
    excess = np.where(good, -np.inf, excess)
    flat = int(np.argmax(excess))
    index = tuple(int(i) for i in np.unravel_index(flat, exp.shape))
    finite_pair = bool(finite_both[index])
    worst = Mismatch(
        index=index,
        expected=_plain(expected[index]),
        actual=_plain(actual[index]),
        abs_error=float(abs_error[index]) if finite_pair and np.isfinite(abs_error[index]) else None,
        allowed=float(allowed[index]) if np.isfinite(allowed[index]) else None,
    )
    return Comparison(name, False, _mismatch_reason(name, bad_count, total, worst), bad_count, total, worst)


def _mismatch_reason(name: str, bad: int, total: int, worst: Mismatch) -> str:
    where = ",".join(str(i) for i in worst.index)
    text = (
        f"output {name!r}: {bad}/{total} values off; worst [{where}] expected {worst.expected!r} got {worst.actual!r}"
    )
    if worst.abs_error is not None and worst.allowed is not None:
        text += f" (|error| {worst.abs_error:.8g} > allowed {worst.allowed:.8g})"
    return text


def _plain(value: Any) -> Any:
    """A JSON-friendly scalar (NaN and Inf as strings so JSON output stays valid)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.floating):
        # The shortest repr at the tensor's own precision: float32 7.1 reads "7.1", not 7.099999904632568.
        value = float(str(value))
    item = value.item() if hasattr(value, "item") else value
    if isinstance(item, float) and not np.isfinite(item):
        return str(item)
    return item
