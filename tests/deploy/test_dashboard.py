"""The Grafana dashboard (charts/gpu-share-webhook/files/dashboard.json) and the alerts
(the chart's PrometheusRule and deploy/optional/monitoring's): every series and label they
query is one a real `serve` exports, or one Prometheus adds; the ServiceMonitor brings the
server's labels into Prometheus as the server exported them; the chart and
deploy/optional/monitoring ship the dashboard as the Grafana sidecars collect dashboards.

The queries are read by a small PromQL reader (`read_promql`): metric names apart from
functions, label matchers, grouping labels and range selectors. A scrape of a real `serve`
process, after reviews that fill every labelled series the dashboard uses, says which series
and labels exist; Prometheus adds the target labels (`job`, `namespace`, ...) itself, and
`stored_labels` works out what it keeps of each sample's labels when one of them has a
target label's name (`endpoint`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import re
import shlex
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import helm_python
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support import deploy_helpers as dh
from tests.support import server_helpers as h
from webhook.server import certificates

CHART = dh.REPO / "charts" / "gpu-share-webhook"
DASHBOARD = CHART / "files" / "dashboard.json"
MONITORING = dh.DEPLOY / "optional" / "monitoring"
KEY = "gpu-share-webhook.json"
RELEASE = "gpu-share-webhook"
NAMESPACE = "gpu-share-system"


def operator_target(port: str) -> dict[str, str]:
    """The labels Prometheus gives every series it scrapes from one pod through a
    ServiceMonitor endpoint (values made up, names as the Prometheus Operator sets them).

    prometheus-operator, pkg/prometheus/promcfg.go (generateServiceMonitorConfig): its
    relabelling sets `namespace`, `service`, `pod` and `container` from the Kubernetes
    service discovery, `job` to the Service's name (or the value of its `jobLabel` label),
    `endpoint` to the endpoint's `port` (its name; "A single service may potentially have
    multiple metrics endpoints, therefore the endpoints labels is filled with the ports
    name"), and `node` only for an address that is a Node's. Prometheus sets `instance` to
    the address when no relabelling did (docs/configuration/configuration.md,
    <relabel_config>).
    """
    return {
        "namespace": NAMESPACE,
        "service": RELEASE,
        "pod": f"{RELEASE}-6f7d9c5b8-x2x4q",
        "container": "webhook",
        "job": RELEASE,
        "endpoint": port,
        "instance": "10.244.1.17:8080",
    }


TARGET_LABELS = frozenset(operator_target("metrics"))
# Series Prometheus makes for each target itself, with the target's labels alone (`up`: 1
# when the scrape worked).
SYNTHETIC = ("up",)
# The dashboard's variables: every query is narrowed to one namespace and job.
SCOPE = {"namespace": '="$namespace"', "job": '="$job"'}


# --------------------------------------------------------------------------- reading PromQL

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=,(){}])
    """,
    re.VERBOSE,
)
# PromQL's aggregation operators: the only names a `by (...)` or `without (...)` may follow.
AGGREGATIONS = frozenset(
    {
        "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
        "bottomk", "topk", "quantile", "limitk", "limit_ratio",
    }
)  # fmt: skip
GROUPING = frozenset({"by", "without"})
# Keywords that are neither metrics nor functions (vector matching takes labels, refused
# below: the dashboard has no use for it, and the reader does not scope its labels).
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan"})
VECTOR_MATCHING = frozenset({"on", "ignoring", "group_left", "group_right"})


@dataclasses.dataclass
class Selector:
    """A vector selector: the metric and its label matchers (label -> operator and value)."""

    metric: str
    matchers: dict[str, str]


@dataclasses.dataclass
class Grouping:
    """An aggregation's `by (...)`: its labels and the metrics of its argument."""

    labels: list[str]
    metrics: set[str]


@dataclasses.dataclass
class Query:
    selectors: list[Selector]
    groupings: list[Grouping]


def _tokens(expr: str) -> list[tuple[str, str]]:
    out, at = [], 0
    while at < len(expr):
        match = _TOKEN.match(expr, at)
        if match is None:
            raise ValueError(f"cannot read {expr[at:]!r} in {expr!r}")
        kind = match.lastgroup
        assert kind is not None
        if kind != "space":
            out.append((kind, match.group()))
        at = match.end()
    return out


