{{/*
The check of a policy file given in .Values.policies.files: what `gpu-share-webhook policy
check` refuses in it, as far as a template can tell, so that `helm install` stops instead of
installing a policy the server will not load.

Two passes over each document, as the server's pydantic models make them:
1. the schema (files/policy-schema.yaml, generated from the models by hack/sync.py): unknown
   fields, missing ones, types, allowed values, patterns, lengths and bounds;
2. when the document passes it, the models' own validators (PolicySpecModel._coherent and
   those of the node classes, profiles, tolerations, host paths and the dra section),
   rewritten here with the constants of files/policy-schema.yaml, except what needs
   webhook/policy/hostpaths.py (whether a host path reaches the GPU paths the rules guard).
Each problem is one line, `<field path>: <reason>`, the path as `policy check` writes it.

Where the chart cannot tell, it lets the file through and leaves the word to the server:
Helm reads YAML a little differently from the server (PyYAML). A plain y, n, 1e3 or 0o17 is
true, false or a number to Helm and a string to the server, so in a file's text a number or
true/false where a string belongs is not refused (`lenient`). A mapping given in the values
is what Helm read, and is written out for the server as such: there it is refused.

pydantic converts some values (lax mode): an integer may also be written "4", "4.0", 4.0 or
true; a boolean 0, 1 or one of true, false, yes, no, on, off, y, n, t, f in any case. The
checks below take what it takes.
*/}}

{{/*
The problems of one value against one schema node, as a JSON list of lines, and "?" for
each value left to the server (the models' own checks are then left to it too: they would
compare what Helm read, not what the server will).
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
{{- if and .lenient (or $number (eq $kind "bool")) (not $s.enum) }}
{{- $out = append $out "?" }}
{{- $checked = false }}
{{- else }}
{{- $out = append $out (printf "%s: expected a string, not %s" $at $what) }}
{{- $checked = false }}
{{- end }}
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
{{- /* true: 1 to pydantic, but y: a string it refuses. */}}
{{- $out = append $out "?" }}
{{- else if eq $kind "bool" }}
{{- $n = ternary "1" "0" $v }}
{{- else if and (kindIs "string" $v) (regexMatch "^\\s*[-+]?[0-9]+(_[0-9]+)*(\\.0+)?\\s*$" $v) }}
{{- $n = regexReplaceAll "[\\s_+]|\\.0+" $v "" }}
{{- else if and .lenient (kindIs "string" $v) (regexMatch "^[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+$" $v) }}
{{- /* 1:20, base 60 to PyYAML (80), a string to Helm. */}}
{{- $out = append $out "?" }}
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
{{- $out = append $out (printf "%s: %s does not match %s" $at (toJson $v) $s.pattern) }}
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

{{/* "true" when the mapping has the key with a value other than null (pydantic's None). */}}
{{- define "gpu-share-webhook.policyHas" -}}
{{- and (hasKey .map .key) (ne (kindOf (get .map .key)) "invalid") }}
{{- end }}

{{/* An integer field's value as the models read it ("" when not known here). */}}
{{- define "gpu-share-webhook.policyInt" -}}
{{- $kind := kindOf . }}
{{- if regexMatch "^(int|uint|float)" $kind }}{{ printf "%d" (int64 .) }}
{{- else if eq $kind "bool" }}{{ ternary "1" "0" . }}
{{- else if and (kindIs "string" .) (regexMatch "^\\s*[-+]?[0-9]+(_[0-9]+)*(\\.0+)?\\s*$" .) }}{{ regexReplaceAll "[\\s_+]|\\.0+" . "" }}
{{- end }}
{{- end }}

