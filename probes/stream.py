"""Golden requests over Triton's generate extension (pure): the JSON body a request sends, its answer's
fields as outputs, and the judgement of a ``generate`` answer or of a ``generate_stream`` stream.

A request's inputs are the body's fields by name (one value: a scalar, else a list; BYTES as text),
its ``parameters`` the body's ``parameters``. A ``generate`` answer is one JSON object; a stream is its
events (LLM backends send deltas), each output the concatenation of the events' values of that field:
texts joined, lists and numbers in order. The answer is judged by the same comparators as ``infer``'s
(probes/compare.py, ``expect``).

A stream's times come from the edge (healer/edges/triton_rest.py: each event with the time it arrived,
then how the stream ended, healer/core/streams.py), so the judgement is a function of them:

* an ``error`` event (the model failed mid-stream): ``fail``, code ``model-error``;
* no event for the stall limit, or the stream still open at ``timeout_s``: the model hangs, ``fail``
  code ``timeout`` when Triton was live and the version ready in the same cycle, else ``error``;
* a wrong answer: ``fail`` (the comparators' why);
* a first token after ``first_token_slo_ms``, a largest gap between two tokens over
  ``inter_token_slo_ms``, or a whole stream over ``latency_slo_ms``: ``fail``, code ``slow``;
* else ``pass``.

A token is an event carrying a non-empty value in an expected output's field (a last event with
nothing in it, as Triton sends when the model ends its stream, is none).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from healer.core.results import ProbeResult, Status, Tier
from healer.core.streams import StreamEnd, StreamEvent, StreamItem
from healer.settings import DATATYPES, GoldenRequest, TensorSpec
from healer.vocabulary import MODEL_ERROR, SLOW, TIMEOUT, WRONG_ANSWER
from probes.comparators import shown
from probes.compare import Comparison, compare_output, timeout_status, wrong_answer_code
from probes.suite import NO_ANSWER

Answer = Mapping[str, Any]  # a generate answer, or a stream's events' fields concatenated

# A stream is read as it comes, never kept whole (the sidecar's budget is 64 MiB): at most MAX_EVENTS
# events and MAX_ANSWER_CHARS of its expected outputs concatenated. More is a runaway generation.
MAX_EVENTS = 10_000
MAX_ANSWER_CHARS = 256 << 10


def json_body(request: GoldenRequest) -> dict[str, Any]:
    """The JSON body of a generate or generate_stream request: each input a field, then the parameters."""
    body: dict[str, Any] = {tensor.name: _json_value(tensor) for tensor in request.inputs}
    if request.parameters:
        body["parameters"] = dict(request.parameters)
    return body


def _json_value(tensor: TensorSpec) -> Any:
    items = [_plain(item) for item in np.asarray(tensor.values).reshape(-1)]
    return items[0] if len(items) == 1 else items


def _plain(item: Any) -> Any:
    if isinstance(item, bytes):
        return item.decode("utf-8", errors="replace")
    return item.item() if isinstance(item, np.generic) else item


def field_values(value: Any, datatype: str) -> tuple[npt.NDArray[Any], str]:
    """An answer's field as an output tensor (values, datatype): a text one BYTES element, a list one
    element each, a number one element of the expected datatype. A text where numbers are expected comes
    back as BYTES, so the comparison names the datatype that came."""
    items = value if isinstance(value, list) else [value]
    if datatype == "BYTES" or any(isinstance(item, str | dict | list) for item in items):
        array = np.empty(len(items), dtype=np.object_)
        array[:] = [item.encode() if isinstance(item, str) else str(item).encode() for item in items]
        return array, "BYTES"
    try:
        return np.array(items, dtype=DATATYPES[datatype]), datatype
    except (TypeError, ValueError, OverflowError):
        return np.array([str(items).encode()], dtype=np.object_), "BYTES"


def concatenated(request: GoldenRequest, events: Sequence[StreamEvent]) -> dict[str, Any]:
    """Each expected output's field over the stream's events: texts joined, values in order (absent from
    every event: absent)."""
    answer: dict[str, Any] = {}
    for expected in request.outputs:
        name = expected.tensor.name
        parts = [event.data[name] for event in events if name in event.data and event.data[name] is not None]
        if not parts:
            continue
        if all(isinstance(part, str) for part in parts):
            answer[name] = "".join(parts)
        else:
            answer[name] = [item for part in parts for item in (part if isinstance(part, list) else [part])]
    return answer


def compare_answer(request: GoldenRequest, answer: Answer) -> list[Comparison]:
    """Every expected output against its field of the answer."""
    comparisons = []
    for expected in request.outputs:
        name = expected.tensor.name
        if name not in answer:
            comparisons.append(compare_output(expected, None, None))
            continue
        values, datatype = field_values(answer[name], expected.tensor.datatype)
        comparisons.append(compare_output(expected, values, datatype))
    return comparisons


@dataclass(frozen=True)
class Timings:
    """A stream's times, in seconds since the request was sent."""

    events: int
    tokens: int
    first_token_s: float | None  # None: no token came
    max_gap_s: float | None  # the largest gap between two tokens; None: fewer than two
    total_s: float  # when the stream ended or was given up

    def to_dict(self) -> dict[str, Any]:
        def ms(value: float | None) -> float | None:
            return None if value is None else round(value * 1000, 3)

        return {
            "events": self.events,
            "tokens": self.tokens,
            "first_token_ms": ms(self.first_token_s),
            "max_gap_ms": ms(self.max_gap_s),
            "total_ms": ms(self.total_s),
        }


