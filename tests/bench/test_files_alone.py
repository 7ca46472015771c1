"""The each-file-alone check's bookkeeping (running every file is far too slow for a test):
which files it finds, how one file's pytest run is read, and what the report says."""

from __future__ import annotations

import json
from pathlib import Path

from bench.files_alone import FileRun, find_test_files, run_file, write_report


def test_the_files_are_every_test_module_under_the_folders_asked_for() -> None:
    files = find_test_files(["tests/bench", "tests/test_layering.py"])
    assert "tests/bench/test_files_alone.py" in files
    assert "tests/test_layering.py" in files
    assert files == sorted(files)
    assert all(Path(f).name.startswith("test_") for f in files)
    assert not any(f.startswith("tests/agents/") for f in files)
    assert len(find_test_files([])) > len(files)


def test_a_file_that_passes_alone_and_one_that_does_not() -> None:
    passed = run_file("tests/test_layering.py", create_db=False)
    assert passed.status == "passed", passed.summary
    assert "passed" in passed.summary
    # A test id that does not exist: pytest's own error is what the report shows.
    failed = run_file("tests/test_layering.py::test_no_such_test", create_db=False)
    assert failed.status == "failed"
    assert "no_such_test" in failed.summary or "not found" in failed.summary


def test_the_report_lists_every_file_and_counts_the_failures(tmp_path: Path) -> None:
    runs = [
        FileRun("tests/a/test_x.py", "passed", 1.5, "3 passed in 1.2s"),
        FileRun("tests/a/test_y.py", "failed", 2.0, "1 failed | 2 passed; FAILED t::y"),
    ]
    report = write_report(runs, "python -m bench.files_alone", tmp_path)
    text = report.read_text()
    assert "failed alone: 1" in text
    assert "| tests/a/test_y.py | failed | 2.0 | 1 failed / 2 passed; FAILED t::y |" in text
    data = json.loads((tmp_path / "files-alone-latest.json").read_text())
    assert (data["files"], data["failed"], data["seconds"]) == (2, 1, 3.5)
    assert [run["status"] for run in data["runs"]] == ["passed", "failed"]


def test_a_failure_is_reported_with_its_assertion(tmp_path: Path) -> None:
    failing = tmp_path / "test_failing.py"
    failing.write_text("def test_sum():\n    assert 1 + 1 == 3, 'arithmetic moved'\n")
    run = run_file(str(failing), create_db=False)
    assert run.status == "failed"
    assert "1 failed" in run.summary
    assert "AssertionError: arithmetic moved" in run.summary
