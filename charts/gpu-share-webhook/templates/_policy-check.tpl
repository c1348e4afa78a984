{{/*
The check of a policy file given in .Values.policies.files, so that `helm install` stops
instead of installing a policy the server will not load: each document against the JSON
schema of the server's policy models (files/policy-schema.yaml, generated from
webhook/policy/policies.py by hack/sync.py): unknown fields, missing ones, types, allowed
values, patterns, lengths and bounds. Each problem is one line, `<field path>: <reason>`, the
path as `gpu-share-webhook policy check` writes it.

The models' own validators, which judge fields together (a class's MPS settings, the
profiles against the classes, names listed twice...) or need the server's code (whether a
host path reaches the GPU paths, whether a quantity is in range), are not copied here: they
are `policy check`'s and the server's (docs/install.md, "What the chart checks in your policy
files").

Helm reads YAML a little differently from the server (PyYAML). A plain y, n, 1e3 or 0o17 is
true, false or a number to Helm and a string to the server, so in a file's text a number or
true/false where a string belongs is not refused (`lenient`). A mapping given in the values
is what Helm read, and is written out for the server as such: there it is refused.

pydantic converts some values (lax mode): an integer may also be written "4", "4.0", 4.0 or
true; a boolean 0, 1 or one of true, false, yes, no, on, off, y, n, t, f in any case. The
check takes what it takes.
*/}}

