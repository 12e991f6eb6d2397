"""The one seam between healer and Triton's HTTP API (KServe v2 + Triton's repository extension).

Every call has a timeout. Failures come out as one of two exceptions, because the
probes act on them differently:

* ``TritonUnavailable``: no answer from Triton (refused, reset, timed out, 502/503/504).
  Nothing is known about the model; the probe result is ``error``. Its subclass
  ``TritonTimeout`` says the request went out and no answer came in time: with Triton live and
  the version ready in the same cycle, that is the model hanging (the business tier's ``timeout``).
* ``TritonRejected``: Triton answered with an error status and a message. The model's
  own failure (HTTP 500 with the model's exception, or 400 for a request it refuses)
  arrives this way.

A stream (``generate_stream``: Triton's generate extension, server-sent events) is read at the edge
into ``StreamEvent``s, each with the time it arrived, and one ``StreamEnd`` saying whether Triton
closed the stream or it was given up (no event for the stall limit, or the request's timeout passed):
the timings are measured here and judged purely (probes/stream.py).

Triton 2.51's HTTP ``infer`` refuses a decoupled model (one that may send any number of responses):
HTTP 501 "HTTP end point doesn't support models with decoupled transaction policy". Such a model is
probed over ``generate_stream``; ``generate`` answers it 200 with an error body ("generate expects
model to produce exactly 1 response") unless it sends exactly one response.
"""

from __future__ import annotations

import contextlib
import http.client
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import quote

from healer.core.streams import StreamEnd, StreamEvent, StreamItem
from healer.edges.triton_types import (
    UNAVAILABLE_STATUSES,
    IndexEntry,
    OutputTensor,
    TritonError,
    TritonRejected,
    TritonTimeout,
    TritonTooLarge,
    TritonUnavailable,
    error_message,
    served_in,
    wire_array,
)
from healer.settings import TensorSpec

__all__ = [
    "UNAVAILABLE_STATUSES",
    "IndexEntry",
    "OutputTensor",
    "StreamEnd",
    "StreamEvent",
    "StreamItem",
    "TritonAPI",
    "TritonError",
    "TritonHttp",
    "TritonRejected",
    "TritonTimeout",
    "TritonTooLarge",
    "TritonUnavailable",
    "error_message",
    "served_in",
    "wire_array",
]


class TritonAPI(Protocol):
    """What the probes (and later the workflow steps) need from Triton."""

    url: str

    def server_live(self) -> bool: ...

    def model_version_ready(self, model: str, version: str) -> bool: ...

    def served_versions(self, model: str) -> list[str]: ...

    def repository_index(self) -> list[IndexEntry]: ...

    def model_config(self, model: str) -> dict[str, Any]: ...

    def model_metadata(self, model: str, version: str) -> dict[str, Any]: ...

    def infer(
        self,
        model: str,
        version: str,
        inputs: Sequence[TensorSpec],
        output_names: Sequence[str],
        timeout_s: float,
        *,
        parameters: Mapping[str, Any] | None = None,
    ) -> dict[str, OutputTensor]: ...

    def generate(self, model: str, version: str, body: Mapping[str, Any], timeout_s: float) -> dict[str, Any]: ...

    def generate_stream(
        self, model: str, version: str, body: Mapping[str, Any], *, timeout_s: float, stall_s: float
    ) -> Iterator[StreamItem]: ...

    def load_model(self, model: str, *, config: str | None = None, timeout_s: float) -> None: ...

    def unload_model(self, model: str) -> None: ...

    def close(self) -> None: ...


