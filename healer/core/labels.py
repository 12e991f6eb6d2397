"""The ``healer.io/*`` keys healer puts on workflows and pods (written once here: the engines, the
templates, the sidecar, the webhook and ``healer runs`` all read them), and Kubernetes label values
from arbitrary text, with the same rule as an Argo expression (pure).

The ArgoEngine labels the workflows it submits with ``label_value(model)``; the WorkflowTemplate's
``workflowMetadata.labelsFrom`` computes ``label_value_expression`` for workflows submitted by hand
(``argo submit --from``, the UI's submit button), so both give the same label and the Argo UI can
filter every rollback by model.
"""

from __future__ import annotations

import hashlib
import re

from healer.vocabulary import RollbackRequest

# ---- the keys -------------------------------------------------------------------------------------------
# On every rollback workflow (labels): the Argo UI filters by them, `healer runs` prints them.
MODEL_LABEL = "healer.io/model"
FROM_VERSION_LABEL = "healer.io/from-version"
TO_VERSION_LABEL = "healer.io/to-version"
REASON_LABEL = "healer.io/reason"
INCIDENT_LABEL = "healer.io/incident"
DRILL_LABEL = "healer.io/drill"  # on a drill workflow: its scenario
# On a LocalEngine run record (annotations): who runs it, so a run whose process died is marked Error.
ENGINE_ANNOTATION = "healer.io/engine"  # <host>/<pid>
ENGINE_INSTANCE_ANNOTATION = "healer.io/engine-instance"
# Written when a run is marked Error because its engine process died: not an outcome, never joined.
ENGINE_GONE_ANNOTATION = "healer.io/engine-gone"  # "true"
# On a pod kept for diagnosis after an escalation (annotations; runbooks/rollback-escalated.md).
DIAGNOSIS_ANNOTATION = "healer.io/diagnosis"  # "keep"
INCIDENT_ANNOTATION = INCIDENT_LABEL
# The incident's OpenTelemetry trace id (32 hex digits; healer/edges/tracing.py), when tracing is on: a label on
# the rollback workflow (the Argo UI's trace link reads it) and an annotation on the pod kept for diagnosis.
TRACE_ID_LABEL = "healer.io/trace-id"
TRACE_ID_ANNOTATION = TRACE_ID_LABEL
# On Triton pods, for the injection webhook.
INJECT = "healer.io/inject"  # label (or annotation) "true": inject the sidecar
INJECTED = "healer.io/injected"  # set by the webhook: what it injected, for idempotence and people
READINESS = "healer.io/readiness"  # "sidecar": Triton's readinessProbe on the sidecar's /readyz
TRITON_CONTAINER = "healer.io/triton-container"  # which container is Triton (default "triton")
# Written by the webhook on the pods it mutates. INJECTION is the evidence that a container is healer's
# own: its name, port and a digest of the fields the webhook wrote and the API server never rewrites
# (name, image, args, port names and numbers). A container is never taken for the sidecar by its name.
INJECTION = "healer.io/injection"
# Written on a pod admitted without the sidecar (a clash it cannot resolve): why. The admission warning
# goes to whoever created the pod, which for a Deployment is the ReplicaSet controller: nobody reads
# it, so the reason is kept on the pod (`kubectl get pod -o yaml`), where an operator looks.
NOT_INJECTED = "healer.io/not-injected"
# On a rollback workflow stopped without an argo-server (annotation): the stop's message, for people.
STOPPED_ANNOTATION = "healer.io/stopped"


def request_labels(request: RollbackRequest) -> dict[str, str]:
    """A rollback's labels by key, values as given (the ArgoEngine passes each through label_value)."""
    return {
        MODEL_LABEL: request.model,
        FROM_VERSION_LABEL: request.from_version,
        TO_VERSION_LABEL: request.to_version,
        REASON_LABEL: request.reason,
        INCIDENT_LABEL: request.incident,
    }


def diagnosis_annotations(incident: str, trace_id: str = "") -> dict[str, str]:
    """What marks a pod kept for diagnosis after an escalation (the sidecar's and the escalate step's);
    with the incident's trace id when it was traced."""
    marks = {DIAGNOSIS_ANNOTATION: "keep", INCIDENT_ANNOTATION: incident}
    if trace_id:
        marks[TRACE_ID_ANNOTATION] = trace_id
    return marks


# The label rule, shared by label_value() and its Argo expression twin (label_value_expression()).
_LABEL_SAFE = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_LABEL_VALUE = re.compile(_LABEL_SAFE)
_LABEL_UNSAFE_RUN = r"[^A-Za-z0-9_.-]+"  # replaced by one "-"
_LABEL_KEEP = 54  # characters kept of the cleaned text: 54 + "-" + 8 hex digits = 63
_LABEL_TRIM = "-_."  # stripped from both ends of the kept text (a label starts and ends alphanumeric)
_LABEL_DIGEST = 8  # hex digits of sha256(UTF-8 text)


def label_value(text: str) -> str:
    """``text`` as a Kubernetes label value (<= 63 chars of [A-Za-z0-9_.-], alphanumeric at both ends).

    The rule: a value that is already a valid label (at most 63 characters matching ``_LABEL_SAFE``)
    is kept as it is. Otherwise every run of characters outside [A-Za-z0-9_.-] becomes one "-", the
    first 54 characters are kept, "-", "_" and "." are stripped from both ends, and "-" and the first 8
    hex digits of the SHA-256 of the UTF-8 text are appended (just the digits when nothing is left), so
    two different values never share a label. ``label_value_expression`` is the same rule for Argo.
    """
    if len(text) <= 63 and _LABEL_VALUE.fullmatch(text):
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:_LABEL_DIGEST]
    cleaned = re.sub(_LABEL_UNSAFE_RUN, "-", text)[:_LABEL_KEEP].strip(_LABEL_TRIM)
    return f"{cleaned}-{digest}" if cleaned else digest


def label_value_expression(value: str) -> str:
    """``label_value`` as an Argo expression over the expression ``value`` (e.g. a workflow parameter),
    for ``workflowMetadata.labelsFrom``: the label a hand-submitted workflow gets is the one the
    ArgoEngine gives it. (Argo's controller sets labelsFrom over the labels a workflow was submitted
    with, workflow/controller/operator.go updateWorkflowMetadata: the two must agree, and do.)

    Argo v4 evaluates it with expr-lang/expr v1.17 over Masterminds/sprig v3.3's GenericFuncMap
    (util/expr/env/env.go). It uses expr's ``len``, ``matches`` (Go RE2, ``$`` = end of text), string
    slicing ``[0:8]``, ``let``, ``&&``, ``==``, ``+`` and ``?:``, and ``sprig.regexReplaceAll``, ``sprig.trunc``,
    ``sprig.trimAll`` and ``sprig.sha256sum`` (hex of the UTF-8 bytes). Every character the slicing and
    truncation see is ASCII by then, so byte and character counts agree.
    """
    # expr's `let` (expr >= 1.16) names each part once; double quotes keep the rendered YAML unescaped.
    return (
        f"let value = {value}; "
        f'let cleaned = sprig.trimAll("{_LABEL_TRIM}", '
        f'sprig.trunc({_LABEL_KEEP}, sprig.regexReplaceAll("{_LABEL_UNSAFE_RUN}", value, "-"))); '
        f"let digest = sprig.sha256sum(value)[0:{_LABEL_DIGEST}]; "
        f'len(value) <= 63 && value matches "^{_LABEL_SAFE}$" ? value : '
        f'(cleaned == "" ? digest : cleaned + "-" + digest)'
    )
