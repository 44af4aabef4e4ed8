"""How long a `cascade` command takes to start, beside what Python and Typer alone take.

Each line is the best of 5 runs, every run a fresh interpreter (subprocess) started from the
repository root: `cascade --help` (registers every command, runs none), `cascade sql
"SELECT 1"` and `SELECT * FROM tiny` on a two-row lake made in a temp dir first (loads DuckDB
and opens the lake), and as the floor measured in the same run, `python -c "import typer"`
and `python -c "pass"`.
Commands load their heavy libraries (Polars, PyArrow, DuckDB, ...) only when they run.

    python bench/startup.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASCADE = [sys.executable, "-c", "from cli.main import main; main()"]
RUNS = 5


def best_of(command: list[str], runs: int = RUNS) -> float:
    """The fastest of `runs` wall times of `command` (seconds); it must succeed."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="cascade-startup-") as tmp:
        rows = Path(tmp) / "tiny.jsonl"
        rows.write_text(
            "".join(
                json.dumps({"problem": f"{n}+{n}", "answer": str(2 * n)}) + "\n" for n in (1, 2)
            )
        )
        lake = str(Path(tmp) / "lake")
        subprocess.run(
            [*CASCADE, "--quiet", "--lake", lake, "ingest", str(rows), "--table", "tiny"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        cases = {
            "cascade --help": [*CASCADE, "--help"],
            'cascade sql "SELECT 1"': [*CASCADE, "--lake", lake, "sql", "SELECT 1"],
            "cascade sql (a table)": [*CASCADE, "--lake", lake, "sql", "SELECT * FROM tiny"],
            'python -c "import typer"': [sys.executable, "-c", "import typer"],
            'python -c "pass"': [sys.executable, "-c", "pass"],
        }
        for name, command in cases.items():
            print(f"{name:28} {best_of(command):6.3f} s", flush=True)


if __name__ == "__main__":
    main()
