"""Proof on CPU that a reward-model stage learns a checkable preference, and that a control
trained on shuffled labels does not.

The toy world (builders/worlds/toy_world.py): column addition. One manifest, three stages: SFT of a
tiny policy on the toy world's worked solutions (so the backbone knows the format and the
column steps), then two Bradley-Terry reward models from that SFT model (`backbone:
stage:sft`):

- `rm`: pairs whose chosen reply is the worked solution with its boxed answer and whose
  rejected reply is the same working followed by a slipped boxed answer (one digit changed,
  the toy world's sloppy teacher): correct preferred over wrong, checkable by code.
- `rm_control`: the same pairs with the training side's chosen/rejected swapped by a seeded
  coin (the held-out side untouched), so the labels carry no information.

Both evaluate on the same held-out prompts (10% of prompt_ids, seeded) with the true labels.
The two replies of a pair have the same form and length, so an untrained model is near 50%
and nothing but the labels can move it.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest
import torch

from builders.worlds.toy_world import STRONG, column_steps, sft_rows, toy_manifest, toy_problems
from training.pair_data import is_heldout
from training.reward_model import read_eval
from training.runner import run_cascade
from training.step_log import read_log

torch.set_num_threads(1)  # two shared cores: more threads only spin
HELDOUT = 0.1


def slipped(answer: str, rng: random.Random) -> str:
    """`answer` with one digit replaced (never a leading zero)."""
    i = rng.randrange(len(answer))
    digits = [d for d in "0123456789" if d != answer[i] and (i or d != "0" or len(answer) == 1)]
    return answer[:i] + rng.choice(digits) + answer[i + 1 :]


def toy_preference_rows(problems: list[dict], per_problem: int, seed: int) -> list[dict]:
    """`preference_pairs`-shaped rows: the worked reply vs the same working with a slipped boxed
    answer, `per_problem` distinct slips per problem; category = the answer's digit count."""
    rng = random.Random(f"toy-pairs:{seed}")
    rows = []
    for p in problems:
        a, _, b = p["problem"].removeprefix("What is ").removesuffix("?").split()
        steps, _ = column_steps(int(a), int(b), "+")
        working = "<think>\n" + "\n".join(steps) + "\n</think>\n"
        slips: set[str] = set()
        while len(slips) < per_problem:
            slips.add(slipped(p["answer"], rng))
        for k, slip in enumerate(sorted(slips)):
            rows.append(
                {
                    "uid": f"{p['uid']}/{k}",
                    "prompt_id": hashlib.sha256(p["problem"].encode()).hexdigest(),
                    "source": "toy_world",
                    "category": f"{len(p['answer'])}-digit answer",
                    "messages": json.dumps([{"role": "user", "content": p["problem"]}]),
                    "chosen": working + f"\\boxed{{{p['answer']}}}",
                    "rejected": working + f"\\boxed{{{slip}}}",
                }
            )
    rng.shuffle(rows)
    return rows


def shuffled_labels(rows: list[dict], seed: int) -> list[dict]:
    """The control's rows: each training-side pair swapped with probability 1/2."""
    rng = random.Random(f"control:{seed}")
    out = []
    for row in rows:
        row = dict(row)
        if not is_heldout(row["prompt_id"], 0, HELDOUT) and rng.random() < 0.5:
            row["chosen"], row["rejected"] = row["rejected"], row["chosen"]
        out.append(row)
    return out


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rm_stage(name: str, data: Path, content_hash: str) -> dict:
    return {
        "name": name,
        "type": "reward_model",
        "backbone": "stage:sft",
        "datasets": [{"ref": data.name, "content_hash": content_hash}],
        "max_seq_len": 128,
        "epochs": 1,
        "heldout_fraction": HELDOUT,
        "heldout_seed": 0,
        "eval_micro_batch_size": 64,
        "optimizer": {
            "learning_rate": 1e-3,
            "schedule": "cosine",
            "warmup_steps": 5,
            "min_learning_rate_ratio": 0.1,
        },
        "batch": {"global_batch_size": 32, "micro_batch_size": 32},
        "deepspeed": {"zero_stage": 0, "bf16": False, "gradient_clipping": 1.0},
        "gradient_checkpointing": False,
        "checkpoint_every_steps": 1000,
        "seed": 1,
    }


@pytest.mark.slow
def test_reward_model_learns_a_checkable_preference_and_a_shuffled_control_does_not(
    tmp_path: Path,
) -> None:
    sft_problems = toy_problems(800, seed=0, digits=(1, 2))
    sft_hash = write_jsonl(tmp_path / "sft.jsonl", sft_rows(sft_problems))
    problems = toy_problems(3000, seed=1, digits=(1, 2), exclude=sft_problems)
    pairs = toy_preference_rows(problems, per_problem=3, seed=1)
    pairs_hash = write_jsonl(tmp_path / "pairs.jsonl", pairs)
    control_hash = write_jsonl(tmp_path / "pairs_control.jsonl", shuffled_labels(pairs, 1))

    manifest = toy_manifest("toy_rm", tmp_path / "sft.jsonl", sft_hash, STRONG, tmp_path, 0)
    manifest["output_dir"] = "run"
    manifest["stages"][0]["datasets"][0]["ref"] = "sft.jsonl"
    manifest["stages"].append(rm_stage("rm", tmp_path / "pairs.jsonl", pairs_hash))
    manifest["stages"].append(
        rm_stage("rm_control", tmp_path / "pairs_control.jsonl", control_hash)
    )
    path = tmp_path / "toy_rm.json"
    path.write_text(json.dumps(manifest, indent=2))
    finals = run_cascade(path, say=lambda _: None)
    assert [f.parent.name for f in finals] == ["sft", "rm", "rm_control"]

    run = tmp_path / "run"
    learned, control = read_eval(run / "rm" / "final"), read_eval(run / "rm_control" / "final")
    start = read_log(run / "rm")[0]
    assert start["step"] == 0 and read_log(run / "rm_control")[0] == start  # same start
    print(
        f"\ntoy reward model, held-out pairwise accuracy ({learned['pairs']} pairs): "
        f"untrained {start['eval_accuracy']}, trained {learned['accuracy']} "
        f"{ {k: v['accuracy'] for k, v in learned['by_category'].items()} }; "
        f"shuffled-label control {control['accuracy']}"
    )
    assert learned["pairs"] == control["pairs"] >= 600
    assert abs(start["eval_accuracy"] - 0.5) <= 0.15  # untrained: near chance
    # 0.844 on one machine, 0.793 on another (the same seeds, each CPU's float path)
    assert learned["accuracy"] >= 0.75
    assert learned["accuracy"] - start["eval_accuracy"] >= 0.2
    assert abs(control["accuracy"] - 0.5) <= 0.1
    # the evaluation is written next to the model and into the run log, the same numbers
    last = read_log(run / "rm")[-1]
    assert last["eval_accuracy"] == learned["accuracy"]
    assert last["eval_by_category"] == learned["by_category"]
    assert set(learned["by_source"]) == {"toy_world"}
    trained_on = json.loads((run / "rm" / "final" / "trained_on.json").read_text())
    assert trained_on["eval"]["accuracy"] == learned["accuracy"]
    assert trained_on["init_from"].endswith("sft/final")
