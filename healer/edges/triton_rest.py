"""TritonAPI over the standard library's http.client: the in-pod sidecar's Triton client.

Why not tritonclient here: tritonclient.http pulls in gevent and its hub (about 14 MiB of the
sidecar's resident memory) for the handful of calls a probe makes, and it is not thread-safe, so a
sidecar on it must probe models one after another. This client is safe to share between threads: a
call takes an idle HTTP/1.1 connection from a small pool (or opens one) and hands it back only when its
answer was read whole and in time (a new TCP connection per call was about 30 % of the prober's time with
a golden suite of 10 on 100 models, issue 30). It speaks the same wire format as tritonclient with
``binary_data=True``: the JSON header plus raw tensor bytes (Triton's binary tensor extension), so NaN and
Inf reach the comparison exactly as Triton sent them.

Kept connections: at most MAX_IDLE_CONNECTIONS idle ones (one per probe worker is what a sidecar uses);
one that failed, timed out, was cut off, was answered too large or "Connection: close" is closed, never
reused; an idle one the server closed meanwhile is noticed before it is used (a peek at its socket), and
when the server closes it just as a call is sent (the write fails, or the connection closes within
STALE_CLOSE_S with no byte of an answer), the call is sent once more on a new connection, unless it is a
repository call (load, unload, index: never sent twice). A stream (``generate_stream``) has a
connection of its own, closed when the stream ends: it can be cut off halfway.

Errors come out as healer/edges/triton.py describes: ``TritonUnavailable`` (no answer: refused, reset,
502/503/504, or no connection in time), ``TritonTimeout`` (the request went out and no answer came
in time), ``TritonRejected`` (Triton answered with an error status).
"""

from __future__ import annotations

import http.client
import json
import struct
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import numpy as np
import numpy.typing as npt

from healer.core.streams import StreamEnd, StreamEvent, StreamItem
from healer.edges.http_pool import PIECE, Connection, Pool
from healer.edges.triton_types import (
    UNAVAILABLE_STATUSES,
    IndexEntry,
    OutputTensor,
    TritonRejected,
    TritonTimeout,
    TritonTooLarge,
    TritonUnavailable,
    error_message,
    served_in,
    wire_array,
)
from healer.settings import DATATYPES, TensorSpec, parse_address

HEADER_LENGTH = "Inference-Header-Content-Length"