{{/* A boolean field's value as the models read it ("" when not known here). */}}
{{- define "gpu-share-webhook.policyBool" -}}
{{- $kind := kindOf . }}
{{- if eq $kind "bool" }}{{ printf "%t" . }}
{{- else if regexMatch "^(int|uint|float)" $kind }}{{ ternary "true" "false" (eq (float64 .) 1.0) }}
{{- else if kindIs "string" . }}{{ ternary "true" "false" (regexMatch "^(?i:true|yes|on|y|t|1)$" .) }}
{{- end }}
{{- end }}

{{/*
The problems the models' validators find in a document that passed the schema, as a JSON
list of lines; pydantic runs a model's validator only when its fields are valid, and so
does this. A value Helm read as another type than the server will (see above) is left to
the server. (dict "doc" D "checks" C)
*/}}
{{- define "gpu-share-webhook.policySemantics" -}}
{{- $checks := .checks }}
{{- $spec := .doc.spec }}
{{- $nested := list }}
{{- /* TolerationSpec: every problem of each, as the API server would refuse it. */}}
{{- range $i, $t := $spec.tolerations | default list }}
{{- $at := printf "spec.tolerations[%d]" $i }}
{{- $operator := $t.operator | default $checks.defaultOperator }}
{{- if and (eq $operator "Exists") $t.value }}
{{- $nested = append $nested (printf "%s: value must be empty when operator is 'Exists'" $at) }}
{{- end }}
{{- if and (or (not (hasKey $t "key")) (eq (kindOf $t.key) "invalid") (eq (toJson $t.key) "\"\"")) (ne $operator "Exists") }}
{{- $nested = append $nested (printf "%s: operator must be 'Exists' when key is empty" $at) }}
{{- end }}
{{- if and (ne (include "gpu-share-webhook.policyInt" $t.tolerationSeconds) "") (ne (toString $t.effect) "NoExecute") }}
{{- $nested = append $nested (printf "%s: tolerationSeconds is only allowed with effect NoExecute" $at) }}
{{- end }}
{{- end }}
{{- /* NodeClassSpec._consistent: every problem of each class. */}}
{{- $classes := list }}
{{- range $i, $c := $spec.nodeClasses }}
{{- $at := printf "spec.nodeClasses[%d]" $i }}
{{- $replicas := include "gpu-share-webhook.policyInt" $c.replicas }}
{{- $resource := ternary $c.resource $checks.defaultResource (hasKey $c "resource") }}
{{- $renamed := ternary (include "gpu-share-webhook.policyBool" $c.renamed) (printf "%t" $checks.defaultRenamed) (hasKey $c "renamed") }}
{{- $memory := ternary (include "gpu-share-webhook.policyInt" $c.memoryMiB) "none" (include "gpu-share-webhook.policyHas" (dict "map" $c "key" "memoryMiB") | eq "true") }}
{{- $mps := eq $c.strategy "mps" }}
{{- if and (ne $replicas "") (lt (int64 $replicas) 2) }}
{{- $nested = append $nested (printf "%s.replicas: %s is not sharing; the device plugin needs at least 2" $at $replicas) }}
{{- end }}
{{- if and $mps (kindIs "string" $resource) (hasPrefix "nvidia.com/mig-" $resource) }}
{{- $nested = append $nested (printf "%s.strategy: the device plugin refuses MPS on MIG devices (use time-slicing)" $at) }}
{{- end }}
{{- if and $mps (eq $memory "none") }}
{{- $nested = append $nested (printf "%s.memoryMiB: required for an mps class (it sets the ceiling)" $at) }}
{{- end }}
{{- if and $mps (ne $replicas "") (gt (int64 $replicas) (int64 $checks.mpsMaxReplicas)) }}
{{- $nested = append $nested (printf "%s.replicas: MPS allows at most %d per GPU" $at (int64 $checks.mpsMaxReplicas)) }}
{{- end }}
{{- /* GFD writes the -SHARED suffix once, only where the plugin shares without renaming, and
the webhook adds it itself for a class that is not renamed: a product that ends with it
matches no node either way. */}}
{{- if and (kindIs "string" $c.product) (ne $renamed "") (hasSuffix $checks.productSharedSuffix $c.product) }}
{{- $plain := trimSuffix $checks.productSharedSuffix $c.product }}
{{- if eq $renamed "true" }}
{{- $nested = append $nested (printf "%s.product: %s never matches a node: GFD writes %s only on GPUs shared without renaming, and this class is renamed. Write %s (or renamed: false, if the device plugin runs renameByDefault: false)" $at $c.product $checks.productSharedSuffix $plain) }}
{{- else }}
{{- $nested = append $nested (printf "%s.product: %s never matches a node: the webhook adds %s itself for a class that is not renamed, and GFD never writes %s%s. Write %s" $at $c.product $checks.productSharedSuffix $c.product $checks.productSharedSuffix $plain) }}
{{- end }}
{{- else if and (eq $renamed "false") (kindIs "string" $c.product) (gt (add (len $c.product) (len $checks.productSharedSuffix)) (int $checks.maxLabelValue)) }}
{{- $nested = append $nested (printf "%s.product: with the %s suffix it is longer than a label value" $at $checks.productSharedSuffix) }}
{{- end }}
{{- $advertised := "" }}
{{- if and (kindIs "string" $resource) (ne $renamed "") }}
{{- $advertised = printf "%s%s" $resource (ternary $checks.sharedSuffix "" (eq $renamed "true")) }}
{{- end }}
{{- $classes = append $classes (dict "name" (toString $c.name) "advertised" $advertised "mps" $mps "replicas" $replicas "memory" $memory) }}
{{- end }}
{{- /* ProfileSpec._not_empty. */}}
{{- range $name, $p := $spec.profiles | default dict }}
{{- if not (or (include "gpu-share-webhook.policyHas" (dict "map" $p "key" "activeThreadPercentage") | eq "true") (include "gpu-share-webhook.policyHas" (dict "map" $p "key" "pinnedMemoryMiB") | eq "true")) }}
{{- $nested = append $nested (printf "spec.profiles.%s: a profile sets activeThreadPercentage, pinnedMemoryMiB or both" $name) }}
{{- end }}
{{- end }}
{{- /* AllowedHostPathSpec._safe and HostAccessSpec._paths: absolute and clean paths (whether
one reaches the GPU paths, webhook/policy/hostpaths.py, is the server's to say). */}}
{{- $hostAccess := $spec.hostAccess | default dict }}
{{- $allowedFine := true }}
{{- range $i, $a := $hostAccess.allowedHostPaths | default list }}
{{- $problem := include "gpu-share-webhook.policyHostPath" (dict "path" $a.pathPrefix "what" "pathPrefix") }}
{{- if $problem }}
{{- $nested = append $nested (printf "spec.hostAccess.allowedHostPaths[%d]: %s" $i $problem) }}
{{- $allowedFine = false }}
{{- end }}
{{- end }}
{{- if $allowedFine }}
{{- $deniedProblem := "" }}
{{- range $i, $d := $hostAccess.deniedHostPaths | default list }}
{{- if not $deniedProblem }}
{{- $deniedProblem = include "gpu-share-webhook.policyHostPath" (dict "path" $d "what" (printf "deniedHostPaths[%d]" $i)) }}
{{- end }}
{{- end }}
{{- if $deniedProblem }}
{{- $nested = append $nested (printf "spec.hostAccess: %s" $deniedProblem) }}
{{- end }}
{{- end }}
{{- /* DraClassSpec._coherent: every problem of each class; DraSpec._coherent when there is
none. pydantic reports them whatever else is wrong, and `policy check` the spec's own
problems beside them (PolicySpecModel._coherent reads nothing of the dra section). */}}
{{- $dra := include "gpu-share-webhook.policyDra" (dict "dra" $spec.dra "checks" $checks) | fromJsonArray }}
{{- if $nested }}
{{- toJson (concat $nested $dra) }}
{{- else }}
{{- /* PolicySpecModel._coherent: every problem. */}}
{{- $out := list }}
{{- $ruleModes := $spec.ruleModes | default dict }}
{{- range $rule, $_ := $ruleModes }}
{{- if not (has $rule $checks.rules) }}
{{- $out = append $out (printf "spec.ruleModes.%s: no rule has this name (rules: %s)" $rule (join ", " $checks.rules)) }}
{{- end }}
{{- end }}
{{- range $rule, $_ := $ruleModes }}
{{- if has $rule $checks.alwaysEnforced }}
{{- $out = append $out (printf "spec.ruleModes.%s: always enforced (it refuses bad input)" $rule) }}
{{- end }}
{{- end }}
{{- if and (not $classes) (not $spec.dra) }}
{{- $out = append $out "spec.nodeClasses: at least one class is needed, unless the policy has a dra section (its namespaces then get GPUs through dynamic resource allocation alone)" }}
{{- end }}
{{- $seen := dict }}
{{- $twice := dict }}
{{- range $classes }}
{{- if hasKey $seen .name }}{{ $_ := set $twice .name true }}{{ end }}
{{- $_ := set $seen .name true }}
{{- end }}
{{- range $name, $_ := $twice }}
{{- $out = append $out (printf "spec.nodeClasses: two classes named '%s'" $name) }}
{{- end }}
{{- $shared := ternary $spec.sharedResources $checks.defaultSharedResources (hasKey $spec "sharedResources") }}
{{- $sharedText := list }}
{{- range $shared }}{{ $sharedText = append $sharedText (toString .) }}{{ end }}
{{- if ne (len (uniq $sharedText)) (len $sharedText) }}
{{- $out = append $out "spec.sharedResources: a resource is listed twice" }}
{{- end }}
{{- $served := list }}
{{- $known := true }}
{{- range $classes }}
{{- if eq .advertised "" }}{{ $known = false }}{{ end }}
{{- $served = append $served .advertised }}
{{- end }}
{{- if and $known $classes }}
{{- range $classes }}
{{- if not (has .advertised $sharedText) }}
{{- $out = append $out (printf "spec.nodeClasses[%s]: advertises %s, which is not in sharedResources" .name .advertised) }}
{{- end }}
{{- end }}
{{- range (uniq $sharedText | sortAlpha) }}
{{- if not (has . $served) }}
{{- $out = append $out (printf "spec.sharedResources: no node class advertises %s" .) }}
{{- end }}
{{- end }}
{{- end }}
{{- $profiles := $spec.profiles | default dict }}
{{- $default := $spec.defaultProfile }}
{{- $defaultSet := include "gpu-share-webhook.policyHas" (dict "map" $spec "key" "defaultProfile") | eq "true" }}
{{- if $profiles }}
{{- if not $defaultSet }}
{{- $out = append $out "spec.defaultProfile: required when profiles are defined" }}
{{- else if and (kindIs "string" $default) (not (hasKey $profiles $default)) }}
{{- $out = append $out (printf "spec.defaultProfile: '%s' is not one of the profiles (%s)" $default (join ", " (keys $profiles | sortAlpha))) }}
{{- end }}
{{- else if $defaultSet }}
{{- $out = append $out "spec.defaultProfile: set, but no profiles are defined" }}
{{- end }}
{{- $mpsClasses := list }}
{{- $ceilingsKnown := true }}
{{- range $classes }}
{{- if .mps }}
{{- $mpsClasses = append $mpsClasses . }}
{{- if or (eq .replicas "") (eq .memory "") }}{{ $ceilingsKnown = false }}{{ end }}
{{- end }}
{{- end }}
{{- if and $mpsClasses $ceilingsKnown }}
{{- $ceilings := list }}
{{- range $mpsClasses }}
{{- $r := int64 .replicas }}
{{- $memoryCeiling := ternary 0 (div (int64 .memory) $r) (eq .memory "none") }}
{{- $ceilings = append $ceilings (printf "%s: %d%% / %d MiB" .name (div 100 $r) $memoryCeiling) }}
{{- end }}
{{- range $name, $p := $profiles }}
{{- $threads := include "gpu-share-webhook.policyInt" $p.activeThreadPercentage }}
{{- $pinned := include "gpu-share-webhook.policyInt" $p.pinnedMemoryMiB }}
{{- $unknown := or (and (include "gpu-share-webhook.policyHas" (dict "map" $p "key" "activeThreadPercentage") | eq "true") (eq $threads "")) (and (include "gpu-share-webhook.policyHas" (dict "map" $p "key" "pinnedMemoryMiB") | eq "true") (eq $pinned "")) }}
{{- $fits := false }}
{{- range $mpsClasses }}
{{- $r := int64 .replicas }}
{{- $fit := true }}
{{- if and (ne $threads "") (gt (int64 $threads) (div 100 $r)) }}{{ $fit = false }}{{ end }}
{{- if and (ne $pinned "") (ne .memory "none") (gt (int64 $pinned) (div (int64 .memory) $r)) }}{{ $fit = false }}{{ end }}
{{- if $fit }}{{ $fits = true }}{{ end }}
{{- end }}
{{- if and (not $fits) (not $unknown) }}
{{- $out = append $out (printf "spec.profiles.%s: above the MPS ceiling of every class (%s)" $name (join ", " $ceilings)) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson (concat $out $dra) }}
{{- end }}
{{- end }}

