{{/* Names and labels. */}}

{{- define "gpu-share-webhook.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of every object: the release name when it contains the chart's name, else
<release>-<chart> (`helm install gpu-share-webhook ...` gives the names deploy/ uses). At most
40 characters, so that the longest name made from it, the bootstrap Job's
<fullname>-certs-<revision>, stays within the 63 a Job name may have.
*/}}
{{- define "gpu-share-webhook.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpu-share-webhook.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* What the release's pods are selected by; the server's add component=webhook, the
bootstrap Job's component=certs. */}}
{{- define "gpu-share-webhook.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-share-webhook.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* On every object. */}}
{{- define "gpu-share-webhook.labels" -}}
helm.sh/chart: {{ include "gpu-share-webhook.chart" . }}
{{ include "gpu-share-webhook.selectorLabels" . }}
app.kubernetes.io/part-of: gpu-share-webhook
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "gpu-share-webhook.serverSelectorLabels" -}}
{{ include "gpu-share-webhook.selectorLabels" . }}
app.kubernetes.io/component: webhook
{{- end }}

{{- define "gpu-share-webhook.certsSelectorLabels" -}}
{{ include "gpu-share-webhook.selectorLabels" . }}
app.kubernetes.io/component: certs
{{- end }}

{{- define "gpu-share-webhook.certsLabels" -}}
{{ include "gpu-share-webhook.labels" . }}
app.kubernetes.io/component: certs
{{- end }}

{{- define "gpu-share-webhook.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/*
checkov's skips for the image, as deploy/ justifies them, where the values keep them true:
a tag rather than a digest, and IfNotPresent. `first` numbers the first annotation.
*/}}
{{- define "gpu-share-webhook.imageSkips" -}}
{{- $n := .first }}
{{- if not .root.Values.image.digest }}
checkov.io/skip{{ $n }}: >-
  CKV_K8S_43=The image is built by each site from this repository (Dockerfile); pin it by
  digest with the value image.digest.
{{- $n = add1 $n }}
{{- end }}
{{- if ne .root.Values.image.pullPolicy "Always" }}
checkov.io/skip{{ $n }}: >-
  CKV_K8S_15=A release tag is never moved (and a pinned digest cannot be), so Always would
  only add a registry round trip; IfNotPresent lets a pod restart while the registry is down.
{{- end }}
{{- end }}

{{/* The Secret the server mounts (tls.crt, tls.key). */}}
{{- define "gpu-share-webhook.tlsSecret" -}}
{{- if eq .Values.certificates.mode "existingSecret" -}}
{{ .Values.certificates.existingSecret.name }}
{{- else -}}
{{ include "gpu-share-webhook.fullname" . }}-tls
{{- end -}}
{{- end }}

{{/* The ConfigMap whose ca.crt holds the CAs of the API server's client certificate. */}}
{{- define "gpu-share-webhook.clientCaConfigMap" -}}
{{- .Values.clientAuth.existingConfigMap | default (printf "%s-client-ca" (include "gpu-share-webhook.fullname" .)) }}
{{- end }}

{{/* The bootstrap Job's account, and the name of its Role, ClusterRole and bindings. */}}
{{- define "gpu-share-webhook.certsName" -}}
{{ include "gpu-share-webhook.fullname" . }}-certs
{{- end }}

{{/* The cert-manager Certificate whose CA the injector writes into caBundle. */}}
{{- define "gpu-share-webhook.servingCertificate" -}}
{{ include "gpu-share-webhook.fullname" . }}
{{- end }}

{{/* The namespaces no entry reviews: kube-system, the webhook's own and the extra ones,
sorted and without repeats, as `gpu-share-webhook render` lists them. */}}
{{- define "gpu-share-webhook.excludedNamespaces" -}}
{{- $gen := .Files.Get "files/generated.yaml" | fromYaml }}
{{- $all := concat (list $gen.names.systemNamespace .Release.Namespace) .Values.webhook.excludedNamespaces }}
{{- toJson (dict "names" ($all | uniq | sortAlpha)) }}
{{- end }}

{{/*
Checks of values that values.schema.json cannot express. The Deployment includes them, so
every render runs them.
*/}}
{{- define "gpu-share-webhook.checks" -}}
{{- if and .Values.podDisruptionBudget.enabled (le (int .Values.replicas) (int .Values.podDisruptionBudget.minAvailable)) }}
{{- fail (printf "replicas (%d) must be more than podDisruptionBudget.minAvailable (%d), or no node that runs a replica could ever be drained. Run at least 2 (with failurePolicy Fail, GPU-sharing pods cannot be created while no replica answers), or set podDisruptionBudget.enabled=false" (int .Values.replicas) (int .Values.podDisruptionBudget.minAvailable)) }}
{{- end }}
{{- $mode := .Values.certificates.mode }}
{{- if eq $mode "existingSecret" }}
{{- if not .Values.certificates.existingSecret.name }}
{{- fail "certificates.existingSecret.name: the name of your kubernetes.io/tls Secret (tls.crt, tls.key) in the release's namespace (mode existingSecret)" }}
{{- end }}
{{- if not (contains "-----BEGIN CERTIFICATE-----" (.Values.certificates.existingSecret.caBundle | default "")) }}
{{- fail "certificates.existingSecret.caBundle: the PEM of the CA that signed the Secret's certificate (--set-file certificates.existingSecret.caBundle=ca.crt); without it the API server cannot verify the webhook" }}
{{- end }}
{{- else if .Values.certificates.existingSecret.caBundle }}
{{- fail (printf "certificates.existingSecret.caBundle is set, but certificates.mode is %s: set the mode to existingSecret, or leave caBundle empty (%s fills it in)" $mode (ternary "cert-manager's CA injector" "the bootstrap Job" (eq $mode "certManager"))) }}
{{- end }}
{{- $own := list "GPU_SHARE_WEBHOOK_POLICIES" "GPU_SHARE_WEBHOOK_CERT_DIR" "GPU_SHARE_WEBHOOK_PORT" "GPU_SHARE_WEBHOOK_METRICS_PORT" "GPU_SHARE_WEBHOOK_STATE_DIR" "GPU_SHARE_WEBHOOK_LOG_FORMAT" "GPU_SHARE_WEBHOOK_LOG_LEVEL" "GPU_SHARE_WEBHOOK_CLIENT_CA_FILE" "GPU_SHARE_WEBHOOK_CLIENT_NAMES" "GPU_SHARE_WEBHOOK_HOST" }}
{{- range .Values.extraEnv }}
{{- if has .name $own }}
{{- fail (printf "extraEnv: %s is set by the chart (its mounts, ports and the values listenAddress, logFormat, logLevel and clientAuth)" .name) }}
{{- end }}
{{- end }}
{{- with .Values.clientAuth }}
{{- if .enabled }}
{{- if and .caBundle .existingConfigMap }}
{{- fail "clientAuth: caBundle and existingConfigMap are both set; give the CA one way (the PEM, or your ConfigMap with it under ca.crt)" }}
{{- end }}
{{- if not (or .caBundle .existingConfigMap) }}
{{- fail "clientAuth.enabled is true, but no CA is given: the server cannot check the API server's client certificate without the CA that signed it. Give its PEM (--set-file clientAuth.caBundle=client-ca.crt) or the name of your ConfigMap holding it under ca.crt (clientAuth.existingConfigMap)" }}
{{- end }}
{{- if and .caBundle (not (contains "-----BEGIN CERTIFICATE-----" .caBundle)) }}
{{- fail "clientAuth.caBundle: not a PEM certificate (-----BEGIN CERTIFICATE-----): give the CA's certificate, --set-file clientAuth.caBundle=client-ca.crt" }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
