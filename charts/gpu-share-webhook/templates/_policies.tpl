{{/*
The policies: the files the ConfigMap holds, and for each policy they define the switches
its webhook entries' conditions follow (spec.rules.voidVisibleDevicesWithoutGpu: every pod,
escape route 2; spec.rules.denyHostAccess and spec.hostAccess.trustPodSecurity: what Pod
Security baseline refuses, route 9; spec.rules.denyCdiAnnotations: Pod updates, route 8;
spec.dra: the classes the section lists (`draClasses`), which every entry is sent the
claims of), as JSON:

  {"files": {"default.yaml": "<text>", ...},
   "switches": {"default": {"everyPod": true, "hostAccess": true, "trustPodSecurity": true,
                            "cdiUpdates": true, "draClasses": []}, ...}}

The shipped files (the chart's policies/, a copy of the repository's) get the switches of
.Values.policies.rules: a file whose switches already are those is kept as written, one that
differs is written out again with them (as plain YAML, without the original's comments). Files
of .Values.policies.files are kept as given; only their names and switches are read.
*/}}
{{- define "gpu-share-webhook.policySet" -}}
{{- $gen := .Files.Get "files/generated.yaml" | fromYaml }}
{{- $schema := .Files.Get "files/policy-schema.yaml" | fromYaml }}
{{- $values := .Values.policies }}
{{- $files := dict }}
{{- $switches := dict }}
{{- $where := dict }}
{{- if $values.shipped }}
{{- $shipped := list }}
{{- range $path, $_ := .Files.Glob "policies/*" }}
{{- $shipped = append $shipped (base $path) }}
{{- end }}
{{- range $values.exclude }}
{{- if not (has . $shipped) }}
{{- fail (printf "policies.exclude: the chart ships no policy file %q (it ships %s)" . (join ", " $shipped)) }}
{{- end }}
{{- end }}
{{- range $path, $_ := .Files.Glob "policies/*" }}
{{- $file := base $path }}
{{- if and (regexMatch "\\.ya?ml$" $file) (not (has $file $values.exclude)) (not (hasKey $values.files $file)) }}
{{- $text := $.Files.Get $path }}
{{- $doc := fromYaml $text }}
{{- $has := dict }}
{{- range $k, $v := $gen.ruleDefaults }}{{ $_ := set $has $k $v }}{{ end }}
{{- range $k, $v := (dig "spec" "rules" (dict) $doc) }}{{ $_ := set $has $k $v }}{{ end }}
{{- $want := deepCopy $has }}
{{- range $k, $v := $values.rules }}{{ $_ := set $want $k $v }}{{ end }}
{{- if ne (toJson $want) (toJson $has) }}
{{- $_ := set $doc.spec "rules" $want }}
{{- $text = printf "# policies/%s of the %s chart,\n# with spec.rules from its values (policies.rules).\n%s" $file (include "gpu-share-webhook.chart" $) (toYaml $doc) }}
{{- end }}
{{- $_ := set $files $file $text }}
{{- $name := dig "metadata" "name" "" $doc }}
{{- $_ := set $where $name $file }}
{{- $_ := set $switches $name (dict "everyPod" (get $want "voidVisibleDevicesWithoutGpu") "hostAccess" (get $want "denyHostAccess") "trustPodSecurity" (dig "spec" "hostAccess" "trustPodSecurity" $gen.trustPodSecurityDefault $doc) "cdiUpdates" (get $want "denyCdiAnnotations") "draClasses" (include "gpu-share-webhook.draClasses" $doc | fromJsonArray)) }}
{{- end }}
{{- end }}
{{- end }}
{{- $problems := list }}
{{- range $file, $content := $values.files }}
{{- if or (not (regexMatch "^[-._a-zA-Z0-9]+\\.ya?ml$" $file)) (regexMatch "^kustomization\\.ya?ml$" $file) }}
{{- fail (printf "policies.files: %q is not a name the server reads as a policy file (letters, digits, '-', '_' and '.', ending in .yaml or .yml; not kustomization.yaml)" $file) }}
{{- end }}
{{- $label := printf "policies.files.%s" $file }}
{{- /* The documents to check, each with its label as `policy check` numbers them. A
mapping is checked as Helm read it, which is what the server gets (toYaml). */}}
{{- $docs := list }}
{{- $text := $content }}
{{- if kindIs "map" $content }}
{{- $text = toYaml $content }}
{{- $docs = list (dict "doc" $content "label" $label "lenient" false) }}
{{- else if not (kindIs "string" $content) }}
{{- fail (printf "%s: a policy file's text, or one policy as a mapping" $label) }}
{{- else }}
{{- if regexMatch "(?m)^---[ \\t]*[^#\\s]" $text }}
{{- fail (printf "%s: put each document separator (---) on a line of its own" $label) }}
{{- end }}
{{- /* PyYAML's documents: what comes before the first separator is one when it holds
more than comments; every separator starts one, empty or not. */}}
{{- $parts := list }}
{{- range $i, $part := regexSplit "(?m)^---[ \\t]*(#.*)?$" $text -1 }}
{{- if or (gt $i 0) (regexMatch "(?m)^[ \\t]*[^#\\s]" $part) }}
{{- $parts = append $parts $part }}
{{- end }}
{{- end }}
{{- range $i, $part := $parts }}
{{- $at := ternary (printf "%s (document %d)" $label (add1 $i)) $label (gt (len $parts) 1) }}
{{- if regexMatch "(?m)^[ \\t]*[^#\\s]" $part }}
{{- $doc := fromYaml $part }}
{{- if not (hasKey $doc "Error") }}
{{- $docs = append $docs (dict "doc" $doc "label" $at "lenient" true) }}
{{- else if regexMatch "cannot unmarshal (array|string|number|bool)" $doc.Error }}
{{- $problems = append $problems (printf "%s: a policy is a mapping (of apiVersion, kind, metadata and spec), not a list or a single value" $at) }}
{{- else }}
{{- $problems = append $problems (printf "%s: not valid YAML: %s" $at $doc.Error) }}
{{- end }}
{{- end }}
{{- end }}
{{- if not $parts }}
{{- $problems = append $problems (printf "%s: holds no policy document" $label) }}
{{- end }}
{{- end }}
{{- range $docs }}
{{- $doc := .doc }}
{{- $at := .label }}
{{- $found := include "gpu-share-webhook.policyDocument" (dict "doc" $doc "schema" $schema "gen" $gen "lenient" .lenient) | fromJsonArray }}
{{- range $found }}
{{- $problems = append $problems (printf "%s: %s" $at .) }}
{{- end }}
{{- if not $found }}
{{- $name := $doc.metadata.name }}
{{- if hasKey $where $name }}
{{- $problems = append $problems (printf "%s: metadata.name: policy %q is already defined in %s (leave out a shipped file with policies.exclude, or replace it by giving a file of the same name)" $at $name (get $where $name)) }}
{{- else }}
{{- $_ := set $where $name $file }}
{{- $rules := dict }}
{{- range $k, $v := $gen.ruleDefaults }}{{ $_ := set $rules $k $v }}{{ end }}
{{- range $k, $v := (dig "spec" "rules" (dict) $doc) }}{{ $_ := set $rules $k (include "gpu-share-webhook.policyBool" $v | eq "true") }}{{ end }}
{{- $trust := dig "spec" "hostAccess" "trustPodSecurity" $gen.trustPodSecurityDefault $doc }}
{{- $_ := set $switches $name (dict "everyPod" (get $rules "voidVisibleDevicesWithoutGpu") "hostAccess" (get $rules "denyHostAccess") "trustPodSecurity" (include "gpu-share-webhook.policyBool" $trust | eq "true") "cdiUpdates" (get $rules "denyCdiAnnotations") "draClasses" (include "gpu-share-webhook.draClasses" $doc | fromJsonArray)) }}
{{- end }}
{{- end }}
{{- end }}
{{- $_ := set $files $file $text }}
{{- end }}
{{- if $problems }}
{{- fail (printf "policies.files: the server would not load these policies (`gpu-share-webhook policy check DIR` refuses them too, and checks what the chart cannot: see docs/install.md):\n  %s" (join "\n  " $problems)) }}
{{- end }}
{{- if not $files }}
{{- fail "no policy files: policies.shipped is false (or every shipped file is excluded) and policies.files is empty" }}
{{- end }}
{{- toJson (dict "files" $files "switches" $switches) }}
{{- end }}

{{/* The device classes a policy's dra section lists, as a JSON list, sorted, once each: none
without one. The GPU classes of a policy with a dra section are those of every policy, and
NVIDIA's (`DraPolicy.gpu_classes`; templates/webhook-configurations.yaml joins them).
A policy document. */}}
{{- define "gpu-share-webhook.draClasses" -}}
{{- $dra := dig "spec" "dra" "" . }}
{{- $classes := list }}
{{- if kindIs "map" $dra }}
{{- range $dra.deviceClasses }}
{{- $classes = append $classes (toString .name) }}
{{- end }}
{{- end }}
{{- $classes | uniq | sortAlpha | toJson }}
{{- end }}

{{/* The policies ConfigMap's name: it changes with the contents, so that a policy change
rolls the Deployment, and a policy set the new pods refuse stops the rollout while the old
pods go on serving with theirs. */}}
{{- define "gpu-share-webhook.policiesConfigMap" -}}
{{- $set := include "gpu-share-webhook.policySet" . | fromJson }}
{{- printf "%s-policies-%s" (include "gpu-share-webhook.fullname" .) (toJson $set.files | sha256sum | trunc 10) }}
{{- end }}
