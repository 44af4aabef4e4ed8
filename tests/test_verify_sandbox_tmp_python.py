"""The sandbox works wherever the interpreter lives, a venv under /tmp included.

As root, each sandbox worker mounts a fresh tmpfs over /tmp. A Python environment installed
under /tmp (a fresh clone's `.venv`, a CI runner's venv) used to vanish with it: a correct
program importing one of its packages failed. The worker now binds the interpreter's own
directories back, read-only, and nothing else of /tmp.
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
secret_file, os_isolation = sys.argv[1], sys.argv[2] == "1"
program = "import cascade_probe\\nprint(cascade_probe.VALUE)"
snoop = f"print(open({secret_file!r}).read())"
with Sandbox(workers=1, os_isolation=os_isolation) as box:
    probe, peek = box.run_many([(program, [StdioTest("", "42")]), (snoop, [StdioTest("", "x")])])
    print(json.dumps({
        "mounts": box._workers[0].info["mounts"],
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


@pytest.mark.parametrize("os_isolation", [True, False], ids=["os-isolation", "hook-and-rlimits"])
def test_a_program_imports_from_a_venv_under_tmp(tmp_venv: Path, os_isolation: bool) -> None:
    secret = tmp_venv.parent / "secret.txt"
    done = subprocess.run(
        [tmp_venv / "bin" / "python", "-c", SCRIPT, str(secret), "1" if os_isolation else "0"],
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["probe"] == [True, "passed 1/1"], report
    if report["mounts"] == "private-mounts":
        # isolation kept: only the interpreter's directories came back, not the rest of /tmp
        assert report["peek"][0] is False and "No such file" in report["peek"][1], report
