"""The toy agentic world: products of two 3-digit numbers, which a tiny model cannot compute
but can get from the `python` tool.

A teacher trajectory (`tool_trajectory`) calls `python` with `print(A * B)`, reads the tool's
output and answers `\\boxed{product}`: the model must learn to copy the operands into a call
and the tool's output into its answer. `toy_agentic_manifest` trains a tiny model on such
trajectories (SFT, loss on the model's turns only), then runs GRPO with the `python`
environment on other products and scores held-out ones at every evaluation; a
shuffled-reward control (`cascade train --control shuffled-rewards`) is the baseline the
learning is measured against (bench/toy_agentic.py).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from builders.worlds.toy_world import write_jsonl
from curation.environments.python import PYTHON_TOOL
from curation.verify.workplace import workplace_task


def product_tasks(
    n: int, seed: int, exclude: set[str] = frozenset(), digits: int = 3
) -> list[dict]:
    """`n` distinct tasks `What is A * B?` (A, B of `digits` digits: 100..999 by default),
    none of `exclude`'s uids."""
    rng = random.Random(seed)
    rows: list[dict] = []
    seen = set(exclude)
    low, high = 10 ** (digits - 1), 10**digits - 1
    while len(rows) < n:
        a, b = rng.randint(low, high), rng.randint(low, high)
        uid = f"mul:{a}x{b}"
        if uid in seen:
            continue
        seen.add(uid)
        rows.append({"uid": uid, "problem": f"What is {a} * {b}?", "answer": str(a * b)})
    return rows


def guessed_answer(row: dict) -> dict:
    """A teacher slip: the answer guessed without the tool (wrong in its last digits)."""
    a, b = (int(x) for x in row["uid"].removeprefix("mul:").split("x"))
    guess = a * b + random.Random(row["uid"]).choice((-1, 1)) * random.Random(row["uid"]).randint(
        1, 99
    )
    return {
        "uid": row["uid"],
        "messages": [
            {"role": "user", "content": row["problem"]},
            {"role": "assistant", "content": f"\\boxed{{{guess}}}"},
        ],
        "tools": [PYTHON_TOOL],
    }


def tool_trajectory(row: dict) -> dict:
    """The teacher's episode for a task: one python call, its output, the boxed answer."""
    a, b = row["uid"].removeprefix("mul:").split("x")
    call = {"name": "python", "arguments": {"code": f"print({a} * {b})"}}
    return {
        "uid": row["uid"],
        "messages": [
            {"role": "user", "content": row["problem"]},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": f"{int(a) * int(b)}\n"},
            {"role": "assistant", "content": f"\\boxed{{{row['answer']}}}"},
        ],
        "tools": [PYTHON_TOOL],
    }


def write_toy_agentic_files(
    data: Path,
    seed: int = 0,
    sft: int = 400,
    rl: int = 400,
    held_out: int = 64,
    no_tool_share: float = 0.0,
    digits: int = 3,
) -> dict[str, str]:
    """sft.jsonl (trajectories; `no_tool_share` of them the teacher guessing without the
    tool), rl.jsonl and eval.jsonl (tasks of `digits`-digit operands), disjoint; their
    sha256."""
    evaluation = product_tasks(held_out, seed + 2, digits=digits)
    taken = {r["uid"] for r in evaluation}
    rl_rows = product_tasks(rl, seed + 1, taken, digits=digits)
    taken |= {r["uid"] for r in rl_rows}
    rng = random.Random(f"no_tool:{seed}")
    sft_rows = [
        guessed_answer(r) if rng.random() < no_tool_share else tool_trajectory(r)
        for r in product_tasks(sft, seed, taken, digits=digits)
    ]
    return {
        "sft": write_jsonl(data / "sft.jsonl", sft_rows),
        "rl": write_jsonl(data / "rl.jsonl", rl_rows),
        "eval": write_jsonl(data / "eval.jsonl", evaluation),
    }


