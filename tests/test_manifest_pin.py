"""`cascade manifest pin`: a training manifest's lake references take the hashes the lake
recorded, its relative paths still point where they did, and training the copy still
recomputes every hash and refuses a version whose bytes changed."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from cli.main import command_app
from lake.catalog import Lake
from training.datasets import DataHashError
from training.runner import load_manifest, plan, verify_data

PLACEHOLDER = "0" * 64


def manifest(tmp_path: Path, file_hash: str) -> Path:
    spec = {
        "name": "pinme",
        "base_model": "tiny-random:qwen2",
        "tokenizer": "in-process-bpe:300",
        "output_dir": "../runs/pinme",
        "stages": [
            {
                "name": "sft",
                "type": "sft",
                "datasets": [
                    {
                        "ref": "chats@1",
                        "content_hash": PLACEHOLDER,
                        "build": "cascade build dataset x",
                    },
                    {"ref": "../data/extra.jsonl", "content_hash": file_hash},
                ],
                "max_seq_len": 64,
                "max_steps": 1,
                "optimizer": {"learning_rate": 1e-3},
                "batch": {"global_batch_size": 1, "micro_batch_size": 1},
            },
            {
                "name": "rm",
                "type": "reward_model",
                "backbone": "Qwen/Qwen2.5-0.5B",
                "datasets": [{"ref": "pairs@2", "content_hash": PLACEHOLDER}],
                "max_seq_len": 64,
                "optimizer": {"learning_rate": 1e-3},
                "batch": {"global_batch_size": 1, "micro_batch_size": 1},
            },
        ],
    }
    path = tmp_path / "repo" / "manifests" / "m.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(spec))
    return path


def test_pin_writes_the_lakes_hashes_and_rebases_paths_and_training_still_checks(
    tmp_path: Path,
) -> None:
    import hashlib

    extra = tmp_path / "repo" / "data" / "extra.jsonl"
    extra.parent.mkdir(parents=True)
    extra.write_text('{"messages": []}\n')
    path = manifest(tmp_path, hashlib.sha256(extra.read_bytes()).hexdigest())
    lake = Lake(tmp_path / "lake")
    chats = lake.commit("chats", pa.table({"uid": ["a"], "messages": ["[]"]}))
    lake.commit("pairs", pa.table({"uid": ["p"]}))
    pairs = lake.commit("pairs", pa.table({"uid": ["q"]}))

    out = tmp_path / "lake" / "pinned" / "m.json"
    result = CliRunner().invoke(
        command_app(),
        ["--lake", str(tmp_path / "lake"), "manifest", "pin", str(path), "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert f"stages[0](sft).datasets[0]: {chats.content_hash}" in result.output
    assert "pinned 2 lake references" in result.output
    pinned = json.loads(out.read_text())
    sft, rm = pinned["stages"]
    assert sft["datasets"][0]["content_hash"] == chats.content_hash
    assert rm["datasets"][0]["content_hash"] == pairs.content_hash
    assert rm["backbone"] == "Qwen/Qwen2.5-0.5B"  # a hub id stays as written
    assert (out.parent / sft["datasets"][1]["ref"]).resolve() == extra.resolve()
    assert (out.parent / pinned["output_dir"]).resolve() == (tmp_path / "repo" / "runs" / "pinme")
    assert {k: v for k, v in pinned.items() if k != "stages"} | {"output_dir": 0} == {
        k: v for k, v in json.loads(path.read_text()).items() if k != "stages"
    } | {"output_dir": 0}

    # the copy trains: every hash is recomputed and matches
    loaded = load_manifest(out)
    verify_data(plan(loaded, out, None), out, tmp_path / "lake")
    # a version whose bytes changed after it was pinned is still refused
    (data_file,) = lake.files("chats@1")
    Path(data_file).write_bytes(Path(lake.files("pairs@2")[0]).read_bytes())
    with pytest.raises(DataHashError, match="chats@1"):
        verify_data(plan(loaded, out, None), out, tmp_path / "lake")


def test_pin_names_the_reference_the_lake_lacks(tmp_path: Path) -> None:
    path = manifest(tmp_path, PLACEHOLDER)
    Lake(tmp_path / "lake").commit("chats", pa.table({"uid": ["a"]}))
    result = CliRunner().invoke(
        command_app(),
        [
            "--lake",
            str(tmp_path / "lake"),
            "manifest",
            "pin",
            str(path),
            "--out",
            str(tmp_path / "o.json"),
        ],
    )
    assert result.exit_code != 0
    message = str(result.exception)  # `cascade` prints it as one line
    assert "stages[1](rm).datasets[0]: pairs@2: no table 'pairs'" in message
    assert message.endswith("no build is recorded")
    assert not (tmp_path / "o.json").exists()
