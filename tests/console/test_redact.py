"""The masking of secrets in log lines: the quick test that lets most lines
through unchanged (every access line names its key by public id) never lets a
secret through."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from console.kernel.redact import _PATTERNS, REDACTED, redact

_PIECES = ["sk-", "pat_", "_", "-", " ", "=", "/invite/", "abc123", "XYZ", "0123456789", "q"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=24).map("".join))
def test_a_line_is_masked_exactly_as_by_every_pattern_whatever_it_holds(text):
    expected = text
    for pattern, replacement in _PATTERNS:
        expected = pattern.sub(replacement, expected)
    assert redact(text) == expected


def test_an_access_line_naming_a_key_by_its_public_id_is_left_alone():
    line = "INFO gateway_bridge.access: openai 200 key=sk-pt3t42t2ev model=m pat_abc"
    assert redact(line) is line


def test_a_secret_after_a_public_id_on_the_same_line_is_masked():
    line = "key=sk-pt3t42t2ev user=sk-abcdef12_ZZZZZZZZZZZZZZ"
    assert redact(line) == f"key=sk-pt3t42t2ev user=sk-abcdef12_{REDACTED}"
