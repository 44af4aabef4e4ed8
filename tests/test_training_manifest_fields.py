"""Every training-manifest field is read by the trainer, or validation rejects it where it
would be ignored: nothing a person writes into a manifest is silently dropped.

"Read" means the field's name is read as an attribute (`stage.kl_coef`, `getattr(stage,
"reward_model")`) by a module that imports the schema (the trainer, its reward code) or by
one of the schema's own helper methods that they call (`accumulation_for`,
`resolved_base_url`); validators do not count. A name is matched, not an object, so this
catches a field nobody reads anywhere, and the table of conditional fields below covers the
fields read only in some contexts: each is validated where it is read and rejected, with its
sentence, where it would be ignored.
"""

from __future__ import annotations

import ast
import copy
import typing
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from schemas.training_manifest import TrainingManifest

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "schemas" / "training_manifest.py"
PACKAGES = ("lake", "curation", "training", "builders", "cli")

# Fields no code reads, by design (and why): every other field must be read. (A name match
# elsewhere, e.g. `tokenizer.chat_template`, does not make these read.)
NOT_READ = {
    "_StageBase.notes": "documentation of where a stage's numbers come from; the whole "
    "manifest, notes included, is copied into every trained_on.json",
    "TrainingManifest.chat_template": "a one-value declaration (the trainer has one template, "
    "chatml-think-flags); any other value is a validation error",
}


def schema_models() -> dict[str, type[BaseModel]]:
    """Every model reachable from TrainingManifest, by name."""
    found: dict[str, type[BaseModel]] = {}

    def visit(annotation: object) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation.__name__ in found:
                return
            found[annotation.__name__] = annotation
            for info in annotation.model_fields.values():
                visit(info.annotation)
        for arg in typing.get_args(annotation):
            visit(arg)

    visit(TrainingManifest)
    return found


def schema_fields() -> set[str]:
    """`Owner.field` for every field, named by the class that declares it."""
    out = set()
    for model in schema_models().values():
        for name in model.model_fields:
            owner = next(c for c in model.__mro__ if name in c.__dict__.get("__annotations__", {}))
            out.add(f"{owner.__name__}.{name}")
    return out


def _attribute_reads(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            names.add(node.attr)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
        ):
            names.add(str(node.args[1].value))
    return names


def _imports_schema(tree: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.ImportFrom) and n.module == "schemas.training_manifest")
        or (
            isinstance(n, ast.Import)
            and any(a.name == "schemas.training_manifest" for a in n.names)
        )
        for n in ast.walk(tree)
    )


def read_names() -> set[str]:
    """Attribute names read by the schema's consumers and its non-validator methods."""
    names: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text(), str(path))
            if _imports_schema(tree):
                names |= _attribute_reads(tree)
    for node in ast.walk(ast.parse(SCHEMA.read_text())):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if not isinstance(item, ast.FunctionDef):
                continue
            decorators = {ast.unparse(d).split("(")[0] for d in item.decorator_list}
            if not decorators & {"field_validator", "model_validator"}:
                names |= _attribute_reads(item)
    return names


# ---------------------------------------------------------------- stages to vary

REF = {"ref": "p.jsonl", "content_hash": "0" * 64}


def sft(**over: object) -> dict:
    spec = {
        "name": "s",
        "type": "sft",
        "datasets": [dict(REF)],
        "optimizer": {"learning_rate": 1e-5},
        "batch": {"global_batch_size": 2, "micro_batch_size": 1},
        "max_seq_len": 64,
        "max_steps": 1,
    }
    return {**spec, **over}


def grpo(**over: object) -> dict:
    spec = {
        "name": "g",
        "type": "grpo",
        "datasets": [{**REF, "prompt_column": "problem"}],
        "optimizer": {"learning_rate": 1e-6},
        "batch": {"prompts_per_step": 1, "rollouts_per_prompt": 2},
        "reward": "math_verifier",
        "max_steps": 1,
        "temperature": 1.0,
        "max_response_len": 16,
        "overlong_filtering": False,
    }
    return {**spec, **over}


def rm(**over: object) -> dict:
    spec = {
        "name": "r",
        "type": "reward_model",
        "backbone": "some/model",
        "datasets": [dict(REF)],
        "optimizer": {"learning_rate": 1e-6},
        "batch": {"global_batch_size": 2, "micro_batch_size": 1},
        "max_seq_len": 64,
    }
    return {**spec, **over}


def with_ref(stage: dict, **ref: object) -> dict:
    out = copy.deepcopy(stage)
    out["datasets"][0].update(ref)
    return out


JUDGE = {"base_url": "http://127.0.0.1:1/v1", "model": "judge"}


