"""The `toy` profile of the recipes: toy domains' prompts and tiny models of our own.

No real teacher runs on our machines, so `--profile toy` proves the model-in-the-loop steps
for real: tiny weak and strong models per toy domain (trained once per lake by the project's
SFT trainer, on CPU, in a minute or two each) answer the domain's prompts through the `hf`
backend, and every pass rate, majority answer, response filter, judge verdict and bucket is
computed from what they actually generated.

Domains (`builders.worlds.toy_world`, `builders.worlds.toy_domains`): `math` (column arithmetic),
`general` (chat requests, IF instructions, the off-topic rewrites and judgements), `code`
(tiny functions with tests) and `swe` (tiny repositories with a planted bug). A model is
named by its domain, tier and a hash of its weights (`toy-code-strong@1a2b3c4d5e6f`) and
loaded from its directory through `backend_options.path`, so rows never hold a machine's
path and the same models build the same rows in any lake.

The `toy-heldout` profile of an RL recipe runs the same recipe on prompts no other split
uses: the held-out set the toy cascade's stage evaluates on.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from builders.worlds import toy_domains as td
from builders.worlds.toy_world import (
    STRONG,
    WEAK,
    ToyModelSpec,
    toy_problems,
    train_chat_models,
    train_toy_models,
    write_jsonl,
)

RL_PROMPTS = 480
"""Math RL prompts drawn (387 survive the recipe's filters). With 120 (99 kept) the toy
cascade's math RL, at 8 prompts a step, learned its prompts by heart: training reward 0.10 ->
0.57, held-out pass rate flat at 0.14. At 32 prompts a step on this pool the held-out rate
doubles over the three phases (0.10 -> 0.21; bench/README.md)."""
HELDOUT_PROMPTS = 120
SFT_PROMPTS = 80
EVAL_PROMPTS = 60
DIGITS = (1, 2)
TIERS = ("weak", "strong")


@dataclass(frozen=True)
class ToyModel:
    """A tiny model of the toy world: the name rows record, and where its weights are."""

    name: str
    path: Path

    def sampler(
        self,
        *,
        k: int,
        temperature: float = 1.0,
        max_new_tokens: int = 96,
        mode: str = "think",
    ) -> dict[str, Any]:
        """Recipe parameters for sampling this model k times (one sampler dict)."""
        return {
            "model": self.name,
            "backend": "hf",
            "backend_options": {"batch_size": 32, "num_threads": 2, "path": str(self.path)},
            "mode": mode,
            "mode_switch": "flag",
            "k": k,
            "temperature": temperature,
            "top_p": 1.0,
            "max_new_tokens": max_new_tokens,
        }

    def flat(self, *, k: int, max_new_tokens: int, temperature: float = 1.0) -> dict[str, Any]:
        """The same, as the code and SWE recipes spell a teacher (flat parameters)."""
        return {
            "teacher": self.name,
            "backend": "hf",
            "backend_options": {"batch_size": 16, "num_threads": 2, "path": str(self.path)},
            "mode": "think",
            "k": k,
            "max_new_tokens": max_new_tokens,
            "temperature": temperature,
            "top_p": 1.0,
        }


def toy_model_name(domain: str, tier: str, path: Path) -> str:
    """`toy-<domain>-<tier>@<first 12 hex of the weights' sha256>`."""
    digest = hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()
    return f"toy-{domain}-{tier}@{digest[:12]}"


def toy_root(workdir: Path) -> Path:
    """The toy files and models of the lake `workdir` (`<lake>/work/<recipe>`) belongs to."""
    return (workdir.parent / "toy").resolve()


# ====================================================================== math ==================


@dataclass(frozen=True)
class ToySetup:
    """Where the toy arithmetic files and models of a lake are."""

    models: dict[str, ToyModel]
    rl_prompts: Path
    sft_prompts: Path
    eval_file: Path
    heldout_prompts: Path

    def sampler(self, name: str, *, k: int, temperature: float = 1.0) -> dict[str, Any]:
        """Recipe parameters for sampling toy model `name` ("weak" or "strong") k times."""
        return self.models[name].sampler(k=k, temperature=temperature)


def toy_setup(workdir: Path) -> ToySetup:
    """The toy arithmetic files and models for the lake `workdir` belongs to (made once)."""
    root = toy_root(workdir)
    paths = {name: root / "models" / name / "sft" / "final" for name in TIERS}
    if not all((m / "config.json").is_file() for m in paths.values()):
        scaled = scaled_specs(root, {"weak": WEAK, "strong": STRONG})
        paths = train_toy_models(root / "models", weak=scaled["weak"], strong=scaled["strong"])
    models = {name: ToyModel(toy_model_name("math", name, p), p) for name, p in paths.items()}
    # The digits the toy models were trained on: the pass rates then spread from easy
    # (one digit, no carry) to hard (two digits, two carries).
    eval_rows = toy_problems(EVAL_PROMPTS, seed=102, digits=DIGITS)
    sft_rows = toy_problems(SFT_PROMPTS, seed=101, digits=DIGITS, exclude=eval_rows)
    rl_rows = toy_problems(RL_PROMPTS, seed=103, digits=DIGITS, exclude=eval_rows + sft_rows)
    heldout = toy_problems(
        HELDOUT_PROMPTS, seed=104, digits=DIGITS, exclude=eval_rows + sft_rows + rl_rows
    )
    files = {}
    for name, rows in (
        ("rl_prompts", rl_rows),
        ("sft_prompts", sft_rows),
        ("eval", eval_rows),
        ("heldout_prompts", heldout),
    ):
        files[name] = root / f"{name}.jsonl"
        write_jsonl(files[name], rows)
    return ToySetup(
        models, files["rl_prompts"], files["sft_prompts"], files["eval"], files["heldout_prompts"]
    )


# ====================================================================== other domains =========

DOMAIN_SPECS: dict[str, dict[str, ToyModelSpec]] = {
    "general": {
        "weak": ToyModelSpec(96, 2, 300, max_seq_len=256, max_positions=512, vocab=400),
        "strong": ToyModelSpec(96, 2, 800, max_seq_len=256, max_positions=512, vocab=400),
    },
    # Under Qwen2's split (one token per digit) 200 / 600 steps gave pass@1 0.04 / 0.08 on
    # the RL split: too few correct answers for code SFT and no RL prompts; 800 / 2000 give
    # 0.50 / 0.78 (k=4, T=1, 100 prompts).
    "code": {
        "weak": ToyModelSpec(96, 2, 800, vocab=300, quick_floor=800),
        "strong": ToyModelSpec(96, 2, 2000, vocab=300, quick_floor=2000),
    },
    "swe": {
        "weak": ToyModelSpec(128, 2, 250, batch=8, max_seq_len=640, max_positions=1024, vocab=500),
        # a shorter training gets the numbers of its repairs wrong (at 400 steps none was right)
        "strong": ToyModelSpec(
            128, 2, 800, batch=8, max_seq_len=640, max_positions=1024, vocab=500, quick_floor=800
        ),
    },
}
"""Each domain's weak and strong teacher: the weak one trains a third to a half as long. A quick
build (`TEACHER_STEPS_FILE`) shortens only the general teachers: the math, code and SWE ones
are cheap to train whole, and shortened they fail the pass-rate filters until a set is empty."""

SLIP = 0.3
"""Share of the toy teachers' training answers that are wrong in a checkable way."""


def toy_models(workdir: Path, domain: str) -> dict[str, ToyModel]:
    """The weak and strong models of a toy domain for this lake (trained on first use)."""
    root = toy_root(workdir)
    where = root / "models" / domain
    paths = {tier: where / tier / "sft" / "final" for tier in TIERS}
    if not all((p / "config.json").is_file() for p in paths.values()):
        chats = teacher_chats(root, domain)
        paths = train_chat_models(where, chats, scaled_specs(root, DOMAIN_SPECS[domain]))
    return {tier: ToyModel(toy_model_name(domain, tier, p), p) for tier, p in paths.items()}


TEACHER_STEPS_FILE = "teacher_steps.json"
"""`{"scale": 0.25}` in a lake's toy dir trains its toy teachers a quarter as long: a smoke run
of every step (`python -m builders.worlds.toy_cascade --quick`), whose teachers are worse."""


def scaled_specs(root: Path, specs: dict[str, ToyModelSpec]) -> dict[str, ToyModelSpec]:
    """`specs` with their steps scaled by the lake's `TEACHER_STEPS_FILE` (if any)."""
    path = root / TEACHER_STEPS_FILE
    if not path.is_file():
        return specs
    scale = float(json.loads(path.read_text())["scale"])
    return {
        name: replace(s, steps=max(s.quick_floor, round(s.steps * scale)))
        for name, s in specs.items()
    }


def teacher_chats(root: Path, domain: str) -> list[dict]:
    """A domain's teacher SFT chats (on prompts of their own, apart from the recipes')."""
    if domain == "general":
        return td.chat_teacher_chats(0, SLIP) + td.if_teacher_chats(0, SLIP)
    if domain == "code":
        return td.code_teacher_chats(td.program_problems(1500, seed=50), 0, SLIP)
    if domain == "swe":
        instances = td.repositories(swe_repos(root), n_repos=20, per_repo=15, seed=50)
        return td.swe_teacher_chats(instances, swe_repos(root), 0, SLIP)
    raise ValueError(f"no toy domain {domain!r}")


# ====================================================================== source files ==========


def toy_file(workdir: Path, name: str, rows: list[dict]) -> str:
    """Write a toy source file under the lake's toy dir; its path, for `--source`."""
    path = toy_root(workdir) / "sources" / f"{name}.jsonl"
    td.write_jsonl(path, rows)
    return str(path)


def general_sft_sources(workdir: Path) -> list[str]:
    """`sft_general`'s toy prompts: chat requests and IF requests with instructions."""
    return [
        toy_file(workdir, "general_chat", td.chat_prompts("sft")),
        toy_file(workdir, "general_if", td.if_sft_prompts()),
    ]


CODE_SPLITS = {"sft": (60, 400), "rl": (61, 200), "heldout": (62, 60), "benchmark": (63, 20)}
"""split -> (seed, rows) of the toy code problems."""


def code_rows(split: str) -> list[dict]:
    """A split of toy code problems, disjoint from the splits before it in `CODE_SPLITS`."""
    taken: list[dict] = []
    for name, (seed, n) in CODE_SPLITS.items():
        rows = td.program_problems(n, seed=seed, exclude=taken)
        if name == split:
            return rows
        taken += rows
    raise ValueError(f"no toy code split {split!r}")


def code_benchmark_dir(workdir: Path) -> Path:
    """A toy benchmark of code problems with tests, for decontamination by behaviour, and the
    problem URLs it was published under (two toy SFT problems copy one of each)."""
    where = toy_root(workdir) / "code_benchmarks"
    bench = code_rows("benchmark")
    copies = code_rows("sft")[:2]
    rows = [{"problem": r["problem"], "tests": r["tests"], "url": r["url"]} for r in bench + copies]
    td.write_jsonl(where / "toy_code_bench.jsonl", rows)
    (where / "urls.txt").write_text(
        f"# toy judge problems used for evaluation\n{bench[0]['url']}\n"
    )
    return where


def swe_repos(root: Path) -> Path:
    return root / "swe" / "repos"


SWE_SPLITS = {"pool": (7, 10, 8), "heldout": (8, 12, 8)}
"""split -> (seed, repositories, commits each) of the toy SWE instances the recipes read. The
recipe keeps only instances its teacher's repairs fail (about one in ten), so the held-out
split is the larger: 4 repositories left 3 held-out prompts, too few to score a stage on."""


def swe_sources(workdir: Path, split: str) -> list[str]:
    """SWE-bench-shaped instance files of a split (repositories made once): the instances,
    and a second source repeating two of them (the (repo, commit) dedup drops them)."""
    root = toy_root(workdir)
    seed, repos, commits = SWE_SPLITS[split]
    marker = root / "swe" / f"{split}.json"
    if marker.is_file():
        rows = json.loads(marker.read_text())
    else:
        instances = td.repositories(swe_repos(root), repos, commits, seed=seed)
        rows = td.instance_rows(instances, source=f"toy_swe_{split}")
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps(rows))
    again = [
        {**r, "instance_id": r["instance_id"] + "-again", "source": "toy_swe_mirror"}
        for r in rows[:2]
    ]
    return [
        toy_file(workdir, f"swe_{split}", rows),
        toy_file(workdir, f"swe_{split}_mirror", again),
    ]


