"""probes.compare: a model's output against the golden expectation, element by element."""

from __future__ import annotations

import json
import warnings
from typing import Any

import numpy as np
import pytest

from healer.core.results import Status
from healer.settings import DATATYPES, ExpectedOutput, TensorSpec
from healer.vocabulary import NON_FINITE, WRONG_ANSWER
from probes.compare import Comparison, Mismatch, compare_output, timeout_status, wrong_answer_code

NAN = float("nan")
INF = float("inf")


def _expected(values: Any, datatype: str = "FP64", *, atol: float = 0.0, rtol: float = 0.0) -> ExpectedOutput:
    array = np.array(values, dtype=DATATYPES[datatype])
    array.setflags(write=False)
    return ExpectedOutput(TensorSpec("OUT", datatype, tuple(array.shape), array), atol=atol, rtol=rtol)


def _compare(expected: ExpectedOutput, actual: Any, datatype: str | None = None) -> Comparison:
    spec = expected.tensor
    array = np.array(actual, dtype=DATATYPES[spec.datatype])
    return compare_output(expected, array, datatype or spec.datatype)


def _json(comparison: Comparison) -> Any:
    return json.loads(json.dumps(comparison.to_dict(), allow_nan=False))


# --- passing ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("datatype", ["FP16", "FP32", "FP64", "INT8", "INT64", "UINT64", "BOOL"])
def test_exact_match_passes(datatype: str) -> None:
    values = [[1, 0], [1, 1]]
    result = _compare(_expected(values, datatype), values)
    assert result == Comparison("OUT", True, "", 0, 4)
    assert result.to_dict() == {"name": "OUT", "ok": True, "mismatched": 0, "total": 4}


def test_empty_tensor_passes() -> None:
    assert _compare(_expected(np.zeros((0, 3))), np.zeros((0, 3))) == Comparison("OUT", True, "", 0, 0)


# --- tolerance edges: |actual - expected| <= atol + rtol * |expected| ------------------------------------
# Every number below is exact in binary, so "equal to the allowance" is exactly equal, not approximately.


@pytest.mark.parametrize(
    ("expected", "atol", "rtol", "at_edge"),
    [
        pytest.param(1.0, 0.25, 0.0, 1.25, id="atol-only-above"),
        pytest.param(1.0, 0.25, 0.0, 0.75, id="atol-only-below"),
        pytest.param(4.0, 0.0, 0.125, 3.5, id="rtol-only-below"),
        pytest.param(-4.0, 0.0, 0.125, -4.5, id="rtol-only-negative-expected"),
        pytest.param(-8.0, 0.5, 0.25, -10.5, id="atol-plus-rtol"),
        pytest.param(0.0, 0.0, 0.5, 0.0, id="rtol-only-at-zero-is-exact"),
    ],
)
def test_error_equal_to_the_allowance_passes_and_one_ulp_more_fails(
    expected: float, atol: float, rtol: float, at_edge: float
) -> None:
    assert abs(at_edge - expected) == atol + rtol * abs(expected)
    golden = _expected([expected], atol=atol, rtol=rtol)

    assert _compare(golden, [at_edge]).ok

    away = np.nextafter(at_edge, np.inf if at_edge >= expected else -np.inf)
    beyond = _compare(golden, [away])
    assert not beyond.ok
    assert (beyond.mismatched, beyond.total) == (1, 1)
    assert beyond.worst == Mismatch(
        (0,), expected, float(away), abs(float(away) - expected), atol + rtol * abs(expected)
    )


def test_fp32_values_compare_at_their_own_precision() -> None:
    # 7.1 is not exact in float32; the same float32 on both sides must still match with no tolerance.
    assert _compare(_expected([7.1], "FP32"), [7.1]).ok
    result = _compare(_expected([7.1], "FP32", atol=1e-3), [7.102])
    assert not result.ok
    assert result.worst is not None
    assert result.worst.index == (0,)


# --- the worst element -----------------------------------------------------------------------------------


def test_worst_element_is_the_largest_excess_over_tolerance() -> None:
    # allowed = 0.5 + 0.1 * |expected| = [[10.5, 1.0], [0.5, 1.2]]; excess = [[1.5, -1], [2.5, -1.2]].
    # [0,0] has the biggest absolute error (12) but [1,0] is further outside its tolerance.
    golden = _expected([[100.0, 5.0], [0.0, 7.0]], atol=0.5, rtol=0.1)
    result = _compare(golden, [[112.0, 5.0], [3.0, 7.0]])

    assert not result.ok
    assert (result.mismatched, result.total) == (2, 4)
    assert result.worst == Mismatch((1, 0), 0.0, 3.0, 3.0, 0.5)
    assert result.reason == ("output 'OUT': 2/4 values off; worst [1,0] expected 0.0 got 3.0 (|error| 3 > allowed 0.5)")