def _parenthesised(tokens: list[tuple[str, str]], at: int) -> int:
    """The index of the `)` that closes the `(` at `at`."""
    depth = 0
    for index in range(at, len(tokens)):
        depth += {"(": 1, ")": -1}.get(tokens[index][1], 0) if tokens[index][0] == "op" else 0
        if depth == 0:
            return index
    raise ValueError("unbalanced parentheses")


def read_promql(expr: str) -> Query:
    """The vector selectors and `by` groupings of a PromQL expression."""
    tokens = _tokens(expr)
    query = Query(selectors=[], groupings=[])
    open_groupings: list[tuple[int, Grouping]] = []  # (index of the argument's `)`, grouping)
    index = 0
    while index < len(tokens):
        kind, text = tokens[index]
        following = tokens[index + 1][1] if index + 1 < len(tokens) else ""
        if kind == "ident" and text in AGGREGATIONS and following in GROUPING:
            if tokens[index + 2][1] != "(":
                raise ValueError(f"{text} {following} without labels in {expr!r}")
            close = _parenthesised(tokens, index + 2)
            labels = [t for k, t in tokens[index + 3 : close] if k == "ident"]
            if following == "without":
                raise ValueError(f"`without` hides which labels remain: {expr!r}")
            if tokens[close + 1][1] != "(":
                raise ValueError(f"{text} by (...) without an argument in {expr!r}")
            grouping = Grouping(labels=labels, metrics=set())
            query.groupings.append(grouping)
            open_groupings.append((_parenthesised(tokens, close + 1), grouping))
            index = close + 1
            continue
        if kind == "ident" and text in GROUPING:
            raise ValueError(
                f"`{text}` after its aggregation's argument in {expr!r}: write it first"
            )
        if kind == "ident" and text in VECTOR_MATCHING:
            raise ValueError(f"vector matching ({text}) in {expr!r}: not read here")
        if kind == "ident" and following == "(":
            index += 1  # a function or an aggregation without grouping
            continue
        if kind == "ident" and text.lower() not in KEYWORDS:
            selector = Selector(metric=text, matchers={})
            index += 1
            if index < len(tokens) and tokens[index][1] == "{":
                index += 1
                while tokens[index][1] != "}":
                    (_, label), (_, operator), (value_kind, value) = tokens[index : index + 3]
                    if value_kind != "string" or operator not in ("=", "!=", "=~", "!~"):
                        raise ValueError(f"a matcher of {text} is not label op string: {expr!r}")
                    selector.matchers[label] = operator + value
                    index += 3
                    if tokens[index][1] == ",":
                        index += 1
                index += 1
            query.selectors.append(selector)
            for _, grouping in open_groupings:
                grouping.metrics.add(text)
            continue
        if kind == "op" and text == ")":
            open_groupings = [(end, g) for end, g in open_groupings if end != index]
        index += 1
    return query


LABEL_VALUES = re.compile(r"label_values\((?P<selector>.+),\s*(?P<label>\w+)\)")


@pytest.mark.parametrize(
    ("expr", "selectors", "groupings"),
    [
        (
            'sum by (endpoint, le) (rate(m_bucket{namespace="$ns", a=~"x|y"}[$__rate_interval]))',
            [("m_bucket", {"namespace": '="$ns"', "a": '=~"x|y"'})],
            [(["endpoint", "le"], {"m_bucket"})],
        ),
        (
            "histogram_quantile(0.99, sum by (le) (rate(a_bucket[5m]))) / 86400 > bool 1e3",
            [("a_bucket", {})],
            [(["le"], {"a_bucket"})],
        ),
        (
            'sum(rate(a{j="$job"}[1m])) / sum by (x) (rate(b_total[1m])) + min(c)',
            [("a", {"j": '="$job"'}), ("b_total", {}), ("c", {})],
            [(["x"], {"b_total"})],
        ),
        ('max(m{l="sum by (x)"})', [("m", {"l": '="sum by (x)"'})], []),
    ],
)
def test_the_promql_reader_finds_metrics_matchers_and_groupings(
    expr: str, selectors: list[tuple[str, dict[str, str]]], groupings: list[Any]
) -> None:
    query = read_promql(expr)
    assert [(s.metric, s.matchers) for s in query.selectors] == selectors
    assert [(g.labels, g.metrics) for g in query.groupings] == groupings


