"""The lake on DuckLake: versions, hashes over every file, atomicity under kill -9,
concurrency (readers never wait, writers retry), plain DuckDB clients, migration."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lake.catalog import Lake, LakeBusyError, LakeError, TableWrite
from schemas.tables import SchemaError

ROOT = Path(__file__).resolve().parents[1]


def prompts(n: int, start: int = 0) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "uid": [f"t:{i}" for i in range(start, start + n)],
            "id": [f"id{i}" for i in range(start, start + n)],
            "source": ["t"] * n,
            "source_id": [str(i) for i in range(start, start + n)],
            "domain": ["math"] * n,
            "problem": [f"What is {i} + {i}?" for i in range(start, start + n)],
            "answer": [str(2 * i) for i in range(start, start + n)],
            "metadata": ["{}"] * n,
        }
    )


def drops(uids: list[str], output_version: int = 1) -> pl.DataFrame:
    n = len(uids)
    return pl.DataFrame(
        {
            "build_id": ["b"] * n,
            "output_table": ["p"] * n,
            "output_version": [output_version] * n,
            "input_table": ["src"] * n,
            "input_version": [1] * n,
            "uid": uids,
            "step": ["s"] * n,
            "reason": ["r"] * n,
            "detail": ["{}"] * n,
        }
    )


def test_pinned_and_latest_reads(lake: Lake) -> None:
    v1 = lake.commit("p", prompts(3), kind="prompts", producer="test")
    v2 = lake.commit("p", prompts(5), kind="prompts", parents=[v1.ref], producer="test")
    assert (v1.version, v2.version) == (1, 2)
    assert v2.snapshot_id > v1.snapshot_id
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


def test_data_lives_in_ducklake_parquet_files(lake: Lake) -> None:
    info = lake.commit("p", prompts(4), kind="prompts")
    files = lake.files(info.ref)
    assert len(files) == 1 and files[0].endswith(".parquet")
    assert pq.read_table(files[0]).num_rows == 4
    assert (lake.path / "catalog.sqlite").is_file()
    changes = lake.con.sql(
        "SELECT changes FROM lake.snapshots() ORDER BY snapshot_id DESC"
    ).fetchone()
    assert "main.p" in json.dumps(changes[0], default=str)


def test_content_hash_covers_every_file_a_version_reads(lake: Lake) -> None:
    v1 = lake.commit("p", prompts(10), kind="prompts")
    again = lake.commit("p", prompts(10), kind="prompts")
    assert v1.content_hash == again.content_hash  # same data, same bytes, same hash
    assert lake.verify_hash("p@1").content_hash == v1.content_hash
    # Append mode: version 2 reads version 1's file too, so tampering with that older file
    # must make version 2's check fail, not only version 1's.
    d1 = lake.commit("drops", drops(["a"]), kind="drops", mode="append")
    d2 = lake.commit("drops", drops(["b"]), kind="drops", mode="append")
    assert d2.content_hash != d1.content_hash
    lake.verify_hash("drops@2")
    older = lake.files("drops@1")[0]
    table = pq.read_table(older)
    pq.write_table(table.set_column(5, "uid", pa.array(["z"])), older)
    with pytest.raises(LakeError, match="does not match"):
        lake.verify_hash("drops@2")
    Path(lake.files("p@1")[0]).write_bytes(b"not parquet")
    with pytest.raises(LakeError, match="does not match"):
        lake.verify_hash("p@1")


def test_append_mode_reads_the_union_and_counts_agree(lake: Lake) -> None:
    lake.commit("drops", drops(["a"]), kind="drops", mode="append")
    lake.commit("drops", drops(["b", "c"]), kind="drops", mode="append")
    assert lake.read("drops@1").num_rows == 1
    assert lake.read("drops").num_rows == 3
    assert lake.resolve("drops").rows == 3  # what `lake ls` shows
    assert lake.sql('SELECT count(*) FROM "drops@2"').fetchall()[0] == (3,)
    with pytest.raises(LakeError, match="append-mode"):
        lake.commit("drops", drops(["d"]), kind="drops")


def test_several_tables_commit_in_one_transaction(lake: Lake) -> None:
    out, dropped = lake.commit_many(
        [
            TableWrite("p", prompts(2), kind="prompts"),
            TableWrite("drops", drops(["t:9"]), kind="drops", mode="append"),
        ],
        build_id="build-1",
    )
    assert out.snapshot_id == dropped.snapshot_id
    assert out.build_id == dropped.build_id == "build-1"
    # A failing write anywhere in the list commits nothing.
    with pytest.raises(SchemaError):
        lake.commit_many(
            [
                TableWrite("p", prompts(3), kind="prompts"),
                TableWrite("drops", prompts(1), kind="drops", mode="append"),
            ]
        )
    assert [v.version for v in lake.versions("p")] == [1]
    assert lake.read("drops").num_rows == 1


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
    # Failed commits leave no files behind.
    assert len(list((Path(lake.data_path) / "main" / "p").iterdir())) == 1


def test_empty_bad_and_reserved_names_are_refused(lake: Lake) -> None:
    with pytest.raises(LakeError, match="empty version"):
        lake.commit("p", prompts(0), kind="prompts")
    with pytest.raises(LakeError, match="invalid table name"):
        lake.commit("bad-name", prompts(1), kind="prompts")
    with pytest.raises(LakeError, match="reserved"):
        lake.commit("cascade_versions", prompts(1), kind="prompts")
    assert lake.tables() == []


def test_streamed_commit_of_many_batches(lake: Lake) -> None:
    batches = (prompts(1000, start=i * 1000).to_arrow().to_batches()[0] for i in range(30))
    info = lake.commit("big", batches, kind="prompts")
    assert info.rows == 30_000
    assert lake.sql("SELECT count(DISTINCT id) FROM big").fetchall()[0] == (30_000,)


def test_missing_and_old_format_lakes_get_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(LakeError, match="no lake at"):
        Lake(tmp_path / "nowhere", create=False)
    assert not (tmp_path / "nowhere").exists()
    old = tmp_path / "old"
    old.mkdir()
    duckdb.connect(str(old / "catalog.duckdb")).close()
    with pytest.raises(LakeError, match="cascade lake migrate"):
        Lake(old)


def test_a_plain_duckdb_client_opens_the_lake_and_time_travels(lake: Lake) -> None:
    v1 = lake.commit("p", prompts(3), kind="prompts")
    lake.commit("p", prompts(7), kind="prompts")
    script = ";\n".join(lake.attach_statements()) + ";\nUSE lake;"
    code = textwrap.dedent(
        f"""
        import duckdb, sys
        con = duckdb.connect()
        for statement in sys.stdin.read().split(";\\n"):
            if statement.strip():
                con.execute(statement)
        print(con.sql("SELECT count(*) FROM p").fetchone()[0])
        print(con.sql("SELECT count(*) FROM p AT (VERSION => {v1.snapshot_id})").fetchone()[0])
        print(con.sql("SELECT max(version) FROM cascade_versions WHERE name = 'p'").fetchone()[0])
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=script, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["7", "3", "2"]