def test_worst_element_with_rtol_only() -> None:
    # allowed = 0.25 * |expected| = [25, 1]; errors [20, 2]: only [1] is off, although [0] is ten times worse.
    result = _compare(_expected([100.0, 4.0], rtol=0.25), [80.0, 6.0])
    assert result.worst == Mismatch((1,), 4.0, 6.0, 2.0, 1.0)
    assert result.mismatched == 1


# --- NaN and infinities ----------------------------------------------------------------------------------


def test_nan_where_a_number_is_expected_fails() -> None:
    result = _compare(_expected([1.0, 2.0], atol=1e9), [1.0, NAN])
    assert not result.ok
    assert (result.mismatched, result.total) == (1, 2)
    assert result.worst == Mismatch((1,), 2.0, "nan", None, 1e9)
    assert result.reason == "output 'OUT': 1/2 values off; worst [1] expected 2.0 got 'nan'"


def test_number_where_nan_is_expected_fails() -> None:
    result = _compare(_expected([NAN], atol=1e9), [0.0])
    assert not result.ok
    assert result.worst == Mismatch((0,), "nan", 0.0, None, None)


@pytest.mark.parametrize("datatype", ["FP16", "FP32", "FP64"])
def test_nan_expected_and_nan_actual_passes(datatype: str) -> None:
    assert _compare(_expected([NAN, 1.0], datatype), [NAN, 1.0]).ok


@pytest.mark.parametrize(
    ("expected", "actual", "ok"),
    [
        (INF, INF, True),
        (-INF, -INF, True),
        (INF, -INF, False),
        (-INF, INF, False),
        (INF, NAN, False),
        (NAN, INF, False),
        (INF, 1e308, False),
        (1e308, INF, False),
    ],
)
def test_infinities_match_only_the_same_infinity(expected: float, actual: float, ok: bool) -> None:
    result = _compare(_expected([expected], atol=1e300, rtol=1.0), [actual])
    assert result.ok is ok
    if not ok:
        assert result.worst is not None
        assert result.worst.abs_error is None
        assert result.mismatched == 1


def test_inf_where_finite_expected_is_the_worst_even_against_a_bigger_finite_error() -> None:
    result = _compare(_expected([0.0, 0.0, 0.0], atol=1.0), [1e6, INF, 2.0])
    assert not result.ok
    assert (result.mismatched, result.total) == (3, 3)
    assert result.worst == Mismatch((1,), 0.0, "inf", None, 1.0)
    assert result.reason == "output 'OUT': 3/3 values off; worst [1] expected 0.0 got 'inf'"


def test_nan_surprise_is_the_worst_even_when_listed_last() -> None:
    result = _compare(_expected([0.0, 0.0], atol=1.0), [1e6, NAN])
    assert result.worst is not None
    assert result.worst.index == (1,)


# --- structure: missing output, datatype, shape ----------------------------------------------------------


def test_missing_output() -> None:
    result = compare_output(_expected([1.0]), None, None)
    assert result == Comparison("OUT", False, "output 'OUT' missing from the response")
    assert _json(result) == {
        "name": "OUT",
        "ok": False,
        "mismatched": 0,
        "total": 0,
        "reason": "output 'OUT' missing from the response",
    }


def test_datatype_mismatch() -> None:
    result = compare_output(_expected([1.0], "FP64"), np.array([1.0], dtype=np.float32), "FP32")
    assert result == Comparison("OUT", False, "output 'OUT' datatype FP32, expected FP64")


def test_shape_mismatch() -> None:
    result = _compare(_expected([[1.0, 2.0]]), [1.0, 2.0])
    assert result == Comparison("OUT", False, "output 'OUT' shape [2], expected [1, 2]")


def test_same_values_in_a_transposed_shape_fail() -> None:
    result = _compare(_expected([[1.0], [1.0]]), [[1.0, 1.0]])
    assert not result.ok
    assert result.reason == "output 'OUT' shape [1, 2], expected [2, 1]"


# --- integers and bytes ----------------------------------------------------------------------------------


def test_int64_exact_compare() -> None:
    golden = _expected([[1], [2], [3]], "INT64")
    assert _compare(golden, [[1], [2], [3]]).ok
    result = _compare(golden, [[1], [2], [4]])
    assert not result.ok
    assert result.worst == Mismatch((2, 0), 3, 4, 1.0, 0.0)
    assert result.reason == "output 'OUT': 1/3 values off; worst [2,0] expected 3 got 4 (|error| 1 > allowed 0)"


@pytest.mark.parametrize(
    ("datatype", "expected", "actual"),
    [
        pytest.param("INT64", 2**53 + 1, 2**53, id="int64-beyond-float64-precision"),
        pytest.param("INT64", -(2**63), 2**63 - 1, id="int64-extremes"),
        pytest.param("UINT64", 2**64 - 1, 2**64 - 2, id="uint64-max"),
    ],
)
def test_large_integers_are_compared_exactly(datatype: str, expected: int, actual: int) -> None:
    result = _compare(_expected([expected, 5], datatype), [actual, 5])
    assert not result.ok
    assert result.worst is not None
    assert (result.worst.index, result.worst.expected, result.worst.actual) == ((0,), expected, actual)
    assert result.worst.abs_error == float(abs(actual - expected))
    assert _compare(_expected([expected, 5], datatype), [expected, 5]).ok