class TritonRest:
    """TritonAPI over plain HTTP/1.1; safe to share between threads (a connection serves one call at a time)."""

    thread_safe = True

    def __init__(self, url: str, *, timeout_s: float) -> None:
        try:
            host, port = parse_address(url, url=False)  # host:port or [v6]:port, the brackets removed
        except ValueError as exc:
            raise ValueError(f"Triton url {exc}") from None
        if port is None:
            raise ValueError(f"Triton url must be host:port, got {url!r}")
        self.url = url
        self.timeout_s = timeout_s
        self._host = host
        self._port = port
        self._pool = Pool(host, port, MAX_IDLE_CONNECTIONS)

    # ---- health and metadata ----------------------------------------------------------------------

    def server_live(self) -> bool:
        # As tritonclient's is_server_live: any answer but 200 means "not live"; no answer raises.
        status, _, _ = self._request("GET", "/v2/health/live", timeout_s=self.timeout_s)
        return status == 200

    def model_version_ready(self, model: str, version: str) -> bool:
        """True on 200, False when Triton says not ready (400/404); 502/503/504 or no answer raises."""
        status, _, body = self._request(
            "GET", f"/v2/models/{_part(model)}/versions/{_part(version)}/ready", timeout_s=self.timeout_s
        )
        if status == 200:
            return True
        if status in (400, 404):
            return False
        raise _rejected(status, body)

    def served_versions(self, model: str) -> list[str]:
        """Versions Triton serves for a model right now ([] when none is available)."""
        status, _, body = self._request("GET", f"/v2/models/{_part(model)}", timeout_s=self.timeout_s)
        if status in (400, 404):
            return []
        return served_in(self._json(status, body))

    def repository_index(self) -> list[IndexEntry]:
        status, _, body = self._request("POST", "/v2/repository/index", b"{}", timeout_s=self.timeout_s)
        return [IndexEntry.from_row(row) for row in self._json(status, body)]

    def model_config(self, model: str) -> dict[str, Any]:
        status, _, body = self._request("GET", f"/v2/models/{_part(model)}/config", timeout_s=self.timeout_s)
        return dict(self._json(status, body))

    def model_metadata(self, model: str, version: str) -> dict[str, Any]:
        """One served version's metadata: its inputs and outputs (see TritonHttp)."""
        status, _, body = self._request(
            "GET", f"/v2/models/{_part(model)}/versions/{_part(version)}", timeout_s=self.timeout_s
        )
        return dict(self._json(status, body))

    # ---- inference -------------------------------------------------------------------------------

    def infer(
        self,
        model: str,
        version: str,
        inputs: Sequence[TensorSpec],
        output_names: Sequence[str],
        timeout_s: float,
        *,
        parameters: Mapping[str, Any] | None = None,
    ) -> dict[str, OutputTensor]:
        header: dict[str, Any] = {"inputs": [], "outputs": []}
        if parameters:
            header["parameters"] = dict(parameters)
        blobs: list[bytes] = []
        for tensor in inputs:
            raw = _to_bytes(wire_array(tensor), tensor.datatype)
            header["inputs"].append(
                {
                    "name": tensor.name,
                    "shape": list(tensor.shape),
                    "datatype": tensor.datatype,
                    "parameters": {"binary_data_size": len(raw)},
                }
            )
            blobs.append(raw)
        header["outputs"] = [{"name": name, "parameters": {"binary_data": True}} for name in output_names]
        head = json.dumps(header, separators=(",", ":")).encode()
        status, headers, body = self._request(
            "POST",
            f"{_version_path(model, version)}/infer",
            head + b"".join(blobs),
            timeout_s=timeout_s,
            headers={HEADER_LENGTH: str(len(head)), "Content-Type": "application/octet-stream"},
        )
        json_length = headers.get(HEADER_LENGTH.lower())
        split = int(json_length) if json_length and json_length.isdigit() else len(body)
        response = self._json(status, body[:split])
        try:
            return _outputs(response, body[split:])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # not the shape Triton answers in
            raise TritonUnavailable(f"garbled answer: {type(exc).__name__}: {exc}") from exc

    # ---- Triton's generate extension ---------------------------------------------------------------

    def generate(self, model: str, version: str, body: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
        """``POST .../generate``: one JSON answer. Triton answers some failures 200 with an ``error`` field
        (a decoupled model that sends more than one response): a TritonRejected as any error status."""
        status, _, data = self._request(
            "POST",
            f"{_version_path(model, version)}/generate",
            json.dumps(dict(body), separators=(",", ":")).encode(),
            timeout_s=timeout_s,
            headers={"Content-Type": "application/json"},
            max_bytes=MAX_GENERATE_BYTES,
        )
        answer = self._json(status, data)
        if not isinstance(answer, dict):
            raise TritonUnavailable(f"garbled answer: not a JSON object: {data[:200]!r}")
        if isinstance(answer.get("error"), str):
            raise TritonRejected(status, answer["error"])
        return answer

    def generate_stream(
        self, model: str, version: str, body: Mapping[str, Any], *, timeout_s: float, stall_s: float
    ) -> Iterator[StreamItem]:
        """``POST .../generate_stream``: each server-sent event as it arrives (``StreamEvent``, its time in
        seconds since the request was sent), then one ``StreamEnd``: closed by Triton, or given up when no
        event came for ``stall_s`` (stalled) or ``timeout_s`` passed. Every read waits at most until the
        sooner of the two; at most MAX_ANSWER_BYTES are read. Raises TritonUnavailable when no stream
        starts (refused, reset, a garbled event) and TritonRejected when Triton answers an error status
        (the model raised: 400 with its message in an event)."""
        path = f"{_version_path(model, version)}/generate_stream"
        # A connection of its own, never kept: a stream given up halfway leaves its answer unread.
        connection = self._connect(min(timeout_s, self.timeout_s))
        try:
            limits = _Limits(time.monotonic(), timeout_s, stall_s)
            connection.bounded.left = limits.left  # the request sent within the limits too
            try:
                connection.http.request(
                    "POST",
                    path,
                    body=json.dumps(dict(body), separators=(",", ":")).encode(),
                    headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
                )
            except (OSError, http.client.HTTPException, _GivenUp) as exc:
                raise _unavailable(exc) from exc
            yield from _events(connection.http.getresponse, limits)
        finally:
            connection.close()

    # ---- repository ------------------------------------------------------------------------------

    def load_model(self, model: str, *, config: str | None = None, timeout_s: float) -> None:
        """Load (or reload) a model; returns when loaded, raises when the load failed (see TritonHttp)."""
        payload = {"parameters": {"config": config}} if config is not None else {}
        status, _, body = self._request(
            "POST", f"/v2/repository/models/{_part(model)}/load", json.dumps(payload).encode(), timeout_s=timeout_s
        )
        self._json(status, body, empty_ok=True)

    def unload_model(self, model: str) -> None:
        status, _, body = self._request(
            "POST", f"/v2/repository/models/{_part(model)}/unload", b"{}", timeout_s=self.timeout_s
        )
        self._json(status, body, empty_ok=True)

    def close(self) -> None:
        """Close the idle connections (a call after this opens a new one, kept as before)."""
        self._pool.close()

    # ---- the one place that touches the network ----------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        timeout_s: float,
        headers: dict[str, str] | None = None,
        max_bytes: int = 0,
    ) -> tuple[int, dict[str, str], bytes]:
        """One call under one deadline: a kept connection (or a new one, connected within the client's
        timeout at most), send, then the answer read in pieces, each with what is left of ``timeout_s`` (a
        server trickling bytes cannot stretch it), and at most MAX_ANSWER_BYTES of it (a runaway output
        cannot exhaust the pod). The connection is kept for the next call only when the answer was read
        whole; after any failure it is closed.

        Sent once more, on a new connection, only when a kept connection went stale while idle (the
        server closed it, and that crossed this call): the send itself failed with a reset or a broken
        pipe, or the connection closed, with no byte of an answer, within STALE_CLOSE_S of the request
        going out (see there). Triton may then have been sent the request: harmless for the calls sent
        again. Reads (health, metadata, config) change nothing; an inference or a generate asks a model for
        an answer and Triton keeps nothing from it (a golden request is a single request, not part of a
        stateful sequence). A repository call (POST /v2/repository/...: load, unload, index) is never sent
        again: Triton may have worked on it for long before the connection went, and that failure is
        reported as it came, not hidden behind a second load. A timeout, a failure after part of an answer
        came, or a close later than STALE_CLOSE_S is never sent again."""
        deadline = time.monotonic() + timeout_s
        connection = self._pool.kept()
        while True:
            if connection is None:
                connection = self._connect(max(min(deadline - time.monotonic(), self.timeout_s), 0.001))
            connection.bounded.left = lambda: _left(deadline)
            try:
                return self._exchange(connection, method, path, body, headers, timeout_s, max_bytes)
            except _ClosedWhileIdle as closed:
                if not _may_resend(method, path) or time.monotonic() >= deadline:
                    raise _unavailable(closed.error) from closed.error
                connection = None  # once: a new connection is never _ClosedWhileIdle

    def _exchange(
        self,
        connection: Connection,
        method: str,
        path: str,
        body: bytes | None,
        headers: dict[str, str] | None,
        timeout_s: float,
        max_bytes: int,
    ) -> tuple[int, dict[str, str], bytes]:
        """One request and its answer on ``connection``: kept when the answer was read whole, closed otherwise."""
        reused = connection.used
        connection.used = True
        connection.bounded.received = 0
        try:
            try:
                connection.http.request(method, path, body=body, headers=headers or {})
            except (OSError, http.client.HTTPException) as exc:
                if reused and isinstance(exc, ConnectionError):
                    raise _ClosedWhileIdle(exc) from exc
                # Refused, unreachable, or the request not taken in time: nothing was answered, and
                # nothing says the model hangs.
                raise _unavailable(exc) from exc
            sent = time.monotonic()
            # Every read of the answer (status line and headers too) waits at most what is left of the
            # deadline, however the server trickles its bytes.
            try:
                response = connection.http.getresponse()
                data = _read_within(response, max_bytes or MAX_ANSWER_BYTES)
            except TimeoutError as exc:
                raise TritonTimeout(f"no answer within {timeout_s:g}s: {method} {path}") from exc
            except (OSError, http.client.HTTPException) as exc:  # reset, closed, a garbled answer
                stale = reused and connection.bounded.received == 0 and time.monotonic() - sent <= STALE_CLOSE_S
                if stale and isinstance(exc, ConnectionError):
                    raise _ClosedWhileIdle(exc) from exc  # RemoteDisconnected is a ConnectionResetError
                raise _unavailable(exc) from exc
        except BaseException:
            connection.close()
            raise
        # Read whole: a chunked answer closes itself at its last chunk; one with a length is read to it.
        whole = response.isclosed() if response.chunked else response.length == 0
        response.close()
        if response.will_close or not whole or connection.http.sock is not connection.bounded:
            connection.close()  # "Connection: close" (or no length: read to the end), or not read whole
        else:
            self._pool.keep(connection)
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data

    def _connect(self, timeout_s: float) -> Connection:
        """A new connection within ``timeout_s``; TritonUnavailable when none (refused, unreachable, not in
        time: nothing says a model hangs)."""
        try:
            return self._pool.connect(timeout_s)
        except (OSError, http.client.HTTPException) as exc:
            raise _unavailable(exc) from exc

    @staticmethod
    def _json(status: int, body: bytes, *, empty_ok: bool = False) -> Any:
        if status != 200:
            raise _rejected(status, body)
        if not body and empty_ok:
            return {}
        try:
            return json.loads(body)
        except ValueError as exc:
            raise TritonUnavailable(f"answer is not JSON: {body[:200]!r}") from exc


