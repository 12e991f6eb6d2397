"""TritonAPI over the standard library's http.client: the in-pod sidecar's Triton client.

Why not tritonclient here: tritonclient.http pulls in gevent and its hub (about 14 MiB of the
sidecar's resident memory) for the handful of calls a probe makes, and it is not thread-safe, so a
sidecar on it must probe models one after another. This client opens one connection per call (a
few hundred microseconds on the pod's loopback), so threads may share it, and it speaks the same
wire format as tritonclient with ``binary_data=True``: the JSON header plus raw tensor bytes
(Triton's binary tensor extension), so NaN and Inf reach the comparison exactly as Triton sent them.

Errors come out as healer/edges/triton.py describes: ``TritonUnavailable`` (no answer: refused, reset,
502/503/504, or no connection in time), ``TritonTimeout`` (the request went out and no answer came
in time), ``TritonRejected`` (Triton answered with an error status).
"""

from __future__ import annotations

import http.client
import json
import socket
import struct
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import numpy as np
import numpy.typing as npt

from healer.edges.triton import (
    UNAVAILABLE_STATUSES,
    IndexEntry,
    OutputTensor,
    TritonRejected,
    TritonTimeout,
    TritonUnavailable,
    error_message,
    served_in,
    wire_array,
)
from healer.settings import DATATYPES, TensorSpec, parse_address

HEADER_LENGTH = "Inference-Header-Content-Length"


class TritonRest:
    """TritonAPI over plain HTTP/1.1; safe to share between threads (nothing is kept between calls)."""

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
    ) -> dict[str, OutputTensor]:
        header: dict[str, Any] = {"inputs": [], "outputs": []}
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
            f"/v2/models/{_part(model)}/versions/{_part(version)}/infer",
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
        """Nothing to close: no connection outlives its call."""

    # ---- the one place that touches the network ----------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        timeout_s: float,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """One call under one deadline: connect (the client's timeout at most), send, then the answer
        read in pieces, each with what is left of ``timeout_s`` (a server trickling bytes cannot
        stretch it), and at most MAX_ANSWER_BYTES of it (a runaway output cannot exhaust the pod)."""
        deadline = time.monotonic() + timeout_s
        connection = http.client.HTTPConnection(self._host, self._port, timeout=min(timeout_s, self.timeout_s))
        try:
            try:
                connection.connect()
                assert connection.sock is not None
                connection.sock.settimeout(_left(deadline))
                connection.request(method, path, body=body, headers=headers or {})
            except (OSError, http.client.HTTPException) as exc:
                # Refused, unreachable, no connection or the request not taken in time: nothing was
                # answered, and nothing says the model hangs.
                raise TritonUnavailable(f"{type(exc).__name__}: {exc}".strip()) from exc
            # The socket itself: http.client lets go of it (connection.sock = None) when the answer
            # says "Connection: close", and every read must still get what is left of the deadline.
            sock = connection.sock
            try:
                response = connection.getresponse()
                data = _read_within(response, deadline, sock)
            except TimeoutError as exc:
                raise TritonTimeout(f"no answer within {timeout_s:g}s: {method} {path}") from exc
            except (OSError, http.client.HTTPException) as exc:  # reset, closed, a garbled answer
                raise TritonUnavailable(f"{type(exc).__name__}: {exc}".strip()) from exc
            return response.status, {k.lower(): v for k, v in response.getheaders()}, data
        finally:
            connection.close()

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
_PIECE = 1 << 16


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline passed")
    return left


def _read_within(response: http.client.HTTPResponse, deadline: float, sock: socket.socket) -> bytes:
    pieces: list[bytes] = []
    size = 0
    while True:
        sock.settimeout(_left(deadline))
        piece = response.read1(_PIECE) if size < MAX_ANSWER_BYTES else b""
        if not piece:
            break
        pieces.append(piece)
        size += len(piece)
        if size > MAX_ANSWER_BYTES:
            raise http.client.HTTPException(f"answer larger than {MAX_ANSWER_BYTES >> 20} MiB")
    return b"".join(pieces)


def _part(text: str) -> str:
    return quote(text, safe="")


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
