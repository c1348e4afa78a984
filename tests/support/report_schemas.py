"""The four policy-report CRDs, as facts, and a validator that judges an object as the API
server judges a custom resource.

Kinds: `wgpolicyk8s.io/v1alpha2` PolicyReport and ClusterPolicyReport, `openreports.io/v1alpha1`
Report and ClusterReport. Each `openAPIV3Schema` below is transcribed from a published CRD
(named, with its commit, above each literal): every structural keyword kept (type, format,
enum, required, properties, items, additionalProperties, x-kubernetes-* markers), the
`description` prose left out.

Where published copies of one kind differ (wgpolicyk8s.io: Kyverno's CRDs and the
wg-policy-prototypes CRD), `validate` checks an object against every copy in `COPIES`: a
report must be accepted wherever it is applied. `SCHEMAS` holds the strictest copy of each kind.

What `validate` does, as the API server does for a custom resource
(kubernetes/kubernetes staging/src/k8s.io/apiextensions-apiserver/pkg/registry/customresource/
validator.go @054d429d: `ValidateObjectMetaAccessor(..., NameIsDNSSubdomain, ...)` then
`ValidateCustomResource` against the schema):
- apiVersion and kind name a kind served here;
- the schema (jsonschema, Draft 4: an integer is an int, never 1.0 nor true);
- `format: int32` / `int64`: the value fits;
- metadata: name (or generateName) given, a DNS-1123 subdomain; a namespaced kind needs a
  namespace (a DNS-1123 label), a cluster kind must have none; label and annotation keys are
  qualified names, label values valid;
- unknown fields. The API server prunes a field its schema does not declare (none of these
  schemas sets x-kubernetes-preserve-unknown-fields), silently on a plain create; with
  `fieldValidation=Strict` (kubectl's default) it refuses the request. Either way a report
  must not rely on one, so `validate` reports each as a problem. Under `metadata` the
  ObjectMeta fields are known, any other is pruned.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import jsonschema

from webhook.policy import names

WG = "wgpolicyk8s.io/v1alpha2"
OPENREPORTS = "openreports.io/v1alpha1"

Key = tuple[str, str]  # (apiVersion, kind)


# ------------------------------------------------------------------------------------------
# wgpolicyk8s.io/v1alpha2, Kyverno's copies.

# kyverno/kyverno config/crds/policyreport/wgpolicyk8s.io_policyreports.yaml
# @bedefb6992bb5ce8ee7b716cc3a59d4db8568e07 (controller-gen v0.15.0).
KYVERNO_POLICYREPORT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["policy"],
                "properties": {
                    "category": {"type": "string"},
                    "message": {"type": "string"},
                    "policy": {"type": "string"},
                    "properties": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                    },
                    "resourceSelector": {
                        "type": "object",
                        "x-kubernetes-map-type": "atomic",
                        "properties": {
                            "matchExpressions": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["key", "operator"],
                                    "properties": {
                                        "key": {"type": "string"},
                                        "operator": {"type": "string"},
                                        "values": {"type": "array", "items": {"type": "string"}},
                                    },
                                },
                            },
                            "matchLabels": {
                                "type": "object",
                                "additionalProperties": {"type": "string"},
                            },
                        },
                    },
                    "resources": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "x-kubernetes-map-type": "atomic",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "fieldPath": {"type": "string"},
                                "kind": {"type": "string"},
                                "name": {"type": "string"},
                                "namespace": {"type": "string"},
                                "resourceVersion": {"type": "string"},
                                "uid": {"type": "string"},
                            },
                        },
                    },
                    "result": {
                        "type": "string",
                        "enum": ["pass", "fail", "warn", "error", "skip"],
                    },
                    "rule": {"type": "string"},
                    "scored": {"type": "boolean"},
                    "severity": {
                        "type": "string",
                        "enum": ["critical", "high", "low", "medium", "info"],
                    },
                    "source": {"type": "string"},
                    "timestamp": {
                        "type": "object",
                        "required": ["nanos", "seconds"],
                        "properties": {
                            "nanos": {"type": "integer", "format": "int32"},
                            "seconds": {"type": "integer", "format": "int64"},
                        },
                    },
                },
            },
        },
        "scope": {
            "type": "object",
            "x-kubernetes-map-type": "atomic",
            "properties": {
                "apiVersion": {"type": "string"},
                "fieldPath": {"type": "string"},
                "kind": {"type": "string"},
                "name": {"type": "string"},
                "namespace": {"type": "string"},
                "resourceVersion": {"type": "string"},
                "uid": {"type": "string"},
            },
        },
        "scopeSelector": {
            "type": "object",
            "x-kubernetes-map-type": "atomic",
            "properties": {
                "matchExpressions": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["key", "operator"],
                        "properties": {
                            "key": {"type": "string"},
                            "operator": {"type": "string"},
                            "values": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                },
                "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "summary": {
            "type": "object",
            "properties": {
                "error": {"type": "integer"},
                "fail": {"type": "integer"},
                "pass": {"type": "integer"},
                "skip": {"type": "integer"},
                "warn": {"type": "integer"},
            },
        },
    },
}

# kyverno/kyverno config/crds/policyreport/wgpolicyk8s.io_clusterpolicyreports.yaml
# @03cf29d03bb5d35fed91bb4c91d990154b3cca0a (controller-gen v0.14.0). As the PolicyReport
# copy above, plus x-kubernetes-list-type: atomic on matchExpressions and on values, in both
# selectors.
KYVERNO_CLUSTERPOLICYREPORT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["policy"],
                "properties": {
                    "category": {"type": "string"},
                    "message": {"type": "string"},
                    "policy": {"type": "string"},
                    "properties": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                    },
                    "resourceSelector": {
                        "type": "object",
                        "x-kubernetes-map-type": "atomic",
                        "properties": {
                            "matchExpressions": {
                                "type": "array",
                                "x-kubernetes-list-type": "atomic",
                                "items": {
                                    "type": "object",
                                    "required": ["key", "operator"],
                                    "properties": {
                                        "key": {"type": "string"},
                                        "operator": {"type": "string"},
                                        "values": {
                                            "type": "array",
                                            "x-kubernetes-list-type": "atomic",
                                            "items": {"type": "string"},
                                        },
                                    },
                                },
                            },
                            "matchLabels": {
                                "type": "object",
                                "additionalProperties": {"type": "string"},
                            },
                        },
                    },
                    "resources": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "x-kubernetes-map-type": "atomic",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "fieldPath": {"type": "string"},
                                "kind": {"type": "string"},
                                "name": {"type": "string"},
                                "namespace": {"type": "string"},
                                "resourceVersion": {"type": "string"},
                                "uid": {"type": "string"},
                            },
                        },
                    },
                    "result": {
                        "type": "string",
                        "enum": ["pass", "fail", "warn", "error", "skip"],
                    },
                    "rule": {"type": "string"},
                    "scored": {"type": "boolean"},
                    "severity": {
                        "type": "string",
                        "enum": ["critical", "high", "low", "medium", "info"],
                    },
                    "source": {"type": "string"},
                    "timestamp": {
                        "type": "object",
                        "required": ["nanos", "seconds"],
                        "properties": {
                            "nanos": {"type": "integer", "format": "int32"},
                            "seconds": {"type": "integer", "format": "int64"},
                        },
                    },
                },
            },
        },
        "scope": {
            "type": "object",
            "x-kubernetes-map-type": "atomic",
            "properties": {
                "apiVersion": {"type": "string"},
                "fieldPath": {"type": "string"},
                "kind": {"type": "string"},
                "name": {"type": "string"},
                "namespace": {"type": "string"},
                "resourceVersion": {"type": "string"},
                "uid": {"type": "string"},
            },
        },
        "scopeSelector": {
            "type": "object",
            "x-kubernetes-map-type": "atomic",
            "properties": {
                "matchExpressions": {
                    "type": "array",
                    "x-kubernetes-list-type": "atomic",
                    "items": {
                        "type": "object",
                        "required": ["key", "operator"],
                        "properties": {
                            "key": {"type": "string"},
                            "operator": {"type": "string"},
                            "values": {
                                "type": "array",
                                "x-kubernetes-list-type": "atomic",
                                "items": {"type": "string"},
                            },
                        },
                    },
                },
                "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "summary": {
            "type": "object",
            "properties": {
                "error": {"type": "integer"},
                "fail": {"type": "integer"},
                "pass": {"type": "integer"},
                "skip": {"type": "integer"},
                "warn": {"type": "integer"},
            },
        },
    },
}

# ------------------------------------------------------------------------------------------
# wgpolicyk8s.io/v1alpha2, the wg-policy-prototypes copy.

# kubernetes-sigs/wg-policy-prototypes (now kubernetes-retired/)
# policy-report/crd/v1alpha2/wgpolicyk8s.io_clusterpolicyreports.yaml
# @037274b4aefe6fea1c8f01b424636ba821e0dd26 (controller-gen v0.5.0). No x-kubernetes-*
# markers; severity only high, low, medium. That directory holds no policyreports file: the
# same Go type (policy-report/pkg/api/wgpolicyk8s.io/v1alpha2/policyreport_types.go @7132d6fc)
# generates both kinds, so this schema stands for the wg PolicyReport too.
WG_CLUSTERPOLICYREPORT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["policy"],
                "properties": {
                    "category": {"type": "string"},
                    "message": {"type": "string"},
                    "policy": {"type": "string"},
                    "properties": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                    },
                    "resourceSelector": {
                        "type": "object",
                        "properties": {
                            "matchExpressions": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["key", "operator"],
                                    "properties": {
                                        "key": {"type": "string"},
                                        "operator": {"type": "string"},
                                        "values": {"type": "array", "items": {"type": "string"}},
                                    },
                                },
                            },
                            "matchLabels": {
                                "type": "object",
                                "additionalProperties": {"type": "string"},
                            },
                        },
                    },
                    "resources": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "fieldPath": {"type": "string"},
                                "kind": {"type": "string"},
                                "name": {"type": "string"},
                                "namespace": {"type": "string"},
                                "resourceVersion": {"type": "string"},
                                "uid": {"type": "string"},
                            },
                        },
                    },
                    "result": {
                        "type": "string",
                        "enum": ["pass", "fail", "warn", "error", "skip"],
                    },
                    "rule": {"type": "string"},
                    "scored": {"type": "boolean"},
                    "severity": {"type": "string", "enum": ["high", "low", "medium"]},
                    "source": {"type": "string"},
                    "timestamp": {
                        "type": "object",
                        "required": ["nanos", "seconds"],
                        "properties": {
                            "nanos": {"type": "integer", "format": "int32"},
                            "seconds": {"type": "integer", "format": "int64"},
                        },
                    },
                },
            },
        },
        "scope": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "fieldPath": {"type": "string"},
                "kind": {"type": "string"},
                "name": {"type": "string"},
                "namespace": {"type": "string"},
                "resourceVersion": {"type": "string"},
                "uid": {"type": "string"},
            },
        },
        "scopeSelector": {
            "type": "object",
            "properties": {
                "matchExpressions": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["key", "operator"],
                        "properties": {
                            "key": {"type": "string"},
                            "operator": {"type": "string"},
                            "values": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                },
                "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "summary": {
            "type": "object",
            "properties": {
                "error": {"type": "integer"},
                "fail": {"type": "integer"},
                "pass": {"type": "integer"},
                "skip": {"type": "integer"},
                "warn": {"type": "integer"},
            },
        },
    },
}

# An earlier v1alpha2 PolicyReport of the same repository, kept as a fact and NOT in COPIES:
# kubernetes-sigs/wg-policy-prototypes policy-report/crd/wgpolicyk8s.io_policyreports.yaml
# @cd234547495ac016843f77ac9b645d6d0bbc8417 (controller-gen v0.5.0, `name: v1alpha2`). Its
# result has no `source`: a result's `source` is pruned where this CRD is installed.
WG_EARLY_POLICYREPORT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["policy"],
                "properties": {
                    "category": {"type": "string"},
                    "message": {"type": "string"},
                    "policy": {"type": "string"},
                    "properties": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                    },
                    "resourceSelector": {
                        "type": "object",
                        "properties": {
                            "matchExpressions": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["key", "operator"],
                                    "properties": {
                                        "key": {"type": "string"},
                                        "operator": {"type": "string"},
                                        "values": {"type": "array", "items": {"type": "string"}},
                                    },
                                },
                            },
                            "matchLabels": {
                                "type": "object",
                                "additionalProperties": {"type": "string"},
                            },
                        },
                    },
                    "resources": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "fieldPath": {"type": "string"},
                                "kind": {"type": "string"},
                                "name": {"type": "string"},
                                "namespace": {"type": "string"},
                                "resourceVersion": {"type": "string"},
                                "uid": {"type": "string"},
                            },
                        },
                    },
                    "result": {
                        "type": "string",
                        "enum": ["pass", "fail", "warn", "error", "skip"],
                    },
                    "rule": {"type": "string"},
                    "scored": {"type": "boolean"},
                    "severity": {"type": "string", "enum": ["high", "low", "medium"]},
                    "timestamp": {
                        "type": "object",
                        "required": ["nanos", "seconds"],
                        "properties": {
                            "nanos": {"type": "integer", "format": "int32"},
                            "seconds": {"type": "integer", "format": "int64"},
                        },
                    },
                },
            },
        },
        "scope": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "fieldPath": {"type": "string"},
                "kind": {"type": "string"},
                "name": {"type": "string"},
                "namespace": {"type": "string"},
                "resourceVersion": {"type": "string"},
                "uid": {"type": "string"},
            },
        },
        "scopeSelector": {
            "type": "object",
            "properties": {
                "matchExpressions": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["key", "operator"],
                        "properties": {
                            "key": {"type": "string"},
                            "operator": {"type": "string"},
                            "values": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                },
                "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "summary": {
            "type": "object",
            "properties": {
                "error": {"type": "integer"},
                "fail": {"type": "integer"},
                "pass": {"type": "integer"},
                "skip": {"type": "integer"},
                "warn": {"type": "integer"},
            },
        },
    },
}

# ------------------------------------------------------------------------------------------
# openreports.io/v1alpha1

# openreports/reports-api config/install.yaml @79fa2f394ab7486b8d9b1cb449dfef885a0c804e
# (controller-gen v0.19.0). The file holds two CRDs, clusterreports.openreports.io then
# reports.openreports.io; both carry this same openAPIV3Schema.
OPENREPORTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "configuration": {
            "type": "object",
            "required": ["limits"],
            "properties": {
                "limits": {
                    "type": "object",
                    "properties": {
                        "maxResults": {"type": "integer"},
                        "statusFilter": {
                            "type": "array",
                            "items": {
                                "type": "string",
                                "enum": ["pass", "fail", "warn", "error", "skip"],
                            },
                        },
                    },
                },
            },
        },
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["policy"],
                "properties": {
                    "category": {"type": "string"},
                    "message": {"type": "string"},
                    "policy": {"type": "string"},
                    "properties": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                    },
                    "resourceSelector": {
                        "type": "object",
                        "x-kubernetes-map-type": "atomic",
                        "properties": {
                            "matchExpressions": {
                                "type": "array",
                                "x-kubernetes-list-type": "atomic",
                                "items": {
                                    "type": "object",
                                    "required": ["key", "operator"],
                                    "properties": {
                                        "key": {"type": "string"},
                                        "operator": {"type": "string"},
                                        "values": {
                                            "type": "array",
                                            "x-kubernetes-list-type": "atomic",
                                            "items": {"type": "string"},
                                        },
                                    },
                                },
                            },
                            "matchLabels": {
                                "type": "object",
                                "additionalProperties": {"type": "string"},
                            },
                        },
                    },
                    "resources": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "x-kubernetes-map-type": "atomic",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "fieldPath": {"type": "string"},
                                "kind": {"type": "string"},
                                "name": {"type": "string"},
                                "namespace": {"type": "string"},
                                "resourceVersion": {"type": "string"},
                                "uid": {"type": "string"},
                            },
                        },
                    },
                    "result": {
                        "type": "string",
                        "enum": ["pass", "fail", "warn", "error", "skip"],
                    },
                    "rule": {"type": "string"},
                    "scored": {"type": "boolean"},
                    "severity": {
                        "type": "string",
                        "enum": ["critical", "high", "low", "medium", "info"],
                    },
                    "source": {"type": "string"},
                    "timestamp": {
                        "type": "object",
                        "required": ["nanos", "seconds"],
                        "properties": {
                            "nanos": {"type": "integer", "format": "int32"},
                            "seconds": {"type": "integer", "format": "int64"},
                        },
                    },
                },
            },
        },
        "scope": {
            "type": "object",
            "x-kubernetes-map-type": "atomic",
            "properties": {
                "apiVersion": {"type": "string"},
                "fieldPath": {"type": "string"},
                "kind": {"type": "string"},
                "name": {"type": "string"},
                "namespace": {"type": "string"},
                "resourceVersion": {"type": "string"},
                "uid": {"type": "string"},
            },
        },
        "scopeSelector": {
            "type": "object",
            "x-kubernetes-map-type": "atomic",
            "properties": {
                "matchExpressions": {
                    "type": "array",
                    "x-kubernetes-list-type": "atomic",
                    "items": {
                        "type": "object",
                        "required": ["key", "operator"],
                        "properties": {
                            "key": {"type": "string"},
                            "operator": {"type": "string"},
                            "values": {
                                "type": "array",
                                "x-kubernetes-list-type": "atomic",
                                "items": {"type": "string"},
                            },
                        },
                    },
                },
                "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "source": {"type": "string"},
        "summary": {
            "type": "object",
            "properties": {
                "error": {"type": "integer"},
                "fail": {"type": "integer"},
                "pass": {"type": "integer"},
                "skip": {"type": "integer"},
                "warn": {"type": "integer"},
            },
        },
    },
}

# ------------------------------------------------------------------------------------------
# additionalPrinterColumns, in the CRDs' order.

# Kyverno's two wgpolicyk8s.io CRDs (the files and commits above): no priority anywhere.
KYVERNO_PRINTER_COLUMNS: tuple[dict[str, Any], ...] = (
    {"name": "Kind", "type": "string", "jsonPath": ".scope.kind"},
    {"name": "Name", "type": "string", "jsonPath": ".scope.name"},
    {"name": "Pass", "type": "integer", "jsonPath": ".summary.pass"},
    {"name": "Fail", "type": "integer", "jsonPath": ".summary.fail"},
    {"name": "Warn", "type": "integer", "jsonPath": ".summary.warn"},
    {"name": "Error", "type": "integer", "jsonPath": ".summary.error"},
    {"name": "Skip", "type": "integer", "jsonPath": ".summary.skip"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
)
# The wg-policy-prototypes CRDs (both files above) and both CRDs of openreports install.yaml:
# Kind and Name have priority 1 (shown only with `kubectl get -o wide`).
PRIORITY_PRINTER_COLUMNS: tuple[dict[str, Any], ...] = (
    {"name": "Kind", "type": "string", "jsonPath": ".scope.kind", "priority": 1},
    {"name": "Name", "type": "string", "jsonPath": ".scope.name", "priority": 1},
    {"name": "Pass", "type": "integer", "jsonPath": ".summary.pass"},
    {"name": "Fail", "type": "integer", "jsonPath": ".summary.fail"},
    {"name": "Warn", "type": "integer", "jsonPath": ".summary.warn"},
    {"name": "Error", "type": "integer", "jsonPath": ".summary.error"},
    {"name": "Skip", "type": "integer", "jsonPath": ".summary.skip"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
)


# ------------------------------------------------------------------------------------------
# CRD names and scope (the same in every copy of a kind; the files above).


class CrdFacts(TypedDict):
    name: str  # the CRD's metadata.name: <plural>.<group>
    group: str
    version: str  # the one version: served and storage
    kind: str
    listKind: str
    plural: str
    singular: str
    shortNames: list[str]
    scope: str  # "Namespaced" or "Cluster"
    namespaced: bool
    subresources: dict[str, Any]  # {}: no status subresource


CRDS: dict[Key, CrdFacts] = {
    (WG, "PolicyReport"): {
        "name": "policyreports.wgpolicyk8s.io",
        "group": "wgpolicyk8s.io",
        "version": "v1alpha2",
        "kind": "PolicyReport",
        "listKind": "PolicyReportList",
        "plural": "policyreports",
        "singular": "policyreport",
        "shortNames": ["polr"],
        "scope": "Namespaced",
        "namespaced": True,
        "subresources": {},
    },
    (WG, "ClusterPolicyReport"): {
        "name": "clusterpolicyreports.wgpolicyk8s.io",
        "group": "wgpolicyk8s.io",
        "version": "v1alpha2",
        "kind": "ClusterPolicyReport",
        "listKind": "ClusterPolicyReportList",
        "plural": "clusterpolicyreports",
        "singular": "clusterpolicyreport",
        "shortNames": ["cpolr"],
        "scope": "Cluster",
        "namespaced": False,
        "subresources": {},
    },
    (OPENREPORTS, "Report"): {
        "name": "reports.openreports.io",
        "group": "openreports.io",
        "version": "v1alpha1",
        "kind": "Report",
        "listKind": "ReportList",
        "plural": "reports",
        "singular": "report",
        "shortNames": ["reps"],
        "scope": "Namespaced",
        "namespaced": True,
        "subresources": {},
    },
    (OPENREPORTS, "ClusterReport"): {
        "name": "clusterreports.openreports.io",
        "group": "openreports.io",
        "version": "v1alpha1",
        "kind": "ClusterReport",
        "listKind": "ClusterReportList",
        "plural": "clusterreports",
        "singular": "clusterreport",
        "shortNames": ["creps"],
        "scope": "Cluster",
        "namespaced": False,
        "subresources": {},
    },
}

# (group, version, plural) -> (apiVersion, kind): how a request path names the kind.
BY_PLURAL: dict[tuple[str, str, str], Key] = {
    (facts["group"], facts["version"], facts["plural"]): key for key, facts in CRDS.items()
}


# ------------------------------------------------------------------------------------------
# The copies each kind is checked against.


@dataclass(frozen=True)
class Copy:
    """One published CRD of a kind: where it comes from, its schema and its columns."""

    label: str  # short, for problem messages
    source: str  # repo path@commit
    schema: dict[str, Any]
    printer_columns: tuple[dict[str, Any], ...]


_KYVERNO_POLR = Copy(
    "kyverno",
    "kyverno/kyverno config/crds/policyreport/wgpolicyk8s.io_policyreports.yaml@bedefb69",
    KYVERNO_POLICYREPORT_SCHEMA,
    KYVERNO_PRINTER_COLUMNS,
)
_KYVERNO_CPOLR = Copy(
    "kyverno",
    "kyverno/kyverno config/crds/policyreport/wgpolicyk8s.io_clusterpolicyreports.yaml@03cf29d0",
    KYVERNO_CLUSTERPOLICYREPORT_SCHEMA,
    KYVERNO_PRINTER_COLUMNS,
)
_WG_V1ALPHA2 = Copy(
    "wg-policy-prototypes",
    "kubernetes-sigs/wg-policy-prototypes"
    " policy-report/crd/v1alpha2/wgpolicyk8s.io_clusterpolicyreports.yaml@037274b4",
    WG_CLUSTERPOLICYREPORT_SCHEMA,
    PRIORITY_PRINTER_COLUMNS,
)
_OPENREPORTS = Copy(
    "openreports",
    "openreports/reports-api config/install.yaml@79fa2f39",
    OPENREPORTS_SCHEMA,
    PRIORITY_PRINTER_COLUMNS,
)
# Not in COPIES (see WG_EARLY_POLICYREPORT_SCHEMA): pass it to `validate(copies=...)`.
WG_EARLY_POLICYREPORT = Copy(
    "wg-policy-prototypes (early v1alpha2)",
    "kubernetes-sigs/wg-policy-prototypes"
    " policy-report/crd/wgpolicyk8s.io_policyreports.yaml@cd234547",
    WG_EARLY_POLICYREPORT_SCHEMA,
    PRIORITY_PRINTER_COLUMNS,
)

COPIES: dict[Key, tuple[Copy, ...]] = {
    (WG, "PolicyReport"): (_KYVERNO_POLR, _WG_V1ALPHA2),
    (WG, "ClusterPolicyReport"): (_KYVERNO_CPOLR, _WG_V1ALPHA2),
    (OPENREPORTS, "Report"): (_OPENREPORTS,),
    (OPENREPORTS, "ClusterReport"): (_OPENREPORTS,),
}

# The strictest copy of each kind. For wgpolicyk8s.io the wg copy: its severity enum is a
# subset of Kyverno's, and the two differ otherwise only in x-kubernetes-* merge markers,
# which do not take part in validation.
SCHEMAS: dict[Key, dict[str, Any]] = {
    (WG, "PolicyReport"): WG_CLUSTERPOLICYREPORT_SCHEMA,
    (WG, "ClusterPolicyReport"): WG_CLUSTERPOLICYREPORT_SCHEMA,
    (OPENREPORTS, "Report"): OPENREPORTS_SCHEMA,
    (OPENREPORTS, "ClusterReport"): OPENREPORTS_SCHEMA,
}


# ------------------------------------------------------------------------------------------
# The validator.

# The JSON names of ObjectMeta's fields (k8s.io/apimachinery pkg/apis/meta/v1 ObjectMeta):
# what the API server keeps under metadata; anything else there is dropped.
OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)
# apimachinery validation: TotalAnnotationSizeLimitB.
ANNOTATIONS_SIZE_LIMIT = 256 * 1024
INTEGER_FORMATS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def _path(parts: Iterable[str | int]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "(root)"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _schema_problems(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    validator = jsonschema.Draft4Validator(schema)
    return [
        f"{_path(error.absolute_path)}: {error.message}"
        for error in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.path)))
    ]


def _walk(value: Any, schema: Mapping[str, Any], at: list[str | int]) -> list[str]:
    """Unknown fields (what pruning would drop) and integers out of their format's range."""
    problems: list[str] = []
    kind = schema.get("type")
    if kind == "integer" and _is_int(value) and schema.get("format") in INTEGER_FORMATS:
        low, high = INTEGER_FORMATS[schema["format"]]
        if not low <= value <= high:
            problems.append(f"{_path(at)}: {value} does not fit format {schema['format']}")
    elif kind == "object" and isinstance(value, Mapping):
        declared = schema.get("properties")
        extra = schema.get("additionalProperties")
        keeps_unknown = schema.get("x-kubernetes-preserve-unknown-fields") is True
        for key, item in value.items():
            if declared is not None and key in declared:
                problems += _walk(item, declared[key], [*at, key])
            elif isinstance(extra, Mapping):
                problems += _walk(item, extra, [*at, key])
            elif not keeps_unknown:
                problems.append(f"{_path([*at, key])}: unknown field (the API server prunes it)")
    elif kind == "array" and isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            problems += _walk(item, schema["items"], [*at, index])
    return problems


