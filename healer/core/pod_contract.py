"""What healer's pods agree on, written once here: the sidecar the webhook injects, the workflows'
step pods and ``healer status`` all assume these (pure). The Helm chart's YAML (values.yaml and its
templates) is a world of its own and says the same there.
"""

from __future__ import annotations

from healer.settings import SidecarSettings

# The healer image's USER: the webhook, the injected sidecars and the workflows' step pods run as it
# (uid, gid and fsGroup), so the sidecars and the step pods write the same files.
HEALER_UID = 10001
# The injected container's name and its port's name: `kubectl exec|logs -c healer`, `healer status`,
# the PodMonitor and the chart's NetworkPolicy find the sidecar by it.
SIDECAR_CONTAINER = "healer"
# The sidecar's port: the one its settings listen on by default (sidecar.listen, written there once).
SIDECAR_PORT = int(SidecarSettings.listen.rpartition(":")[2])
# The ConfigMap that holds healer.yaml, mounted at CONFIG_DIR in the sidecar and in the step pods.
CONFIG_MAP = "healer-config"
CONFIG_DIR = "/etc/healer"
CONFIG_PATH = f"{CONFIG_DIR}/healer.yaml"
# The sidecar's state directory (its runs, in an emptyDir of its own).
STATE_DIR = "/var/lib/healer/runs"
