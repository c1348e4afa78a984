"""tests/support/report_schemas.py: the transcribed report CRDs hold the facts their projects
publish (names, scopes, required fields), and its validator accepts what
the API server accepts and refuses what it refuses or would prune."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest

from tests.support import report_schemas as rs

WG_KINDS = [(rs.WG, "PolicyReport"), (rs.WG, "ClusterPolicyReport")]
OR_KINDS = [(rs.OPENREPORTS, "Report"), (rs.OPENREPORTS, "ClusterReport")]
KINDS = WG_KINDS + OR_KINDS
NAMESPACED = [key for key in KINDS if rs.CRDS[key]["namespaced"]]
CLUSTER = [key for key in KINDS if not rs.CRDS[key]["namespaced"]]
ALL_COPIES = [
    rs.KYVERNO_POLICYREPORT_SCHEMA,
    rs.KYVERNO_CLUSTERPOLICYREPORT_SCHEMA,
    rs.WG_CLUSTERPOLICYREPORT_SCHEMA,
    rs.WG_EARLY_POLICYREPORT_SCHEMA,
    rs.OPENREPORTS_SCHEMA,
]
ids = [kind for _, kind in KINDS]


def minimal(key: rs.Key) -> dict[str, Any]:
    api_version, kind = key
    metadata = {"name": "gpu-share-webhook"}
    if rs.CRDS[key]["namespaced"]:
        metadata["namespace"] = "team-a"
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata}


def selector() -> dict[str, Any]:
    return {
        "matchLabels": {"app": "trainer"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}],
    }


def reference() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "trainer",
        "namespace": "team-a",
        "uid": "6b2d6c1e-0c55-4c1e-9d7b-3f1f7d0b9a10",
        "resourceVersion": "42",
        "fieldPath": "spec.template",
    }


def full(key: rs.Key) -> dict[str, Any]:
    """A report with every field its schema declares (test_full_report_has_every_field)."""
    report = minimal(key)
    report["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "gpu-share-webhook"}
    report["metadata"]["annotations"] = {"example.com/note": "any text"}
    report["scope"] = {"apiVersion": "v1", "kind": "Namespace", "name": "team-a"} | {
        "uid": "0f6d",
        "resourceVersion": "7",
        "fieldPath": "",
        "namespace": "",
    }
    report["scopeSelector"] = selector()
    report["summary"] = {"pass": 1, "fail": 0, "warn": 0, "error": 0, "skip": 0}
    report["results"] = [
        {
            "source": "gpu-share-webhook",
            "policy": "team-a-share",
            "rule": "time-slicing",
            "category": "GPU sharing",
            "severity": "medium",
            "timestamp": {"seconds": 1_767_225_600, "nanos": 0},
            "result": "pass",
            "scored": True,
            "resources": [reference()],
            "resourceSelector": selector(),
            "message": "admitted as it is",
            "properties": {"mode": "enforce"},
        }
    ]
    if key[0] == rs.OPENREPORTS:
        report["source"] = "gpu-share-webhook"
        report["configuration"] = {
            "limits": {"maxResults": 500, "statusFilter": ["pass", "fail", "warn", "error", "skip"]}
        }
    return report


def result_of(report: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = report["results"][0]
    return result


def mentioning(problems: list[str], text: str) -> list[str]:
    return [problem for problem in problems if text in problem]


def strip(schema: Any, drop: tuple[str, ...] = ("x-kubernetes-",)) -> Any:
    """The schema without the keys that start with any of `drop`."""
    if isinstance(schema, dict):
        return {
            key: strip(value, drop) for key, value in schema.items() if not key.startswith(drop)
        }
    if isinstance(schema, list):
        return [strip(item, drop) for item in schema]
    return schema


def nodes(schema: dict[str, Any], at: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(at, schema)]
    for name, sub in schema.get("properties", {}).items():
        found += nodes(sub, f"{at}.{name}" if at else name)
    if isinstance(schema.get("items"), dict):
        found += nodes(schema["items"], f"{at}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        found += nodes(schema["additionalProperties"], f"{at}{{}}")
    return found


def present(obj: Any, path: str) -> bool:
    """Whether a path of `nodes` (properties by name, [] the first item) is set in obj."""
    for part in path.replace("[]", ".[]").split("."):
        if not part:
            continue
        if part == "[]":
            if not isinstance(obj, list) or not obj:
                return False
            obj = obj[0]
        elif isinstance(obj, dict) and part in obj:
            obj = obj[part]
        else:
            return False
    return True


# ----------------------------------------------------------------------------- accepted


@pytest.mark.parametrize("key", KINDS, ids=ids)
def test_a_minimal_report_is_valid(key: rs.Key) -> None:
    assert rs.validate(minimal(key)) == []


@pytest.mark.parametrize("key", KINDS, ids=ids)
def test_a_full_report_is_valid(key: rs.Key) -> None:
    assert rs.validate(full(key)) == []


@pytest.mark.parametrize("key", KINDS, ids=ids)
def test_full_report_has_every_field(key: rs.Key) -> None:
    """So that the test above covers every declared field, in every copy of the kind."""
    report = full(key)
    for each in rs.COPIES[key]:
        missing = [
            path
            for path, _ in nodes(each.schema)
            if path and "{}" not in path and path != "metadata" and not present(report, path)
        ]
        assert missing == [], each.label


# ----------------------------------------------------------------------------- refused


@pytest.mark.parametrize("key", KINDS, ids=ids)
def test_a_result_without_policy_is_refused(key: rs.Key) -> None:
    report = full(key)
    del result_of(report)["policy"]
    assert mentioning(rs.validate(report), "results[0]: 'policy' is a required property")


@pytest.mark.parametrize("key", WG_KINDS, ids=[kind for _, kind in WG_KINDS])
def test_severity_critical_is_refused_by_the_wg_copy_only(key: rs.Key) -> None:
    report = full(key)
    result_of(report)["severity"] = "critical"
    problems = rs.validate(report)
    assert len(problems) == 1
    assert "results[0].severity" in problems[0]
    assert problems[0].endswith("[wg-policy-prototypes]")
    kyverno = next(each for each in rs.COPIES[key] if each.label == "kyverno")
    assert rs.problems_against(report, kyverno) == []


@pytest.mark.parametrize("key", OR_KINDS, ids=[kind for _, kind in OR_KINDS])
def test_severity_critical_and_info_are_valid_in_openreports(key: rs.Key) -> None:
    report = full(key)
    report["results"].append(result_of(report) | {"severity": "info"})
    result_of(report)["severity"] = "critical"
    assert rs.validate(report) == []


@pytest.mark.parametrize("key", KINDS, ids=ids)
def test_result_ok_is_refused(key: rs.Key) -> None:
    report = full(key)
    result_of(report)["result"] = "ok"
    assert mentioning(rs.validate(report), "results[0].result: 'ok' is not one of")


@pytest.mark.parametrize("key", KINDS, ids=ids)
def test_properties_with_a_number_are_refused(key: rs.Key) -> None:
    report = full(key)
    result_of(report)["properties"]["replicas"] = 2
    assert mentioning(rs.validate(report), "results[0].properties.replicas: 2 is not of type")


@pytest.mark.parametrize("key", KINDS, ids=ids)
def test_a_timestamp_without_nanos_is_refused(key: rs.Key) -> None:
    report = full(key)
    del result_of(report)["timestamp"]["nanos"]
    assert mentioning(rs.validate(report), "timestamp: 'nanos' is a required property")


@pytest.mark.parametrize("key", KINDS, ids=ids)
def test_seconds_beyond_int64_are_refused(key: rs.Key) -> None:
    report = full(key)
    result_of(report)["timestamp"]["seconds"] = 2**63 - 1
    assert rs.validate(report) == []
    result_of(report)["timestamp"]["seconds"] = 2**63
    assert mentioning(rs.validate(report), "timestamp.seconds: 9223372036854775808 does not fit")


@pytest.mark.parametrize("key", KINDS, ids=ids)
def test_nanos_beyond_int32_are_refused(key: rs.Key) -> None:
    report = full(key)
    result_of(report)["timestamp"]["nanos"] = 2**31
    assert mentioning(rs.validate(report), "timestamp.nanos: 2147483648 does not fit format int32")


@pytest.mark.parametrize("key", KINDS, ids=ids)
@pytest.mark.parametrize("count", ["1", True, None])
def test_a_summary_count_that_is_no_integer_is_refused(key: rs.Key, count: Any) -> None:
    report = full(key)
    report["summary"]["pass"] = count
    assert mentioning(rs.validate(report), "summary.pass: ")


@pytest.mark.parametrize("key", KINDS, ids=ids)
def test_an_unknown_top_level_field_is_refused(key: rs.Key) -> None:
    report = full(key)
    report["spec"] = {"results": []}
    assert rs.validate(report) == ["spec: unknown field (the API server prunes it)"]


@pytest.mark.parametrize("key", KINDS, ids=ids)
def test_an_unknown_field_in_a_result_is_refused(key: rs.Key) -> None:
    """The Go field is Subjects; its JSON name is resources."""
    report = full(key)
    result_of(report)["subjects"] = [reference()]
    result_of(report)["resources"][0]["labels"] = {"a": "b"}
    assert sorted(rs.validate(report)) == [
        "results[0].resources[0].labels: unknown field (the API server prunes it)",
        "results[0].subjects: unknown field (the API server prunes it)",
    ]


@pytest.mark.parametrize("key", WG_KINDS, ids=[kind for _, kind in WG_KINDS])
def test_a_top_level_source_is_refused_in_v1alpha2(key: rs.Key) -> None:
    report = full(key)
    report["source"] = "gpu-share-webhook"
    assert rs.validate(report) == ["source: unknown field (the API server prunes it)"]


@pytest.mark.parametrize("key", KINDS, ids=ids)
def test_an_unknown_metadata_field_is_refused(key: rs.Key) -> None:
    report = full(key)
    report["metadata"]["clusterName"] = "east"
    assert mentioning(rs.validate(report), "metadata.clusterName: unknown field")


@pytest.mark.parametrize("key", NAMESPACED, ids=[kind for _, kind in NAMESPACED])
def test_a_namespaced_report_without_namespace_is_refused(key: rs.Key) -> None:
    report = full(key)
    del report["metadata"]["namespace"]
    assert rs.validate(report) == ["metadata.namespace: required for a namespaced kind"]


@pytest.mark.parametrize("key", NAMESPACED, ids=[kind for _, kind in NAMESPACED])
def test_a_namespace_that_is_no_dns_label_is_refused(key: rs.Key) -> None:
    report = full(key)
    report["metadata"]["namespace"] = "team.a"
    assert mentioning(rs.validate(report), "metadata.namespace: 'team.a' is not a DNS-1123 label")


@pytest.mark.parametrize("key", CLUSTER, ids=[kind for _, kind in CLUSTER])
def test_a_cluster_report_with_a_namespace_is_refused(key: rs.Key) -> None:
    report = full(key)
    report["metadata"]["namespace"] = "team-a"
    assert rs.validate(report) == ["metadata.namespace: not allowed on a cluster-scoped kind"]


@pytest.mark.parametrize("key", KINDS, ids=ids)
@pytest.mark.parametrize("name", ["GPU-share", "gpu_share", "-gpu", "gpu.", "a" * 254, ""])
def test_a_bad_name_is_refused(key: rs.Key, name: str) -> None:
    report = full(key)
    report["metadata"]["name"] = name
    assert mentioning(rs.validate(report), "metadata.name: ")


@pytest.mark.parametrize("key", KINDS, ids=ids)
@pytest.mark.parametrize("name", ["gpu-share-webhook-2", "a.b-c", "a" * 253])
def test_a_dns_subdomain_name_is_valid(key: rs.Key, name: str) -> None:
    report = full(key)
    report["metadata"]["name"] = name
    assert rs.validate(report) == []


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"app.kubernetes.io/managed-by": "gpu share"}, "is not a valid label value"),
        ({"Example.com/x": "v"}, "prefix must be a DNS-1123 subdomain"),
        ({"a/b/c": "v"}, "prefix must be a DNS-1123 subdomain"),
        ({"x" * 64: "v"}, "name part must be"),
        ({"managed-by": 1}, "value must be a string"),
    ],
)
def test_a_bad_label_is_refused(labels: dict[str, Any], expected: str) -> None:
    report = full((rs.WG, "PolicyReport"))
    report["metadata"]["labels"] = labels
    assert mentioning(rs.validate(report), expected)


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [
        (rs.WG, "Report"),
        (rs.OPENREPORTS, "PolicyReport"),
        ("wgpolicyk8s.io/v1beta1", "PolicyReport"),
        ("v1", "List"),
    ],
)
def test_a_kind_no_crd_serves_is_refused(api_version: str, kind: str) -> None:
    report = full((rs.WG, "PolicyReport")) | {"apiVersion": api_version, "kind": kind}
    assert mentioning(rs.validate(report), "no CRD here serves")


# ----------------------------------------------------------------------------- the facts


@pytest.mark.parametrize("schema", ALL_COPIES)
def test_each_schema_is_a_valid_structural_schema(schema: dict[str, Any]) -> None:
    jsonschema.Draft4Validator.check_schema(schema)
    assert [path for path, node in nodes(schema) if "type" not in node] == []
    assert all("description" not in node for _, node in nodes(schema))


@pytest.mark.parametrize("schema", ALL_COPIES)
def test_a_result_requires_policy_and_nothing_else(schema: dict[str, Any]) -> None:
    result = schema["properties"]["results"]["items"]
    assert result["required"] == ["policy"]
    assert result["properties"]["result"]["enum"] == ["pass", "fail", "warn", "error", "skip"]
    assert result["properties"]["properties"]["additionalProperties"] == {"type": "string"}
    assert "required" not in schema
    timestamp = result["properties"]["timestamp"]
    assert timestamp["required"] == ["nanos", "seconds"]
    assert timestamp["properties"] == {
        "nanos": {"type": "integer", "format": "int32"},
        "seconds": {"type": "integer", "format": "int64"},
    }
    assert schema["properties"]["summary"]["properties"] == {
        count: {"type": "integer"} for count in ("error", "fail", "pass", "skip", "warn")
    }


def test_the_severity_enums() -> None:
    def severities(schema: dict[str, Any]) -> list[str]:
        enum: list[str] = schema["properties"]["results"]["items"]["properties"]["severity"]["enum"]
        return enum

    everything = ["critical", "high", "low", "medium", "info"]
    assert severities(rs.KYVERNO_POLICYREPORT_SCHEMA) == everything
    assert severities(rs.KYVERNO_CLUSTERPOLICYREPORT_SCHEMA) == everything
    assert severities(rs.OPENREPORTS_SCHEMA) == everything
    assert severities(rs.WG_CLUSTERPOLICYREPORT_SCHEMA) == ["high", "low", "medium"]
    assert severities(rs.WG_EARLY_POLICYREPORT_SCHEMA) == ["high", "low", "medium"]


def test_only_openreports_has_a_top_level_source_and_configuration() -> None:
    for schema in ALL_COPIES:
        top = schema["properties"]
        has = schema is rs.OPENREPORTS_SCHEMA
        assert ("source" in top, "configuration" in top) == (has, has)
    configuration = rs.OPENREPORTS_SCHEMA["properties"]["configuration"]
    assert configuration["required"] == ["limits"]
    limits = configuration["properties"]["limits"]
    assert "required" not in limits
    assert limits["properties"]["maxResults"] == {"type": "integer"}
    assert limits["properties"]["statusFilter"]["items"]["enum"] == [
        "pass",
        "fail",
        "warn",
        "error",
        "skip",
    ]


def test_the_copies_differ_where_the_notes_say_and_nowhere_else() -> None:
    """Notes 1.1: severity and the x-kubernetes-* markers; 2.3: openreports adds a top-level
    source and configuration. Also catches a slip in one of the transcriptions."""

    def core(schema: dict[str, Any]) -> Any:
        bare = strip(schema)
        bare["properties"].pop("source", None)
        bare["properties"].pop("configuration", None)
        bare["properties"]["results"]["items"]["properties"].pop("severity")
        return bare

    wg = core(rs.WG_CLUSTERPOLICYREPORT_SCHEMA)
    for schema in (
        rs.KYVERNO_POLICYREPORT_SCHEMA,
        rs.KYVERNO_CLUSTERPOLICYREPORT_SCHEMA,
        rs.OPENREPORTS_SCHEMA,
    ):
        assert core(schema) == wg
    early = copy.deepcopy(wg)
    early["properties"]["results"]["items"]["properties"].pop("source")
    assert core(rs.WG_EARLY_POLICYREPORT_SCHEMA) == early


def markers(schema: dict[str, Any]) -> dict[str, str]:
    return {
        f"{path} {key}": value
        for path, node in nodes(schema)
        for key, value in node.items()
        if key.startswith("x-kubernetes-")
    }


def test_the_merge_markers_of_each_copy() -> None:
    """Notes 1.1: map-type atomic on scope, scopeSelector, resources[] items and
    resourceSelector in Kyverno's and openreports' copies, none in wg's; list-type atomic on
    matchExpressions and values in Kyverno's ClusterPolicyReport @03cf29d0 and in
    openreports, absent from Kyverno's PolicyReport @bedefb69."""
    atomic_maps = {
        f"{path} x-kubernetes-map-type": "atomic"
        for path in (
            "scope",
            "scopeSelector",
            "results[].resources[]",
            "results[].resourceSelector",
        )
    }
    atomic_lists = {
        f"{selector}{path} x-kubernetes-list-type": "atomic"
        for selector in ("scopeSelector", "results[].resourceSelector")
        for path in (".matchExpressions", ".matchExpressions[].values")
    }
    assert markers(rs.WG_CLUSTERPOLICYREPORT_SCHEMA) == {}
    assert markers(rs.WG_EARLY_POLICYREPORT_SCHEMA) == {}
    assert markers(rs.KYVERNO_POLICYREPORT_SCHEMA) == atomic_maps
    assert markers(rs.KYVERNO_CLUSTERPOLICYREPORT_SCHEMA) == atomic_maps | atomic_lists
    assert markers(rs.OPENREPORTS_SCHEMA) == atomic_maps | atomic_lists
    for schema in ALL_COPIES:
        assert "x-kubernetes-preserve-unknown-fields" not in str(markers(schema))
        assert "list-type" not in str(
            {k: v for k, v in markers(schema).items() if k.startswith("results ")}
        )