class TritonHttp:
    """TritonAPI over tritonclient.http. Not thread-safe (neither is tritonclient): one per thread."""

    thread_safe = False

    def __init__(self, url: str, *, timeout_s: float) -> None:
        # Imported here: tritonclient pulls in gevent (~50 MB RSS); only code that talks to Triton pays.
        import tritonclient.http as triton_http

        self.url = url
        self.timeout_s = timeout_s
        self._http = triton_http
        self._client = triton_http.InferenceServerClient(url, connection_timeout=timeout_s, network_timeout=timeout_s)
        self._timed_clients: dict[float, Any] = {}
        self._rest_client: TritonAPI | None = None
        self._rest_lock = threading.Lock()  # one TritonRest even when threads ask at once (one pool, closed)

    def server_live(self) -> bool:
        return bool(self._call(self._client.is_server_live))

    def model_version_ready(self, model: str, version: str) -> bool:
        """True on 200, False when Triton says not ready (400/404); a proxy's 502/503/504 or no answer
        is TritonUnavailable, never "not ready" (tritonclient folds every non-200 into False)."""
        url = f"http://{self.url}/v2/models/{quote(model, safe='')}/versions/{quote(version, safe='')}/ready"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as response:
                return bool(response.status == 200)
        except urllib.error.HTTPError as exc:
            if exc.code in UNAVAILABLE_STATUSES:
                raise TritonUnavailable(f"HTTP {exc.code} on readiness of {model} v{version}") from exc
            if exc.code in (400, 404):
                return False
            raise TritonRejected(exc.code, error_message(exc.read().decode(errors="replace"))) from exc
        except (urllib.error.URLError, OSError) as exc:
            raise TritonUnavailable(f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}") from exc

    def served_versions(self, model: str) -> list[str]:
        """Versions Triton serves for a model right now ([] when none is available)."""
        try:
            metadata = self._call(self._client.get_model_metadata, model)
        except TritonRejected as exc:
            if exc.status in (400, 404):
                return []
            raise
        return served_in(metadata)

    def repository_index(self) -> list[IndexEntry]:
        return [IndexEntry.from_row(row) for row in self._call(self._client.get_model_repository_index)]

    def model_config(self, model: str) -> dict[str, Any]:
        """The config Triton serves the model with (JSON form of config.pbtxt, after auto-complete)."""
        return dict(self._call(self._client.get_model_config, model))

    def model_metadata(self, model: str, version: str) -> dict[str, Any]:
        """One served version's metadata (``GET /v2/models/{m}/versions/{v}``): its inputs and outputs,
        with names, datatypes and shapes (-1: any size, the batch dimension included)."""
        return dict(self._call(self._client.get_model_metadata, model, model_version=version))

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
        client = self._client_with_timeout(timeout_s)
        request_inputs = []
        for tensor in inputs:
            infer_input = self._http.InferInput(tensor.name, list(tensor.shape), tensor.datatype)
            infer_input.set_data_from_numpy(wire_array(tensor), binary_data=True)
            request_inputs.append(infer_input)
        requested = [self._http.InferRequestedOutput(name, binary_data=True) for name in output_names]
        extra = {"parameters": dict(parameters)} if parameters else {}
        result = self._call(client.infer, model, request_inputs, model_version=version, outputs=requested, **extra)
        response: Mapping[str, Any] = result.get_response()
        outputs: dict[str, OutputTensor] = {}
        for meta in response.get("outputs", []):
            name = meta["name"]
            values = result.as_numpy(name)
            if values is None:
                continue
            outputs[name] = OutputTensor(name=name, datatype=str(meta.get("datatype")), values=values)
        return outputs

    def generate(self, model: str, version: str, body: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
        """Triton's generate extension, which tritonclient does not speak: the one plain-HTTP implementation
        (healer/edges/triton_rest.py)."""
        return self._rest().generate(model, version, body, timeout_s)

    def generate_stream(
        self, model: str, version: str, body: Mapping[str, Any], *, timeout_s: float, stall_s: float
    ) -> Iterator[StreamItem]:
        """As ``generate``: TritonRest's ``generate_stream``."""
        return self._rest().generate_stream(model, version, body, timeout_s=timeout_s, stall_s=stall_s)

    def _rest(self) -> TritonAPI:
        """One TritonRest for the adapter's life (its kept connection reused), closed by ``close``."""
        with self._rest_lock:
            if self._rest_client is None:
                from healer.edges.triton_rest import TritonRest  # it imports this module

                self._rest_client = TritonRest(self.url, timeout_s=self.timeout_s)
            return self._rest_client

    def load_model(self, model: str, *, config: str | None = None, timeout_s: float) -> None:
        """Load (or reload) a model. Synchronous in Triton: returns when loaded, raises when the load failed.

        ``config`` is a model config as JSON, e.g. to pin ``version_policy``; Triton then uses it instead
        of config.pbtxt.
        """
        self._call(self._client_with_timeout(timeout_s).load_model, model, config=config)

    def unload_model(self, model: str) -> None:
        """Ask Triton to unload a model. Returns before the model is gone: poll repository_index()."""
        self._call(self._client.unload_model, model)

    def close(self) -> None:
        with self._rest_lock:
            if self._rest_client is not None:
                self._rest_client.close()
        for client in (self._client, *self._timed_clients.values()):
            # Closing a dead connection has nothing left to report.
            with contextlib.suppress(Exception):
                client.close()
        self._timed_clients.clear()

    def _client_with_timeout(self, timeout_s: float) -> Any:
        # tritonclient fixes the network timeout per client; golden requests and loads have their own.
        if timeout_s == self.timeout_s:
            return self._client
        client = self._timed_clients.get(timeout_s)
        if client is None:
            client = self._http.InferenceServerClient(
                self.url, connection_timeout=min(timeout_s, self.timeout_s), network_timeout=timeout_s
            )
            self._timed_clients[timeout_s] = client
        return client

    def _call(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        from tritonclient.utils import InferenceServerException

        try:
            return method(*args, **kwargs)
        except InferenceServerException as exc:
            raise _from_triton_exception(exc) from exc
        except TimeoutError as exc:
            # A socket timeout (tritonclient lets it through untranslated): no answer in time.
            raise TritonTimeout(f"{type(exc).__name__}: {exc}".strip()) from exc
        except (OSError, http.client.HTTPException) as exc:
            # Refused, reset, DNS: tritonclient lets these through untranslated.
            raise TritonUnavailable(f"{type(exc).__name__}: {exc}".strip()) from exc
        except BaseException as exc:
            # gevent.Timeout derives from BaseException; anything else we re-raise untouched.
            if type(exc).__module__.startswith("gevent"):
                error = TritonTimeout if "Timeout" in type(exc).__name__ else TritonUnavailable
                raise error(f"{type(exc).__name__}: {exc}".strip()) from exc
            raise


def _from_triton_exception(exc: Any) -> TritonError:
    status_text = exc.status()
    message = exc.message() or str(exc)
    try:
        status = int(status_text)
    except (TypeError, ValueError):
        # No HTTP status: tritonclient raised before it had a response (e.g. a timeout inside the client).
        return TritonUnavailable(message)
    if status in UNAVAILABLE_STATUSES:
        return TritonUnavailable(f"HTTP {status}: {message}")
    body_message = error_message(message)
    return TritonRejected(status, body_message)