@pytest.mark.parametrize(
    "expr",
    [
        "sum(rate(a[1m])) by (x)",
        "sum without (x) (a)",
        "a / on (x) b",
        "sum by (x) (a",
        "a{x=1}",
        "a # b",
    ],
)
def test_the_promql_reader_refuses_what_it_cannot_check(expr: str) -> None:
    with pytest.raises((ValueError, IndexError)):
        read_promql(expr)


# --------------------------------------------------------------------------- the dashboard


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def targets() -> list[tuple[str, dict[str, Any]]]:
    """(panel title, target) for every query of every panel."""
    return [(p["title"], t) for p in panels() for t in p["targets"]]


def _target_id(target: tuple[str, dict[str, Any]]) -> str:
    return f"{target[0]}/{target[1]['refId']}"


@dataclasses.dataclass
class Exported:
    """What the server's /metrics shows: each series name and the labels of its samples
    (with the series Prometheus makes itself, of no labels of their own), and the samples."""

    labels: dict[str, set[str]]
    samples: list[tuple[str, dict[str, str]]] = dataclasses.field(default_factory=list)

    def problems(self, query: Query) -> list[str]:
        found = []
        for selector in query.selectors:
            if selector.metric not in self.labels:
                found.append(f"{selector.metric} is not a series the server exports")
                continue
            have = self.labels[selector.metric] | TARGET_LABELS
            found += [
                f"{selector.metric} has no label {label}"
                for label in selector.matchers
                if label not in have
            ]
        for grouping in query.groupings:
            for metric in sorted(grouping.metrics & set(self.labels)):
                have = self.labels[metric] | TARGET_LABELS
                found += [
                    f"by ({label}): {metric} has no label {label}"
                    for label in grouping.labels
                    if label not in have
                ]
        return found


async def _fill_every_series(serve: h.Process, ca: Path) -> str:
    """Reviews that give each labelled series the dashboard reads a sample: a review
    allowed, one refused by a rule (the series of connections closed and requests shed are
    there from the start); then a scrape."""
    async with h.connect(serve.port, ca) as connection:
        for number, (path, pod) in enumerate(
            [("/mutate", h.real_pods()[0]), ("/mutate", h.real_pods()[0]),
             ("/validate", h.shared_pod(2))]
        ):  # fmt: skip
            status, _, _ = await connection.post(path, h.review_body(pod, f"uid-{number}"))
            assert status == 200
    async with aiohttp.ClientSession() as session:

        async def scraped() -> str | None:
            async with session.get(serve.probe_url("/metrics")) as response:
                text = await response.text()
            wanted = ("gpu_share_webhook_connections_closed_total{", "_rule_violations_total{")
            return text if all(w in text for w in wanted) else None

        text: str = await h.eventually(scraped, what="every series on /metrics")
    return text


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    directory = tmp_path_factory.mktemp("serve")
    with h.serving(directory, "--drain-seconds", "0.2") as serve:

        async def run() -> str:
            await serve.ready()
            return await _fill_every_series(serve, directory / "certs" / certificates.CA_FILE)

        text = asyncio.run(run())
    labels: dict[str, set[str]] = {name: set() for name in SYNTHETIC}
    samples = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
            samples.append((sample.name, dict(sample.labels)))
    return Exported(labels=labels, samples=samples)


@pytest.mark.slow  # starts `serve`
@pytest.mark.parametrize("target", targets(), ids=_target_id)
def test_every_query_asks_for_series_and_labels_the_server_exports(
    exported: Exported, target: tuple[str, dict[str, Any]]
) -> None:
    query = read_promql(target[1]["expr"])
    assert query.selectors, "a query of no series"
    assert exported.problems(query) == []


