"""The Grafana dashboard (charts/gpu-share-webhook/files/dashboard.json): every series and
label it queries is one a real `serve` exports, and the chart and deploy/optional/monitoring
ship it as the Grafana sidecars collect dashboards.

The queries are read by a small PromQL reader (`read_promql`): metric names apart from
functions, label matchers, grouping labels and range selectors. A scrape of a real `serve`
process, after reviews that fill every labelled series the dashboard uses, says which series
and labels exist; Prometheus adds the target labels (`job`, `namespace`, ...) itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import helm_python
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests import deploy_helpers as dh
from tests import server_helpers as h
from webhook import certificates

CHART = dh.REPO / "charts" / "gpu-share-webhook"
DASHBOARD = CHART / "files" / "dashboard.json"
MONITORING = dh.DEPLOY / "optional" / "monitoring"
KEY = "gpu-share-webhook.json"
RELEASE = "gpu-share-webhook"
NAMESPACE = "gpu-share-system"

# The labels Prometheus gives every series of a target (the Prometheus Operator's
# ServiceMonitor: job is the Service's name, namespace, pod, instance...).
TARGET_LABELS = frozenset({"job", "namespace", "pod", "instance", "service", "container"})
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
    """What the server's /metrics shows: each series name and the labels of its samples."""

    labels: dict[str, set[str]]

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
    """Reviews and abuse that give each labelled series the dashboard reads a sample: a
    review allowed, one refused by a rule, the same review twice (the answer cache), a
    request whose body never comes and a connection that sends none; then a scrape."""
    async with h.connect(serve.port, ca) as connection:
        for number, (path, pod) in enumerate(
            [("/mutate", h.real_pods()[0]), ("/mutate", h.real_pods()[0]),
             ("/validate", h.shared_pod(2))]
        ):  # fmt: skip
            status, _, _ = await connection.post(path, h.review_body(pod, f"uid-{number}"))
            assert status == 200
    async with h.connect(serve.port, ca) as connection:
        await connection.send_head("/mutate", 1000)  # no body: body-timeout, 408
        status, _, _ = await connection.response()
        assert status == 408
    async with h.connect(serve.port, ca), aiohttp.ClientSession() as session:
        # A connection that never sends a request: closed for `header`.

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
    timeouts = ("--header-timeout", "0.3", "--body-timeout", "0.3", "--drain-seconds", "0.2")
    with h.serving(directory, *timeouts) as serve:

        async def run() -> str:
            await serve.ready()
            return await _fill_every_series(serve, directory / "certs" / certificates.CA_FILE)

        text = asyncio.run(run())
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    return Exported(labels=labels)


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
    quantiles, answers from the cache, requests in flight and refused for limits, broken
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
    assert "gpu_share_webhook_decision_cache_hits" in _metrics_of("Answers from the cache")
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


def _dashboards(chart: helm_python.Chart, values: Mapping[str, Any]) -> list[dict[str, Any]]:
    manifests = chart.render(dict(values), name=RELEASE, namespace=NAMESPACE)
    objects = [
        doc
        for path in sorted(manifests)
        if path.endswith((".yaml", ".yml"))
        for doc in yaml.safe_load_all(manifests[path])
        if doc
    ]
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