# -- processes: kill -9, readers beside a writer, racing writers --------------------------------

WRITER = textwrap.dedent(
    """
    import sys
    import polars as pl
    from lake.catalog import Lake
    lake = Lake(sys.argv[1])
    n = int(sys.argv[2])
    frame = pl.DataFrame({"uid": [f"r{i}" for i in range(n)], "id": [f"r{i}" for i in range(n)],
        "source": ["s"] * n, "source_id": ["0"] * n, "domain": ["math"] * n,
        "problem": ["x" * 50] * n, "answer": ["1"] * n, "metadata": ["{}"] * n})
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
        assert lake.read(info.ref).num_rows == info.rows
        lake.verify_hash(info.ref)


@pytest.mark.parametrize("point", ["mid_write", "before_commit", "in_transaction", "after_commit"])
def test_kill_9_mid_commit_leaves_old_or_new_version(tmp_path: Path, point: str) -> None:
    lake = Lake(tmp_path / "lake")
    lake.commit("t", prompts(7), kind="prompts")
    proc = _writer(lake.path, 20_000, pause=point)
    line = proc.stdout.readline()
    assert line.startswith(f"PAUSED {point}"), proc.stderr.read()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    fresh = Lake(lake.path)
    versions = [v.version for v in fresh.versions("t")]
    # Killed after COMMIT: the new version is complete and visible; before, it never was.
    assert versions == ([1, 2] if point == "after_commit" else [1])
    _assert_consistent(fresh)
    assert fresh.read("t@1").num_rows == 7
    info = fresh.commit("t", prompts(3), kind="prompts")
    assert info.version == versions[-1] + 1
    # Files the killed writer left are invisible; gc removes them.
    table_dir = Path(fresh.data_path) / "main" / "t"
    registered = {f for v in fresh.versions("t") for f in fresh.files(v.ref)}
    fresh.remove_orphans(older_than=timedelta(0))
    assert {str(p) for p in table_dir.iterdir()} == registered
    _assert_consistent(fresh)


def test_kill_9_at_random_moments(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake")
    lake.commit("t", prompts(7), kind="prompts")
    for delay in (0.5, 1.0, 1.5, 2.0, 2.5):
        proc = _writer(lake.path, 50_000, commits=3)
        time.sleep(delay)
        proc.kill()
        proc.wait()
        fresh = Lake(lake.path)
        _assert_consistent(fresh)
        assert fresh.read("t@1").num_rows == 7


def test_the_next_commit_deletes_what_killed_writers_left_and_spares_a_running_one(
    tmp_path: Path,
) -> None:
    lake = Lake(tmp_path / "lake")
    lake.commit("t", prompts(7), kind="prompts")
    table_dir = Path(lake.data_path) / "main" / "t"
    before = set(table_dir.iterdir())
    # killed mid-write: as soon as its first data file is on disk
    proc = _writer(lake.path, 200_000)
    deadline = time.monotonic() + 120
    while set(table_dir.iterdir()) == before and proc.poll() is None:
        assert time.monotonic() < deadline, "the writer wrote no file"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # killed with every file written, before registering them
    proc = _writer(lake.path, 20_000, pause="before_commit")
    assert proc.stdout.readline().startswith("PAUSED"), proc.stderr.read()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed = set(table_dir.iterdir()) - before - {Path(f) for f in _registered(lake)}
    assert killed, "the killed writers left no orphans to collect"
    # a writer in flight: its files are written, it is stopped before registering them
    running = _writer(lake.path, 1000, pause="before_commit", CASCADE_TEST_PAUSE_SECONDS="6")
    try:
        assert running.stdout.readline().startswith("PAUSED"), running.stderr.read()
        running.send_signal(signal.SIGSTOP)
        in_flight = set(table_dir.iterdir()) - before - killed
        assert in_flight
        fresh = Lake(lake.path)
        committed = fresh.commit("t", prompts(3), kind="prompts")
        assert not killed & set(table_dir.iterdir()), "the killed writers' files are still there"
        assert in_flight <= set(table_dir.iterdir()), "a running writer's files were deleted"
        running.send_signal(signal.SIGCONT)
        out, err = running.communicate(timeout=120)
    finally:
        running.kill()
        running.wait()
    assert running.returncode == 0, err
    assert f"COMMITTED {committed.version + 1}" in out  # it landed on top, with its files
    fresh = Lake(lake.path)
    assert set(table_dir.iterdir()) == {Path(f) for f in _registered(fresh)}
    _assert_consistent(fresh)
    assert fresh.read("t@1").num_rows == 7
    assert list((lake.path / "writers" / "t").iterdir()) == []  # no lease left behind


def _registered(lake: Lake) -> set[str]:
    return {f for v in lake.versions("t") for f in lake.files(v.ref)}


def test_concurrent_committers_all_land(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake")
    procs = [_writer(lake.path, 2000, commits=4) for _ in range(3)]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert out.count("COMMITTED") == 4
    assert [v.version for v in lake.versions("t")] == list(range(1, 13))
    _assert_consistent(lake)


SQL = [sys.executable, "-c", "from cli.main import main; main()"]


@pytest.mark.parametrize("point", ["mid_write", "in_transaction"])
def test_readers_never_wait_for_a_writer(tmp_path: Path, point: str) -> None:
    lake = Lake(tmp_path / "lake")
    lake.commit("t", prompts(7), kind="prompts")
    proc = _writer(lake.path, 20_000, pause=point, CASCADE_TEST_PAUSE_SECONDS="120")
    try:
        assert proc.stdout.readline().startswith(f"PAUSED {point}")
        started = time.monotonic()
        reader = subprocess.run(
            [
                *SQL,
                "--lake",
                str(lake.path),
                "sql",
                "SELECT count(*) AS n FROM t",
                "--format",
                "csv",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=100,
        )
        waited = time.monotonic() - started
        assert reader.returncode == 0, reader.stderr
        assert reader.stdout.split() == ["n", "7"]  # the last committed snapshot
        assert proc.poll() is None, "the writer must still be mid-commit"
        print(f"reader answered in {waited:.2f}s while the writer was paused at {point}")
    finally:
        proc.kill()
        proc.wait()


def test_racing_writers_get_distinct_versions(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake")
    lake.commit("t", prompts(1), kind="prompts")
    slow = _writer(lake.path, 100, pause="in_transaction", CASCADE_TEST_PAUSE_SECONDS="3")
    try:
        assert slow.stdout.readline().startswith("PAUSED")
        fast = lake.commit("t", prompts(2), kind="prompts")  # lands while the other waits
        out, err = slow.communicate(timeout=120)
        assert slow.returncode == 0, err
    finally:
        slow.kill()
    assert fast.version == 2
    assert "COMMITTED 3" in out  # the paused writer retried on top of version 2
    _assert_consistent(Lake(lake.path))


def test_a_busy_catalog_gives_one_sentence_after_retrying(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake")
    lake.commit("t", prompts(1), kind="prompts")
    # Another process holds the catalog's write lock (SQLite locks are per process).
    hold = (
        "import sqlite3, sys, time; db = sqlite3.connect(sys.argv[1]); "
        "db.execute('BEGIN IMMEDIATE'); print('HELD', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(lake.path / "catalog.sqlite")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "HELD"
        impatient = Lake(lake.path, busy_timeout=1.0)
        with pytest.raises(LakeBusyError, match=r"is busy: .* try again"):
            impatient.commit("t", prompts(2), kind="prompts")
        assert impatient.read("t").num_rows == 1  # reading still works
    finally:
        holder.kill()
        holder.wait()
    assert Lake(lake.path).commit("t", prompts(2), kind="prompts").version == 2


def test_migrate_an_old_format_lake(tmp_path: Path) -> None:
    from lake.migrate import migrate_lake

    old = tmp_path / "old"
    (old / "tables" / "p" / "v1-a").mkdir(parents=True)
    (old / "tables" / "drops" / "v1-b").mkdir(parents=True)
    pq.write_table(prompts(3).drop("uid").to_arrow(), old / "tables/p/v1-a/part-00000.parquet")
    old_drops = pa.table(
        {
            "table": ["p_sources"],
            "version": [1],
            "row_id": ["x"],
            "step": ["s"],
            "reason": ["r"],
            "detail": ["{}"],
        }
    )
    pq.write_table(old_drops, old / "tables/drops/v1-b/part-00000.parquet")
    con = duckdb.connect(str(old / "catalog.duckdb"))
    con.execute(
        "CREATE TABLE versions (name VARCHAR, version BIGINT, kind VARCHAR, mode VARCHAR, "
        "files VARCHAR[], rows BIGINT, content_hash VARCHAR, arrow_schema VARCHAR, "
        "parents VARCHAR[], producer VARCHAR, params JSON, code_version VARCHAR, "
        "created_at TIMESTAMPTZ)"
    )
    for name, kind, mode, f, parents in (
        ("p", "prompts", "snapshot", "tables/p/v1-a/part-00000.parquet", []),
        ("drops", "drops", "append", "tables/drops/v1-b/part-00000.parquet", ["p@1"]),
    ):
        con.execute(
            "INSERT INTO versions VALUES (?, 1, ?, ?, [?], 1, 'h', '', ?, 'old', '{}', 'v', now())",
            [name, kind, mode, f, parents],
        )
    con.close()
    counts = migrate_lake(old, tmp_path / "new")
    assert counts == {"p": 1, "drops": 1}
    new = Lake(tmp_path / "new")
    assert new.read("p@1")["uid"].to_pylist() == ["t:0", "t:1", "t:2"]
    assert new.sql("SELECT output_table, output_version, uid FROM drops").fetchall() == [
        ("p", 1, "x")
    ]


def test_time_travel_after_a_table_is_replaced_in_the_same_process(tmp_path: Path) -> None:
    # DuckLake's in-connection cache lost older snapshots after this connection replaced a
    # table another connection had made, and reading "a@1" then failed inside a long build
    # ("Table with name a does not exist at version 3"); commits now start afresh.
    first = Lake(tmp_path / "lake")
    first.commit("a", prompts(2), kind="prompts")
    first.commit("b", prompts(2), kind="prompts")
    lake = Lake(tmp_path / "lake")
    lake.commit("b", prompts(3), kind="prompts")
    lake.commit("drops", drops(["x"]), kind="drops", mode="append")
    lake.commit("drops", drops(["y"]), kind="drops", mode="append")
    lake.commit("c", prompts(1), kind="prompts")
    assert lake.read("a@1").num_rows == 2
    assert lake.read("b@1").num_rows == 2


def test_versions_stay_immutable_when_another_client_deletes_rows(lake: Lake) -> None:
    lake.commit("p", prompts(5), kind="prompts")
    assert "read_parquet" in lake._scan_source(lake.con, lake.resolve("p"), lake.versions("p"))
    other = duckdb.connect()
    for statement in lake.attach_statements(read_only=False, alias="outside"):
        other.execute(statement)
    other.execute("DELETE FROM outside.p WHERE uid = 't:0'")
    assert other.execute("SELECT count(*) FROM outside.p").fetchone() == (4,)
    other.close()
    # p@1 is a snapshot: a later change by another client is not a cascade version of p.
    fresh = Lake(lake.path)
    assert fresh.sql("SELECT count(*) FROM p").fetchall()[0] == (5,)
    assert fresh.verify_hash("p@1").version == 1


def test_a_duckdb_file_catalog_is_selectable(tmp_path: Path) -> None:
    from lake.catalog import LakeConfig

    lake = Lake(tmp_path / "lake", config=LakeConfig(catalog="duckdb"))
    lake.commit("p", prompts(3), kind="prompts")
    lake.commit("p", prompts(4), kind="prompts")
    lake.close()
    again = Lake(tmp_path / "lake")
    assert again.config.catalog == "duckdb" and (again.path / "catalog.ducklake").is_file()
    assert again.read("p@1").num_rows == 3
    assert again.sql("SELECT count(*) FROM p").fetchall()[0] == (4,)
    again.verify_hash("p@2")


def test_a_hand_written_lake_json_sets_itself_up(tmp_path: Path) -> None:
    where = tmp_path / "lake"
    where.mkdir()
    (where / "lake.json").write_text(
        json.dumps({"format": "cascade-ducklake/1", "catalog": "sqlite", "data_path": "files"})
    )
    lake = Lake(where)
    lake.commit("p", prompts(2), kind="prompts")
    assert lake.read("p").num_rows == 2
    assert (where / "files" / "main" / "p").is_dir()
