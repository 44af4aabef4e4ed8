"""The sandbox works wherever the interpreter lives, a venv under /tmp included.

Each sandboxed program runs in a jail whose /tmp is the job's own fresh tmpfs. A Python
environment installed under /tmp (a fresh clone's `.venv`, a CI runner's venv) would vanish
with it: a correct program importing one of its packages would fail. The worker binds the
interpreter's own directories into each job's tmpfs, read-only, and nothing else of /tmp.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import json, sys
from curation.verify.sandbox import Sandbox, StdioTest
secret_file = sys.argv[1]
program = "import cascade_probe\\nprint(cascade_probe.VALUE)"
snoop = f"print(open({secret_file!r}).read())"
with Sandbox(workers=1) as box:
    probe, peek = box.run_many([(program, [StdioTest("", "42")]), (snoop, [StdioTest("", "x")])])
    print(json.dumps({
        "isolation": box._workers[0].info["isolation"],
        "probe": [probe.passed, probe.summary()],
        "peek": [peek.passed, peek.summary()],
    }))
"""


@pytest.fixture(scope="module")
def tmp_venv() -> Path:
    """A venv under /tmp with a package of its own (`cascade_probe`), like a fresh clone's."""
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="cascade-venv-test-") as where:
        venv = Path(where) / "venv"
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", venv],
            check=True,
        )
        python = venv / "bin" / "python"
        site = subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        (Path(site) / "cascade_probe.py").write_text("VALUE = 42\n")
        (Path(where) / "secret.txt").write_text("a file of /tmp that is not Python\n")
        yield venv


def test_a_program_imports_from_a_venv_under_tmp(tmp_venv: Path) -> None:
    secret = tmp_venv.parent / "secret.txt"
    done = subprocess.run(
        [tmp_venv / "bin" / "python", "-c", SCRIPT, str(secret)],
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["probe"] == [True, "passed 1/1"], report
    assert report["isolation"] in ("root", "userns"), report
    # isolation kept: only the interpreter's directories came back, not the rest of /tmp
    assert report["peek"][0] is False and "No such file" in report["peek"][1], report
