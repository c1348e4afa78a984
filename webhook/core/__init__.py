"""The admission core: a Kubernetes object and a compiled policy in, a `Decision` out.

Pure: no I/O, no clock, no HTTP. The server (through the review codec), the CLI and the
tests all call `reviewing.review`. Read in this order:

- `pods`: reads a pod (or a workload's pod templates) once, checking the shape of every
  field a rule looks at; a shape the API server would never send is a violation naming the
  field, never an exception.
- `rules`: the table of rules. Each is one small named unit: what it looks at, the
  violations it returns and the patch operations it contributes. The name is what a
  refusal, a metric label, an audit annotation and the docs all use.
- `placing`: which node classes a pod may land on, and the node selection that pins it.
- `reviewing`: runs the table over every container and assembles the decision.
- `decisions`, `quantities`: the result type, and Kubernetes quantities as the API server
  parses them.
"""
