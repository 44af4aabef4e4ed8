"""The toy world: a domain whose answers code can check, and tiny models of our own trained on it.

No real model runs on our machines, so the whole path (generation, verification, pass rates,
difficulty filtering, SFT, GRPO) is proved on column arithmetic: "What is 47 + 85?", answer
132, with a worked reasoning that goes column by column. Everything is deterministic in its
seed.

- `toy_problems`: prompt rows shaped like a lake prompts table (`uid`, `problem`, `answer`,
  `difficulty`, `source`); `difficulty` = digit columns + carries (or borrows), the work a
  solver must get right.
- `sft_rows`: the same problems as chats whose reply is `<think>` column steps `</think>` and
  `\\boxed{N}`, which `curation.verify.math_reward` checks.
- `train_toy_models`: tiny weak and strong models trained in-process on CPU by the project's
  SFT trainer (`training.runner.run_cascade` on a manifest written here), for pass-rate work.

`python -m builders.worlds.toy_world --out DIR` writes the files `manifests/toy_world.json` pins.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lake.progress import phase

SOURCE = "toy_world"


def column_steps(a: int, b: int, op: str) -> tuple[list[str], int]:
    """Column-by-column working of `a op b` (right to left) and the carries/borrows made.

    >>> column_steps(47, 85, "+")
    (['7+5=12', '4+8+1=13'], 2)
    >>> column_steps(52, 17, "-")
    (['12-7=5', '4-1=3'], 1)
    """
    xs, ys = str(a)[::-1], str(b)[::-1]
    steps, carry, events = [], 0, 0
    for i in range(max(len(xs), len(ys))):
        x = int(xs[i]) if i < len(xs) else 0
        y = int(ys[i]) if i < len(ys) else 0
        if op == "+":
            total = x + y + carry
            steps.append(f"{x}+{y}{'+1' if carry else ''}={total}")
            carry = 1 if total >= 10 else 0
        else:
            top = x - carry
            carry = 1 if top < y else 0
            top += 10 * carry
            steps.append(f"{top}-{y}={top - y}")
        events += carry
    if op == "-":  # leading zeros of the difference are not worth a line
        while len(steps) > 1 and steps[-1].endswith("=0") and steps[-1].startswith("0-0"):
            steps.pop()
    return steps, events


def toy_problems(
    n: int,
    *,
    seed: int,
    digits: tuple[int, int] = (1, 3),
    ops: Sequence[str] = ("+",),
    exclude: Sequence[dict] = (),
) -> list[dict]:
    """`n` distinct problems; operands have `digits[0]..digits[1]` digits; `a - b` keeps
    a >= b. Problems in `exclude` (e.g. a held-out set) are never produced."""
    rng = random.Random(f"{SOURCE}:{seed}")
    taken = {row["problem"] for row in exclude}
    rows: list[dict] = []
    attempts = 0
    while len(rows) < n:
        attempts += 1
        if attempts > 100 * n + 1000:
            raise ValueError(f"cannot draw {n} distinct problems with digits {digits}")
        op = rng.choice(list(ops))
        a, b = _operand(rng, digits), _operand(rng, digits)
        if op == "-" and a < b:
            a, b = b, a
        problem = f"What is {a} {op} {b}?"
        if problem in taken:
            continue
        taken.add(problem)
        steps, events = column_steps(a, b, op)
        answer = a + b if op == "+" else a - b
        rows.append(
            {
                "uid": f"{SOURCE}-{seed}-{len(rows)}",
                "problem": problem,
                "answer": str(answer),
                "difficulty": len(steps) + events,
                "source": SOURCE,
            }
        )
    return rows


def _operand(rng: random.Random, digits: tuple[int, int]) -> int:
    width = rng.randint(*digits)
    return rng.randint(10 ** (width - 1) if width > 1 else 0, 10**width - 1)


def solution(row: dict) -> tuple[str, str]:
    """(reasoning, reply) of a toy problem: the column steps, and `\\boxed{answer}`."""
    words = row["problem"].removeprefix("What is ").removesuffix("?").split()
    steps, _ = column_steps(int(words[0]), int(words[2]), words[1])
    return "\n".join(steps), f"\\boxed{{{row['answer']}}}"


def sft_rows(
    problems: Sequence[dict], wrong_answer_share: float = 0.0, seed: int = 0
) -> list[dict]:
    """Chats for SFT: the problem, then `<think>` steps `</think>` and the boxed answer.

    `wrong_answer_share` of the replies (seeded) box a wrong answer after correct steps (one
    digit changed): a sloppy teacher, whose students copy the slip at that rate. A verifier
    reward can teach them out of it, which makes the toy GRPO run's gain measurable quickly.
    """
    rng = random.Random(f"{SOURCE}:sloppy:{seed}")
    out = []
    for row in problems:
        reasoning, reply = solution(row)
        if rng.random() < wrong_answer_share:
            reply = f"\\boxed{{{_slip(row['answer'], rng)}}}"
        out.append(
            {
                "uid": row["uid"],
                "messages": [
                    {"role": "user", "content": row["problem"]},
                    {"role": "assistant", "content": reply, "reasoning": reasoning},
                ],
            }
        )
    return out


def _slip(answer: str, rng: random.Random) -> str:
    """`answer` with one digit replaced by another."""
    i = rng.randrange(len(answer))
    digit = rng.choice(
        [d for d in "0123456789" if d != answer[i] and (i or d != "0" or len(answer) == 1)]
    )
    return answer[:i] + digit + answer[i + 1 :]


def write_jsonl(path: Path, rows: Sequence[dict]) -> str:
    """Write rows as jsonl (stable key order) and return the file's sha256."""
    import hashlib

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------ the files of the toy cascade