def test_the_crd_names_and_scopes() -> None:
    """Notes 1.2 and 2.2."""
    table = {
        key: (
            facts["name"],
            facts["group"],
            facts["version"],
            facts["listKind"],
            facts["plural"],
            facts["singular"],
            facts["shortNames"],
            facts["scope"],
            facts["namespaced"],
            facts["subresources"],
        )
        for key, facts in rs.CRDS.items()
    }
    assert table == {
        (rs.WG, "PolicyReport"): (
            "policyreports.wgpolicyk8s.io",
            "wgpolicyk8s.io",
            "v1alpha2",
            "PolicyReportList",
            "policyreports",
            "policyreport",
            ["polr"],
            "Namespaced",
            True,
            {},
        ),
        (rs.WG, "ClusterPolicyReport"): (
            "clusterpolicyreports.wgpolicyk8s.io",
            "wgpolicyk8s.io",
            "v1alpha2",
            "ClusterPolicyReportList",
            "clusterpolicyreports",
            "clusterpolicyreport",
            ["cpolr"],
            "Cluster",
            False,
            {},
        ),
        (rs.OPENREPORTS, "Report"): (
            "reports.openreports.io",
            "openreports.io",
            "v1alpha1",
            "ReportList",
            "reports",
            "report",
            ["reps"],
            "Namespaced",
            True,
            {},
        ),
        (rs.OPENREPORTS, "ClusterReport"): (
            "clusterreports.openreports.io",
            "openreports.io",
            "v1alpha1",
            "ClusterReportList",
            "clusterreports",
            "clusterreport",
            ["creps"],
            "Cluster",
            False,
            {},
        ),
    }
    for (api_version, kind), facts in rs.CRDS.items():
        assert facts["kind"] == kind
        assert api_version == f"{facts['group']}/{facts['version']}"
        assert facts["name"] == f"{facts['plural']}.{facts['group']}"
        assert rs.BY_PLURAL[(facts["group"], facts["version"], facts["plural"])] == (
            api_version,
            kind,
        )
    assert len(rs.BY_PLURAL) == 4


