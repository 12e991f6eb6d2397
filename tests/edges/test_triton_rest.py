"""The sidecar's Triton client (healer/edges/triton_rest.py): the same answers as tritonclient's on the real
Triton, the binary tensor format both ways, and the three error kinds from real sockets."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from healer.edges.embedded import EmbeddedTriton
from healer.edges.triton import TritonAPI, TritonHttp, TritonRejected, TritonTimeout, TritonUnavailable
from healer.edges.triton_rest import TritonRest, _from_bytes, _to_bytes
from healer.settings import ModelSettings, Settings, TensorSpec

Deploy = Callable[..., ModelSettings]


@pytest.fixture
def rest(triton_server: EmbeddedTriton) -> TritonRest:
    return TritonRest(triton_server.url, timeout_s=5.0)


def golden_call(client: TritonAPI, model: ModelSettings, version: str) -> dict[str, npt.NDArray[Any]]:
    golden = model.golden
    names = [o.tensor.name for o in golden.outputs]
    outputs = client.infer(model.name, version, golden.inputs, names, golden.timeout_s)
    return {name: tensor.values for name, tensor in outputs.items()}


@pytest.mark.parametrize("which", ["good", "nan", "wrong_weights"])
@pytest.mark.parametrize("base", ["linear_scorer", "tiny_classifier"])
def test_both_clients_read_the_same_tensors(
    triton: TritonHttp, rest: TritonRest, deploy: Deploy, base: str, which: str
) -> None:
    model = deploy(base, {3: ("good", "2") if which == "good" else ("broken", which)})
    by_tritonclient = golden_call(triton, model, "3")
    by_rest = golden_call(rest, model, "3")
    assert by_tritonclient.keys() == by_rest.keys() and by_rest
    for name, values in by_tritonclient.items():
        assert by_rest[name].dtype == values.dtype, name
        assert by_rest[name].shape == values.shape, name
        # Bit for bit (NaN included): the comparison sees what Triton sent, whichever client asked.
        assert by_rest[name].tobytes() == values.tobytes(), name


def test_metadata_calls_match_tritonclient(triton: TritonHttp, rest: TritonRest, example_settings: Settings) -> None:
    assert rest.server_live() is True
    for model in ("linear_scorer", "tiny_classifier"):
        assert rest.served_versions(model) == triton.served_versions(model) == ["2"]
        assert rest.model_version_ready(model, "2") is True
        assert rest.model_version_ready(model, "1") is False
        assert rest.model_config(model) == triton.model_config(model)
    assert rest.served_versions("no_such_model") == []
    assert rest.model_version_ready("no_such_model", "1") is False
    assert sorted(rest.repository_index(), key=repr) == sorted(triton.repository_index(), key=repr)


def test_load_with_an_override_then_unload(rest: TritonRest, deploy: Deploy, triton_server: EmbeddedTriton) -> None:
    model = deploy("linear_scorer", {1: ("good", "1"), 2: ("good", "2")}, load=False)
    rest.load_model(model.name, timeout_s=60)
    assert rest.served_versions(model.name) == ["2"]
    config = rest.model_config(model.name)
    config["version_policy"] = {"specific": {"versions": [1]}}
    import json

    rest.load_model(model.name, config=json.dumps(config), timeout_s=60)
    assert rest.served_versions(model.name) == ["1"]
    rest.unload_model(model.name)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        states = {e.state for e in rest.repository_index() if e.name == model.name}
        if states <= {"UNAVAILABLE"}:
            break
        time.sleep(0.2)
    assert rest.served_versions(model.name) == []


def test_a_failed_load_is_rejected_with_tritons_reason(
    rest: TritonRest, deploy: Deploy, triton_server: EmbeddedTriton
) -> None:
    model = deploy("linear_scorer", {1: ("good", "1")}, load=False)
    (Path(triton_server.model_repository) / model.name / "1" / "params.json").write_text("{not json")
    with pytest.raises(TritonRejected) as raised:
        rest.load_model(model.name, timeout_s=60)
    assert raised.value.status == 400
    assert "JSONDecodeError" in raised.value.message


def test_a_raising_model_is_rejected_with_its_exception(rest: TritonRest, deploy: Deploy) -> None:
    model = deploy("linear_scorer", {3: ("broken", "raises")})
    with pytest.raises(TritonRejected) as raised:
        golden_call(rest, model, "3")
    assert raised.value.status == 500
    assert "ValueError" in raised.value.message


def test_threads_share_one_client(rest: TritonRest, example_settings: Settings) -> None:
    model = example_settings.model("linear_scorer")
    expected = golden_call(rest, model, "2")
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: golden_call(rest, model, "2"), range(64)))
    for answer in answers:
        assert {k: v.tobytes() for k, v in answer.items()} == {k: v.tobytes() for k, v in expected.items()}


# ---- the error kinds, from real sockets (no Triton needed) ------------------------------------------


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Accepts connections and never answers: a hung model behind a live port."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for connection in accepted:
            connection.close()
        listener.close()


def test_no_answer_in_time_is_a_timeout(silent_server: str) -> None:
    client = TritonRest(silent_server, timeout_s=10.0)
    spec = TensorSpec(name="X", datatype="FP32", shape=(1,), values=np.zeros(1, dtype=np.float32))
    started = time.monotonic()
    with pytest.raises(TritonTimeout):
        client.infer("m", "1", [spec], ["Y"], timeout_s=0.3)
    # The call's own 0.3 s timeout, not the client's 10 s (bounded at half of that: a busy machine's slack).
    assert time.monotonic() - started < 5.0


def test_a_refused_connection_is_unavailable_not_a_timeout() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    client = TritonRest(f"127.0.0.1:{port}", timeout_s=1.0)
    with pytest.raises(TritonUnavailable) as raised:
        client.server_live()
    assert not isinstance(raised.value, TritonTimeout)


class _Proxy503(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(503)
        self.end_headers()
        self.wfile.write(b"upstream down")

    def log_message(self, *args: object) -> None:
        pass


def test_a_proxys_503_is_unavailable_and_never_not_ready() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Proxy503)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = TritonRest(f"127.0.0.1:{server.server_address[1]}", timeout_s=2.0)
        with pytest.raises(TritonUnavailable, match="503"):
            client.model_version_ready("m", "1")
        with pytest.raises(TritonUnavailable, match="503"):
            client.served_versions("m")
        assert client.server_live() is False  # as tritonclient: live only on 200
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_a_url_that_is_not_host_and_port_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match="host:port"):
        TritonRest("http://triton", timeout_s=1.0)


# ---- the binary tensor format --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("datatype", "values"),
    [
        ("FP32", np.array([[1.5, np.nan], [np.inf, -0.0]], dtype=np.float32)),
        ("INT64", np.array([1, -2, 3], dtype=np.int64)),
        ("BOOL", np.array([True, False], dtype=np.bool_)),
        ("FP16", np.array([0.5, 2.0], dtype=np.float16)),
        ("BYTES", np.array([b"cat", b"", "dóg".encode()], dtype=np.object_)),
    ],
)
def test_tensors_round_trip_through_the_wire_format(datatype: str, values: npt.NDArray[Any]) -> None:
    raw = _to_bytes(values, datatype)
    back = _from_bytes(raw, datatype, values.shape)
    assert back.shape == values.shape
    if datatype == "BYTES":
        assert list(back.ravel()) == list(values.ravel())
        assert raw[:4] == (3).to_bytes(4, "little")  # Triton's length prefix, little-endian
    else:
        assert back.tobytes() == values.tobytes()


# ---- answers that do not add up, and servers that stretch a call ------------------------------------


def _serve_once(answer: bytes, *, family: int = socket.AF_INET, trickle_s: float = 0.0) -> tuple[str, threading.Thread]:
    """A one-connection server that reads the request and sends ``answer`` (a byte at a time every
    ``trickle_s`` when set)."""
    host = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    listener = socket.create_server((host, 0), family=family)
    port = listener.getsockname()[1]

    def serve() -> None:
        with listener:
            listener.settimeout(10)
            connection, _ = listener.accept()
            with connection:
                connection.settimeout(10)
                connection.recv(65536)
                try:
                    if trickle_s:
                        for byte in answer:
                            connection.sendall(bytes([byte]))
                            time.sleep(trickle_s)
                    else:
                        connection.sendall(answer)
                except OSError:
                    pass  # the client gave up: what the test wants

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return (f"[::1]:{port}" if family == socket.AF_INET6 else f"127.0.0.1:{port}"), thread


def _http(body: bytes, headers: dict[str, str] | None = None) -> bytes:
    lines = [b"HTTP/1.1 200 OK", f"Content-Length: {len(body)}".encode()]
    lines += [f"{k}: {v}".encode() for k, v in (headers or {}).items()]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def test_an_ipv6_address_in_brackets_is_reached() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        url, thread = _serve_once(_http(b""), family=socket.AF_INET6)
    except OSError:
        pytest.skip("::1 is not configured here")
    assert TritonRest(url, timeout_s=2.0).server_live() is True
    thread.join(timeout=5)


@pytest.mark.parametrize("close", [False, True], ids=["keep-alive", "connection-close"])
def test_a_trickling_answer_cannot_stretch_the_calls_deadline(close: bool) -> None:
    # With "Connection: close", http.client hands the socket to the answer: the deadline must follow it.
    url, thread = _serve_once(_http(b"x" * 200, {"Connection": "close"} if close else None), trickle_s=0.05)
    started = time.monotonic()
    with pytest.raises(TritonTimeout):
        TritonRest(url, timeout_s=2.0).model_config("m")
    # One deadline for the call (2 s), not one per byte (200 bytes x 0.05 s = 10 s); slack for a busy machine.
    assert time.monotonic() - started < 6.0
    thread.join(timeout=15)


def _infer_answer(header: dict[str, object], binary: bytes) -> bytes:
    head = json.dumps(header).encode()
    return _http(head + binary, {"Inference-Header-Content-Length": str(len(head))})


FP32_SPEC = TensorSpec(name="X", datatype="FP32", shape=(1,), values=np.zeros(1, dtype=np.float32))


@pytest.mark.parametrize(
    ("outputs", "binary"),
    [
        ([{"name": "Y", "datatype": "FP32", "shape": [2], "parameters": {"binary_data_size": 8}}], b"\0" * 4),
        ([{"name": "Y", "datatype": "FP32", "shape": [3], "parameters": {"binary_data_size": 8}}], b"\0" * 8),
        ([{"name": "Y", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 7}}], b"\x64\0\0\0abc"),
        ([{"name": "Y", "datatype": "BYTES", "shape": [2], "parameters": {"binary_data_size": 7}}], b"\x03\0\0\0abc"),
        ([{"datatype": "FP32", "shape": [1], "parameters": {"binary_data_size": 4}}], b"\0" * 4),
        ([{"name": "Y", "datatype": "FP32", "shape": [2], "data": [1.0]}], b""),
    ],
    ids=["short", "shape", "bytes-overrun", "bytes-count", "no-name", "json-shape"],
)
def test_a_garbled_answer_is_nothing_learnt_never_a_wrong_one(outputs: list[dict[str, object]], binary: bytes) -> None:
    url, thread = _serve_once(_infer_answer({"outputs": outputs}, binary))
    with pytest.raises(TritonUnavailable, match="garbled"):
        TritonRest(url, timeout_s=2.0).infer("m", "1", [FP32_SPEC], ["Y"], timeout_s=2.0)
    thread.join(timeout=5)


def test_a_runaway_answer_is_cut_off_not_read_into_memory() -> None:
    from healer.edges.triton_rest import MAX_ANSWER_BYTES

    size = MAX_ANSWER_BYTES + (1 << 20)
    url, thread = _serve_once(_http(b"\0" * size))
    with pytest.raises(TritonUnavailable, match="larger than"):
        TritonRest(url, timeout_s=5.0).model_config("m")
    thread.join(timeout=10)