def _qualified_name_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash and not (
        prefix
        and len(prefix) <= names.MAX_SUBDOMAIN_LENGTH
        and re.fullmatch(names.DNS1123_SUBDOMAIN, prefix)
    ):
        return "prefix must be a DNS-1123 subdomain"
    if not (len(name) <= names.MAX_LABEL_LENGTH and _QUALIFIED_NAME_PART.fullmatch(name)):
        return "name part must be 1-63 alphanumerics, '-', '_' or '.', alphanumeric at both ends"
    return None


def _metadata_problems(metadata: Any, namespaced: bool) -> list[str]:
    """ValidateObjectMetaAccessor with NameIsDNSSubdomain, as for every custom resource."""
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, Mapping):
        return ["metadata: must be an object"]
    problems = [
        f"metadata.{key}: unknown field (not in ObjectMeta; the API server drops it)"
        for key in metadata
        if key not in OBJECT_META_FIELDS
    ]
    name = metadata.get("name") or ""
    if not isinstance(name, str):
        problems.append("metadata.name: must be a string")
    elif not name and not metadata.get("generateName"):
        problems.append("metadata.name: name or generateName is required")
    elif name and not (
        len(name) <= names.MAX_SUBDOMAIN_LENGTH and re.fullmatch(names.DNS1123_SUBDOMAIN, name)
    ):
        problems.append(
            f"metadata.name: {name!r} is not a DNS-1123 subdomain (lowercase alphanumerics,"
            " '-' and '.', alphanumeric at both ends, at most 253 characters)"
        )
    namespace = metadata.get("namespace") or ""
    if not isinstance(namespace, str):
        problems.append("metadata.namespace: must be a string")
    elif namespaced and not namespace:
        problems.append("metadata.namespace: required for a namespaced kind")
    elif not namespaced and namespace:
        problems.append("metadata.namespace: not allowed on a cluster-scoped kind")
    elif namespace and not (
        len(namespace) <= names.MAX_LABEL_LENGTH and re.fullmatch(names.DNS1123_LABEL, namespace)
    ):
        problems.append(f"metadata.namespace: {namespace!r} is not a DNS-1123 label")
    for field in ("labels", "annotations"):
        entries = metadata.get(field) or {}
        if not isinstance(entries, Mapping):
            problems.append(f"metadata.{field}: must be a map of strings")
            continue
        for key, value in entries.items():
            why = _qualified_name_problem(key) if isinstance(key, str) else "must be a string"
            if why:
                problems.append(f"metadata.{field}: key {key!r}: {why}")
            if not isinstance(value, str):
                problems.append(f"metadata.{field}[{key!r}]: value must be a string")
            elif field == "labels" and not (
                len(value) <= names.MAX_LABEL_LENGTH and re.fullmatch(names.LABEL_VALUE, value)
            ):
                problems.append(f"metadata.labels[{key!r}]: {value!r} is not a valid label value")
        if field == "annotations" and (
            sum(len(str(k)) + len(str(v)) for k, v in entries.items()) > ANNOTATIONS_SIZE_LIMIT
        ):
            problems.append("metadata.annotations: larger than 256 KiB in all")
    return problems


