"""The probe sidecar, in small parts:

* ``loop``: the ``Sidecar``: probes every model each period, asks the pure core what to do
  (healer/core/state.py, healer/core/decisions.py) and does it;
* ``book``: what the loop learnt, per model, under one lock (states, results, metrics that follow);
* ``handover``: a rollback handed to an engine, one workflow per incident, every call bounded;
* ``peers``: the replica set a drain is weighed against (Kubernetes API or the sidecars' /status);
* ``identity``: who this pod is (downward API);
* ``clock``: its time (monotonic, wall, waits), injected: fake in the tests;
* ``views``: the HTTP endpoints (/livez, /healthz, /readyz, /metrics, /status) and /status's document.

Composed from settings by the CLI (``healer sidecar``) and the drills.
"""

from healer.sidecar.handover import BoundedCalls, EngineCallHung, submit_incident
from healer.sidecar.identity import pod_identity, pod_triton_url
from healer.sidecar.loop import Sidecar
from healer.sidecar.peers import HttpPeers, KubePeers, PeerSource, PeersUnavailable
from healer.sidecar.views import SidecarServer

__all__ = [
    "BoundedCalls",
    "EngineCallHung",
    "HttpPeers",
    "KubePeers",
    "PeerSource",
    "PeersUnavailable",
    "Sidecar",
    "SidecarServer",
    "pod_identity",
    "pod_triton_url",
    "submit_incident",
]