def toy_agentic_manifest(
    out: Path,
    *,
    seed: int = 0,
    sft_steps: int = 150,
    grpo_steps: int = 20,
    prompts_per_step: int = 8,
    rollouts_per_prompt: int = 8,
    held_out: int = 64,
    hidden_size: int = 64,
    layers: int = 2,
    sft_learning_rate: float = 3e-3,
    sft_rows: int = 4000,
    grpo_learning_rate: float = 1e-4,
    no_tool_share: float = 0.0,
    temperature: float = 1.0,
    digits: int = 3,
) -> Path:
    """Data and a training manifest (SFT on trajectories -> GRPO in the python environment)
    under `out`; returns the manifest's path."""
    data = out / "data"
    digests = write_toy_agentic_files(
        data,
        seed,
        sft=sft_rows,
        held_out=held_out,
        no_tool_share=no_tool_share,
        digits=digits,
    )
    prompt = {"prompt_column": "problem"}
    spec = {
        "name": "toy_agentic",
        "base_model": "tiny-random:qwen2",
        "model_overrides": {
            "hidden_size": hidden_size,
            "intermediate_size": 2 * hidden_size,
            "num_hidden_layers": layers,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 512,
        },
        "tokenizer": "in-process-bpe:400",
        "attn_implementation": "sdpa",
        "output_dir": str(out / "run"),
        "stages": [
            {
                "name": "sft",
                "type": "sft",
                "datasets": [
                    {
                        "ref": str(data / "sft.jsonl"),
                        "content_hash": digests["sft"],
                        "mode": "no_think",
                    }
                ],
                "max_seq_len": 512,
                "max_steps": sft_steps,
                "optimizer": {
                    "learning_rate": sft_learning_rate,
                    "schedule": "cosine",
                    "warmup_steps": 10,
                },
                "batch": {"global_batch_size": 8, "micro_batch_size": 8},
                "deepspeed": {"zero_stage": 0, "bf16": False, "gradient_clipping": 1.0},
                "gradient_checkpointing": False,
                "checkpoint_every_steps": sft_steps,
                "keep_checkpoints": 1,
                "seed": seed,
            },
            {
                "name": "grpo_python",
                "type": "grpo",
                "datasets": [
                    {"ref": str(data / "rl.jsonl"), "content_hash": digests["rl"], **prompt}
                ],
                "environment": "python",
                "episode": {"max_turns": 3, "max_total_tokens": 480, "tool_timeout_s": 5.0},
                "reward": "math_verifier",
                "thinking_fraction": 0.0,
                "max_steps": grpo_steps,
                "temperature": temperature,
                "max_response_len": 40,
                "overlong_filtering": False,
                "batch": {
                    "prompts_per_step": prompts_per_step,
                    "rollouts_per_prompt": rollouts_per_prompt,
                    "micro_batch_size": 16,
                },
                "optimizer": {"learning_rate": grpo_learning_rate, "warmup_steps": 1},
                "deepspeed": {"zero_stage": 0, "bf16": False, "gradient_clipping": 1.0},
                "gradient_checkpointing": False,
                "rollout": {"engine": "hf", "batch_size": 32},
                "checkpoint_every_steps": grpo_steps,
                "keep_checkpoints": 1,
                "seed": seed + 1,
                "evaluation": {
                    "dataset": {
                        "ref": str(data / "eval.jsonl"),
                        "content_hash": digests["eval"],
                        **prompt,
                    },
                    "every_steps": max(1, grpo_steps // 4),
                },
            },
        ],
    }
    path = out / "toy_agentic.json"
    path.write_text(json.dumps(spec, indent=2))
    return path


OPERATIONS = {
    "double": ("twice x", "2 * x"),
    "triple": ("three times x", "3 * x"),
    "square": ("x squared", "x * x"),
    "negate": ("minus x", "-x"),
    "increment": ("x plus one", "x + 1"),
    "halve": ("x divided by two", "x / 2"),
}
SLIPS = ("x + 2", "x * 2 + 1", "x - 1", "x ** 3", "2 + x * x", "x")


def swe_tasks(n: int, seed: int) -> list[dict]:
    """`n` repositories of three one-function modules, one with a wrong expression, with a
    test file per module: swe rows (`problem_statement`, `repo_files`, `test_files`,
    FAIL_TO_PASS: the broken function's test, PASS_TO_PASS: the others')."""
    rng = random.Random(f"toy_swe_env:{seed}")
    rows = []
    for i in range(n):
        names = rng.sample(sorted(OPERATIONS), 3)
        broken = rng.choice(names)
        wrong = rng.choice([e for e in SLIPS if e != OPERATIONS[broken][1]])
        files, tests = {"pkg/__init__.py": ""}, {}
        for name in names:
            words, expression = OPERATIONS[name]
            body = wrong if name == broken else expression
            files[f"pkg/{name}.py"] = (
                f'def {name}(x):\n    """Return {words}."""\n    return {body}\n'
            )
            checks = "".join(
                f"    assert {name}({x}) == {eval(expression, {'x': x})!r}\n" for x in (2, 5)
            )
            tests[f"tests/test_{name}.py"] = (
                f"from pkg.{name} import {name}\n\n\ndef test_{name}():\n{checks}"
            )
        x = next(
            x
            for x in rng.sample(range(2, 10), 8)
            if eval(wrong, {"x": x}) != eval(OPERATIONS[broken][1], {"x": x})
        )
        right, got = eval(OPERATIONS[broken][1], {"x": x}), eval(wrong, {"x": x})
        rows.append(
            {
                "uid": f"toy_swe:{seed}:{i}",
                "problem_statement": f"`{broken}({x})` returns {got!r} but it should return {right!r}.",
                "repo_files": json.dumps(files),
                "test_files": json.dumps(tests),
                "FAIL_TO_PASS": [f"tests/test_{broken}.py::test_{broken}"],
                "PASS_TO_PASS": [f"tests/test_{o}.py::test_{o}" for o in names if o != broken],
            }
        )
    return rows


def workplace_tasks(n: int, seed: int) -> list[dict]:
    """`n` workplace tasks (prompt and `workplace` JSON), seeds from `seed` on."""
    return [workplace_task(seed * 100_000 + i) for i in range(n)]
