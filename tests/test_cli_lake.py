"""The lake commands as a user runs them: ingest, sql in every format, lake ls/log/show."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from cli.main import command_app

app = command_app()
runner = CliRunner()


@pytest.fixture
def cli_lake(tmp_path: Path) -> tuple[str, Path]:
    src = tmp_path / "src.jsonl"
    src.write_text(
        "".join(
            json.dumps({"question": f"What is {i} times 3?", "answer": str(3 * i), "level": i % 2})
            + "\n"
            for i in range(20)
        )
    )
    lake = str(tmp_path / "lake")
    for _ in range(2):
        result = runner.invoke(
            app, ["--lake", lake, "ingest", str(src), "--table", "q", "--map", "problem=question"]
        )
        assert result.exit_code == 0, result.output
    return lake, tmp_path


def invoke(lake: str, *args: str):
    return runner.invoke(app, ["--lake", lake, *args])


def test_sql_formats(cli_lake) -> None:
    lake, tmp = cli_lake
    q = 'SELECT answer FROM "q@1" ORDER BY CAST(answer AS INT) LIMIT 3'
    table = invoke(lake, "sql", q)
    assert table.exit_code == 0 and "answer" in table.output and "6" in table.output
    csv = invoke(lake, "sql", q, "--format", "csv")
    assert csv.output.split() == ["answer", "0", "3", "6"]
    js = invoke(lake, "sql", q, "--format", "json")
    assert json.loads(js.output) == [{"answer": "0"}, {"answer": "3"}, {"answer": "6"}]
    out = tmp / "r.parquet"
    pq = invoke(lake, "sql", "SELECT * FROM q", "--format", "parquet", "--out", str(out))
    assert pq.exit_code == 0 and pl.read_parquet(out).height == 20
    meta = invoke(lake, "sql", "SELECT name, version, rows FROM versions", "--format", "csv")
    assert meta.output.split() == ["name,version,rows", "q,1,20", "q,2,20"]


def test_bad_query_is_one_line_without_traceback(cli_lake) -> None:
    lake, _ = cli_lake
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from cli.main import main; main()",
            "--lake",
            lake,
            "sql",
            "SELEC nope",
        ],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: Parser Error")
    assert proc.stderr.startswith("error:")  # errors go to stderr, results to stdout


def test_lake_ls_log_show(cli_lake) -> None:
    lake, _ = cli_lake
    ls = invoke(lake, "lake", "ls")
    assert ls.exit_code == 0 and "q" in ls.output and "prompts" in ls.output
    log = invoke(lake, "lake", "log", "q")
    assert log.exit_code == 0 and "ingest" in log.output and "2 " in log.output
    show = invoke(lake, "lake", "show", "q@1")
    assert show.exit_code == 0
    for text in (
        "rows:     20",
        "content_hash:",
        "problem: large_string",
        "producer: cascade ingest",
    ):
        assert text in show.output
    missing = invoke(lake, "lake", "show", "q@9")
    assert missing.exit_code != 0


def test_ingest_errors_exit_nonzero_with_the_reason(cli_lake) -> None:
    lake, tmp = cli_lake
    bad = tmp / "bad.jsonl"
    bad.write_text('{"problem": "a"}\n{nope\n')
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from cli.main import main; main()",
            "--lake",
            lake,
            "ingest",
            str(bad),
            "--table",
            "b",
        ],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert proc.returncode == 1
    assert f"{bad}:2: malformed line" in proc.stderr and "Traceback" not in proc.stderr
    skipped = invoke(lake, "ingest", str(bad), "--table", "b", "--on-error", "skip")
    assert skipped.exit_code == 0 and "skipped 1 malformed" in skipped.output


def test_messages_keep_bracketed_names_and_missing_lakes_are_not_created(tmp_path: Path) -> None:
    manifest = tmp_path / "m.json"
    manifest.write_text(
        json.dumps(
            {
                "name": "x",
                "base_model": "tiny-random:qwen2",
                "tokenizer": "in-process-bpe:300",
                "output_dir": "o",
                "stages": [
                    {
                        "name": "sft1",
                        "type": "sft",
                        "datasets": [{"ref": "d.jsonl", "content_hash": "xyz"}],
                        "max_seq_len": 8,
                        "epochs": 1,
                        "optimizer": {"learning_rate": 0.1},
                        "batch": {"global_batch_size": 2, "micro_batch_size": 1},
                    }
                ],
            }
        )
    )
    cli = [sys.executable, "-c", "from cli.main import main; main()"]
    root = Path(__file__).resolve().parents[1]
    train = subprocess.run(
        [*cli, "train", "--manifest", str(manifest)], capture_output=True, text=True, cwd=root
    )
    assert train.returncode == 1
    assert "stages[0](sft1).datasets[0].content_hash" in train.stderr  # not eaten as markup
    missing = tmp_path / "no_lake_here"
    sql = subprocess.run(
        [*cli, "sql", "SELECT 1", "--lake", str(missing)], capture_output=True, text=True, cwd=root
    )
    assert sql.returncode == 1 and f"no lake at {missing}" in sql.stderr
    assert not missing.exists()
    assert "lake lake" not in sql.stderr


def test_sql_json_and_jsonl_output_are_inputs_for_other_commands(cli_lake) -> None:
    lake, tmp = cli_lake
    for fmt in ("json", "jsonl"):
        out = tmp / f"q.{fmt}"
        query = (
            "SELECT uid, problem, answer, '\\boxed{' || answer || '}' AS response FROM q LIMIT 5"
        )
        result = invoke(lake, "sql", query, "--format", fmt, "--out", str(out))
        assert result.exit_code == 0, result.output
        verified = invoke(
            lake,
            "verify",
            "--input",
            str(out),
            "--kind",
            "math",
            "--out",
            str(tmp / f"v{fmt}.jsonl"),
        )
        assert verified.exit_code == 0, verified.output
        rows = [json.loads(line) for line in (tmp / f"v{fmt}.jsonl").read_text().splitlines()]
        assert len(rows) == 5 and all(r["passed"] for r in rows)


def test_gc_says_what_it_kept_and_why(tmp_path: Path) -> None:
    from lake.catalog import Lake
    from lake.leases import LEASE_DIR, WriteLease

    lake = Lake(tmp_path / "lake")
    info = lake.commit("t", pl.DataFrame({"a": [1, 2]}))
    table_dir = Path(lake.data_path) / "main" / "t"
    data = (table_dir / Path(info.files[0]).name).read_bytes()
    (table_dir / "ducklake-foreign.parquet").write_bytes(data)  # an orphan of unknown origin
    dead = "0123456789abcdef"  # a writer killed after writing a file: its lock is free
    (lake.path / LEASE_DIR / "t").mkdir(parents=True, exist_ok=True)
    (lake.path / LEASE_DIR / "t" / f"{dead}.lock").touch()
    (table_dir / f"cascade-{dead}-0123456789ab-00000.parquet").write_bytes(data)
    with WriteLease(lake.path / LEASE_DIR) as running:  # a writer in flight, in this process
        running.cover("t")
        (table_dir / f"cascade-{running.token}-0123456789ab-00000.parquet").write_bytes(data)
        result = invoke(str(lake.path), "lake", "gc")
        assert result.exit_code == 0, result.output
        assert " ".join(result.output.split()) == (
            "removed 1 orphaned data files "
            "kept 1 orphaned files younger than 24 h (a commit in flight may still register "
            "them); --older-than-hours changes the grace period "
            "kept 1 files of writers that are still running"
        )
        result = invoke(str(lake.path), "lake", "gc", "--older-than-hours", "0")
        assert " ".join(result.output.split()) == (
            "removed 1 orphaned data files kept 1 files of writers that are still running"
        )
    assert sorted(p.name for p in table_dir.iterdir()) == sorted(
        [Path(info.files[0]).name, f"cascade-{running.token}-0123456789ab-00000.parquet"]
    )
    assert lake.verify_hash("t").content_hash == info.content_hash