@pytest.mark.slow  # starts `serve`
@pytest.mark.parametrize(
    "variable", [v for v in dashboard()["templating"]["list"] if v["type"] == "query"],
    ids=lambda v: v["name"],
)  # fmt: skip
def test_the_variables_list_labels_of_series_the_server_exports(
    exported: Exported, variable: dict[str, Any]
) -> None:
    match = LABEL_VALUES.fullmatch(variable["query"]["query"])
    assert match is not None
    assert variable["definition"] == variable["query"]["query"]
    query = read_promql(match["selector"])
    assert exported.problems(query) == []
    (selector,) = query.selectors
    assert match["label"] in exported.labels[selector.metric] | TARGET_LABELS


@pytest.mark.slow  # starts `serve`
def test_the_check_fails_on_a_series_or_label_the_server_does_not_export(
    exported: Exported,
) -> None:
    renamed = 'sum by (endpoint) (rate(gpu_share_webhook_review_total{job="$job"}[5m]))'
    assert exported.problems(read_promql(renamed)) == [
        "gpu_share_webhook_review_total is not a series the server exports"
    ]
    wrong_label = 'sum by (rule) (rate(gpu_share_webhook_reviews_total{reason="x"}[5m]))'
    assert exported.problems(read_promql(wrong_label)) == [
        "gpu_share_webhook_reviews_total has no label reason",
        "by (rule): gpu_share_webhook_reviews_total has no label rule",
    ]


@pytest.mark.parametrize("target", targets(), ids=_target_id)
def test_every_query_is_narrowed_to_the_chosen_namespace_and_job(
    target: tuple[str, dict[str, Any]],
) -> None:
    for selector in read_promql(target[1]["expr"]).selectors:
        assert {k: selector.matchers.get(k) for k in SCOPE} == SCOPE, selector.metric


@pytest.mark.parametrize("target", targets(), ids=_target_id)
def test_legends_name_only_labels_the_query_keeps(target: tuple[str, dict[str, Any]]) -> None:
    kept = {label for g in read_promql(target[1]["expr"]).groupings for label in g.labels}
    assert set(re.findall(r"\{\{\s*(\w+)\s*\}\}", target[1]["legendFormat"])) <= kept


def _metrics_of(title: str) -> set[str]:
    (panel,) = [p for p in panels() if p["title"] == title]
    return {s.metric for t in panel["targets"] for s in read_promql(t["expr"]).selectors}


def test_the_dashboard_shows_what_an_admin_asks_of_it() -> None:
    """Issue 23: reviews by endpoint and outcome, refusals and warnings by rule, latency
    quantiles, requests in flight and refused for limits, broken
    policy files, certificate expiry."""
    by_title = {p["title"]: p for p in panels()}
    reviews = read_promql(by_title["Reviews per second"]["targets"][0]["expr"])
    assert reviews.groupings[0].labels == ["endpoint", "decision"]
    for title, mode in (
        ("Refusals by rule", '="enforce"'),
        ("Warnings by rule", '=~"warn|dry-run"'),
    ):
        (query,) = [read_promql(t["expr"]) for t in by_title[title]["targets"]]
        assert query.selectors[0].metric == "gpu_share_webhook_rule_violations_total"
        assert query.selectors[0].matchers["mode"] == mode
        assert "rule" in query.groupings[0].labels
    latency = [t["expr"] for t in by_title["Review latency"]["targets"]]
    assert [e.split(",")[0] for e in latency] == [
        f"histogram_quantile({q}" for q in ("0.5", "0.9", "0.99")
    ]
    assert all("gpu_share_webhook_review_duration_seconds_bucket" in e for e in latency)
    assert "gpu_share_webhook_reviews_in_flight" in _metrics_of("Requests in flight")
    assert _metrics_of("Requests refused for limits") == {"gpu_share_webhook_requests_shed_total"}
    assert _metrics_of("Broken policy files") == {"gpu_share_webhook_policy_files_not_loaded"}
    expiry = by_title["Certificate expiry"]
    assert expiry["fieldConfig"]["defaults"]["unit"] == "d"
    assert "/ 86400" in expiry["targets"][0]["expr"]