def problems_against(obj: Mapping[str, Any], copy: Copy) -> list[str]:
    """What one copy's schema finds in the object (metadata apart: the API server keeps
    ObjectMeta's fields there, whatever the schema says)."""
    body = {key: value for key, value in obj.items() if key != "metadata"}
    return _schema_problems(obj, copy.schema) + _walk(body, copy.schema, [])


def validate(obj: Any, copies: Iterable[Copy] | None = None) -> list[str]:
    """The problems the API server would find in `obj` (empty: valid), against every copy
    of its kind in COPIES (or the copies given). A problem found by only some copies names
    them."""
    if not isinstance(obj, Mapping):
        return ["(root): must be an object"]
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    key = (str(api_version), str(kind))
    crd = CRDS.get(key)
    if crd is None or not isinstance(api_version, str) or not isinstance(kind, str):
        return [f"no CRD here serves apiVersion {api_version!r} kind {kind!r}"]
    chosen = tuple(COPIES[key] if copies is None else copies)
    problems = _metadata_problems(obj.get("metadata"), crd["namespaced"])
    found: dict[str, list[str]] = {}
    for each in chosen:
        for problem in problems_against(obj, each):
            labels = found.setdefault(problem, [])
            if each.label not in labels:
                labels.append(each.label)
    every = sorted({each.label for each in chosen})
    for problem, labels in found.items():
        problems.append(problem if sorted(labels) == every else f"{problem} [{', '.join(labels)}]")
    return problems
