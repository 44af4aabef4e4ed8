"""The lake shared by a cluster: the DuckLake catalog in PostgreSQL, the data on an S3 store.

Real servers on 127.0.0.1 (tests/test_ray_servers.py: a throwaway PostgreSQL cluster with a
password, SeaweedFS's S3 gateway with a key pair); credentials only in the environment. What
the local lake promises holds here too: commits are atomic under kill -9 at any point, two
writers never commit the same version, readers never wait, `cascade sql` reads the lake from
another process; and files written by cluster workers straight into the bucket are registered
by the driver in one commit.
"""

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

import polars as pl
import pytest
from test_lake import _assert_consistent, _writer  # type: ignore[import-not-found]
from test_ray_servers import (  # type: ignore[import-not-found]
    Postgres,
    S3Store,
    needs_postgres,
    needs_ray,
    needs_weed,
    postgres_server,
    ray_cluster,
    seaweedfs_server,
    ship_test_module,
)

from lake.catalog import Lake, LakeConfig, LakeError, TableWrite
from lake.storage import DataFiles, write_data_files
from schemas.tables import SchemaError

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [needs_postgres, needs_weed]


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


@pytest.fixture(scope="module")
def servers():
    with postgres_server() as pg, seaweedfs_server() as s3:
        yield pg, s3


