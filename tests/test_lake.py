"""The lake: commits, pinned vs latest reads, schemas, atomicity under kill -9, concurrency."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import polars as pl
import pytest

from lake.catalog import Lake, LakeBusyError, LakeError
from schemas.tables import SchemaError

ROOT = Path(__file__).resolve().parents[1]


def prompts(n: int, start: int = 0) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "id": [f"id{i}" for i in range(start, start + n)],
            "source": ["t"] * n,
            "source_id": [str(i) for i in range(start, start + n)],
            "domain": ["math"] * n,
            "problem": [f"What is {i} + {i}?" for i in range(start, start + n)],
            "answer": [str(2 * i) for i in range(start, start + n)],
            "metadata": ["{}"] * n,
        }
    )


def test_pinned_and_latest_reads(lake: Lake) -> None:
    v1 = lake.commit("p", prompts(3), kind="prompts", producer="test")
    v2 = lake.commit("p", prompts(5), kind="prompts", parents=[v1.ref], producer="test")
    assert (v1.version, v2.version) == (1, 2)
    assert lake.read("p").num_rows == 5
    assert lake.read("p@1").num_rows == 3
    assert lake.sql('SELECT count(*) FROM "p@1"').fetchall()[0] == (3,)
    assert lake.sql("SELECT count(*) FROM p").fetchall()[0] == (5,)
    assert lake.scan("p@1").select(pl.len()).collect().item() == 3
    assert lake.resolve("p").parents == ["p@1"]
    rows = lake.sql("SELECT name, version, rows FROM versions ORDER BY version").fetchall()
    assert rows == [("p", 1, 3), ("p", 2, 5)]
    with pytest.raises(LakeError, match="no version 7"):
        lake.resolve("p@7")
    with pytest.raises(LakeError, match="no table 'q'"):
        lake.resolve("q")


def test_content_hash_is_over_the_files_and_detects_tampering(lake: Lake) -> None:
    v1 = lake.commit("p", prompts(10), kind="prompts")
    again = lake.commit("p", prompts(10), kind="prompts")
    assert v1.content_hash == again.content_hash  # same data, same bytes, same hash
    assert lake.verify_hash("p@1").content_hash == v1.content_hash
    (lake.path / v1.files[0]).write_bytes(b"not parquet")
    with pytest.raises(LakeError, match="does not match"):
        lake.verify_hash("p@1")


def test_append_mode_reads_the_union_of_increments(lake: Lake) -> None:
    drops = pl.DataFrame(
        {
            "table": ["p"],
            "version": [1],
            "row_id": ["a"],
            "step": ["s"],
            "reason": ["r"],
            "detail": ["{}"],
        }
    )
    lake.commit("drops", drops, kind="drops", mode="append")
    lake.commit(
        "drops", drops.with_columns(pl.lit("b").alias("row_id")), kind="drops", mode="append"
    )
    assert lake.read("drops@1").num_rows == 1
    assert lake.read("drops").num_rows == 2
    assert lake.sql("SELECT count(*) FROM drops").fetchall()[0] == (2,)
    with pytest.raises(LakeError, match="append-mode"):
        lake.commit("drops", drops, kind="drops")


def test_schema_errors_name_the_column(lake: Lake) -> None:
    with pytest.raises(SchemaError, match="missing required column 'problem'"):
        lake.commit("p", prompts(2).drop("problem"), kind="prompts")
    with pytest.raises(SchemaError, match="column 'answer' has type int32, expected string"):
        lake.commit("p", prompts(2).with_columns(pl.lit(1).alias("answer")), kind="prompts")
    with pytest.raises(SchemaError, match="column 'id' must not be null, but row 1"):
        lake.commit("p", prompts(2).with_columns(pl.Series("id", ["a", None])), kind="prompts")
    with pytest.raises(SchemaError, match="unknown table kind"):
        lake.commit("p", prompts(2), kind="nonsense")
    lake.commit("p", prompts(2), kind="prompts")
    with pytest.raises(SchemaError, match="is of kind 'prompts'"):
        lake.commit("p", prompts(2), kind="generic")
    assert [v.version for v in lake.versions("p")] == [1]
    assert not any(d.name.startswith("_staging") for d in (lake.path / "tables" / "p").iterdir())


def test_empty_and_bad_names_are_refused(lake: Lake) -> None:
    with pytest.raises(LakeError, match="empty version"):
        lake.commit("p", prompts(0), kind="prompts")
    with pytest.raises(LakeError, match="invalid table name"):
        lake.commit("bad-name", prompts(1), kind="prompts")
    assert lake.tables() == []


def test_streamed_commit_of_many_batches(lake: Lake) -> None:
    batches = (prompts(1000, start=i * 1000).to_arrow().to_batches()[0] for i in range(30))
    info = lake.commit("big", batches, kind="prompts")
    assert info.rows == 30_000
    assert lake.sql("SELECT count(DISTINCT id) FROM big").fetchall()[0] == (30_000,)


WRITER = textwrap.dedent(
    """
    import sys
    import polars as pl
    from lake.catalog import Lake
    lake = Lake(sys.argv[1])
    n = int(sys.argv[2])
    frame = pl.DataFrame({"id": [f"r{i}" for i in range(n)], "source": ["s"] * n,
        "source_id": ["0"] * n, "domain": ["math"] * n, "problem": ["x" * 50] * n,
        "answer": ["1"] * n, "metadata": ["{}"] * n})
    for _ in range(int(sys.argv[3])):
        info = lake.commit("t", frame.to_arrow().to_batches(max_chunksize=5000), kind="prompts")
        print("COMMITTED", info.version, flush=True)
    """
)


def _writer(lake_path: Path, rows: int, commits: int = 1, pause: str | None = None, **env: str):
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    if pause:
        environ["CASCADE_TEST_PAUSE_AT"] = pause
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(lake_path), str(rows), str(commits)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ,
    )


def _assert_consistent(lake: Lake) -> None:
    for info in lake._rows():
        for f in info.files:
            assert (lake.path / f).exists(), f"catalog row {info.ref} points at missing {f}"
        assert lake.read(info.ref).num_rows == info.rows
        lake.verify_hash(info.ref)


@pytest.mark.parametrize("point", ["mid_write", "before_rename", "after_rename", "after_catalog"])
def test_kill_9_mid_commit_leaves_old_or_new_version(tmp_path: Path, point: str) -> None:
    lake = Lake(tmp_path / "lake")
    lake.commit("t", prompts(7), kind="prompts")
    proc = _writer(lake.path, 20_000, pause=point)
    line = proc.stdout.readline()
    assert line.startswith(f"PAUSED {point}"), proc.stderr.read()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    versions = [v.version for v in lake.versions("t")]
    # Killed after the catalog row was written: the new version is complete and visible.
    assert versions == ([1, 2] if point == "after_catalog" else [1])
    _assert_consistent(lake)
    assert lake.read("t@1").num_rows == 7
    # The next commit succeeds and clears what the killed writer left behind.
    info = lake.commit("t", prompts(3), kind="prompts")
    assert info.version == versions[-1] + 1
    referenced = {Path(f).parts[2] for v in lake.versions("t") for f in v.files}
    assert {d.name for d in (lake.path / "tables" / "t").iterdir()} == referenced
    _assert_consistent(lake)


def test_kill_9_at_random_moments(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake")
    lake.commit("t", prompts(7), kind="prompts")
    for delay in (0.3, 0.6, 0.9, 1.2, 1.5):
        proc = _writer(lake.path, 50_000, commits=3)
        time.sleep(delay)
        proc.kill()
        proc.wait()
        _assert_consistent(lake)
        assert lake.read("t@1").num_rows == 7


def test_concurrent_committers_all_land(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake")
    procs = [_writer(lake.path, 2000, commits=4) for _ in range(3)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert out.count("COMMITTED") == 4
    assert [v.version for v in lake.versions("t")] == list(range(1, 13))
    _assert_consistent(lake)


def test_busy_lake_gives_a_clear_error(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake")
    proc = _writer(lake.path, 100, pause="after_rename")
    try:
        assert proc.stdout.readline().startswith("PAUSED")
        impatient = Lake(lake.path, lock_timeout=0.2)
        with pytest.raises(LakeBusyError, match=rf"is busy: another process \(pid {proc.pid}\)"):
            impatient.commit("t", prompts(1), kind="prompts")
        # Readers are not blocked by a committer.
        assert impatient.tables() == []
    finally:
        proc.kill()
        proc.wait()
