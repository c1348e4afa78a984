"""The admission core: a Kubernetes object and a compiled policy in, a `Decision` out.

Pure: no I/O, no clock, no HTTP. The server (through the review codec), `mutate -f` and
`audit` call `reviewing.admit`; the tests also judge objects with `reviewing.review_object`.
Read in this order:

- `view`: reads a pod (or a workload's pod templates) once into a closed, immutable view,
  checking the shape of every field a rule looks at; a shape the API server would never
  send is a violation naming the field, never an exception.
- `facts`: what is worked out of the view once, before any rule: each container's GPU
  usage, the shared resource, the profile and the placement (`placing`: the node classes
  the pod may land on, and the values of the patches that pin it there; `selection`: node
  selection). `claims`: the same for a ResourceClaim or template, read from the object.
- `rules`: the table of rules. Each is one small named unit: what it looks at, what it
  reports (a check, or what `facts`/`claims` found) and what it adds (a patch, with its
  words), reading only what was gathered. The name is what a refusal, a metric label, an
  audit annotation and the docs all use.
- `reviewing`: routes a request (`admit`), runs the table over every pod or claim of the
  object (`run_rules`: one runner, one mode path) and assembles the decision; `record`: the
  annotations that record what was done to a pod; `hints`: near misses, told as warnings.
- `decision`: the result type (violations with their field paths, as Kubernetes' field
  errors; additions in their rules' words).
"""