def timings(request: GoldenRequest, events: Sequence[StreamEvent], end: StreamEnd) -> Timings:
    names = [o.tensor.name for o in request.outputs]
    tokens = [e.at for e in events if any(e.data.get(name) not in (None, "", []) for name in names)]
    gaps = [b - a for a, b in itertools.pairwise(tokens)]
    return Timings(
        events=len(events),
        tokens=len(tokens),
        first_token_s=tokens[0] if tokens else None,
        max_gap_s=max(gaps) if gaps else None,
        total_s=end.at,
    )


class StreamReading:
    """A stream read item by item (pure, bounded): its running timings (count, first token, largest gap
    between two tokens), its expected outputs' parts, its first error event, how it ended. ``add`` says
    when nothing more is worth reading: the end, an error event, or a cap passed (``over``)."""

    def __init__(self, request: GoldenRequest) -> None:
        self.request = request
        self.names = [o.tensor.name for o in request.outputs]
        self.parts: dict[str, list[Any]] = {name: [] for name in self.names}
        self.events = 0
        self.tokens = 0
        self.first_token_s: float | None = None
        self.max_gap_s: float | None = None
        self.last_token_s: float | None = None
        self.last_s = 0.0
        self.size = 0
        self.error: tuple[int, Any] | None = None  # (events before it, its message)
        self.end: StreamEnd | None = None
        self.over = ""

    def add(self, item: StreamItem) -> bool:
        """One item of the stream; False when the rest need not be read."""
        if isinstance(item, StreamEnd):
            self.end = item
            self.over = self.over or item.over
            return False
        if self.error is not None or self.over:
            return False
        if self.events >= MAX_EVENTS:
            self.over = f"more than {MAX_EVENTS} events"
            return False
        self.last_s = item.at
        if isinstance(item.data.get("error"), str):
            self.error = (self.events, item.data["error"])
            self.events += 1
            return False
        self.events += 1
        token = False
        for name in self.names:
            value = item.data.get(name)
            if value is None:
                continue
            token = token or value not in ("", [])
            self.parts[name].append(value)
            self.size += len(value) if isinstance(value, str) else len(json.dumps(value, default=str))
        if token:
            if self.last_token_s is not None:
                gap = item.at - self.last_token_s
                self.max_gap_s = gap if self.max_gap_s is None else max(self.max_gap_s, gap)
            else:
                self.first_token_s = item.at
            self.last_token_s = item.at
            self.tokens += 1
        if self.size > MAX_ANSWER_CHARS:
            self.over = f"answer over {MAX_ANSWER_CHARS >> 10} KiB"
            return False
        return True

    def answer(self) -> dict[str, Any]:
        """Each expected output's parts as concatenated() joins them."""
        return {name: _joined(parts) for name, parts in self.parts.items() if parts}

    def timings(self, end: StreamEnd) -> Timings:
        return Timings(self.events, self.tokens, self.first_token_s, self.max_gap_s, end.at)


def _joined(parts: Sequence[Any]) -> Any:
    if all(isinstance(part, str) for part in parts):
        return "".join(parts)
    return [item for part in parts for item in (part if isinstance(part, list) else [part])]


def judge_generate(request: GoldenRequest, model: str, version: str, answer: Answer, elapsed_s: float) -> ProbeResult:
    """A ``generate`` answer: its fields against the expected outputs, then the latency SLO."""
    details = {**_base(request), "outputs": []}
    return _judged(request, model, version, answer, elapsed_s, details, slow=_slow_total(request, elapsed_s))


def judge_stream(
    request: GoldenRequest, model: str, version: str, items: Sequence[StreamItem], *, serving_confirmed: bool
) -> ProbeResult:
    """A ``generate_stream`` stream from its events and end, with their times (see the module's rules)."""
    reading = StreamReading(request)
    for item in items:
        if not reading.add(item):
            break
    return judge_reading(reading, model, version, serving_confirmed=serving_confirmed)


def judge_reading(reading: StreamReading, model: str, version: str, *, serving_confirmed: bool) -> ProbeResult:
    """A stream as read (StreamReading: fed by the prober as the edge yields it)."""
    request = reading.request
    end = reading.end
    if end is None:  # the reading stopped early (an error event, a cap), or the stream was cut short of its end
        end = StreamEnd(reading.last_s, closed=False, stalled=not (reading.error or reading.over))
    times = reading.timings(end)
    details: dict[str, Any] = {**_base(request), **times.to_dict(), "request_name": request.name}
    for name in ("first_token_slo_ms", "inter_token_slo_ms"):
        if getattr(request, name) is not None:
            details[name] = getattr(request, name)

    def result(status: Status, reason: str, code: str = "", **more: Any) -> ProbeResult:
        return _result(status, model, version, end.at, reason, {**details, **more}, code)

    if reading.error is not None:
        before, error = reading.error
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return result(
            Status.FAIL, f"the stream carried an error after {before} event(s): {message}", MODEL_ERROR, error=error
        )
    so_far = reading.answer()
    if reading.over:
        return _over(reading.over, result, times, so_far, serving_confirmed)
    if not end.closed:
        return _hang(request, result, end, times, so_far, serving_confirmed)
    return _judged(request, model, version, so_far, end.at, details, slow=_slow_stream(request, times))


