"""The model-call CPU benchmark measures real calls through the app's OpenAI backend."""

from __future__ import annotations

import re

import pytest

from bench.llm_client_cpu import main


def test_it_times_calls_one_at_a_time_and_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--calls", "4", "--repeats", "3", "--at-once", "2"]) == 0
    out = capsys.readouterr().out
    figures = re.findall(r"client CPU per model call, (.+?): median ([\d.]+) ms \((.+)\)", out)
    assert [label for label, _, _ in figures] == ["one at a time", "2 at once"]
    for _, median, each in figures:
        assert float(median) > 0
        assert all(float(value) > 0 for value in each.split(", "))