{{/*
The problems of one value against one schema node, as a JSON list of lines.
  (dict "value" V "schema" S "defs" D "path" "spec.nodeClasses[0]" "lenient" true)
*/}}
{{- define "gpu-share-webhook.policyValue" -}}
{{- $v := .value }}
{{- $s := .schema }}
{{- if hasKey $s "ref" }}{{ $s = get .defs $s.ref }}{{ end }}
{{- $at := .path | default "(document)" }}
{{- $out := list }}
{{- $kind := kindOf $v }}
{{- $number := regexMatch "^(int|uint|float)" $kind }}
{{- $what := "a string" }}
{{- if eq $kind "invalid" }}{{ $what = "null" }}
{{- else if $number }}{{ $what = printf "the number %v" $v }}
{{- else if eq $kind "bool" }}{{ $what = printf "%t" $v }}
{{- else if eq $kind "slice" }}{{ $what = "a list" }}
{{- else if eq $kind "map" }}{{ $what = "a mapping" }}
{{- end }}
{{- /* The value's number, where the checks of an integer need one ("" when unknown). */}}
{{- $n := "" }}
{{- $checked := true }}
{{- if eq $kind "invalid" }}
{{- if not $s.nullable }}
{{- $out = append $out (printf "%s: expected %s, not null" $at (include "gpu-share-webhook.policyType" $s)) }}
{{- end }}
{{- $checked = false }}
{{- else if eq $s.type "string" }}
{{- if not (kindIs "string" $v) }}
{{- if not (and .lenient (or $number (eq $kind "bool")) (not $s.enum)) }}
{{- $out = append $out (printf "%s: expected a string, not %s" $at $what) }}
{{- end }}
{{- $checked = false }}
{{- end }}
{{- else if eq $s.type "integer" }}
{{- if $number }}
{{- if ne (float64 $v) (floor $v) }}
{{- $out = append $out (printf "%s: expected an integer, not %s" $at $what) }}
{{- $checked = false }}
{{- else }}
{{- $n = printf "%d" (int64 $v) }}
{{- end }}
{{- else if and (eq $kind "bool") .lenient }}
{{- /* true: 1 to pydantic, but y: a string it refuses; left to the server. */}}
{{- else if eq $kind "bool" }}
{{- $n = ternary "1" "0" $v }}
{{- else if and (kindIs "string" $v) (regexMatch "^\\s*[-+]?[0-9]+(_[0-9]+)*(\\.0+)?\\s*$" $v) }}
{{- $n = regexReplaceAll "[\\s_+]|\\.0+" $v "" }}
{{- else if and .lenient (kindIs "string" $v) (regexMatch "^[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+$" $v) }}
{{- /* 1:20, base 60 to PyYAML (80), a string to Helm; left to the server. */}}
{{- else }}
{{- $out = append $out (printf "%s: expected an integer, not %s" $at $what) }}
{{- $checked = false }}
{{- end }}
{{- else if eq $s.type "boolean" }}
{{- if not (or (eq $kind "bool") (and $number (or (eq (float64 $v) 0.0) (eq (float64 $v) 1.0))) (and (kindIs "string" $v) (regexMatch "^(?i:true|false|yes|no|on|off|y|n|t|f|1|0)$" $v))) }}
{{- $out = append $out (printf "%s: expected true or false, not %s" $at $what) }}
{{- $checked = false }}
{{- end }}
{{- else if eq $s.type "array" }}
{{- if not (eq $kind "slice") }}
{{- $out = append $out (printf "%s: expected a list, not %s" $at $what) }}
{{- $checked = false }}
{{- end }}
{{- else if eq $s.type "object" }}
{{- if not (eq $kind "map") }}
{{- $out = append $out (printf "%s: expected a mapping, not %s" $at $what) }}
{{- $checked = false }}
{{- end }}
{{- end }}
{{- if $checked }}
{{- if and $s.enum (not (has $v $s.enum)) }}
{{- $out = append $out (printf "%s: %s is not one of: %s" $at (toJson $v) (join ", " $s.enum)) }}
{{- end }}
{{- if kindIs "string" $v }}
{{- $length := len (splitList "" $v) }}
{{- if and (hasKey $s "minLength") (lt $length (int $s.minLength)) }}
{{- $out = append $out (printf "%s: %s is shorter than %d characters" $at (toJson $v) (int $s.minLength)) }}
{{- end }}
{{- if and (hasKey $s "maxLength") (gt $length (int $s.maxLength)) }}
{{- $out = append $out (printf "%s: %s is longer than %d characters" $at (toJson $v) (int $s.maxLength)) }}
{{- end }}
{{- if and $s.pattern (eq $s.type "string") (not (regexMatch $s.pattern $v)) }}
{{- if $s.patternWords }}
{{- $out = append $out (printf "%s: %s is not %s" $at (toJson $v) $s.patternWords) }}
{{- else }}
{{- $out = append $out (printf "%s: %s does not match %s" $at (toJson $v) $s.pattern) }}
{{- end }}
{{- end }}
{{- end }}
{{- if ne $n "" }}
{{- $i := int64 $n }}
{{- if and (hasKey $s "minimum") (lt $i (int64 $s.minimum)) }}
{{- $out = append $out (printf "%s: %s is less than %d" $at $n (int64 $s.minimum)) }}
{{- end }}
{{- if and (hasKey $s "maximum") (gt $i (int64 $s.maximum)) }}
{{- $out = append $out (printf "%s: %s is more than %d" $at $n (int64 $s.maximum)) }}
{{- end }}
{{- if and (hasKey $s "exclusiveMinimum") (le $i (int64 $s.exclusiveMinimum)) }}
{{- $out = append $out (printf "%s: %s is not more than %d" $at $n (int64 $s.exclusiveMinimum)) }}
{{- end }}
{{- end }}
{{- if eq $kind "slice" }}
{{- if and (hasKey $s "minItems") (lt (len $v) (int $s.minItems)) }}
{{- $out = append $out (printf "%s: lists fewer than %d items" $at (int $s.minItems)) }}
{{- end }}
{{- if $s.items }}
{{- range $i, $item := $v }}
{{- $out = concat $out (include "gpu-share-webhook.policyValue" (dict "value" $item "schema" $s.items "defs" $.defs "path" (printf "%s[%d]" $.path $i) "lenient" $.lenient) | fromJsonArray) }}
{{- end }}
{{- end }}
{{- end }}
{{- if eq $kind "map" }}
{{- $prefix := ternary "" (printf "%s." $.path) (eq $.path "") }}
{{- range $s.required }}
{{- if not (hasKey $v .) }}
{{- $out = append $out (printf "%s%s: required, and missing" $prefix .) }}
{{- end }}
{{- end }}
{{- $properties := $s.properties | default dict }}
{{- range $key, $item := $v }}
{{- if hasKey $properties $key }}
{{- $out = concat $out (include "gpu-share-webhook.policyValue" (dict "value" $item "schema" (get $properties $key) "defs" $.defs "path" (printf "%s%s" $prefix $key) "lenient" $.lenient) | fromJsonArray) }}
{{- else if kindIs "map" $s.additionalProperties }}
{{- with $s.propertyNames }}
{{- $out = concat $out (include "gpu-share-webhook.policyValue" (dict "value" $key "schema" (merge (dict "type" "string") .) "defs" $.defs "path" (printf "%s%s.[key]" $prefix $key) "lenient" false) | fromJsonArray) }}
{{- end }}
{{- $out = concat $out (include "gpu-share-webhook.policyValue" (dict "value" $item "schema" $s.additionalProperties "defs" $.defs "path" (printf "%s%s" $prefix $key) "lenient" $.lenient) | fromJsonArray) }}
{{- else if eq (toString $s.additionalProperties) "false" }}
{{- $out = append $out (printf "%s%s: unknown field (a typo? unknown fields are refused, not ignored)" $prefix $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{- define "gpu-share-webhook.policyType" -}}
{{- $type := .type | default "" }}
{{- if eq $type "string" }}a string
{{- else if eq $type "integer" }}an integer
{{- else if eq $type "boolean" }}true or false
{{- else if eq $type "array" }}a list
{{- else if eq $type "object" }}a mapping
{{- else }}a value
{{- end }}
{{- end }}

{{/* A boolean field's value as the models read it ("" when not known here): the switches
templates/_policies.tpl reads from a policy. */}}
{{- define "gpu-share-webhook.policyBool" -}}
{{- $kind := kindOf . }}
{{- if eq $kind "bool" }}{{ printf "%t" . }}
{{- else if regexMatch "^(int|uint|float)" $kind }}{{ ternary "true" "false" (eq (float64 .) 1.0) }}
{{- else if kindIs "string" . }}{{ ternary "true" "false" (regexMatch "^(?i:true|yes|on|y|t|1)$" .) }}
{{- end }}
{{- end }}

{{/*
The problems of one policy document (a mapping), as a JSON list of lines. A document of
another apiVersion or kind gets that one line: its other fields are not a policy's.
  (dict "doc" D "schema" files/policy-schema.yaml "gen" files/generated.yaml "lenient" true)
*/}}
{{- define "gpu-share-webhook.policyDocument" -}}
{{- $schema := .schema }}
{{- $gen := .gen }}
{{- $doc := .doc }}
{{- $out := list }}
{{- range $field := list "apiVersion" "kind" }}
{{- if and (not $out) (ne (get $doc $field | toString) (get $gen.names (ternary "policyApiVersion" "policyKind" (eq $field "apiVersion")))) }}
{{- $out = append $out (printf "%s: every document must be apiVersion: %s, kind: %s (not %s)" $field $gen.names.policyApiVersion $gen.names.policyKind (ternary (get $doc $field | toJson) "missing" (hasKey $doc $field))) }}
{{- end }}
{{- end }}
{{- if not $out }}
{{- $out = include "gpu-share-webhook.policyValue" (dict "value" $doc "schema" $schema.root "defs" $schema.defs "path" "" "lenient" .lenient) | fromJsonArray }}
{{- end }}
{{- if and (not $out) (not (kindIs "string" $doc.metadata.name)) }}
{{- /* A field the chart needs to read itself: it names the policy's webhook entries. */}}
{{- $out = append $out (printf "metadata.name: Helm reads this name as %s, not as text: put it in quotes" (toJson $doc.metadata.name)) }}
{{- end }}
{{- if and (not $out) (kindIs "map" $doc.spec.dra) }}
{{- /* And the names of the dra section's classes, which its entries' conditions list. */}}
{{- range $i, $class := $doc.spec.dra.deviceClasses | default list }}
{{- if and (kindIs "map" $class) (not (kindIs "string" $class.name)) }}
{{- $out = append $out (printf "spec.dra.deviceClasses[%d].name: Helm reads this name as %s, not as text: put it in quotes" $i (toJson $class.name)) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}