{{/*
The problems of a dra section (spec.dra) that passed the schema, as a JSON list of lines:
those of DraClassSpec._coherent for each class, and when there are none those of
DraSpec._coherent; each message as files/policy-schema.yaml has it from the models, placed
as `policy check` places it (`fieldFirst`: at the field it starts with, under the model's
path). (dict "dra" D "checks" C)
*/}}
{{- define "gpu-share-webhook.policyDra" -}}
{{- $checks := .checks }}
{{- $c := $checks.dra }}
{{- $out := list }}
{{- with .dra }}
{{- $names := list }}
{{- range $i, $class := .deviceClasses | default list }}
{{- $at := printf "spec.dra.deviceClasses[%d]" $i }}
{{- $name := toString $class.name }}
{{- $names = append $names $name }}
{{- $kind := $class.configKind | default (get $c.configKinds $name) | default $c.defaultConfigKind }}
{{- $sharing := $class.sharing | default list }}
{{- $messages := list }}
{{- if and (hasKey $c.unshared $kind) $sharing }}
{{- $messages = append $messages (get $c.unshared $kind) }}
{{- end }}
{{- if ne (len (uniq $sharing)) (len $sharing) }}
{{- $messages = append $messages $c.strategyTwice }}
{{- end }}
{{- $capacities := $class.capacity | default dict }}
{{- if and (eq (kindOf $class.allowed) "bool") $class.allowed (eq (kindOf $class.allowWholeDevice) "bool") (not $class.allowWholeDevice) (not $sharing) (not $capacities) }}
{{- $messages = append $messages $c.wholeWithoutSharing }}
{{- end }}
{{- if and (eq (kindOf $class.addMpsConfig) "bool") $class.addMpsConfig }}
{{- if not (has "MPS" $sharing) }}
{{- $messages = append $messages $c.addWithoutMps }}
{{- else if $capacities }}
{{- $messages = append $messages $c.addWithCapacity }}
{{- end }}
{{- end }}
{{- range $capacity, $value := $class.capacity | default dict }}
{{- $fault := include "gpu-share-webhook.policyQuantity" (dict "value" $value "q" $checks.quantity) }}
{{- if $fault }}
{{- $messages = append $messages (printf $c.capacity $capacity (include "gpu-share-webhook.pythonRepr" $value) $fault) }}
{{- end }}
{{- end }}
{{- range $messages }}
{{- $out = append $out (printf (ternary "%s.%s" "%s: %s" (regexMatch $c.fieldFirst .)) $at .) }}
{{- end }}
{{- end }}
{{- if not $out }}
{{- $twice := dict }}
{{- range $i, $name := $names }}
{{- if has $name (slice $names 0 $i) }}{{ $_ := set $twice $name true }}{{ end }}
{{- end }}
{{- range keys $twice | sortAlpha }}
{{- $out = append $out (printf "spec.dra.%s" (printf $c.classTwice .)) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/*
webhook/policy/quantities.py `parse` of a quantity given as text: "" when it takes it, else
its reason (not a quantity, out of range, negative), with the grammar, the bounds and the
suffixes of files/policy-schema.yaml (`checks.quantity`). Exact: the bounds are compared as
digit strings, not as numbers a template could round. (dict "value" V "q" Q)
*/}}
{{- define "gpu-share-webhook.policyQuantity" -}}
{{- $q := .q }}
{{- $v := .value }}
{{- $grammar := printf "^(?:%s)$" $q.pattern }}
{{- if or (not (kindIs "string" $v)) (eq $v "") (not (regexMatch $grammar $v)) }}
{{- $q.notAQuantity }}
{{- else }}
{{- $sign := regexReplaceAll $grammar $v "${1}" }}
{{- $whole := regexReplaceAll $grammar $v "${2}" }}
{{- $fraction := regexReplaceAll $grammar $v "${3}" }}
{{- $exponent := regexReplaceAll $grammar $v "${4}" }}
{{- $suffix := regexReplaceAll $grammar $v "${5}" }}
{{- $power10 := 0 }}
{{- $power2 := 0 }}
{{- $fault := "" }}
{{- if ne $exponent "" }}
{{- /* Compared as digits first: int64 of a longer string would overflow. */}}
{{- $magnitude := regexReplaceAll "^[+-]?0*" $exponent "" }}
{{- if or (gt (len $magnitude) (len $q.maxExponent)) (and (eq (len $magnitude) (len $q.maxExponent)) (gt $magnitude $q.maxExponent)) }}
{{- $fault = $q.exponentOutOfRange }}
{{- else }}
{{- $power10 = int64 (printf "%s%s" (ternary "-" "" (hasPrefix "-" $exponent)) ($magnitude | default "0")) }}
{{- end }}
{{- else if ne $suffix "" }}
{{- $power10 = int64 (get (get $q.suffixes $suffix) "power10") }}
{{- $power2 = int64 (get (get $q.suffixes $suffix) "power2") }}
{{- end }}
{{- $digits := regexReplaceAll "^0*" (printf "%s%s" $whole $fraction) "" }}
{{- if and (not $fault) (ne $digits "") }}
{{- $power10 = sub $power10 (len $fraction) }}
{{- $n := len $digits }}
{{- $maxDigits := len $q.max }}
{{- if ge (add $n -1 $power10) $maxDigits }}
{{- $fault = $q.outOfRange }}
{{- else if gt (add $n $power10 $maxDigits) -9 }}
{{- /* Not so small that it rounds up to 10^-9: compare with the bound exactly. */}}
{{- if eq $power2 0 }}
{{- /* digits * 10^power10 > max, as digits beside max * 10^-power10 or digits * 10^power10
beside max: both of the same length here or the first shorter. */}}
{{- $a := $digits }}
{{- $b := $q.max }}
{{- if ge $power10 0 }}
{{- $a = printf "%s%s" $digits (repeat (int $power10) "0") }}
{{- else }}
{{- $b = printf "%s%s" $q.max (repeat (int (sub 0 $power10)) "0") }}
{{- end }}
{{- if or (gt (len $a) (len $b)) (and (eq (len $a) (len $b)) (gt $a $b)) }}
{{- $fault = $q.outOfRange }}
{{- end }}
{{- else }}
{{- /* A binary suffix (no exponent): whole + fraction, against the largest of each. */}}
{{- $bound := get $q.binary $suffix }}
{{- $w := regexReplaceAll "^0*" $whole "" }}
{{- $above := or (gt (len $w) (len $bound.whole)) (and (eq (len $w) (len $bound.whole)) (gt $w $bound.whole)) }}
{{- if and (not $above) (eq $w $bound.whole) }}
{{- $width := max (len $fraction) (len $bound.fraction) }}
{{- $above = gt (printf "%s%s" $fraction (repeat (int (sub $width (len $fraction))) "0")) (printf "%s%s" $bound.fraction (repeat (int (sub $width (len $bound.fraction))) "0")) }}
{{- end }}
{{- if $above }}
{{- $fault = $q.outOfRange }}
{{- end }}
{{- end }}
{{- end }}
{{- if and (not $fault) (eq $sign "-") }}
{{- $fault = $q.negative }}
{{- end }}
{{- end }}
{{- $fault }}
{{- end }}
{{- end }}

