"""The trainer's floor: `training/` imports only `lake` (its stable surface), `schemas`,
`curation.verify` (rewards) and `curation.environments` (episodes) from the project, as
architecture.md draws it (the chat format and seeded sampling it shares with the teachers are
contracts in `schemas`), and checks each dataset's hash once per stage.
"""

from __future__ import annotations

import ast
from pathlib import Path

import torch
from test_training_sft import gsm8k_chats, tiny_manifest, write_jsonl

import training.datasets
from training.runner import run_cascade

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
PROJECT = {"lake", "schemas", "curation", "builders", "training", "cli", "bench"}


def project_imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return [n for n in names if n.split(".")[0] in PROJECT]


def test_training_imports_only_lake_schemas_verify_and_environments() -> None:
    files = sorted((ROOT / "training").rglob("*.py"))
    assert len(files) > 10
    for path in files:
        for name in project_imports(path):
            top = name.split(".")[0]
            shared = any(
                name == layer or name.startswith(layer + ".")
                for layer in ("curation.verify", "curation.environments")
            )
            allowed = name == "lake" or top in ("schemas", "training") or shared
            assert allowed, f"{path.relative_to(ROOT)} imports {name}"


def test_each_dataset_hash_is_checked_once(tmp_path: Path, monkeypatch) -> None:
    calls: list[list[Path]] = []
    real = training.datasets.file_sha256

    def counting(paths):
        paths = list(paths)
        calls.append(paths)
        return real(paths)

    monkeypatch.setattr(training.datasets, "file_sha256", counting)
    data = tmp_path / "chat.jsonl"
    sha = write_jsonl(data, gsm8k_chats(16))
    run_cascade(
        tiny_manifest(tmp_path, data, sha, "run", max_steps=1),
        say=lambda _: None,
    )
    assert calls == [[data]]