TOY_FILES = {"sft": (0, 800), "rl": (1, 2000), "eval": (2, 200)}
"""name -> (seed, rows) of the files `manifests/toy_world.json` trains on."""


def write_toy_files(
    out: Path, digits: tuple[int, int] = (1, 2), wrong_answer_share: float = 0.4
) -> dict[str, tuple[Path, str]]:
    """The toy cascade's data: SFT chats from a sloppy teacher (`wrong_answer_share` of its
    boxed answers are slips), RL prompts, held-out prompts (disjoint from both).

    Returns name -> (path, sha256). Deterministic: the manifest pins these hashes.
    """
    held_out = toy_problems(TOY_FILES["eval"][1], seed=TOY_FILES["eval"][0], digits=digits)
    sft = toy_problems(
        TOY_FILES["sft"][1], seed=TOY_FILES["sft"][0], digits=digits, exclude=held_out
    )
    rl = toy_problems(
        TOY_FILES["rl"][1], seed=TOY_FILES["rl"][0], digits=digits, exclude=held_out + sft
    )
    files = {"sft": sft_rows(sft, wrong_answer_share), "rl": rl, "eval": held_out}
    return {
        name: ((p := out / f"{name}.jsonl"), write_jsonl(p, rows)) for name, rows in files.items()
    }


# ------------------------------------------------------------------ weak and strong models ----


@dataclass(frozen=True)
class ToyModelSpec:
    """A tiny Qwen2 and how long the SFT trainer trains it."""

    hidden_size: int
    layers: int
    steps: int
    learning_rate: float = 3e-3
    batch: int = 16
    max_seq_len: int = 128  # packed SFT sequence length
    max_positions: int = 256
    vocab: int = 300  # in-process BPE trained on the model's own SFT chats
    quick_floor: int = 10  # the fewest steps a shortened (smoke-run) training keeps


WEAK = ToyModelSpec(hidden_size=96, layers=2, steps=150, quick_floor=150)
STRONG = ToyModelSpec(hidden_size=96, layers=2, steps=300, quick_floor=300)