# The longest answer read: a golden request's outputs are small; a version answering with a runaway
# tensor must not take the sidecar's memory (64 MiB) with it.
MAX_ANSWER_BYTES = 16 << 20
# generate's JSON answer: parsed whole, so a smaller cap (16 MiB of JSON takes ~200 MiB once parsed).
MAX_GENERATE_BYTES = 1 << 20
# A stream's events: each is yielded and let go, but a runaway one is read no further.
MAX_STREAM_EVENTS = 10_000
# A kept connection that closes, with no byte of an answer, within this long of a request going out was
# closed by the server while idle (its close crossed the request), and the call is sent once more. The
# close of an idle connection reaches the client one round trip after the request at most: well under a
# millisecond on the pod's loopback, a few across a cluster's network; 50 ms leaves room for a busy
# node's scheduler and stays far below what Triton's work on a request takes. A close later than this
# came after the server had the request for a while (it worked on it, then crashed or was cut off): that
# failure is reported, never hidden behind a second send.
STALE_CLOSE_S = 0.05
# Never sent twice: a repository call (load, unload, index) may have run for long before its connection
# went; a second load would hide the first's failure and run it all again.
NOT_RESENT_PREFIX = "/v2/repository/"
# Idle connections kept per client: the sidecar probes 8 models at once by default (probe_concurrency);
# a connection handed back past this many is closed.
MAX_IDLE_CONNECTIONS = 16


