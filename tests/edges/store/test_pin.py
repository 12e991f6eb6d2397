"""A config.pbtxt pinned to one version (healer/edges/store/pin.py): only the top-level version_policy is
replaced, a pin of a pin is the same pin, and a file that does not close is refused."""

from __future__ import annotations

import pytest

from healer.edges.store import PIN_HEADER, leaves_out, pin_text, pinned_version
from tests.conftest import EXAMPLES


def test_the_example_config_pinned_keeps_everything_but_its_version_policy() -> None:
    text = (EXAMPLES / "model_repository" / "linear_scorer" / "config.pbtxt").read_text()
    pinned = pin_text(text, "1")
    assert pinned.startswith(f"{PIN_HEADER}1\n")
    assert pinned.rstrip().endswith("version_policy: { specific: { versions: [ 1 ] } }")
    assert "latest" not in pinned
    for line in text.splitlines():
        if "version_policy" not in line or line.lstrip().startswith("#"):
            assert line in pinned
    assert pinned_version(pinned) == "1"
    assert pinned_version(text) is None


def test_a_pin_of_a_pin_is_the_same_pin_and_a_new_version_replaces_it() -> None:
    text = (EXAMPLES / "model_repository" / "linear_scorer" / "config.pbtxt").read_text()
    once = pin_text(text, "1")
    assert pin_text(once, "1") == once
    moved = pin_text(once, "3")
    assert moved == pin_text(text, "3")
    assert moved.count("version_policy:") == 1 and moved.count(PIN_HEADER) == 1


def test_only_the_top_level_field_is_replaced() -> None:
    text = (
        'name: "m"  # version_policy in a comment stays\n'
        'parameters { key: "version_policy" value: { string_value: "} {" } }\n'
        "version_policy < all {} >\n"
        "sub { version_policy: { latest { num_versions: 2 } } }\n"
    )
    pinned = pin_text(text, "2")
    assert "# version_policy in a comment stays" in pinned
    assert 'parameters { key: "version_policy" value: { string_value: "} {" } }' in pinned
    assert "sub { version_policy: { latest { num_versions: 2 } } }" in pinned
    assert "all {}" not in pinned
    assert pinned.rstrip().endswith("version_policy: { specific: { versions: [ 2 ] } }")


@pytest.mark.parametrize("broken", ["input [ { name: 'x' }", 'name: "open', "a } b"])
def test_a_file_that_does_not_close_is_refused(broken: str) -> None:
    with pytest.raises(ValueError):
        pin_text(broken, "1")


def test_a_version_must_be_a_number() -> None:
    with pytest.raises(ValueError, match="positive integer"):
        pin_text('name: "m"\n', "../1")


@pytest.mark.parametrize(
    ("text", "left_out"),
    [
        ('name: "m"\nversion_policy: { specific: { versions: [ 1, 3 ] } }\n', True),
        ('name: "m"\nversion_policy { specific { versions: 1 versions: 3 } }  # not 2\n', True),
        ('name: "m"\nversion_policy: { specific: { versions: [ 2 ] } }\n', False),
        ('name: "m"\nversion_policy: { latest: { num_versions: 1 } }\n', False),
        ('name: "m"\nversion_policy: { all: {} }\n', False),
        ('name: "m"\n', False),  # latest 1: whatever the store's highest version is
        ("version_policy: { specific: { versions: [ 1 ] }", False),  # does not read
        ("sub { version_policy: { specific: { versions: [ 1 ] } } }\n", False),  # not the top-level field
    ],
)
def test_a_config_leaves_a_version_out_only_when_its_policy_names_the_others(text: str, left_out: bool) -> None:
    assert leaves_out(text, {"2"}) is left_out