def toy_manifest(
    name: str, data: Path, content_hash: str, spec: ToyModelSpec, out_dir: Path, seed: int
) -> dict:
    """A one-stage SFT manifest for a tiny model on toy chats (CPU, fp32, ZeRO-0)."""
    return {
        "name": f"toy_{name}",
        "base_model": "tiny-random:qwen2",
        "model_overrides": {
            "hidden_size": spec.hidden_size,
            "intermediate_size": 2 * spec.hidden_size,
            "num_hidden_layers": spec.layers,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": spec.max_positions,
        },
        "tokenizer": f"in-process-bpe:{spec.vocab}",
        "attn_implementation": "sdpa",
        "output_dir": str(out_dir / name),
        "stages": [
            {
                "name": "sft",
                "type": "sft",
                "datasets": [{"ref": str(data), "content_hash": content_hash}],
                "max_seq_len": spec.max_seq_len,
                "max_steps": spec.steps,
                "packing": True,
                "optimizer": {
                    "learning_rate": spec.learning_rate,
                    "schedule": "cosine",
                    "warmup_steps": max(1, spec.steps // 10),
                    "min_learning_rate_ratio": 0.1,
                },
                "batch": {"global_batch_size": spec.batch, "micro_batch_size": spec.batch},
                "deepspeed": {"zero_stage": 0, "bf16": False, "gradient_clipping": 1.0},
                "gradient_checkpointing": False,
                "checkpoint_every_steps": spec.steps,
                "keep_checkpoints": 1,
                "seed": seed,
            }
        ],
    }


def train_toy_models(
    out_dir: str | Path,
    *,
    seed: int = 0,
    train_rows: int = 800,
    digits: tuple[int, int] = (1, 2),
    weak: ToyModelSpec = WEAK,
    strong: ToyModelSpec = STRONG,
) -> dict[str, Path]:
    """Train a weak and a strong tiny model on toy SFT chats; return their final dirs.

    Both are trained in-process on CPU by `training.runner.run_cascade` from manifests
    written to `out_dir` (about a minute of CPU on two cores). The weak model gets half the
    strong one's steps: greedy pass rates on held-out 1-2 digit sums were 0.18 vs 0.62 when
    this was written (tests/test_toy_world.py prints them). Each final dir is
    a transformers model with its tokenizer and chat template, loadable by
    `curation.generate.hf.HfBackend`; prompt it with a toy `problem` in think mode and check
    the reply with `curation.verify.math_reward` against `answer`.

    Returns {"weak": Path, "strong": Path}.
    """
    problems = toy_problems(train_rows, seed=seed, digits=digits)
    specs = {"weak": weak, "strong": strong}
    return train_chat_models(out_dir, sft_rows(problems), specs, seed)


def train_chat_models(
    out_dir: str | Path,
    chats: Sequence[dict],
    specs: dict[str, ToyModelSpec],
    seed: int = 0,
) -> dict[str, Path]:
    """Train one tiny model per spec on the same SFT chats (rows with `messages`); return
    {name: final dir}, each a transformers model with its tokenizer and chat template."""
    from training.runner import run_cascade  # the trainer is heavy: import only when training

    out = Path(out_dir).resolve()  # the manifests written here name files by absolute path
    content_hash = write_jsonl(out / "sft.jsonl", chats)
    finals = {}
    for name, spec in specs.items():
        manifest = out / f"{name}.json"
        spec_dict = toy_manifest(name, out / "sft.jsonl", content_hash, spec, out, seed)
        manifest.write_text(json.dumps(spec_dict, indent=2))
        with phase(f"toy model {name}", unit="models"):
            (final,) = run_cascade(manifest, say=lambda _: None)
        finals[name] = final
    return finals


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="write the toy cascade's data files")
    parser.add_argument("--out", default="build/toy_world")
    args = parser.parse_args()
    for name, (path, digest) in write_toy_files(Path(args.out)).items():
        print(f"{name}: {path} sha256 {digest}")


if __name__ == "__main__":
    main()