def test_integer_tolerance_still_applies() -> None:
    assert _compare(_expected([10, 20], "INT32", atol=1.0), [11, 19]).ok
    assert not _compare(_expected([10, 20], "INT32", atol=1.0), [12, 20]).ok


def test_bytes_exact_compare() -> None:
    golden = _expected([b"cat", b"dog"], "BYTES", atol=1e9, rtol=1e9)
    same = compare_output(golden, np.array([b"cat", b"dog"], dtype=object), "BYTES")
    assert same == Comparison("OUT", True, "", 0, 2)

    result = compare_output(golden, np.array([b"cat", b"dot"], dtype=object), "BYTES")
    assert not result.ok
    assert (result.mismatched, result.total) == (1, 2)
    assert result.worst == Mismatch((1,), "dog", "dot", None, None)
    assert result.reason == "output 'OUT': 1/2 values off; worst [1] expected 'dog' got 'dot'"


def test_bytes_first_mismatch_is_reported() -> None:
    golden = _expected([[b"a", b"b"], [b"c", b"d"]], "BYTES")
    result = compare_output(golden, np.array([[b"a", b"x"], [b"y", b"d"]], dtype=object), "BYTES")
    assert result.mismatched == 2
    assert result.worst is not None
    assert result.worst.index == (0, 1)


# --- JSON ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("golden", "actual", "worst"),
    [
        pytest.param(
            _expected([1.0, 2.0]),
            [1.0, NAN],
            {"index": [1], "expected": 2.0, "actual": "nan", "abs_error": None, "allowed": 0.0},
            id="nan-actual",
        ),
        pytest.param(
            _expected([NAN], "FP32"),
            [3.0],
            {"index": [0], "expected": "nan", "actual": 3.0, "abs_error": None, "allowed": None},
            id="nan-expected",
        ),
        pytest.param(
            _expected([INF]),
            [-INF],
            {"index": [0], "expected": "inf", "actual": "-inf", "abs_error": None, "allowed": None},
            id="opposite-infinities",
        ),
        pytest.param(
            _expected([1e308]),
            [-1e308],
            {"index": [0], "expected": 1e308, "actual": -1e308, "abs_error": None, "allowed": 0.0},
            id="finite-error-overflows",
        ),
        pytest.param(
            _expected([b"\xff"], "BYTES"),
            np.array([b"ok"], dtype=object),
            {"index": [0], "expected": "\ufffd", "actual": "ok", "abs_error": None, "allowed": None},
            id="undecodable-bytes",
        ),
    ],
)
def test_to_dict_is_strict_json(golden: ExpectedOutput, actual: Any, worst: dict[str, Any]) -> None:
    result = _compare(golden, actual)
    assert not result.ok
    data = _json(result)
    assert data["worst"] == worst
    assert data["ok"] is False
    assert data["reason"] == result.reason
    assert (data["mismatched"], data["total"]) == (result.mismatched, result.total)


@pytest.mark.parametrize(
    ("expected", "actual"),
    [([INF], [-INF]), ([INF], [1e308]), ([NAN], [1.0]), ([1e308], [-1e308]), ([1.0], [NAN])],
)
def test_non_finite_values_raise_no_numpy_warnings(expected: list[float], actual: list[float]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not _compare(_expected(expected, atol=1e300, rtol=1.0), actual).ok


# --- a golden request that timed out -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("liveness_passed", "readiness_passed", "status"),
    [
        (True, True, Status.FAIL),  # live, this version ready, and no answer: the model hangs
        (True, False, Status.ERROR),  # the version is not ready: the readiness tier owns that
        (False, True, Status.ERROR),  # Triton not live: nothing learnt about the model
        (False, False, Status.ERROR),
    ],
)
def test_timeout_status(liveness_passed: bool, readiness_passed: bool, status: Status) -> None:
    assert timeout_status(liveness_passed=liveness_passed, readiness_passed=readiness_passed) is status


@pytest.mark.parametrize(
    ("worst_actuals", "code"),
    [
        ([12.1], WRONG_ANSWER),
        (["nan"], NON_FINITE),
        (["inf"], NON_FINITE),
        (["-inf"], NON_FINITE),
        ([3.0, "nan"], NON_FINITE),  # any output with a non-finite worst value
        (["cat"], WRONG_ANSWER),  # BYTES
        ([], WRONG_ANSWER),  # missing output or wrong shape: no worst element
    ],
)
def test_wrong_answer_code(worst_actuals: list[Any], code: str) -> None:
    assert wrong_answer_code(worst_actuals) == code