def _unavailable(exc: BaseException) -> TritonUnavailable:
    return TritonUnavailable(f"{type(exc).__name__}: {exc}".strip())


class _ClosedWhileIdle(Exception):
    """A kept connection failed before any byte of an answer came: the server closed it while it was idle."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _may_resend(method: str, path: str) -> bool:
    """Whether a call whose kept connection went stale may be sent once more: any but a repository POST."""
    return not (method == "POST" and path.startswith(NOT_RESENT_PREFIX))


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline passed")
    return left


def _read_within(response: http.client.HTTPResponse, max_bytes: int = MAX_ANSWER_BYTES) -> bytes:
    """The answer's body, at most ``max_bytes`` (each read bounded by the connection's limits);
    TritonTooLarge past it, read no further; IncompleteRead when the connection closed before the length
    the answer said (a cut answer is never judged as if whole)."""
    pieces: list[bytes] = []
    size = 0
    while True:
        piece = response.read1(min(PIECE, max_bytes + 1 - size))
        if not piece:
            break
        pieces.append(piece)
        size += len(piece)
        if size > max_bytes:
            raise TritonTooLarge(f"answer larger than {_size(max_bytes)}")
    if not response.chunked and response.length:  # http.client's read1 ends at a close, short or not
        raise http.client.IncompleteRead(b"".join(pieces), response.length)
    return b"".join(pieces)


def _size(count: int) -> str:
    return f"{count >> 20} MiB" if count >= 1 << 20 else f"{count >> 10} KiB"


def _part(text: str) -> str:
    return quote(text, safe="")


def _version_path(model: str, version: str) -> str:
    """The model's path, at ``version``; "" is the version Triton chooses (as tritonclient leaves it out)."""
    if not version:
        return f"/v2/models/{_part(model)}"
    return f"/v2/models/{_part(model)}/versions/{_part(version)}"


