"""The admission core: a Kubernetes object and a compiled policy in, a `Decision` out.

Pure: no I/O, no clock, no HTTP. The server (through the review codec), the CLI and the
tests all call `reviewing.review`. Read in this order:

- `pods`: reads a pod (or a workload's pod templates) once into a closed, immutable view,
  checking the shape of every field a rule looks at; a shape the API server would never
  send is a violation naming the field, never an exception.
- `facts`: what is worked out of the view once, before any rule: each container's GPU
  usage, the shared resource, the profile and the placement (`placing`: the node classes
  the pod may land on, and the values of the patches that pin it there).
- `rules`: the table of rules. Each is one small named unit: what it looks at, what it
  reports (a check) and what it adds (a patch), reading only the view and the facts. The
  name is what a refusal, a metric label, an audit annotation and the docs all use.
- `reviewing`: runs the table over every pod of the object and assembles the decision;
  `recording`: the annotations that record what was done.
- `decisions`, `quantities`, `selecting`: the result type (violations with their field
  paths, as Kubernetes' field errors), Kubernetes quantities as the API server parses them,
  and node selection.
"""
