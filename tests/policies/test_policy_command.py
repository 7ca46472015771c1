"""`manage.py policy export|import|diff` over the YAML documents of policy versions."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from policies.documents import policy_version_create
from policies.models import PolicyVersion, Strategy
from tests.policies.test_documents import strategy_make


def run(*args: str) -> str:
    out = StringIO()
    call_command("policy", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def two_versions(db: None) -> tuple[PolicyVersion, PolicyVersion]:
    adapter = strategy_make("adapter")
    v1 = policy_version_create(strategies=[adapter], author_kind="initial")
    v2 = policy_version_create(
        strategies=[adapter, strategy_make("error_handler")], author_kind="reviewer"
    )
    return v1, v2


def test_export_without_any_version_fails_clearly(db: None) -> None:
    with pytest.raises(CommandError, match="No policy version exists yet"):
        run("export")


def test_export_prints_the_active_document(two_versions: tuple[PolicyVersion, ...]) -> None:
    assert run("export") == two_versions[1].document


def test_export_prints_the_requested_version(two_versions: tuple[PolicyVersion, ...]) -> None:
    assert run("export", "--version", "1") == two_versions[0].document


def test_export_writes_the_document_to_a_file(
    two_versions: tuple[PolicyVersion, ...], tmp_path: Path
) -> None:
    target = tmp_path / "policy.yaml"

    out = run("export", "--output", str(target))

    assert target.read_text(encoding="utf-8") == two_versions[1].document
    assert out == f"wrote v2 to {target}\n"


def test_export_to_a_path_it_cannot_write_fails_clearly(
    two_versions: tuple[PolicyVersion, ...], tmp_path: Path
) -> None:
    target = tmp_path / "no such folder" / "policy.yaml"
    with pytest.raises(CommandError, match=f"Cannot write {target}: No such file or directory"):
        run("export", "--output", str(target))


def test_export_of_a_missing_version_fails(two_versions: tuple[PolicyVersion, ...]) -> None:
    with pytest.raises(CommandError, match="Policy version v9 does not exist"):
        run("export", "--version", "9")


def test_import_makes_the_file_the_active_version(
    two_versions: tuple[PolicyVersion, ...], tmp_path: Path
) -> None:
    source = tmp_path / "policy.yaml"
    source.write_text(
        two_versions[1].document.replace("transform: digits_to_int", "transform: strip"),
        encoding="utf-8",
    )

    out = run("import", str(source))

    active = PolicyVersion.objects.get(is_active=True)
    assert out == "Imported as v3 (active); parent v2.\n"
    assert (active.number, active.author_kind) == (3, "import")
    assert Strategy.objects.get(kind="adapter").branch["transform"] == "strip"


def test_import_of_the_unchanged_document_reports_no_changes(
    two_versions: tuple[PolicyVersion, ...], tmp_path: Path
) -> None:
    source = tmp_path / "policy.yaml"
    source.write_text(run("export"), encoding="utf-8")

    out = run("import", str(source))

    assert out == "No changes: v2 already has this content.\n"
    assert PolicyVersion.objects.count() == 2


def test_import_dry_run_prints_the_diff_and_writes_nothing(
    two_versions: tuple[PolicyVersion, ...], tmp_path: Path
) -> None:
    source = tmp_path / "policy.yaml"
    source.write_text(
        two_versions[1].document.replace("transform: digits_to_int", "transform: strip"),
        encoding="utf-8",
    )

    out = run("import", str(source), "--dry-run")

    assert out.startswith(
        "Dry run, nothing written. Would create v3 (parent v2): 0 added, 0 removed, "
        "1 changed; 0 new and 1 edited strategies.\n--- v2\n+++ v3\n"
    )
    assert "-      transform: digits_to_int\n+      transform: strip\n" in out
    assert PolicyVersion.objects.count() == 2
    assert Strategy.objects.get(kind="adapter").branch["transform"] == "digits_to_int"


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
def test_import_of_an_invalid_file_lists_every_error(
    two_versions: tuple[PolicyVersion, ...], tmp_path: Path, dry_run: list[str]
) -> None:
    source = tmp_path / "policy.yaml"
    source.write_text(
        two_versions[1]
        .document.replace("      transform: digits_to_int\n", "")
        .replace("action: degrade_cache", "action: explode"),
        encoding="utf-8",
    )

    with pytest.raises(CommandError) as caught:
        run("import", str(source), *dry_run)

    assert str(caught.value) == (
        f"{source} is not a valid policy document (2 errors):\n"
        "  scopes[0].error_handlers[0].branch: action must be one of "
        "retry_once, wait_retry, degrade_cache, handover, call_tool\n"
        "  scopes[0].adapters[0].branch: missing 'transform'"
    )
    assert PolicyVersion.objects.count() == 2


def test_import_of_a_missing_file_fails(db: None, tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=r"Cannot read .*absent\.yaml"):
        run("import", str(tmp_path / "absent.yaml"))


def test_diff_prints_the_unified_diff(two_versions: tuple[PolicyVersion, ...]) -> None:
    out = run("diff", "1", "2")

    assert out.startswith("--- v1\n+++ v2\n")
    assert "+  - id: " in out and "+      action: degrade_cache\n" in out


def test_a_version_compared_with_itself_says_there_is_no_difference(
    two_versions: tuple[PolicyVersion, ...],
) -> None:
    assert run("diff", "2", "2") == "No differences between v2 and v2.\n"


def test_diff_json_prints_the_structured_diff(two_versions: tuple[PolicyVersion, ...]) -> None:
    data = json.loads(run("diff", "1", "2", "--json"))

    assert [entry["kind"] for entry in data["added"]] == ["error_handler"]
    assert (data["removed"], data["changed"]) == ([], [])


def test_diff_of_a_missing_version_fails(two_versions: tuple[PolicyVersion, ...]) -> None:
    with pytest.raises(CommandError, match="Policy version v7 does not exist"):
        run("diff", "1", "7")
