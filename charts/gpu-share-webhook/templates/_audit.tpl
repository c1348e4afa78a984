{{/* The background audit (audit-cronjob.yaml, audit-rbac.yaml): its names, labels, command
and rights. */}}

{{/* The CronJob, its account, ClusterRole and binding, and its NetworkPolicy: at most 46
characters (fullname is at most 40), within the 52 a CronJob's name may have. */}}
{{- define "gpu-share-webhook.auditName" -}}
{{ include "gpu-share-webhook.fullname" . }}-audit
{{- end }}

{{- define "gpu-share-webhook.auditSelectorLabels" -}}
{{ include "gpu-share-webhook.selectorLabels" . }}
app.kubernetes.io/component: audit
{{- end }}

{{- define "gpu-share-webhook.auditLabels" -}}
{{ include "gpu-share-webhook.labels" . }}
app.kubernetes.io/component: audit
{{- end }}

{{/*
The command: `audit --cluster -o <api> --write-reports`, with the server's policies (the
same ConfigMap, mounted at the same path), the release's namespace (never reviewed, as the
rendered configurations say), the namespaces webhook.excludedNamespaces leaves out (never
reviewed either) and the page size. No --workload-kinds: the chart has no such
setting, so the audit reads the file shipped in the image, as the server does. The
credentials are the pod's own service account token (the command's default in a pod).
*/}}
{{- define "gpu-share-webhook.auditArgs" -}}
- audit
- --cluster
- --output={{ .Values.audit.reports }}
- --write-reports
- --policies=/etc/gpu-share-webhook/policies
- --webhook-namespace={{ .Release.Namespace }}
- --page-size={{ .Values.audit.pageSize }}
{{- range .Values.webhook.excludedNamespaces }}
- --exclude-namespace={{ . }}
{{- end }}
{{- range .Values.audit.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/*
The least the command needs (files/generated.yaml `audit`, which hack/sync.py takes from the
package): `list` on each kind it reads, cluster-wide (Namespaces, Pods, the built-in workload
kinds, the DRA claims and the kinds of the shipped WorkloadKinds file); and on the chosen
report API's two kinds, `list` (its own reports, by label), `create` and `patch` (a
server-side apply is a PATCH, and one that makes the object needs create too), `delete` (a
report of a namespace with nothing left). No get (an apply need not read first), no watch,
no update. The report verbs cannot be limited by resourceNames: create never can, and the
reports of a large namespace are numbered (gpu-share-webhook-2, ...).
*/}}
{{- define "gpu-share-webhook.auditRules" -}}
{{- $gen := .Files.Get "files/generated.yaml" | fromYaml }}
{{- range $gen.audit.reads }}
- apiGroups: [{{ .apiGroup | quote }}]
  resources: {{ toJson .resources }}
  verbs: ["list"]
{{- end }}
{{- with index $gen.audit.reports .Values.audit.reports }}
- apiGroups: [{{ .apiGroup | quote }}]
  resources: {{ toJson .resources }}
  verbs: ["list", "create", "patch", "delete"]
{{- end }}
{{- end }}

{{/* What values.schema.json cannot say of the audit's values. */}}
{{- define "gpu-share-webhook.auditChecks" -}}
{{- $own := list "--cluster" "--output" "--write-reports" "--policies" "--webhook-namespace" "--page-size" "--exclude-namespace" "--filename" "-f" }}
{{- range .Values.audit.extraArgs }}
{{- $option := first (splitList "=" .) }}
{{- if or (has $option $own) (and (not (hasPrefix "--" .)) (or (hasPrefix "-o" .) (hasPrefix "-f" .))) }}
{{- fail (printf "audit.extraArgs: %s is set by the chart (the values audit.reports, audit.pageSize and the release's policies and namespace), or cannot be used with --cluster" .) }}
{{- end }}
{{- end }}
{{- end }}