def _over(
    over: str, result: Callable[..., ProbeResult], times: Timings, so_far: Answer, serving_confirmed: bool
) -> ProbeResult:
    """A runaway generation: more than the caps allow read. The version's failure when serving is confirmed."""
    text = next((v for v in so_far.values() if isinstance(v, str)), None)
    what = f"{over} after {times.events} event(s)" + (f" ({shown(text, 40)})" if text else "")
    if serving_confirmed:
        return result(Status.FAIL, f"{what}: max_tokens ignored? a runaway generation", WRONG_ANSWER, over=over)
    return result(Status.ERROR, f"{what}; Triton's liveness or the version's readiness not confirmed", over=over)


def _hang(
    request: GoldenRequest,
    result: Callable[..., ProbeResult],
    end: StreamEnd,
    times: Timings,
    so_far: Answer,
    serving_confirmed: bool,
) -> ProbeResult:
    text = next((v for v in so_far.values() if isinstance(v, str)), None)
    after = f"after {times.events} event(s)" + (f" ({shown(text, 40)})" if text else "")
    if end.stalled:
        what = f"the stream stalled: no event for {request.stall_limit_s:g} s {after}"
    elif times.events:  # events kept coming until the timeout: slow, not hanging
        return result(
            Status.FAIL,
            f"still streaming after {request.timeout_s:g} s (timeout_s), {after}",
            SLOW,
            timeout_s=request.timeout_s,
            stalled=False,
        )
    else:
        what = f"the stream still open after timeout {request.timeout_s:g} s, {after}"
    status = timeout_status(liveness_passed=serving_confirmed, readiness_passed=serving_confirmed)
    more = {"stall_s": request.stall_limit_s, "timeout_s": request.timeout_s, "stalled": end.stalled}
    if status is Status.FAIL:
        return result(
            Status.FAIL, f"{what} while Triton is live and the version ready: the model hangs", TIMEOUT, **more
        )
    return result(
        Status.ERROR, f"{what}; Triton's liveness or the version's readiness not confirmed", **more, **{NO_ANSWER: True}
    )


def _slow_stream(request: GoldenRequest, times: Timings) -> str:
    """Why a right stream is too slow ("" when it is not): first token, then the largest gap, then the total."""
    first, gap = request.first_token_slo_ms, request.inter_token_slo_ms
    if first is not None and times.first_token_s is not None and times.first_token_s * 1000 > first:
        return f"first token after {times.first_token_s * 1000:.1f} ms > SLO {first:g} ms"
    if gap is not None and times.max_gap_s is not None and times.max_gap_s * 1000 > gap:
        return f"a gap of {times.max_gap_s * 1000:.1f} ms between two tokens > inter-token SLO {gap:g} ms"
    return _slow_total(request, times.total_s)


def _slow_total(request: GoldenRequest, elapsed_s: float) -> str:
    if elapsed_s * 1000 > request.latency_slo_ms:
        return f"the whole answer took {elapsed_s * 1000:.1f} ms > SLO {request.latency_slo_ms:g} ms"
    return ""


def _judged(
    request: GoldenRequest,
    model: str,
    version: str,
    answer: Answer,
    elapsed_s: float,
    details: dict[str, Any],
    *,
    slow: str,
) -> ProbeResult:
    comparisons = compare_answer(request, answer)
    details = {**details, "outputs": [c.to_dict() for c in comparisons]}
    wrong = [c for c in comparisons if not c.ok]
    if wrong:
        code = wrong_answer_code(c.worst.actual for c in wrong if c.worst is not None)
        return _result(Status.FAIL, model, version, elapsed_s, "; ".join(c.reason for c in wrong), details, code)
    if slow:
        return _result(Status.FAIL, model, version, elapsed_s, f"correct answer but slow: {slow}", details, SLOW)
    return _result(Status.PASS, model, version, elapsed_s, "", details)


def _base(request: GoldenRequest) -> dict[str, Any]:
    return {"input_hash": request.input_hash, "latency_slo_ms": request.latency_slo_ms, "endpoint": request.endpoint}


def _result(
    status: Status, model: str, version: str, elapsed_s: float, reason: str, details: dict[str, Any], code: str = ""
) -> ProbeResult:
    return ProbeResult(
        tier=Tier.BUSINESS,
        status=status,
        model=model,
        version=version,
        latency_ms=elapsed_s * 1000,
        reason=reason,
        details=details,
        code=code,
    )