def verified_repos_file(workdir: Path) -> str:
    """The toy 'SWE-bench Verified' repositories: one of the pool's, whose instances go."""
    path = toy_root(workdir) / "swe" / "verified_repos.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"toy/proj{SWE_SPLITS['pool'][0]}00\n")
    return str(path)


def chat_sources(workdir: Path, name: str) -> str:
    """A toy chat source file: `helpsteer3` / `helpsteer2` pairs (half the pair requests
    each; HelpSteer3 also has a few math and code pairs, which RLHF leaves out), `offtopic`
    requests, `heldout` pairs (the RLHF stage's held-out requests), `benchmark` (the held-out
    requests as a decontamination set) and `training_requests` (the pair requests as one)."""
    pairs = td.chat_prompts("pairs")
    half = len(pairs) // 2
    if name == "helpsteer3":
        sums = toy_problems(6, seed=105, digits=(1, 2))
        extra = td.helpsteer3_rows(
            [{"problem": f"{r['problem']} Tell me about the honey too."} for r in sums], seed=2
        )
        for row in extra[:3]:
            row["domain"] = "math"
        for row in extra[3:]:
            row["domain"] = "code"
        rows = td.helpsteer3_rows(pairs[:half], seed=0, per_prompt=4) + extra
    elif name == "helpsteer2":
        rows = td.helpsteer2_rows(pairs[half:], seed=1)
    elif name == "offtopic":
        rows = td.chat_prompts("offtopic")
    elif name == "heldout":
        rows = td.helpsteer3_rows(td.chat_prompts("heldout"), seed=3, tie_share=0.0)
    elif name == "benchmark":
        rows = [{"problem": r["problem"]} for r in td.chat_prompts("heldout")]
    elif name == "training_requests":
        rows = [{"problem": r["problem"]} for r in pairs + td.chat_prompts("offtopic")]
    else:
        raise ValueError(f"no toy chat source {name!r}")
    return toy_file(workdir, f"chat_{name}", rows)


def if_sources(workdir: Path, split: str) -> str:
    """Base requests of a toy IF split (`rl`, `rl_ifbench`, `heldout`)."""
    return toy_file(workdir, f"if_{split}", td.if_prompts(split))