@pytest.fixture
def remote(servers: tuple[Postgres, S3Store], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A fresh remote lake (its own database and bucket prefix); credentials in the env."""
    pg, s3 = servers
    database = f"lake_{tmp_path.name.lower().replace('-', '_')[-40:]}"
    pg.create_database(database)
    for key, value in {**s3.env(), "PGPASSWORD": pg.password}.items():
        monkeypatch.setenv(key, value)
    config = LakeConfig(
        catalog="postgres",
        postgres=pg.dsn(database),
        data_path=f"s3://{s3.bucket}/{tmp_path.name}",
        s3={"endpoint": s3.endpoint, "url_style": "path", "use_ssl": False},
    )
    return Lake(tmp_path / "lake", config=config), s3


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_versions_hashes_and_time_travel_on_postgres_and_s3(remote) -> None:
    lake, s3 = remote
    v1 = lake.commit("p", prompts(3), kind="prompts")
    v2 = lake.commit("p", prompts(7), kind="prompts")
    assert lake.read("p@1").num_rows == 3 and lake.read("p").num_rows == 7
    assert lake.scan("p@1").select(pl.len()).collect().item() == 3
    assert all(f.startswith(lake.data_path) for f in lake.files("p"))
    assert len(s3.keys(lake.data_path.removeprefix(f"s3://{s3.bucket}/"))) == 2
    lake.verify_hash(v2.ref)
    assert v1.content_hash != v2.content_hash
    # lake.json names where things are, never a secret
    config = json.loads((lake.path / "lake.json").read_text())
    assert config["catalog"] == "postgres" and config["data_path"].startswith("s3://")
    assert "password" not in json.dumps(config) and s3.secret not in json.dumps(config)
    # tampering with a file on the store is caught
    first = lake.store.relative(lake.files("p@1")[0])
    with s3.filesystem().open_output_stream(lake.store.fs_path(first)) as out:
        out.write(b"not parquet")
    with pytest.raises(LakeError, match="does not match"):
        lake.verify_hash("p@1")


def test_cascade_sql_reads_the_lake_from_another_process(remote) -> None:
    lake, _ = remote
    lake.commit("p", prompts(5), kind="prompts")
    out = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", "--lake", str(lake.path),
         "sql", "SELECT count(*) AS n FROM p", "--format", "csv"],
        capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["n", "5"]
    # without the store's keys, one sentence says what to set
    bare = {k: v for k, v in _env().items() if not k.startswith("AWS_")}
    out = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", "--lake", str(lake.path),
         "sql", "SELECT count(*) FROM p"],
        capture_output=True, text=True, cwd=ROOT, env=bare, timeout=120,
    )  # fmt: skip
    assert out.returncode != 0
    assert "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in out.stderr
    # and without the database password
    nopw = {k: v for k, v in _env().items() if k != "PGPASSWORD"}
    out = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", "--lake", str(lake.path),
         "sql", "SELECT count(*) FROM p"],
        capture_output=True, text=True, cwd=ROOT, env=nopw, timeout=120,
    )  # fmt: skip
    assert out.returncode != 0 and "password" in out.stderr


def test_a_plain_duckdb_client_opens_the_lake(remote) -> None:
    lake, _ = remote
    v1 = lake.commit("p", prompts(3), kind="prompts")
    lake.commit("p", prompts(9), kind="prompts")
    printed = lake.attach_statements()
    assert any("getenv('AWS_SECRET_ACCESS_KEY')" in s for s in printed)  # no secret printed
    assert not any(os.environ["AWS_SECRET_ACCESS_KEY"] in s for s in printed)
    script = ";\n".join(lake.attach_statements(reveal_secrets=True)) + ";\nUSE lake;"
    code = textwrap.dedent(
        f"""
        import duckdb, sys
        con = duckdb.connect()
        for statement in sys.stdin.read().split(";\\n"):
            if statement.strip():
                con.execute(statement)
        print(con.sql("SELECT count(*) FROM p").fetchone()[0])
        print(con.sql("SELECT count(*) FROM p AT (VERSION => {v1.snapshot_id})").fetchone()[0])
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=script, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["9", "3"]


def test_the_viewer_reads_a_remote_lake_confined_to_its_files(remote) -> None:
    import duckdb

    from cli.serve import read_only_connection, run_query
    from cli.serve_query import QueryLimits

    lake, _ = remote
    lake.commit("p", prompts(4), kind="prompts")
    lake.commit("p", prompts(2), kind="prompts")
    reader = Lake(lake.path, create=False, read_only=True)
    limits = QueryLimits(seconds=60)
    for query, want in (("SELECT count(*) FROM p", 2), ('SELECT count(*) FROM "p@1"', 4)):
        result = run_query(reader, query, limits, 10, lake.path.parent)
        assert result.rows == [(want,)]
    con = read_only_connection(reader, "SELECT 1")
    for barred in (
        "SELECT * FROM read_text('/etc/passwd')",
        f"SELECT * FROM read_text('{reader.data_path}')",
        f"COPY (SELECT 1 AS x) TO '{reader.data_path}new.parquet'",
    ):
        with pytest.raises(duckdb.PermissionException):
            con.execute(barred)
    with pytest.raises(duckdb.Error, match="READ ONLY|read-only"):
        con.execute(
            "CALL postgres_execute('__ducklake_metadata_lake', 'DROP TABLE ducklake_snapshot')"
        )
    con.close()
    assert reader.versions("p")[-1].version == 2
    reader.verify_hash("p@2")


@pytest.mark.parametrize("point", ["mid_write", "before_commit", "in_transaction", "after_commit"])
def test_kill_9_mid_commit_leaves_old_or_new_version_on_object_storage(remote, point) -> None:
    lake, s3 = remote
    lake.commit("t", prompts(7), kind="prompts")
    proc = _writer(lake.path, 20_000, pause=point)
    line = proc.stdout.readline()
    assert line.startswith(f"PAUSED {point}"), proc.stderr.read()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    fresh = Lake(lake.path)
    versions = [v.version for v in fresh.versions("t")]
    assert versions == ([1, 2] if point == "after_commit" else [1])
    _assert_consistent(fresh)
    assert fresh.read("t@1").num_rows == 7
    assert fresh.commit("t", prompts(3), kind="prompts").version == versions[-1] + 1
    # the killed writer's objects are invisible; gc removes them from the bucket
    prefix = fresh.data_path.removeprefix(f"s3://{s3.bucket}/") + "main/t"
    registered = {fresh.store.relative(f) for v in fresh.versions("t") for f in fresh.files(v.ref)}
    fresh.remove_orphans(older_than=timedelta(0))
    base = fresh.data_path.removeprefix(f"s3://{s3.bucket}/")
    assert {k.removeprefix(base) for k in s3.keys(prefix)} == registered
    _assert_consistent(fresh)


def test_racing_writers_never_commit_the_same_version(remote) -> None:
    lake, _ = remote
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
    assert "COMMITTED 3" in out  # DuckLake refused the paused commit; it retried on top of 2
    assert [v.version for v in lake.versions("t")] == [1, 2, 3]
    _assert_consistent(Lake(lake.path))


def test_concurrent_committers_all_land_with_distinct_versions(remote) -> None:
    lake, _ = remote
    procs = [_writer(lake.path, 2000, commits=4) for _ in range(3)]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert out.count("COMMITTED") == 4
    assert [v.version for v in lake.versions("t")] == list(range(1, 13))
    _assert_consistent(lake)


def test_readers_never_wait_for_a_writer(remote) -> None:
    lake, _ = remote
    lake.commit("t", prompts(7), kind="prompts")
    proc = _writer(lake.path, 20_000, pause="in_transaction", CASCADE_TEST_PAUSE_SECONDS="120")
    try:
        assert proc.stdout.readline().startswith("PAUSED in_transaction")
        started = time.monotonic()
        reader = subprocess.run(
            [sys.executable, "-c", "from cli.main import main; main()", "--lake",
             str(lake.path), "sql", "SELECT count(*) AS n FROM t", "--format", "csv"],
            capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=100,
        )  # fmt: skip
        waited = time.monotonic() - started
        assert reader.returncode == 0, reader.stderr
        assert reader.stdout.split() == ["n", "7"]
        assert proc.poll() is None, "the writer must still be mid-commit"
        print(f"reader answered in {waited:.2f}s beside a writer paused in its transaction")
    finally:
        proc.kill()
        proc.wait()


def test_files_written_elsewhere_are_registered_by_one_commit(remote) -> None:
    lake, s3 = remote
    store = lake.store
    parts = [write_data_files(store, "w", prompts(50, 50 * k), kind="prompts") for k in range(3)]
    info = lake.commit_many(
        [TableWrite("w", DataFiles.merge(parts), kind="prompts")], build_id="b"
    )[0]
    assert info.rows == 150 and len(info.files) == 3
    assert pl.from_arrow(lake.read("w"))["uid"].to_list() == [f"t:{i}" for i in range(150)]
    lake.verify_hash(info.ref)
    # files outside the table's folder, missing, or of the wrong kind are refused
    stray = write_data_files(store, "other", prompts(2), kind="prompts")
    with pytest.raises(LakeError, match="must be written under main/w/"):
        lake.commit_many([TableWrite("w", stray, kind="prompts")])
    gone = write_data_files(store, "w", prompts(2), kind="prompts")
    store.remove(gone.files[0])
    with pytest.raises(LakeError, match="does not exist"):
        lake.commit_many([TableWrite("w", gone, kind="prompts")])
    with pytest.raises(SchemaError):
        lake.commit_many([TableWrite("w", DataFiles.merge(parts), kind="drops")])
    assert lake.resolve("w").version == 1


def _write_on_worker(store, start: int) -> DataFiles:
    return write_data_files(store, "from_workers", prompts(1000, start), kind="prompts")


@needs_ray
@pytest.mark.slow
def test_ray_workers_write_parquet_to_the_bucket_and_the_driver_commits(remote) -> None:
    import ray

    lake, s3 = remote
    with ray_cluster(num_cpus=2, env={**s3.env()}) as cluster:
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        ship_test_module(__name__)
        task = ray.remote(_write_on_worker)
        parts = ray.get([task.remote(lake.store, 1000 * k) for k in range(4)])
        ray.shutdown()
    info = lake.commit_many([TableWrite("from_workers", DataFiles.merge(parts), kind="prompts")])[0]
    assert info.rows == 4000
    lake.verify_hash(info.ref)
    assert lake.sql("SELECT count(DISTINCT uid) FROM from_workers").fetchone()[0] == 4000


@needs_ray
@pytest.mark.slow
def test_steps_on_the_cluster_read_and_write_the_bucket_and_match_a_local_run(remote) -> None:
    """`run_steps` with the Ray executor over a version of the shared lake: the workers read
    the version from the bucket, run the steps and write the kept rows and drops there; the
    driver commits them. The output and its drops are the local executor's."""
    from curation.cluster_plans import CLUSTER_PLANS
    from curation.dedup import exact_dedup, near_dedup
    from lake.cluster import RayExecutor
    from lake.steps import Step, run_steps

    lake, s3 = remote
    copies = prompts(300).with_columns(uid=pl.concat_str(pl.lit("copy:"), "uid"))
    lake.commit("corpus", pl.concat([prompts(1500), copies]), kind="prompts")
    steps = [
        Step("exact_dedup", exact_dedup, {"id_column": "uid"}, partition="normalized_text"),
        Step("near_dedup", near_dedup, {"id_column": "uid"}, partition="lsh_bands"),
    ]
    local = run_steps(lake, "corpus", steps, out="local_out", producer="t")
    with ray_cluster(num_cpus=2) as cluster:
        executor = RayExecutor(address=cluster.address, plans=CLUSTER_PLANS, block_rows=400)
        executor.connect()
        clustered = run_steps(lake, "corpus", steps, out="ray_out", producer="t", executor=executor)
        stages = {(s.step, s.stage) for s in executor.stages}
        executor.close()
    assert {("input", "read on the workers"), ("output", "write on the workers")} <= stages
    assert local.funnel[0].dropped == {"exact_duplicate": 300}
    assert clustered.output.content_hash == local.output.content_hash
    assert [(f.step, f.rows_out, f.dropped) for f in clustered.funnel] == [
        (f.step, f.rows_out, f.dropped) for f in local.funnel
    ]
    assert clustered.output.rows == local.output.rows
    assert all(f.startswith(f"s3://{s3.bucket}/") for f in lake.files(clustered.output.ref))
    drops = "SELECT uid, step, reason, detail FROM drops WHERE output_table = '{}' ORDER BY ALL"
    assert (
        lake.sql(drops.format("ray_out")).fetchall()
        == lake.sql(drops.format("local_out")).fetchall()
    )
    assert len(lake.sql(drops.format("ray_out")).fetchall()) == 1800 - local.output.rows
    _assert_consistent(lake)