_LINE_LIMIT = 1 << 20  # the longest line of a stream read (an event is one line)


class _Over(Exception):
    """More of a stream than is read: a runaway generation (its StreamEnd says ``over``)."""


class _GivenUp(Exception):
    """No event within the stall limit, or the request's deadline passed."""


@dataclass
class _Limits:
    """The stall limit (from the last event, or the request) and the request's deadline, for every read."""

    started: float
    timeout_s: float
    stall_s: float
    last: float = 0.0

    def left(self) -> float:
        """The longest the next read may wait; _GivenUp when a limit has passed already."""
        left = min((self.last or self.started) + self.stall_s, self.started + self.timeout_s) - time.monotonic()
        if left <= 0:
            raise _GivenUp
        return left

    def end(self, *, closed: bool) -> StreamEnd:
        now = time.monotonic()
        return StreamEnd(now - self.started, closed=closed, stalled=not closed and now < self.started + self.timeout_s)


def _events(response_of: Callable[[], http.client.HTTPResponse], limits: _Limits) -> Iterator[StreamItem]:
    """A started stream's events as they arrive, then its end."""
    try:
        response = response_of()  # Triton answers its headers with the first event
        if response.status != 200:
            try:
                body = _read_within(response)
            except (_GivenUp, TimeoutError) as exc:  # an error status came: an answer, slow, not a stall
                raise TritonTimeout(f"HTTP {response.status}: its body not read within the limits") from exc
            raise _rejected(response.status, _sse_data(body))
        pending: list[bytes] = []
        size = count = 0
        for line in _lines(response):
            text = line.rstrip(b"\r\n")
            if text.startswith(b"data:"):
                pending.append(text[5:].strip())
                size += len(text)
                if size > _LINE_LIMIT:
                    raise TritonUnavailable(f"garbled stream: an event over {_LINE_LIMIT >> 20} MiB")
            elif not text and pending:  # a blank line ends an event
                if count >= MAX_STREAM_EVENTS:
                    raise _Over(f"more than {MAX_STREAM_EVENTS} events")
                now = time.monotonic()
                yield StreamEvent(now - limits.started, _event(b"\n".join(pending)))
                pending, size, count, limits.last = [], 0, count + 1, now
        if pending:
            yield StreamEvent(time.monotonic() - limits.started, _event(b"\n".join(pending)))
        yield limits.end(closed=True)
    except _Over as over:
        yield StreamEnd(time.monotonic() - limits.started, closed=False, over=str(over))
    except (_GivenUp, TimeoutError):
        yield limits.end(closed=False)
    except (OSError, http.client.HTTPException) as exc:  # reset, closed, a garbled answer
        raise _unavailable(exc) from exc


def _lines(response: http.client.HTTPResponse) -> Iterator[bytes]:
    """The stream's lines until Triton closes it, split here from what each read brings (every read within
    the limits: the response reads through a Connection's bounded socket), at most MAX_ANSWER_BYTES in all."""
    size = 0
    buffer = bytearray()
    while True:
        piece = response.read1(PIECE)
        if not piece:
            if buffer:
                yield bytes(buffer)
            return
        size += len(piece)
        if size > MAX_ANSWER_BYTES:
            raise _Over(f"stream over {MAX_ANSWER_BYTES >> 20} MiB")
        buffer += piece
        start = 0
        while (newline := buffer.find(b"\n", start)) >= 0:
            yield bytes(buffer[start : newline + 1])
            start = newline + 1
        del buffer[:start]
        if len(buffer) > _LINE_LIMIT:
            raise TritonUnavailable(f"garbled stream: a line over {_LINE_LIMIT >> 20} MiB")