@dataclass(frozen=True)
class Conditional:
    """A field read only in some contexts: `read` is a stage where it is read (valid),
    `ignored` one where it would be ignored, rejected with `message`."""

    field: str
    where_read: str
    read: dict
    ignored: dict
    message: str


CONDITIONAL = [
    Conditional(
        "GRPOStage.reward_model",
        "rewards reward_model and if_verifier+reward_model (load_reward_model)",
        grpo(reward="reward_model", reward_model="some/rm"),
        grpo(reward="swe_patch_similarity", reward_model="Kimi-Dev-72B (semantic patch judge)"),
        "reward_model is read only by the reward_model and if_verifier+reward_model rewards",
    ),
    Conditional(
        "GRPOStage.reward_model_batch_size",
        "an in-process reward model (SequenceClassifierRM)",
        grpo(reward="reward_model", reward_model="some/rm", reward_model_batch_size=4),
        grpo(reward="reward_model", reward_model="http://rm:8000", reward_model_batch_size=4),
        "reward_model_batch_size batches a reward model scored in-process",
    ),
    Conditional(
        "GRPOStage.patch_judge",
        "reward swe_patch_judge (training.rewards.patch_judge_for)",
        grpo(reward="swe_patch_judge", patch_judge=JUDGE),
        grpo(reward="swe_patch_similarity", patch_judge=JUDGE),
        "patch_judge is read only by the swe_patch_judge reward",
    ),
    Conditional(
        "GRPOStage.max_resample_rounds",
        "batch-level dynamic filtering (grpo.collect_batch)",
        grpo(dynamic_filtering="batch", max_resample_rounds=2),
        grpo(dynamic_filtering="epoch", max_resample_rounds=2),
        "max_resample_rounds applies to dynamic_filtering 'batch', not 'epoch'",
    ),
    Conditional(
        "GRPOStage.readmit_hard",
        "epoch-level dynamic filtering (rl_data.EpochFilter)",
        grpo(dynamic_filtering="epoch", readmit_hard=0.2),
        grpo(dynamic_filtering="batch", readmit_hard=0.2),
        "readmit_hard applies to dynamic_filtering 'epoch', not 'batch'",
    ),
    Conditional(
        "GRPOStage.readmit_easy",
        "epoch-level dynamic filtering (rl_data.EpochFilter)",
        grpo(dynamic_filtering="epoch", readmit_easy=0.05),
        grpo(readmit_easy=0.05),
        "readmit_easy applies to dynamic_filtering 'epoch', not 'none'",
    ),
    Conditional(
        "RolloutEngineSpec.batch_size",
        "the hf engine (HfEngine row slots)",
        grpo(rollout={"engine": "hf", "batch_size": 8}),
        grpo(rollout={"engine": "vllm", "batch_size": 8}),
        "batch_size is the hf engine's decoding width; vllm does not read it",
    ),
    Conditional(
        "RolloutEngineSpec.gpu_memory_utilization",
        "the vllm engine (VllmEngine)",
        grpo(rollout={"engine": "vllm", "gpu_memory_utilization": 0.5}),
        grpo(rollout={"engine": "hf", "gpu_memory_utilization": 0.5}),
        "gpu_memory_utilization is the vllm engine's memory share; hf does not read it",
    ),
    Conditional(
        "OptimizerSpec.min_learning_rate_ratio",
        "a cosine or linear decay (distributed.lr_lambda)",
        sft(
            optimizer={"learning_rate": 1e-5, "schedule": "cosine", "min_learning_rate_ratio": 0.1}
        ),
        sft(
            optimizer={
                "learning_rate": 1e-5,
                "schedule": "constant",
                "min_learning_rate_ratio": 0.1,
            }
        ),
        "min_learning_rate_ratio is the floor of a cosine or linear decay",
    ),
    Conditional(
        "OptimizerSpec.warmup_ratio",
        "a schedule without warmup_steps (distributed.lr_lambda)",
        sft(optimizer={"learning_rate": 1e-5, "warmup_ratio": 0.1}),
        sft(optimizer={"learning_rate": 1e-5, "warmup_ratio": 0.1, "warmup_steps": 3}),
        "give warmup_ratio or warmup_steps, not both",
    ),
    Conditional(
        "SFTStage.epochs",
        "an SFT stage without max_steps (sft.DataStream.total_steps)",
        sft(max_steps=None, epochs=1),
        sft(epochs=1),
        "give epochs or max_steps, not both",
    ),
    Conditional(
        "RewardModelStage.epochs",
        "a reward-model stage without max_steps (pair_data.PairStream)",
        rm(epochs=2),
        rm(epochs=2, max_steps=3),
        "give epochs or max_steps, not both",
    ),
    Conditional(
        "RewardModelStage.heldout_seed",
        "a held-out share (pair_data.is_heldout)",
        rm(heldout_seed=3),
        rm(heldout_fraction=0, heldout_seed=3),
        "heldout_seed applies to the held-out pairs; heldout_fraction 0 holds none out",
    ),
    Conditional(
        "RewardModelStage.eval_every_steps",
        "a held-out share (reward_model.evaluate)",
        rm(eval_every_steps=5),
        rm(heldout_fraction=0, eval_every_steps=5),
        "eval_every_steps applies to the held-out pairs",
    ),
    Conditional(
        "RewardModelStage.eval_micro_batch_size",
        "a held-out share (reward_model.evaluate)",
        rm(eval_micro_batch_size=4),
        rm(heldout_fraction=0, eval_micro_batch_size=4),
        "eval_micro_batch_size applies to the held-out pairs",
    ),
    Conditional(
        "DatasetRef.upsample",
        "SFT and reward-model data (sft_data.upsample, pair_data.stage_pairs)",
        with_ref(sft(), upsample=2),
        with_ref(grpo(), upsample=2),
        "datasets[0]: upsample applies to SFT and reward-model data",
    ),
    Conditional(
        "DatasetRef.upsample",
        "(an RL stage's evaluation prompts)",
        with_ref(rm(), upsample=2),
        grpo(evaluation={"dataset": {**REF, "upsample": 2}, "every_steps": 1}),
        "evaluation.dataset: upsample applies to SFT and reward-model data",
    ),
    Conditional(
        "DatasetRef.response_column",
        "SFT data (sft_data.conversations)",
        with_ref(sft(), prompt_column="q", response_column="a"),
        with_ref(grpo(), response_column="a"),
        "datasets[0]: response_column is for SFT data",
    ),
    Conditional(
        "DatasetRef.reasoning_column",
        "SFT data (sft_data.conversations)",
        with_ref(sft(), prompt_column="q", response_column="a", reasoning_column="r"),
        with_ref(rm(), reasoning_column="r"),
        "datasets[0]: reasoning_column is for SFT data",
    ),
    Conditional(
        "DatasetRef.mode_column",
        "SFT data (sft_data.conversations)",
        with_ref(sft(), mode_column="mode"),
        with_ref(grpo(), mode_column="mode"),
        "datasets[0]: mode_column is for SFT data",
    ),
    Conditional(
        "DatasetRef.mode",
        "policy stages (sft_data.conversations; RL: it must agree with thinking_fraction)",
        with_ref(grpo(thinking_fraction=0.0), mode="no_think"),
        with_ref(rm(), mode="think"),
        "datasets[0]: mode is for policy stages",
    ),
    Conditional(
        "DatasetRef.messages_column",
        "rows without prompt_column (sft_data, rl_data, pair_data)",
        with_ref(grpo(), prompt_column=None, messages_column="chat"),
        with_ref(grpo(), messages_column="chat"),
        "give messages_column or prompt_column, not both",
    ),
]


