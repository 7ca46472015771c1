"""YAML read from people and programs: no aliases, no recursion errors, dumps that read back."""

from __future__ import annotations

import pytest
import yaml

from config.safe_yaml import PlainSafeDumper, yaml_load_plain
from policies.documents import PolicyDocumentError, policy_document_parse


def test_plain_yaml_reads_as_safe_load_does() -> None:
    text = "tool: get_order\nfields: [a, b]\nnested: {x: 1, y: null}\n"
    assert yaml_load_plain(text) == yaml.safe_load(text)


@pytest.mark.parametrize(
    "text",
    [
        "a: &x [1, 2]\nb: *x\n",
        "base: &b {k: 1}\nchild:\n  <<: *b\n  j: 2\n",
        "s: &s {properties: {query: *s}}\n",  # a cycle
    ],
)
def test_an_alias_is_refused_with_its_line(text: str) -> None:
    with pytest.raises(yaml.YAMLError) as caught:
        yaml_load_plain(text)
    assert "are not accepted here" in str(caught.value)
    assert "line" in str(caught.value)


def test_a_document_nested_past_the_parser_is_a_yaml_error_not_a_recursion_error() -> None:
    with pytest.raises(yaml.YAMLError, match="nested too deeply"):
        yaml_load_plain("[" * 5000 + "]" * 5000)


def test_a_value_used_twice_is_dumped_twice_and_reads_back() -> None:
    shared = {"type": "string"}
    data = {"a": shared, "b": shared}
    text = yaml.dump(data, Dumper=PlainSafeDumper)
    assert "&" not in text and "*" not in text
    assert yaml_load_plain(text) == data


def test_a_policy_document_with_an_alias_is_refused() -> None:
    text = "version: 1\nparent: null\nscopes: &s []\nother: *s\n"
    with pytest.raises(PolicyDocumentError) as caught:
        policy_document_parse(text)
    assert "not accepted here" in str(caught.value)
