"""Every command of the README's tour runs as written, in order, from a project root."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def tour_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- tour -->\s*```bash\n(.*?)```\s*<!-- /tour -->", text, re.S)
    assert block, "README.md has no tour block"
    return [
        line
        for line in block.group(1).splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_the_readme_tour_runs_as_written(tmp_path: Path) -> None:
    # A stand-in project root next to the shared data, as in a clone: ../shared and manifests/.
    work = tmp_path / "project"
    work.mkdir()
    (tmp_path / "shared").symlink_to(ROOT.parent / "shared")
    # A copy, not a link: the tour's builds write manifests/datasets/, which must not land
    # in the repository's own manifests/.
    shutil.copytree(ROOT / "manifests", work / "manifests")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CASCADE_LAKE", None)
    cascade = [sys.executable, "-c", "from cli.main import main; main()"]
    commands = tour_commands()
    assert len(commands) > 20
    for command in commands:
        args = shlex.split(command)
        assert args[0] == "cascade", command
        done = subprocess.run(
            [*cascade, "--quiet", *args[1:]],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert (work / "scratch" / "toy_export" / "README.md").is_file()
    assert (work / "scratch" / "math_rl_v2_report.html").stat().st_size > 100_000
    # everything the tour writes is under the lake, scratch/ or build/ (all git-ignored);
    # dataset manifests live with the lake, not in the project's manifests/
    assert sorted(p.name for p in work.iterdir()) == ["build", "lakehouse", "manifests", "scratch"]
    assert not (work / "manifests" / "datasets").exists()
    assert (work / "lakehouse" / "manifests" / "datasets" / "math_rl_v2").is_dir()
