"""SWE instances: the reader, the SWE-bench Verified repository rule, (repo, commit) dedup."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from curation.swe.instances import (
    SWE_BENCH_VERIFIED_REPOS,
    dedup_repo_commit,
    drop_verified_repos,
    load_repo_list,
    read_swe_instances,
)
from schemas.tables import contract_for

PATCH = """diff --git a/pkg/mod.py b/pkg/mod.py
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,2 +1,2 @@
 def f():
-    return 1
+    return 2
"""


def record(instance_id: str, repo: str = "acme/calc", commit: str = "a" * 40, **extra) -> dict:
    return {
        "instance_id": instance_id,
        "repo": repo,
        "base_commit": commit,
        "problem_statement": f"issue {instance_id}",
        "patch": PATCH,
        "test_patch": "",
        "FAIL_TO_PASS": json.dumps(["tests/test_mod.py::test_f"]),
        "PASS_TO_PASS": [],
        **extra,
    }


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_reader_builds_contract_rows_and_keeps_extra_fields(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "swe_gym.jsonl", [record("x-1", created_at="2024-01-01"), record("x-2")]
    )
    read = read_swe_instances([path])
    df = read.frame
    contract_for("swe_instances").validate(df.to_arrow().schema, "t")
    assert df["source"].to_list() == ["swe_gym", "swe_gym"]
    assert df["source_id"].to_list() == ["x-1", "x-2"]
    assert df["uid"].n_unique() == 2
    assert df["FAIL_TO_PASS"][0].to_list() == ["tests/test_mod.py::test_f"]  # JSON text decoded
    assert json.loads(df["metadata"][0]) == {"created_at": "2024-01-01"}
    assert read.bad_rows == []


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"repo": "no-slash"}, "repo 'no-slash' is not owner/name"),
        ({"base_commit": "main"}, "base_commit 'main' is not a git commit hash"),
        ({"patch": "just text"}, "patch is not a unified diff"),
        ({"problem_statement": ""}, "field 'problem_statement' is missing"),
        ({"FAIL_TO_PASS": "[not json"}, "field 'FAIL_TO_PASS' is text but not a JSON list"),
        ({"instance_id": "x-1"}, "instance_id 'x-1' repeats"),
    ],
)
def test_bad_rows_are_named_by_file_and_line(tmp_path: Path, bad: dict, message: str) -> None:
    path = write_jsonl(tmp_path / "src.jsonl", [record("x-1"), {**record("x-2"), **bad}])
    with pytest.raises(ValueError, match=rf"src.jsonl:2: {message}"):
        read_swe_instances([path])
    skipped = read_swe_instances([path], on_error="skip")
    assert skipped.frame["source_id"].to_list() == ["x-1"]
    assert [(b.line, message in b.error) for b in skipped.bad_rows] == [(2, True)]


def test_invalid_json_lines(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "src.jsonl", [record("x-1"), "{not json"])
    with pytest.raises(ValueError, match=r"src.jsonl:2: invalid JSON"):
        read_swe_instances([path])
    assert read_swe_instances([path], on_error="skip").bad_rows[0].line == 2


def frame(rows: list[tuple[str, str, str]]) -> pl.DataFrame:
    """(source, repo, commit) rows as a minimal instances frame."""
    return pl.DataFrame(
        {
            "uid": [f"u{i}" for i in range(len(rows))],
            "source": [r[0] for r in rows],
            "repo": [r[1] for r in rows],
            "base_commit": [r[2] for r in rows],
        }
    )


def test_every_instance_of_a_verified_repository_is_dropped(tmp_path: Path) -> None:
    df = frame(
        [
            ("a", "django/django", "1" * 40),
            ("a", "Django/Django", "2" * 40),
            ("b", "sympy/sympy", "3" * 40),
            ("b", "acme/calc", "4" * 40),
            ("b", "django/channels", "5" * 40),
        ]
    )
    result = drop_verified_repos(df)
    assert result.kept["uid"].to_list() == ["u3", "u4"]
    assert set(result.dropped["reason"]) == {"verified_repo"}
    assert result.stats["dropped_by_repo"] == {"django/django": 2, "sympy/sympy": 1}
    listed = tmp_path / "verified.txt"
    listed.write_text("# SWE-bench Verified\nhttps://github.com/acme/calc.git\n")
    assert drop_verified_repos(df, verified_repos=listed).dropped["uid"].to_list() == ["u3"]
    verified_jsonl = write_jsonl(tmp_path / "verified.jsonl", [{"repo": "sympy/sympy"}])
    assert load_repo_list(verified_jsonl) == {"sympy/sympy"}
    assert len(load_repo_list(SWE_BENCH_VERIFIED_REPOS)) == 12
    with pytest.raises(ValueError, match="is not a file"):
        drop_verified_repos(df, verified_repos=str(tmp_path / "missing.txt"))


def test_dedup_across_sources_on_repo_and_commit() -> None:
    df = frame(
        [
            ("swe_gym", "acme/calc", "a" * 40),
            ("swe_gym", "acme/calc", "a" * 40),  # another issue at the same commit: stays
            ("swe_rebench", "ACME/calc", "A" * 40),  # the same (repo, commit) elsewhere
            ("swe_rebench", "acme/calc", "b" * 40),
            ("swe_smith", "acme/calc", "b" * 40),
        ]
    )
    result = dedup_repo_commit(df)
    assert result.kept["uid"].to_list() == ["u0", "u1", "u3"]
    dropped = {r["uid"]: r for r in result.dropped.iter_rows(named=True)}
    assert dropped["u2"]["duplicate_of"] == "u0" and dropped["u2"]["kept_source"] == "swe_gym"
    assert dropped["u4"]["kept_source"] == "swe_rebench"
    assert set(result.dropped["reason"]) == {"duplicate_repo_commit"}
    preferred = dedup_repo_commit(df, source_priority=["swe_smith", "swe_rebench"])
    assert preferred.kept["uid"].to_list() == ["u2", "u4"]