def test_the_dashboard_is_a_grafana_model_on_a_chosen_prometheus() -> None:
    model = dashboard()
    assert model["uid"] == "gpu-share-webhook"
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in model["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels():
        position = panel["gridPos"]
        assert position["x"] >= 0, panel["title"]
        assert position["x"] + position["w"] <= 24, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        datasource = {"type": "prometheus", "uid": "${datasource}"}
        assert panel["datasource"] == datasource
        assert all(t["datasource"] == datasource for t in panel["targets"])
        assert panel["description"], panel["title"]


# --------------------------------------------------------------------------- the installs


@pytest.fixture(scope="module")
def chart() -> Iterator[helm_python.Chart]:
    with helm_python.Chart.load(CHART) as loaded:
        yield loaded


def _rendered(chart: helm_python.Chart, values: Mapping[str, Any]) -> list[dict[str, Any]]:
    manifests = chart.render(dict(values), name=RELEASE, namespace=NAMESPACE)
    return [
        doc
        for path in sorted(manifests)
        if path.endswith((".yaml", ".yml"))
        for doc in dh.load_all(manifests[path])
        if doc
    ]


def _dashboards(chart: helm_python.Chart, values: Mapping[str, Any]) -> list[dict[str, Any]]:
    return _dashboards_in(_rendered(chart, values))


def _dashboards_in(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "ConfigMap" and KEY in o.get("data", {})]


def test_the_chart_makes_no_dashboard_unless_asked(chart: helm_python.Chart) -> None:
    assert chart.values["monitoring"]["dashboard"]["enabled"] is False
    assert _dashboards(chart, {}) == []


def test_the_charts_dashboard_is_the_json_file_with_the_sidecars_label(
    chart: helm_python.Chart,
) -> None:
    (configmap,) = _dashboards(chart, {"monitoring": {"dashboard": {"enabled": True}}})
    assert configmap["data"] == {KEY: DASHBOARD.read_text(encoding="utf-8")}
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["namespace"] == NAMESPACE
    assert "annotations" not in configmap["metadata"]


def test_the_sidecars_label_folder_and_namespace_are_the_admins(
    chart: helm_python.Chart,
) -> None:
    values = {
        "enabled": True,
        "label": "example.com/dashboard",
        "labelValue": "gpu",
        "folder": "GPU sharing",
        "folderAnnotation": "grafana_folder",
        "namespace": "monitoring",
    }
    (configmap,) = _dashboards(chart, {"monitoring": {"dashboard": values}})
    metadata = configmap["metadata"]
    assert metadata["labels"]["example.com/dashboard"] == "gpu"
    assert "grafana_dashboard" not in metadata["labels"]
    assert metadata["annotations"] == {"grafana_folder": "GPU sharing"}
    assert metadata["namespace"] == "monitoring"


@pytest.mark.parametrize(
    "values",
    [{"label": "not a label"}, {"labelValue": "x" * 64}, {"folderAnnotation": "/x"}],
)
def test_the_chart_refuses_a_label_kubernetes_would(
    chart: helm_python.Chart, values: dict[str, Any]
) -> None:
    with pytest.raises(helm_python.HelmError):
        chart.render(
            {"monitoring": {"dashboard": {"enabled": True, **values}}},
            name=RELEASE,
            namespace=NAMESPACE,
        )


def test_the_kustomize_install_ships_the_same_dashboard(chart: helm_python.Chart) -> None:
    objects = dh.kustomize(MONITORING)
    (ours,) = [o for o in objects if o["kind"] == "ConfigMap"]
    (theirs,) = _dashboards(chart, {"monitoring": {"dashboard": {"enabled": True}}})
    assert ours["data"] == theirs["data"]
    assert ours["metadata"]["name"] == theirs["metadata"]["name"]
    assert ours["metadata"]["namespace"] == NAMESPACE
    assert ours["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(ours["data"][KEY]) == dashboard()


# --------------------------------------------------------------------------- what Prometheus stores

# Prometheus's relabelling defaults (prometheus model/relabel/relabel.go,
# DefaultRelabelConfig), and the fields of the Operator's RelabelConfig (monitoring.coreos.com/v1:
# the same, in camelCase).
RELABEL_DEFAULTS = {"separator": ";", "regex": "(.*)", "replacement": "$1", "action": "replace"}
RELABEL_FIELDS = frozenset(
    {"sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement", "action"}
)
EXPORTED_PREFIX = "exported_"


def _expand(match: re.Match[str], template: str) -> str:
    """Go's Regexp.Expand, as relabelling uses it: $1, ${1} and $name become that group."""
    return re.sub(
        r"\$(?:\{(\w+)\}|(\w+))",
        lambda m: match.group(int(g) if (g := m[1] or m[2]).isdigit() else g) or "",
        template,
    )


def relabel(labels: Mapping[str, str], configs: list[Mapping[str, Any]]) -> dict[str, str]:
    """A sample's labels after metric_relabel_configs (prometheus model/relabel/relabel.go,
    relabel), for the two actions the ServiceMonitors use. `replace` joins the source labels'
    values with the separator; when the regex matches all of it (relabel regexes are
    anchored) it sets the target label to the replacement, or removes the target label when
    that comes out empty; no match changes nothing. `labeldrop` removes every label whose
    name the regex matches. The Operator accepts `replace` only with a target label, and
    `labeldrop` with a regex and no other field (pkg/prometheus/validation: "requires only
    'regex', and no other fields")."""
    out = dict(labels)
    for config in configs:
        assert set(config) <= RELABEL_FIELDS, config
        merged = {**RELABEL_DEFAULTS, **config}
        action = str(merged["action"]).lower()
        if action == "replace":
            assert merged.get("targetLabel"), config
            value = merged["separator"].join(out.get(n, "") for n in merged.get("sourceLabels", []))
            match = re.fullmatch(merged["regex"], value)
            if match is None:
                continue
            target = _expand(match, merged["targetLabel"])
            result = _expand(match, merged["replacement"])
            if result:
                out[target] = result
            else:
                out.pop(target, None)
        elif action == "labeldrop":
            assert set(config) <= {"regex", "action"}, config
            out = {k: v for k, v in out.items() if not re.fullmatch(merged["regex"], k)}
        else:
            raise AssertionError(f"relabel action {merged['action']!r} is not modelled here")
    return out


def stored_labels(
    sample: Mapping[str, str],
    target: Mapping[str, str],
    *,
    honor: bool,
    relabelings: list[Mapping[str, Any]],
) -> dict[str, str]:
    """The labels Prometheus stores for one scraped sample of a target (prometheus
    scrape/scrape.go, mutateSampleLabels).

    honor_labels true: the sample's labels stay and the target's fill in only the names the
    sample lacks. honor_labels false (the default): every target label is set, and a sample
    label it displaces is kept as exported_<name> (exported_exported_<name> if that is taken
    too: resolveConflictingExposedLabels). docs/configuration/configuration.md
    (<scrape_config>, honor_labels) says the same. metric_relabel_configs run after that.
    """
    if honor:
        merged = {**target, **sample}
    else:
        merged = {**sample, **target}
        for name in sorted((n for n in sample if n in target), key=len):
            renamed = EXPORTED_PREFIX + name
            while merged.get(renamed):
                renamed = EXPORTED_PREFIX + renamed
            merged[renamed] = sample[name]
    return relabel(merged, relabelings)


def label_problems(
    samples: list[tuple[str, dict[str, str]]],
    endpoint: Mapping[str, Any],
    *,
    override_honor_labels: bool,
) -> list[str]:
    """What Prometheus would store differently from what the server exported, scraping it
    through this ServiceMonitor endpoint: a label of the server's with another value (or
    none), a target label that is missing, an exported_ label left over. A Prometheus with
    overrideHonorLabels scrapes every ServiceMonitor with honor_labels false
    (prometheus-operator pkg/prometheus/promcfg.go, AddHonorLabels; OpenShift's user
    workload monitoring sets it)."""
    target = operator_target(endpoint["port"])
    honor = bool(endpoint.get("honorLabels", False)) and not override_honor_labels
    found = set()
    for name, exposed in samples:
        # A label with an empty value is no label to Prometheus.
        labels = {k: v for k, v in exposed.items() if v}
        stored = stored_labels(
            labels, target, honor=honor, relabelings=endpoint.get("metricRelabelings", [])
        )
        wanted = [("server", labels), ("target", {k: target[k] for k in target.keys() - labels})]
        for whose, expected in wanted:
            found.update(
                f"{name}: the {whose}'s {label}={value!r} is stored as {stored.get(label)!r}"
                for label, value in expected.items()
                if stored.get(label) != value
            )
        found.update(
            f"{name}: {label} is left" for label in stored if label.startswith("exported_")
        )
    return sorted(found)


MONITORING_VALUES = {"monitoring": {"serviceMonitor": {"enabled": True},
                                    "prometheusRule": {"enabled": True}}}  # fmt: skip


Installs = dict[str, list[dict[str, Any]]]


@pytest.fixture(scope="module")
def installs(chart: helm_python.Chart) -> Installs:
    """The Prometheus Operator objects of each install, made once (the tests only read
    them): the chart's, with both switched on, and deploy/optional/monitoring's."""
    return {"chart": _rendered(chart, MONITORING_VALUES), "kustomize": dh.kustomize(MONITORING)}


@pytest.mark.slow  # starts `serve`
@pytest.mark.parametrize("install", ["chart", "kustomize"])
@pytest.mark.parametrize("override", [False, True], ids=["honorLabels", "overrideHonorLabels"])
def test_prometheus_stores_every_label_of_the_server_as_the_server_exported_it(
    exported: Exported, installs: Installs, install: str, override: bool
) -> None:
    """The review series' `endpoint` (mutate or validate) has the name of the label the
    Operator gives every target (the port's name): the ServiceMonitor must bring ours
    through, whether or not the Prometheus lets it honour labels."""
    (endpoint,) = dh.find(installs[install], "ServiceMonitor")["spec"]["endpoints"]
    assert any("endpoint" in labels for _, labels in exported.samples)
    assert label_problems(exported.samples, endpoint, override_honor_labels=override) == []


REVIEW = ("gpu_share_webhook_reviews_total",
          {"endpoint": "mutate", "policy": "default", "decision": "allowed"})  # fmt: skip
UNLABELLED = ("gpu_share_webhook_reviews_in_flight", {})


@pytest.mark.parametrize(
    ("endpoint", "override", "wrong"),
    [
        # Neither honorLabels nor the relabelling: ours is renamed, the port's name stays.
        ({"port": "metrics"}, False, ["the server's endpoint='mutate' is stored as 'metrics'",
                                      "exported_endpoint is left"]),
        # honorLabels alone is enough, but not where the Prometheus overrides it.
        ({"port": "metrics", "honorLabels": True}, False, []),
        ({"port": "metrics", "honorLabels": True}, True,
         ["the server's endpoint='mutate' is stored as 'metrics'", "exported_endpoint is left"]),
        # The relabelling's regex must not match an empty value: with the default (.*) the
        # series without an endpoint of their own lose the target's.
        ({"port": "metrics", "metricRelabelings": [
            {"sourceLabels": ["exported_endpoint"], "targetLabel": "endpoint"},
            {"regex": "exported_endpoint", "action": "labeldrop"}]}, False,
         ["the target's endpoint='metrics' is stored as None"]),
    ],
    ids=["neither", "honorLabels", "honorLabels-overridden", "relabelled-with-(.*)"],
)  # fmt: skip
def test_the_label_check_fails_where_prometheus_would_store_other_labels(
    endpoint: dict[str, Any], override: bool, wrong: list[str]
) -> None:
    problems = label_problems([REVIEW, UNLABELLED], endpoint, override_honor_labels=override)
    assert [p.split(": ", 1)[1] for p in problems] == sorted(wrong)


def test_the_service_monitors_relabel_alike(installs: Installs) -> None:
    """The chart's ServiceMonitor endpoint, with the default values, is the kustomize
    install's: honorLabels off (the default, said outright) and the same relabelling."""
    ((chart_endpoint,), (kustomize_endpoint,)) = (
        dh.find(installs[name], "ServiceMonitor")["spec"]["endpoints"]
        for name in ("chart", "kustomize")
    )
    assert chart_endpoint == kustomize_endpoint
    assert chart_endpoint["honorLabels"] is False


def _alerts(installs: Installs) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{install}/{rule['alert']}", rule)
        for install, objects in installs.items()
        for group in dh.find(objects, "PrometheusRule")["spec"]["groups"]
        for rule in group["rules"]
    ]


@pytest.mark.slow  # starts `serve`
def test_every_alert_asks_for_series_and_labels_the_server_exports(
    exported: Exported, installs: Installs
) -> None:
    """What test_every_query_asks_for_series_and_labels_the_server_exports checks of the
    dashboard, for the alerts of both installs; and an alert's text names only labels its
    expression keeps."""
    alerts = _alerts(installs)
    assert {name.split("/")[0] for name, _ in alerts} == {"chart", "kustomize"}
    for name, rule in alerts:
        query = read_promql(rule["expr"])
        assert query.selectors, name
        assert exported.problems(query) == [], name
        kept = {label for g in query.groupings for label in g.labels}
        named = set(re.findall(r"\$labels\.(\w+)", json.dumps(rule["annotations"])))
        assert named <= kept, name


@pytest.mark.slow  # starts `serve`
def test_the_queries_take_namespace_job_and_pod_from_the_target(exported: Exported) -> None:
    """The dashboard narrows every query by namespace and job, and shows some by pod: the
    server must not export labels of those names, or they would mean something else (with
    honorLabels) or become exported_ (without)."""
    from_target = set(SCOPE) | {
        label
        for _, target in targets()
        for grouping in read_promql(target["expr"]).groupings
        for label in grouping.labels
        if label in TARGET_LABELS - {"endpoint"}
    }
    assert from_target == {"namespace", "job", "pod"}
    exported_labels = {label for labels in exported.labels.values() for label in labels}
    assert exported_labels & from_target == set()


# --------------------------------------------------------------------------- the docs

OPERATIONS = dh.REPO / "docs" / "operations.md"


def _dashboard_section() -> str:
    text = OPERATIONS.read_text(encoding="utf-8")
    return text.split("### The dashboard\n", 1)[1].split("\n## ", 1)[0]


def test_the_docs_helm_command_installs_the_dashboard_and_what_it_reads(
    chart: helm_python.Chart,
) -> None:
    """docs/operations.md, "The dashboard": its `helm upgrade` makes the dashboard's
    ConfigMap, the ServiceMonitor it reads through and the alerts."""
    (command,) = re.findall(r"^helm upgrade .*?(?<!\\)$", _dashboard_section(), re.M | re.S)
    words = shlex.split(command.replace("\\\n", " "))
    values: dict[str, Any] = {}
    for word, following in itertools.pairwise(words):
        if word == "--set":
            key, _, value = following.partition("=")
            *parents, last = key.split(".")
            node = values
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = yaml.safe_load(value)
    objects = _rendered(chart, values)
    assert len(_dashboards_in(objects)) == 1
    assert {"ServiceMonitor", "PrometheusRule"} <= set(dh.kinds(objects))


def test_the_docs_kustomization_moves_the_dashboard_into_a_folder_of_grafanas_namespace(
    tmp_path: Path,
) -> None:
    """docs/operations.md, "The dashboard": the kustomization it shows builds next to a
    clone, and puts the same dashboard in `monitoring` with the sidecar's folder annotation."""
    (block,) = re.findall(r"```yaml\n(.*?)```", _dashboard_section(), flags=re.DOTALL)
    shutil.copytree(dh.DEPLOY, tmp_path / "gpu-share-webhook" / "deploy")
    site = tmp_path / "site"
    site.mkdir()
    (site / "kustomization.yaml").write_text(block, encoding="utf-8")
    objects = dh.kustomize(site)
    (configmap,) = [o for o in objects if o["kind"] == "ConfigMap"]
    assert configmap["metadata"]["namespace"] == "monitoring"
    assert configmap["metadata"]["annotations"] == {"k8s-sidecar-target-directory": "GPU sharing"}
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"][KEY]) == dashboard()
    # The rest stays where the webhook runs.
    others = [o for o in objects if o["kind"] != "ConfigMap"]
    assert sorted(dh.kinds(others)) == ["PrometheusRule", "ServiceMonitor"]
    assert {o["metadata"]["namespace"] for o in others} == {NAMESPACE}