def test_the_printer_columns() -> None:
    """Notes 1.7 and 2.2: eight columns in order; Kind and Name at priority 1 except in
    Kyverno's wgpolicyk8s.io CRDs."""
    expected = [
        ("Kind", ".scope.kind", "string"),
        ("Name", ".scope.name", "string"),
        ("Pass", ".summary.pass", "integer"),
        ("Fail", ".summary.fail", "integer"),
        ("Warn", ".summary.warn", "integer"),
        ("Error", ".summary.error", "integer"),
        ("Skip", ".summary.skip", "integer"),
        ("Age", ".metadata.creationTimestamp", "date"),
    ]
    for copies in rs.COPIES.values():
        for each in copies:
            columns = each.printer_columns
            assert [(c["name"], c["jsonPath"], c["type"]) for c in columns] == expected
            priorities = [c.get("priority") for c in columns]
            wide = None if each.label == "kyverno" else 1
            assert priorities == [wide, wide, None, None, None, None, None, None], each.label


def test_the_strictest_copy_is_in_schemas() -> None:
    """Every object the SCHEMAS copy accepts, every copy accepts (for these schemas: they
    differ only in severity, so the narrowest severity enum)."""
    for key, schema in rs.SCHEMAS.items():
        copies = rs.COPIES[key]
        assert any(each.schema is schema for each in copies)
        mine = set(schema["properties"]["results"]["items"]["properties"]["severity"]["enum"])
        for each in copies:
            theirs = each.schema["properties"]["results"]["items"]["properties"]["severity"]
            assert mine <= set(theirs["enum"])
    assert [each.label for each in rs.COPIES[(rs.WG, "PolicyReport")]] == [
        "kyverno",
        "wg-policy-prototypes",
    ]


def test_the_early_wg_policyreport_prunes_a_results_source() -> None:
    """The v1alpha2 PolicyReport @cd234547 has no results[].source: the reports' per-result
    source would be dropped where that CRD is installed."""
    report = full((rs.WG, "PolicyReport"))
    assert rs.validate(report, copies=[rs.WG_EARLY_POLICYREPORT]) == [
        "results[0].source: unknown field (the API server prunes it)"
    ]
    del result_of(report)["source"]
    assert rs.validate(report, copies=[rs.WG_EARLY_POLICYREPORT]) == []
