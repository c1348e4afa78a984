{{/*
The policies: the files the ConfigMap holds, and for each policy they define the switches
its webhook entries' conditions follow (spec.rules.voidVisibleDevicesWithoutGpu: every pod,
escape route 2; spec.rules.denyHostAccess and spec.hostAccess.trustPodSecurity: what Pod
Security baseline refuses, route 9; spec.rules.denyCdiAnnotations: Pod updates, route 8), as
JSON:

  {"files": {"default.yaml": "<text>", ...},
   "switches": {"default": {"everyPod": true, "hostAccess": true, "trustPodSecurity": true,
                            "cdiUpdates": true}, ...}}

The shipped files (the chart's policies/, a copy of the repository's) get the switches of
.Values.policies.rules: a file whose switches already are those is kept as written, one that
differs is written out again with them (as plain YAML, without the original's comments). Files
of .Values.policies.files are kept as given; only their names and switches are read.
*/}}
{{- define "gpu-share-webhook.policySet" -}}
{{- $gen := .Files.Get "files/generated.yaml" | fromYaml }}
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
{{- $_ := set $switches $name (dict "everyPod" (get $want "voidVisibleDevicesWithoutGpu") "hostAccess" (get $want "denyHostAccess") "trustPodSecurity" (dig "spec" "hostAccess" "trustPodSecurity" $gen.trustPodSecurityDefault $doc) "cdiUpdates" (get $want "denyCdiAnnotations")) }}
{{- end }}
{{- end }}
{{- end }}
{{- range $file, $content := $values.files }}
{{- if or (not (regexMatch "^[-._a-zA-Z0-9]+\\.ya?ml$" $file)) (regexMatch "^kustomization\\.ya?ml$" $file) }}
{{- fail (printf "policies.files: %q is not a name the server reads as a policy file (letters, digits, '-', '_' and '.', ending in .yaml or .yml; not kustomization.yaml)" $file) }}
{{- end }}
{{- $text := $content }}
{{- if kindIs "map" $content }}
{{- $text = toYaml $content }}
{{- end }}
{{- if not (kindIs "string" $text) }}
{{- fail (printf "policies.files.%s: a policy file's text, or one policy as a mapping" $file) }}
{{- end }}
{{- if regexMatch "(?m)^---[ \\t]*[^#\\s]" $text }}
{{- fail (printf "policies.files.%s: put each document separator (---) on a line of its own" $file) }}
{{- end }}
{{- $found := 0 }}
{{- range $part := regexSplit "(?m)^---[ \\t]*(#.*)?$" $text -1 }}
{{- if regexMatch "(?m)^[ \\t]*[^#\\s]" $part }}
{{- $doc := fromYaml $part }}
{{- if hasKey $doc "Error" }}
{{- fail (printf "policies.files.%s: not valid YAML: %s" $file $doc.Error) }}
{{- end }}
{{- if not (and (eq (get $doc "apiVersion") $gen.names.policyApiVersion) (eq (get $doc "kind") $gen.names.policyKind)) }}
{{- fail (printf "policies.files.%s: every document must be apiVersion: %s, kind: %s" $file $gen.names.policyApiVersion $gen.names.policyKind) }}
{{- end }}
{{- $name := dig "metadata" "name" "" $doc }}
{{- if not (and (kindIs "string" $name) (le (len $name) 63) (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $name)) }}
{{- fail (printf "policies.files.%s: metadata.name %v is not a policy name (a DNS label)" $file $name) }}
{{- end }}
{{- if hasKey $where $name }}
{{- fail (printf "policies.files.%s: policy %q is already defined in %s (leave out a shipped file with policies.exclude, or replace it by giving a file of the same name)" $file $name (get $where $name)) }}
{{- end }}
{{- $_ := set $where $name $file }}
{{- $rules := dict }}
{{- range $k, $v := $gen.ruleDefaults }}{{ $_ := set $rules $k $v }}{{ end }}
{{- range $k, $v := (dig "spec" "rules" (dict) $doc) }}{{ $_ := set $rules $k $v }}{{ end }}
{{- $_ := set $switches $name (dict "everyPod" (get $rules "voidVisibleDevicesWithoutGpu") "hostAccess" (get $rules "denyHostAccess") "trustPodSecurity" (dig "spec" "hostAccess" "trustPodSecurity" $gen.trustPodSecurityDefault $doc) "cdiUpdates" (get $rules "denyCdiAnnotations")) }}
{{- $found = add1 $found }}
{{- end }}
{{- end }}
{{- if eq $found 0 }}
{{- fail (printf "policies.files.%s: holds no policy" $file) }}
{{- end }}
{{- $_ := set $files $file $text }}
{{- end }}
{{- if not $files }}
{{- fail "no policy files: policies.shipped is false (or every shipped file is excluded) and policies.files is empty" }}
{{- end }}
{{- toJson (dict "files" $files "switches" $switches) }}
{{- end }}

{{/* The policies ConfigMap's name: it changes with the contents, so that a policy change
rolls the Deployment, and a policy set the new pods refuse stops the rollout while the old
pods go on serving with theirs. */}}
{{- define "gpu-share-webhook.policiesConfigMap" -}}
{{- $set := include "gpu-share-webhook.policySet" . | fromJson }}
{{- printf "%s-policies-%s" (include "gpu-share-webhook.fullname" .) (toJson $set.files | sha256sum | trunc 10) }}
{{- end }}
