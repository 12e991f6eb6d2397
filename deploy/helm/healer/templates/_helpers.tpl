{{/*
Shared names and labels. The release's own objects are named after the release (the monitoring
templates use <release>-webhook for the webhook Deployment). The objects the WorkflowTemplates and the
injected sidecar refer to (the config ConfigMap, the rollback's ServiceAccount, the Roles) are
healer-<suffix>, or <fullname>-<suffix> with nameOverride or fullnameOverride ("healer.sharedName");
the chart writes that name wherever they are referred to (workflows/rollback.py TemplateOptions,
healer/webhook/config.py InjectionConfig).
*/}}

{{/* nameOverride: the app.kubernetes.io/name label (default healer). */}}
{{- define "healer.name" -}}
{{ .Values.nameOverride | default "healer" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of the release's own objects (the webhook, its TLS Secret and configuration, the
monitoring objects, the test pod): fullnameOverride, else <release>-<nameOverride> when nameOverride
is set, else the release name (as before these values existed: an upgrade renames nothing). At most
40 characters, so that "<prefix>-webhook-injection" and the like stay within 63.
*/}}
{{- define "healer.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{ .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else if .Values.nameOverride -}}
{{ printf "%s-%s" .Release.Name .Values.nameOverride | trunc 40 | trimSuffix "-" }}
{{- else -}}
{{ .Release.Name | trunc 40 | trimSuffix "-" }}
{{- end -}}
{{- end }}

{{/*
Fails in one line on a label Kubernetes would refuse at apply (helm template renders it): "where" names
the value, "labels" is the map. A key: an optional DNS-subdomain prefix and "/", then a name of at most
63 letters, digits, "-", "_", "." that starts and ends with a letter or digit; a value: such a name, or "".
*/}}
{{- define "healer.checkLabels" -}}
{{- range $key, $value := .labels }}
{{- $name := regexReplaceAll "^.*/" $key "" }}
{{- $prefix := ternary (trimSuffix (printf "/%s" $name) $key) "" (contains "/" $key) }}
{{- if or (gt (len $name) 63) (not (regexMatch "^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$" $name)) (gt (len $prefix) 253) (and (contains "/" $key) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$" $prefix))) }}
{{- fail (printf "%s: %q is not a label key (an optional DNS-subdomain prefix and /, then at most 63 letters, digits, '-', '_', '.', starting and ending with a letter or digit)" $.where $key) }}
{{- end }}
{{- $text := toString $value }}
{{- if or (gt (len $text) 63) (not (regexMatch "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$" $text)) }}
{{- fail (printf "%s.%s: %q is not a label value (at most 63 letters, digits, '-', '_', '.', starting and ending with a letter or digit, or empty)" $.where $key $text) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Every object's labels: commonLabels, then the chart's own over them (a commonLabel never changes
app.kubernetes.io/* or helm.sh/chart, which selectors and `helm` rely on).
*/}}
{{- define "healer.labels" -}}
{{- range $key, $_ := .Values.commonLabels }}
{{- if or (hasPrefix "app.kubernetes.io/" $key) (hasPrefix "helm.sh/" $key) }}
{{- fail (printf "commonLabels.%s: a label the chart sets itself (app.kubernetes.io/*, helm.sh/*); remove it" $key) }}
{{- end }}
{{- end }}
{{- include "healer.checkLabels" (dict "where" "commonLabels" "labels" .Values.commonLabels) }}
{{- $own := dict
  "app.kubernetes.io/name" (include "healer.name" .)
  "app.kubernetes.io/instance" .Release.Name
  "app.kubernetes.io/version" .Chart.AppVersion
  "app.kubernetes.io/managed-by" .Release.Service
  "app.kubernetes.io/part-of" "healer"
  "helm.sh/chart" (printf "%s-%s" .Chart.Name .Chart.Version) -}}
{{- toYaml (merge $own (deepCopy (.Values.commonLabels | default dict))) }}
{{- end }}

{{/*
The labels of a pod the chart runs (the webhook's, the helm test pod): podLabels, then the object's
labels and "extra" (its component) over them, so a podLabel never breaks a selector.
*/}}
{{- define "healer.podLabels" -}}
{{- include "healer.checkLabels" (dict "where" "podLabels" "labels" .root.Values.podLabels) }}
{{- $labels := include "healer.labels" .root | fromYaml -}}
{{- $labels = merge (deepCopy (.extra | default dict)) $labels (deepCopy (.root.Values.podLabels | default dict)) -}}
{{- toYaml $labels }}
{{- end }}

{{/*
A name the code or another object refers to: healer-<suffix> (as before the overrides existed: an
upgrade renames nothing), <fullname>-<suffix> when nameOverride or fullnameOverride is set, so that
two releases in one namespace name nothing alike. Called with (dict "root" $ "suffix" "config").
*/}}
{{- define "healer.sharedName" -}}
{{- if or .root.Values.nameOverride .root.Values.fullnameOverride -}}
{{ printf "%s-%s" (include "healer.fullname" .root) .suffix | trunc 63 | trimSuffix "-" }}
{{- else -}}
{{ printf "healer-%s" .suffix }}
{{- end -}}
{{- end }}

{{- define "healer.configMapName" -}}
{{ include "healer.sharedName" (dict "root" . "suffix" "config") }}
{{- end }}

{{/* The rollback and drill workflows' ServiceAccount (the WorkflowTemplates' serviceAccountName). */}}
{{- define "healer.workflowsServiceAccount" -}}
{{ include "healer.sharedName" (dict "root" . "suffix" "rollback") }}
{{- end }}

{{- define "healer.webhook.selectorLabels" -}}
app.kubernetes.io/name: {{ include "healer.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: webhook
{{- end }}

{{/*
The image: [<registry>/]<repository>, then @<digest> when a digest is given (it wins over the tag:
the image is pulled by content), else :<tag> (default the chart's appVersion).
*/}}
{{- define "healer.image" -}}
{{- $image := .Values.image -}}
{{- $name := $image.repository -}}
{{- with $image.registry }}{{ $name = printf "%s/%s" (trimSuffix "/" .) $name }}{{ end -}}
{{- if $image.digest -}}
{{ $name }}@{{ $image.digest }}
{{- else -}}
{{ $name }}:{{ $image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{- define "healer.webhook.name" -}}
{{ include "healer.fullname" . }}-webhook
{{- end }}

{{- define "healer.webhook.secretName" -}}
{{- if .Values.certificates.certManager.enabled -}}
{{ include "healer.fullname" . }}-webhook-tls
{{- else -}}
{{ required "certificates.secretName: the webhook's TLS Secret (tls.crt, tls.key) is required when certificates.certManager.enabled is false" .Values.certificates.secretName }}
{{- end }}
{{- end }}

{{/* The namespaces whose pods may be injected: webhook.namespaces, or triton.namespace. */}}
{{- define "healer.injectionNamespaces" -}}
{{- if .Values.webhook.namespaces -}}
{{ toYaml .Values.webhook.namespaces }}
{{- else -}}
{{ toYaml (list .Values.triton.namespace) }}
{{- end }}
{{- end }}

{{/* The namespaces that get the healer-config ConfigMap: Triton's and Argo's (once if the same), and the
release's when the webhook's alert receiver reads it (alertReceiver.enabled). */}}
{{- define "healer.configNamespaces" -}}
{{- $namespaces := list .Values.triton.namespace .Values.argo.namespace -}}
{{- if and .Values.webhook.enabled .Values.alertReceiver.enabled -}}
{{- $namespaces = append $namespaces .Release.Namespace -}}
{{- end -}}
{{ toYaml ($namespaces | uniq) }}
{{- end }}

{{/* The alert receiver's token Secret: alertReceiver.existingSecret, or the one the chart writes. */}}
{{- define "healer.alertReceiver.secretName" -}}
{{ .Values.alertReceiver.existingSecret | default (printf "%s-alert-receiver" (include "healer.fullname" .)) }}
{{- end }}

{{/*
healer.yaml: .Values.config with the keys the chart derives from the other values. A derived key
set in .Values.config is an error, so a value is never silently overridden.
*/}}
{{- define "healer.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- $rollback := $config.rollback | default dict -}}
{{- $sidecar := $config.sidecar | default dict -}}
{{- range $key := list "store" "live_repository" -}}
{{- if hasKey $config $key -}}
{{- fail (printf "config.%s: set by the chart from modelRepository; remove it from config" $key) -}}
{{- end -}}
{{- end -}}
{{- range $key := list "engine" "state_dir" "argo" "replicas" -}}
{{- if hasKey $rollback $key -}}
{{- fail (printf "config.rollback.%s: set by the chart (argo, triton, sidecar.stateDir); remove it from config" $key) -}}
{{- end -}}
{{- end -}}
{{- if hasKey $sidecar "listen" -}}
{{- fail "config.sidecar.listen: set by the chart from sidecar.port; remove it from config" -}}
{{- end -}}
{{- if not $config.models -}}
{{- fail "config.models: list the models the sidecar checks, each with its golden request" -}}
{{- end -}}
{{- $repo := .Values.modelRepository -}}
{{- if eq $repo.type "nfs" -}}
{{- $_ := set $config "store" (dict "filesystem" (dict "root" $repo.mountPath)) -}}
{{- else if eq $repo.type "s3" -}}
{{- $s3 := dict "bucket" (required "modelRepository.s3.bucket: required with modelRepository.type s3" $repo.s3.bucket) -}}
{{- with $repo.s3.prefix }}{{ $_ := set $s3 "prefix" . }}{{ end -}}
{{- with $repo.s3.region }}{{ $_ := set $s3 "region" . }}{{ end -}}
{{- with $repo.s3.endpointUrl }}{{ $_ := set $s3 "endpoint_url" . }}{{ end -}}
{{- $_ := set $s3 "connect_timeout_s" $repo.s3.connectTimeoutSeconds -}}
{{- $_ := set $s3 "read_timeout_s" $repo.s3.readTimeoutSeconds -}}
{{- $_ := set $config "store" (dict "s3" $s3) -}}
{{- /* object-store: Triton reads the bucket itself, so there is no live repository (the loader refuses one) */ -}}
{{- if ne ($config.repository_mode | default "shared") "object-store" -}}
{{- $_ := set $config "live_repository" $repo.mountPath -}}
{{- end -}}
{{- else -}}
{{- fail (printf "modelRepository.type: nfs or s3, got %q" $repo.type) -}}
{{- end -}}
{{- $_ := set $rollback "engine" "argo" -}}
{{- $_ := set $rollback "state_dir" .Values.sidecar.stateDir -}}
{{- $argo := dict "host" .Values.argo.server "namespace" .Values.argo.namespace "token_file" "/var/run/secrets/kubernetes.io/serviceaccount/token" "verify_ssl" .Values.argo.verifySSL -}}
{{- if .Values.argo.caBundle -}}
{{- /* Written beside healer.yaml in healer-config (templates/config.yaml), mounted at /etc/healer. */ -}}
{{- $_ := set $argo "ca_file" "/etc/healer/argo-ca.crt" -}}
{{- end -}}
{{- $_ := set $rollback "argo" $argo -}}
{{- $_ := set $rollback "replicas" (dict "namespace" .Values.triton.namespace "selector" .Values.triton.selector "port" (int .Values.triton.port)) -}}
{{- $_ := set $config "rollback" $rollback -}}
{{- $_ := set $sidecar "listen" (printf "0.0.0.0:%d" (int .Values.sidecar.port)) -}}
{{- if $sidecar.drain -}}
{{- if or (hasKey $sidecar.drain "peers") (hasKey $sidecar.drain "peer_urls") -}}
{{- fail "config.sidecar.drain.peers: set by the chart (triton.namespace, triton.selector); remove peers and peer_urls from config" -}}
{{- end -}}
{{- $_ := set $sidecar.drain "peers" (dict "namespace" .Values.triton.namespace "selector" .Values.triton.selector) -}}
{{- end -}}
{{- $_ := set $config "sidecar" $sidecar -}}
{{- /* Helm holds numbers as float64 and writes 1e-07 for 1.0e-7, which YAML 1.1 (PyYAML, healer's
loader) reads as a string: give such exponents a fraction (1.0e-07). Quoted strings are untouched. */ -}}
{{- regexReplaceAll "(?m)((?:^|: |- )[ ]*)(-?[0-9]+)(e[-+]?[0-9]+)$" (toYaml $config) "${1}${2}.0${3}" -}}
{{- end }}

{{/* The image's user (Dockerfile USER, healer/core/pod_contract.py HEALER_UID): the sidecar, the rollback's
pods and the webhook run as it; the sidecar and the rollback's pods write the same files. */}}
{{- define "healer.uid" -}}
{{- if .Values.runAsUser }}{{ int .Values.runAsUser }}{{ end -}}
{{- end }}

{{/* A pod securityContext: non-root, RuntimeDefault seccomp, runAsUser/runAsGroup/fsGroup from
runAsUser (none when it is null: the platform assigns them), then the "extra" keys over it. */}}
{{- define "healer.podSecurityContext" -}}
{{- $context := dict "runAsNonRoot" true "seccompProfile" (dict "type" "RuntimeDefault") -}}
{{- with .root.Values.runAsUser -}}
{{- $_ := set $context "runAsUser" (int .) -}}
{{- $_ := set $context "runAsGroup" (int .) -}}
{{- $_ := set $context "fsGroup" (int .) -}}
{{- end -}}
{{- toYaml (mergeOverwrite $context (deepCopy (.extra | default dict))) -}}
{{- end }}