{{/* Python's repr of a string, as `policy check` quotes a value: in single quotes, or double
ones when it holds a single quote and no double one; backslashes, the quote and the usual
control characters escaped. */}}
{{- define "gpu-share-webhook.pythonRepr" -}}
{{- $s := toString . }}
{{- $quote := ternary "\"" "'" (and (contains "'" $s) (not (contains "\"" $s))) }}
{{- $s = $s | replace "\\" "\\\\" | replace "\n" "\\n" | replace "\r" "\\r" | replace "\t" "\\t" | replace $quote (printf "\\%s" $quote) }}
{{- printf "%s%s%s" $quote $s $quote }}
{{- end }}

{{/* webhook/policy/policies.py _host_path: "" when `path` is absolute and clean (or not a string,
left to the server), else the reason. */}}
{{- define "gpu-share-webhook.policyHostPath" -}}
{{- $p := .path }}
{{- if kindIs "string" $p }}
{{- if not (hasPrefix "/" $p) }}
{{- printf "%s '%s' is not an absolute path" .what $p }}
{{- else if and (ne (clean $p) (regexReplaceAll "/+$" $p "")) (ne $p "/") }}
{{- printf "%s '%s' is not clean (write '%s')" .what $p (clean $p) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The problems of one policy document (a mapping), as a JSON list of lines. A document of
another apiVersion or kind gets that one line: its other fields are not a policy's.
  (dict "doc" D "root" $ "lenient" true)
*/}}
{{- define "gpu-share-webhook.policyDocument" -}}
{{- $check := .root.Files.Get "files/policy-schema.yaml" | fromYaml }}
{{- $gen := .root.Files.Get "files/generated.yaml" | fromYaml }}
{{- $doc := .doc }}
{{- $out := list }}
{{- range $field := list "apiVersion" "kind" }}
{{- if and (not $out) (ne (get $doc $field | toString) (get $gen.names (ternary "policyApiVersion" "policyKind" (eq $field "apiVersion")))) }}
{{- $out = append $out (printf "%s: every document must be apiVersion: %s, kind: %s (not %s)" $field $gen.names.policyApiVersion $gen.names.policyKind (ternary (get $doc $field | toJson) "missing" (hasKey $doc $field))) }}
{{- end }}
{{- end }}
{{- $unsure := false }}
{{- if not $out }}
{{- $out = include "gpu-share-webhook.policyValue" (dict "value" $doc "schema" $check.schema.root "defs" $check.schema.defs "path" "" "lenient" .lenient) | fromJsonArray }}
{{- $unsure = has "?" $out }}
{{- $out = without $out "?" }}
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
{{- if and (not $out) (not $unsure) }}
{{- $out = include "gpu-share-webhook.policySemantics" (dict "doc" $doc "checks" $check.checks) | fromJsonArray }}
{{- end }}
{{- toJson $out }}
{{- end }}
