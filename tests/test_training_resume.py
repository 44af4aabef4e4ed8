"""Resume after a real kill: a SIGKILLed `cascade train` resumed with --resume ends bit-for-bit
where an uninterrupted run ends (same losses, learning rates, grad norms and final weights).

Uses DeepSpeed (ZeRO-2, gloo on CPU) in subprocesses through the real CLI.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_training_sft import ROOT, gsm8k_chats, read_log, tiny_manifest, write_jsonl

CLI = [
    sys.executable,
    "-c",
    "import sys; from cli.main import main; sys.argv[0] = 'cascade'; main()",
]


def clean_env() -> dict[str, str]:
    """The environment minus process-group variables an in-process test run may have set."""
    group = {"MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE"}
    return {k: v for k, v in os.environ.items() if k not in group}


def _train(manifest: Path, *extra: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [*CLI, "train", "--manifest", str(manifest), "--no-progress", *extra],
        cwd=ROOT,
        env={**clean_env(), "OMP_NUM_THREADS": "1", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.slow
def test_resume_after_kill_is_exact(tmp_path: Path) -> None:
    data = tmp_path / "gsm8k_chat.jsonl"
    sha = write_jsonl(data, gsm8k_chats(16, offset=100))
    stage = {"max_steps": 6, "checkpoint_every_steps": 2}
    straight = tiny_manifest(tmp_path, data, sha, "straight", **stage)
    killed = tiny_manifest(tmp_path, data, sha, "killed", **stage)

    proc = _train(straight)
    # The second run is slowed down so the kill lands mid-training, after step 2's checkpoint.
    victim = _train(killed, env={"CASCADE_TRAIN_STEP_DELAY_S": "0.5"})
    marker = tmp_path / "killed" / "sft1" / "checkpoints" / "step_0000002" / "COMPLETE"
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert victim.poll() is None, victim.stdout.read()
        assert time.monotonic() < deadline, "no checkpoint after 120 s"
        time.sleep(0.05)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    assert victim.returncode == -signal.SIGKILL
    assert not (tmp_path / "killed" / "sft1" / "final").exists()

    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    resumed = _train(killed, "--resume")
    out, _ = resumed.communicate(timeout=180)
    assert resumed.returncode == 0, out

    a, b = read_log(tmp_path / "straight" / "sft1"), read_log(tmp_path / "killed" / "sft1")
    assert [r["step"] for r in b] == list(range(1, 7))
    for ra, rb in zip(a, b, strict=True):
        assert (ra["loss"], ra["lr"], ra["grad_norm"]) == (rb["loss"], rb["lr"], rb["grad_norm"])
    wa = load_file(tmp_path / "straight" / "sft1" / "final" / "model.safetensors")
    wb = load_file(tmp_path / "killed" / "sft1" / "final" / "model.safetensors")
    assert wa.keys() == wb.keys()
    for key in wa:
        assert torch.equal(wa[key], wb[key]), key
