"""The fast loop's table (tests/support/fast_loop.py) names tests that exist, and keeps the
cases it says it keeps."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import fast_loop

REPO = Path(__file__).resolve().parents[1]


def functions(path: str) -> set[str]:
    """The test functions the file defines at its top level."""
    text = (REPO / path).read_text(encoding="utf-8")
    return set(re.findall(r"^(?:async )?def (test\w+)", text, re.MULTILINE))


@pytest.mark.parametrize("path", sorted({*fast_loop.FILES, *fast_loop.SAMPLED}))
def test_every_test_the_table_names_exists(path: str) -> None:
    named = {f for p, f in fast_loop.named_functions() if p == path}
    assert (REPO / path).is_file(), path
    assert named <= functions(path), sorted(named - functions(path))


def test_every_entry_says_why_and_samples_at_least_every_second_case() -> None:
    for part in fast_loop.FILES.values():
        assert part.why
        assert not (part.fast and part.slow)
    for samples in fast_loop.SAMPLED.values():
        for sample in samples.values():
            assert sample.why
            assert sample.every >= 2


def test_a_sampled_test_keeps_its_first_and_every_kth_case() -> None:
    path, functions_ = next(iter(fast_loop.SAMPLED.items()))
    function, sample = next(iter(functions_.items()))
    ids = [f"{path}::{function}[{i}]" for i in range(2 * sample.every + 1)]
    slow = fast_loop.slow_items(["tests/x.py::test_other", *ids])
    kept = [i for i in ids if i not in slow]
    assert kept == [ids[0], ids[sample.every], ids[2 * sample.every]]


def test_a_file_part_makes_slow_what_it_names_or_all_but_what_it_keeps() -> None:
    for path, part in fast_loop.FILES.items():
        names = [*part.fast, *part.slow, "test_not_named"]
        slow = fast_loop.slow_items(f"{path}::{name}" for name in names)
        if part.slow:
            assert slow == {f"{path}::{name}" for name in part.slow}
        else:
            assert slow == {f"{path}::{name}" for name in names if name not in part.fast}


def test_a_file_is_wholly_slow_by_the_table_or_its_own_module_mark() -> None:
    for path, part in fast_loop.FILES.items():
        assert fast_loop.wholly_slow(path, "") == (not part.fast and not part.slow), path
    marked = "import pytest\n\npytestmark = pytest.mark.slow\n\n\ndef test_x() -> None: ...\n"
    assert fast_loop.wholly_slow("tests/x.py", marked)
    # A mark on one test, or a module mark among others, leaves the file collected.
    assert not fast_loop.wholly_slow("tests/x.py", "@pytest.mark.slow\ndef test_x() -> None: ...\n")
    assert not fast_loop.wholly_slow("tests/x.py", "pytestmark = [pytest.mark.slow, other]\n")


@pytest.mark.parametrize(
    "path", ["tests/server/test_compiled_core.py", "tests/engine/test_properties.py"]
)
def test_the_modules_marked_slow_as_a_whole_are_read_as_such(path: str) -> None:
    assert fast_loop.wholly_slow(path, (REPO / path).read_text(encoding="utf-8"))
