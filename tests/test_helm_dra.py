"""charts/gpu-share-webhook and a policy's `dra` section: the claim conditions the chart
writes for it (the GPU classes of the section, as `gpu-share-webhook render` lists them) and
its check of the section (what DraClassSpec and DraSpec refuse, capacity ceilings read as
webhook/core/quantities.py reads them), each held to the server's own code.

The table of bad policies in tests/test_helm.py has a case for each kind of problem; here the
quantities are compared line for line, at their bounds and at random, and the conditions for
random lists of classes.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import deploy_helpers as dh
from tests.test_helm import (
    CHART,
    NAMESPACE,
    RELEASE,
    _chart_problems,
    _configurations,
    _expected_configurations,
    _render,
)
from webhook import cli, names
from webhook.core import quantities


@pytest.fixture(scope="module")
def chart() -> Iterator[helm_python.Chart]:
    with helm_python.Chart.load(CHART) as loaded:
        yield loaded


def _policy(dra: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "gpu-share.io/v1alpha1",
        "kind": "SharingPolicy",
        "metadata": {"name": "site"},
        "spec": {
            "nodeClasses": [
                {"name": "t4", "product": "Tesla-T4", "strategy": "time-slicing", "replicas": 4}
            ],
            "dra": dict(dra),
        },
    }


def _checked(text: str) -> list[str]:
    """`gpu-share-webhook policy check`'s problems with the file site.yaml of `text`, each
    `site.yaml: <field>: <reason>`."""
    with tempfile.TemporaryDirectory() as directory:
        (Path(directory) / "site.yaml").write_text(text, encoding="utf-8")
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            cli.main(["policy", "check", directory])
    return [
        line.removeprefix("error: ").removeprefix(f"{directory}/")
        for line in err.getvalue().splitlines()
        if line.startswith("error: ")
    ]


# --------------------------------------------------------------------------- capacity ceilings

# Quantities at the edges of what quantities.parse takes: the grammar, the sign, the bound of
# 2^63-1 in each form (whole, with a decimal suffix, an exponent, a fraction, each binary
# suffix), the exponent's own bound; and values `policy check` quotes with care.
EDGE_QUANTITIES = [
    # The grammar.
    "8Gi", "500m", "1", "0", "1.", ".5", ".", "+", "-", "-0", "+1", "1e3", "1E3", "1e+3",
    "1e-3", "1E", "1e", "1ki", "1K", "1k", "1Ki", "1 Gi", " 1", "1 ", "0x10", "1_000",
    "1.5.3", "1e3.5", "e3", "Ki", "1Gib", "1.5Gi", "00012", "\uff11", "1e3Gi",
    # The sign: negative unless zero, however small.
    "-1", "-8Gi", "-0.0", "-000", "-1n", "-1e-30", "-0.0000000001", "-1e-2147483647",
    # Whole numbers.
    "9223372036854775807", "9223372036854775808", "09223372036854775807",
    "99999999999999999999", "-9223372036854775807", "-9223372036854775808",
    "9223372036854775807.0", "9223372036854775807.000000001",
    # Decimal suffixes and exponents.
    "9.223372036854775807E", "9.223372036854775808E", "9223372036854775807000m",
    "9223372036854775807001m", "9223372036854.775807M", "9223372036854.775808M",
    "92233720368547758070e-1", "92233720368547758071e-1", "9223372036854775807e0",
    "9.223372036854775807e18", "9.223372036854775808e18", "1e18", "1e19", "10E",
    "1e2147483647", "1e2147483648", "1e-2147483648", "0e2147483648", "1e-2147483647",
    "1e0000000000002147483647", "1e-40", "1e-9n",
    # Binary suffixes: the largest whole part, its largest fraction, and just above.
    "7Ei", "8Ei", "7.999999999999999999132638262011596452794037759304046630859375Ei",
    "7.999999999999999999132638262011596452794037759304046630859376Ei",
    "7.99999999999999999913263826201159645279403775930404663085937Ei",
    "8191Pi", "8191.99999999999999911182158029987476766109466552734375Pi",
    "8191.99999999999999911182158029987476766109466552734376Pi", "8192Pi",
    "8388607Ti", "8388608Ti", "8589934591Gi", "8589934591.9999999991Gi", "8589934592Gi",
    "8796093022207.99999904632568359375Mi", "8796093022207.99999904632568359376Mi",
    "9007199254740991.9990234375Ki", "9007199254740991.9990234376Ki", "9007199254740992Ki",
    "0009007199254740991.99902343750Ki", "99999999999999999999Ki",
    # What `policy check` writes as Python's repr.
    "it's", 'say "hi"', "it's \"quoted\"", "back\\slash", "tab\there",
]  # fmt: skip


def _capacity_lines(chart: helm_python.Chart, values: Sequence[str]) -> tuple[list[str], ...]:
    """(the chart's problems, `policy check`'s) with a class whose capacity ceilings are
    `values`, named q0, q1, ... and, from the third on, every other one with a domain (which
    `policy check` places at the class)."""
    capacity = {
        (f"example.com/q{i}" if i > 1 and i % 2 else f"q{i}"): value
        for i, value in enumerate(values)
    }
    doc = _policy({"deviceClasses": [{"name": "gpu.nvidia.com", "capacity": capacity}]})
    # The mapping: Helm takes the strings as they are (in a file's text it reads 1e3 as a
    # number, and leaves the file to the server).
    charted = sorted(_chart_problems(chart, doc))
    checked = sorted(_checked(yaml.safe_dump(doc)))
    return charted, checked


def test_capacity_ceilings_are_judged_as_the_server_judges_them(chart: helm_python.Chart) -> None:
    """Line for line: the same values refused, for the same reason, at the same place."""
    charted, checked = _capacity_lines(chart, EDGE_QUANTITIES)
    assert charted == checked
    # Some of each kind, and a domain's at the class.
    text = "\n".join(checked)
    for reason in (
        quantities.NOT_A_QUANTITY,
        quantities.NEGATIVE,
        quantities.OUT_OF_RANGE,
        quantities.EXPONENT_OUT_OF_RANGE,
    ):
        assert reason in text
    assert "spec.dra.deviceClasses[0]: capacity.example.com/q" in text
    assert "'it\\'s \"quoted\"'" in text
    # And every value the server takes passes.
    good = [v for v in EDGE_QUANTITIES if _takes(v)]
    assert len(good) > 40
    assert _capacity_lines(chart, good) == ([], [])


def _takes(value: str) -> bool:
    try:
        return quantities.parse(value) >= 0
    except quantities.QuantityError:
        return False


_DIGITS = st.text("0123456789", max_size=24)
_QUANTITY_LIKE = st.builds(
    lambda sign, whole, fraction, tail: f"{sign}{whole}{fraction}{tail}",
    st.sampled_from(["", "", "+", "-"]),
    _DIGITS,
    st.one_of(st.just(""), _DIGITS.map(lambda d: f".{d}")),
    st.one_of(
        st.sampled_from(["", "", "m", "k", "M", "G", "E", "n", "Ki", "Gi", "Pi", "Ei", "e", "K"]),
        st.builds(lambda s, d: f"e{s}{d}", st.sampled_from(["", "+", "-"]), _DIGITS),
    ),
)
_ANY_TEXT = st.text("0123456789+-.eEinumkKMGTP ", min_size=1, max_size=12)


@pytest.mark.slow  # forty renders and `policy check`s
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(
        st.one_of(_QUANTITY_LIKE, _ANY_TEXT).filter(lambda v: 0 < len(v) <= 64),
        min_size=1,
        max_size=30,
    )
)
def test_random_capacity_ceilings_are_judged_as_the_server_judges_them(
    chart: helm_python.Chart, values: list[str]
) -> None:
    charted, checked = _capacity_lines(chart, values)
    assert charted == checked


# --------------------------------------------------------------------------- class names


@pytest.mark.parametrize(("plain", "helm_reads"), [("y", "true"), ("1e3", "1000")])
def test_a_class_name_helm_reads_otherwise_must_be_quoted(
    chart: helm_python.Chart, plain: str, helm_reads: str
) -> None:
    """The chart lists the classes in the conditions, so it must read their names as the
    server does; `policy check` takes them as they are."""
    text = yaml.safe_dump(_policy({"deviceClasses": [{"name": "PLAIN", "allowed": True}]}))
    assert _checked(text.replace("PLAIN", plain)) == []
    assert _chart_problems(chart, text.replace("PLAIN", plain)) == [
        f"site.yaml: spec.dra.deviceClasses[0].name: Helm reads this name as {helm_reads},"
        " not as text: put it in quotes"
    ]
    quoted = text.replace("PLAIN", f"'{plain}'")
    objects = _render(chart, {"policies": {"files": {"site.yaml": quoted}}}, RELEASE, NAMESPACE)
    for configuration in _configurations(objects):
        (entry,) = [
            e for e in configuration["webhooks"] if e["name"] == "site.policies.gpu-share.io"
        ]
        listed = ", ".join(f"'{c}'" for c in sorted([plain, *names.DRA_NVIDIA_CLASSES]))
        assert f"deviceClassName in [{listed}]" in entry["matchConditions"][1]["expression"]


# --------------------------------------------------------------------------- the conditions

_CLASS_NAMES = st.one_of(
    st.sampled_from(
        [
            *names.DRA_NVIDIA_CLASSES,
            "a.example.com",
            "gpu.nvidia.com.example",
            "gpu-nvidia.com",
            "gpu.nvidia.co",
            "z",
            "0gpu",
            "nvidia.com",
            "vfio.gpu.nvidia.com-2",
        ]
    ),
    st.from_regex(r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?(\.[a-z0-9]{1,6}){0,2}", fullmatch=True),
)


@pytest.mark.slow  # thirty renders
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(classes=st.lists(_CLASS_NAMES, unique=True, max_size=6))
def test_the_claim_conditions_are_renders_for_any_classes(
    chart: helm_python.Chart, classes: list[str]
) -> None:
    """Listed or not, NVIDIA's or not, in any order: the chart's conditions are render's."""
    doc = _policy({"deviceClasses": [{"name": c} for c in classes]})
    assert _checked(yaml.safe_dump(doc)) == []
    values = {"policies": {"files": {"site.yaml": doc}}}
    objects = _render(chart, values, RELEASE, NAMESPACE)
    expected = _expected_configurations(objects, values, RELEASE, NAMESPACE)
    for want, have in zip(expected, _configurations(objects), strict=True):
        assert [e["matchConditions"] for e in dh.pod_entries(have)] == [
            e["matchConditions"] for e in dh.pod_entries(want)
        ]