def validate(stage: dict) -> None:
    TrainingManifest.model_validate(
        {"name": "m", "base_model": "some/model", "output_dir": "out", "stages": [stage]}
    )


def test_every_field_is_read_or_rejected_where_it_would_be_ignored() -> None:
    fields = schema_fields()
    read = read_names()
    unread = {f for f in fields if f.split(".")[1] not in read} - set(NOT_READ)
    assert not unread, "fields nothing reads: " + ", ".join(sorted(unread))
    assert set(NOT_READ) <= fields
    conditional = {c.field for c in CONDITIONAL}
    assert conditional <= fields, conditional - fields
    assert not conditional & set(NOT_READ)


@pytest.mark.parametrize("case", CONDITIONAL, ids=lambda c: f"{c.field}:{c.message[:30]}")
def test_conditional_field_is_rejected_where_it_would_be_ignored(case: Conditional) -> None:
    validate(case.read)  # where it is read, the field is welcome
    with pytest.raises(ValidationError) as info:
        validate(case.ignored)
    assert case.message in str(info.value)


def test_the_swe_stages_of_cascade_8b_as_they_were_are_refused() -> None:
    """The Kimi-Dev line the SWE stages carried, which no code read, is now an error."""
    import json

    spec = json.loads((ROOT / "manifests" / "cascade_8b.json").read_text())
    for swe in (s for s in spec["stages"] if s["name"].startswith("swe_rl")):
        swe.pop("patch_judge", None)
        swe.update(reward="swe_patch_similarity", reward_model="Kimi-Dev-72B (semantic judge)")
    with pytest.raises(ValidationError) as info:
        TrainingManifest.model_validate(spec)
    assert str(info.value).count("reward_model is read only by the reward_model") == 2
