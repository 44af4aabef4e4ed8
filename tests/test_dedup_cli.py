"""`cascade dedup` on files and on lake tables."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from cli.main import command_app

SOURCES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "sources"
app = command_app()


def _rows() -> list[dict]:
    real = pl.read_ndjson(SOURCES / "math_train.jsonl").head(40)
    rows = [{"problem": p, "answer": a} for p, a in real.select("problem", "answer").iter_rows()]
    rows.append({"problem": rows[3]["problem"].upper(), "answer": rows[3]["answer"]})  # exact
    rows.append({"problem": "Problem: " + rows[5]["problem"], "answer": rows[5]["answer"]})
    rows.append({"problem": rows[7]["problem"], "answer": None})  # no answer: joins row 8
    return rows


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_dedup_file_records_what_each_dropped_row_duplicates(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    _write(src, _rows())
    out, dropped = tmp_path / "kept.jsonl", tmp_path / "dropped.jsonl"
    result = CliRunner().invoke(
        app, ["dedup", "--input", str(src), "--out", str(out), "--dropped", str(dropped)]
    )
    assert result.exit_code == 0, result.output
    kept = pl.read_ndjson(out)
    gone = pl.read_ndjson(dropped).sort("id")
    assert kept.height == 40
    # ids are 1-based line numbers when the file has no id field
    assert gone.select("id", "duplicate_of", "reason").rows() == [
        ("41", "4", "exact_duplicate"),
        ("42", "6", "near_duplicate"),
        ("43", "8", "exact_duplicate"),
    ]
    assert gone.get_column("cluster_id").to_list() == ["exact:4", "near:6", "exact:8"]
    assert "40 kept" in result.output.replace(",", "")


def test_dedup_reports_the_bad_line(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"problem": "a"}\n{"problem": 5}\n')
    result = CliRunner().invoke(
        app, ["dedup", "--input", str(src), "--out", str(tmp_path / "o.jsonl")]
    )
    assert result.exit_code != 0
    assert isinstance(result.exception, Exception)
    assert f"{src}:2" in str(result.exception) and "'problem'" in str(result.exception)


def test_dedup_lake_table_commits_kept_rows_and_drops(tmp_path: Path) -> None:
    from lake.catalog import Lake

    lake = Lake(tmp_path / "lake")
    rows = _rows()
    df = pl.DataFrame(
        {
            "uid": [f"math_train:{i}" for i in range(len(rows))],
            "id": [f"p{i}" for i in range(len(rows))],
            "source": ["math_train"] * len(rows),
            "source_id": [str(i) for i in range(len(rows))],
            "domain": ["math"] * len(rows),
            "problem": [r["problem"] for r in rows],
            "answer": [r["answer"] for r in rows],
            "metadata": ["{}"] * len(rows),
        }
    )
    lake.commit("raw", df, kind="prompts")
    result = CliRunner().invoke(
        app, ["--lake", str(tmp_path / "lake"), "dedup", "--table", "raw", "--out", "deduped"]
    )
    assert result.exit_code == 0, result.output
    assert lake.read("deduped").num_rows == 40
    drops = lake.sql(
        "select step, reason, detail from drops "
        "where output_table = 'deduped' and output_version = 1 and input_table = 'raw' "
        "order by uid"
    ).pl()
    assert drops.get_column("step").to_list() == ["exact_dedup", "near_dedup", "exact_dedup"]
    detail = json.loads(drops.get_column("detail")[1])
    # Rows are named by uid (unique), not by the prompt hash that exact copies share.
    assert detail["duplicate_of"] == "math_train:5"
    assert detail["cluster_id"] == "near:math_train:5"
    assert 0.6 <= detail["jaccard_estimate"] <= 1.0