def _event(data: bytes) -> dict[str, Any]:
    try:
        event = json.loads(data)
    except ValueError as exc:
        raise TritonUnavailable(f"garbled stream: an event is not JSON: {data[:200]!r}") from exc
    if not isinstance(event, dict):
        raise TritonUnavailable(f"garbled stream: an event is not a JSON object: {data[:200]!r}")
    return event


def _sse_data(body: bytes) -> bytes:
    """An error answer's JSON: the body itself, or its first event's data when Triton sent it as a stream."""
    for line in body.splitlines():
        if line.startswith(b"data:"):
            return line[5:].strip()
    return body


def _rejected(status: int, body: bytes) -> Exception:
    text = body.decode(errors="replace")
    if status in UNAVAILABLE_STATUSES:
        return TritonUnavailable(f"HTTP {status}: {text[:500]}")
    return TritonRejected(status, error_message(text))


def _to_bytes(array: npt.NDArray[Any], datatype: str) -> bytes:
    if datatype != "BYTES":
        return np.ascontiguousarray(array).tobytes()
    # Triton's BYTES: each element as a 4-byte little-endian length, then its bytes.
    parts = []
    for item in array.ravel():
        raw = item if isinstance(item, bytes) else str(item).encode()
        parts.append(struct.pack("<I", len(raw)) + raw)
    return b"".join(parts)


def _from_bytes(raw: bytes, datatype: str, shape: Sequence[int]) -> npt.NDArray[Any]:
    """Raw tensor bytes → an array of ``shape``; anything that does not add up is a garbled answer
    (TritonUnavailable: nothing learnt), never a wrong one."""
    count = int(np.prod(shape)) if shape else 1
    if datatype != "BYTES":
        itemsize = np.dtype(DATATYPES[datatype]).itemsize
        if len(raw) != count * itemsize:
            raise TritonUnavailable(f"garbled answer: {len(raw)} bytes for {count} x {datatype}")
        return np.frombuffer(raw, dtype=DATATYPES[datatype]).reshape(shape)
    items: list[bytes] = []
    offset = 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise TritonUnavailable("garbled answer: a BYTES element's length is cut off")
        (length,) = struct.unpack_from("<I", raw, offset)
        if offset + 4 + length > len(raw):
            raise TritonUnavailable(f"garbled answer: a BYTES element of {length} bytes runs past the tensor")
        items.append(raw[offset + 4 : offset + 4 + length])
        offset += 4 + length
    if len(items) != count:
        raise TritonUnavailable(f"garbled answer: {len(items)} BYTES elements for shape {list(shape)}")
    array = np.empty(count, dtype=np.object_)
    array[:] = items
    return array.reshape(shape)


def _outputs(response: dict[str, Any], binary: bytes) -> dict[str, OutputTensor]:
    outputs: dict[str, OutputTensor] = {}
    offset = 0
    for meta in response.get("outputs", []):
        name, datatype, shape = meta["name"], str(meta.get("datatype")), list(meta.get("shape", []))
        size = (meta.get("parameters") or {}).get("binary_data_size")
        if datatype not in DATATYPES:
            continue  # as tritonclient: not read, so the comparison reports the output missing
        if size is not None:
            if int(size) < 0 or offset + int(size) > len(binary):
                raise TritonUnavailable(
                    f"garbled answer: output {name!r} says {size} bytes, {len(binary) - offset} left"
                )
            values = _from_bytes(binary[offset : offset + int(size)], datatype, shape)
            offset += int(size)
        elif "data" in meta:
            try:
                values = np.array(meta["data"], dtype=DATATYPES[datatype]).reshape(shape)
            except (ValueError, TypeError, OverflowError) as exc:
                raise TritonUnavailable(f"garbled answer: output {name!r}: {exc}") from exc
        else:
            continue
        outputs[name] = OutputTensor(name=name, datatype=datatype, values=values)
    return outputs
