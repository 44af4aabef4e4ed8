"""Training manifest: the person-written plan of a cascade of SFT, reward-model, GRPO and MOPD
stages.

A manifest names the base model, the tokenizer, the chat template, where outputs go and an
ordered list of stages. Each stage pins its data by reference *and* content hash, so a run
cannot silently train on data other than what the manifest names. Pydantic reports every
error with the path of the offending field (e.g. `stages.1.batch.micro_batch_size`).

Policy stages (sft, grpo, mopd) chain: each starts from the previous policy stage's final
model. A `reward_model` stage stands aside: it trains its own backbone (recipe 5.1: the RM is
trained separately, before RL) and a later GRPO stage names it as `reward_model: stage:<name>`.

Model and tokenizer references:
- `base_model`: a local directory, a hub id, or `tiny-random:<arch>` (a random-init model built
  from a transformers config, shaped by `model_overrides`; used by tests and demos).
- `tokenizer`: a local directory or hub id (default: `base_model`), or `in-process-bpe:<vocab>`
  (a byte-level BPE trained at run time on the first stage's data; no download).

Dataset references (`DatasetRef.ref`): `name@version` for a lake table version, or a path to a
`.jsonl` / `.parquet` file (relative paths resolve against the manifest's directory). `build`
records the `cascade build dataset ...` command that produces a lake table, so a run that does
not find it (or finds other bytes) can say how to make it.

RL batches are spelled out: `prompts_per_step` prompts, `rollouts_per_prompt` responses each
(the recipe's 128 x 8), and one optimizer step per such batch (strict on-policy).

Every field is read by the trainer. A field that only applies to another stage type, engine,
reward or filtering mode (`reward_model` on a verifier reward, `gpu_memory_utilization` with
the hf engine, `readmit_hard` without epoch filtering, ...) is an error where it would be
ignored, so nothing a person writes is silently dropped (tests/test_training_manifest_fields.py
walks the schema to keep it so).
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

LAKE_REF = re.compile(r"^[A-Za-z][A-Za-z0-9_]*@[1-9][0-9]*$")
ENV_REF = re.compile(r"^env:([A-Za-z_][A-Za-z0-9_]*)$")
CONTENT_HASH = re.compile(r"^[0-9a-f]{64}$")
FILE_SUFFIXES = (".jsonl", ".parquet")
TINY_RANDOM_ARCHS = ("qwen2", "qwen3", "llama")


class _Strict(BaseModel):
    """Unknown keys are errors: a typo in a manifest must not be silently ignored."""

    model_config = ConfigDict(extra="forbid")


class DatasetRef(_Strict):
    """One input table of a stage, pinned by content hash, with its upsampling factor."""

    ref: str = Field(description="`name@version` (lake) or a path to a .jsonl/.parquet file")
    content_hash: str = Field(
        description="the lake's content_hash of the version, or the sha256 of the file's bytes"
    )
    upsample: float = Field(
        1.0,
        gt=0,
        description="repeat factor per epoch: 2 = every row twice; 0.5 = a seeded half",
    )
    limit: int | None = Field(None, gt=0, description="use only the first N rows (demos/tests)")
    messages_column: str = Field(
        "messages",
        description="conversation: list of {role, content, reasoning?} or that list as JSON; "
        "if it ends before the reply, response_column (+ reasoning_column) is appended",
    )
    prompt_column: str | None = Field(
        None, description="instead of messages: a single user turn from this text column"
    )
    tools_column: str = Field(
        "tools",
        description="SFT: the tools a row's conversation may call (a list of JSON schemas, or "
        "its JSON text; rendered in <tools> in the system prompt); absent or null: none",
    )
    response_column: str | None = Field(None, description="SFT: the assistant reply text")
    reasoning_column: str | None = Field(
        None, description="SFT: optional column rendered inside <think>...</think> before the reply"
    )
    mode_column: str | None = Field(
        None, description="SFT: per-row mode, `think` or `no_think` (overrides mode)"
    )
    mode: Literal["think", "no_think", "infer"] = Field(
        "infer",
        description="flag appended to user turns; infer = think iff a reply has reasoning "
        "(SFT) or the stage's thinking_fraction (RL)",
    )
    build: str | None = Field(
        None,
        description="the `cascade build dataset ...` command that produces this lake table "
        "(None: the recipe of the same name if there is one, or a plain file)",
    )

    @field_validator("ref")
    @classmethod
    def _ref_form(cls, value: str) -> str:
        if LAKE_REF.match(value) or value.endswith(FILE_SUFFIXES):
            return value
        raise ValueError(
            f"{value!r} is neither a lake reference `name@version` (version >= 1) nor a "
            f"path ending in {' or '.join(FILE_SUFFIXES)}"
        )

    @field_validator("content_hash")
    @classmethod
    def _hash_form(cls, value: str) -> str:
        if not CONTENT_HASH.match(value):
            raise ValueError(f"expected 64 lowercase hex characters, got {value!r}")
        return value

    @field_validator("build")
    @classmethod
    def _build_form(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("cascade build dataset "):
            raise ValueError(f"expected a `cascade build dataset NAME ...` command, got {value!r}")
        return value

    @model_validator(mode="after")
    def _one_conversation_source(self) -> DatasetRef:
        if self.prompt_column is not None and "messages_column" in self.model_fields_set:
            raise ValueError(
                "give messages_column or prompt_column, not both (with prompt_column the "
                "conversation is that one user turn and messages_column is not read)"
            )
        return self

    @property
    def is_lake(self) -> bool:
        """True for `name@version` references, False for file paths."""
        return bool(LAKE_REF.match(self.ref))

    def how_to_build(self, recipe_command: str | None = None) -> str:
        """The sentence an error appends: which command produces this table, or that none does.

        `recipe_command` is the command of a recipe that builds a table of this name, for a
        reference without `build` (schemas cannot look recipes up; the caller does).

        >>> DatasetRef(ref="t@1", content_hash="0" * 64).how_to_build()
        'no recipe builds it yet'
        >>> DatasetRef(ref="t@1", content_hash="0" * 64).how_to_build("cascade build dataset t")[:37]
        '`cascade build dataset t` produces it'
        """
        if self.build is not None:
            return f"`{self.build}` produces it"
        if recipe_command is not None and self.is_lake:
            recipe = recipe_command.removeprefix("cascade build dataset ").split(" ", 1)[0]
            return (
                f"`{recipe_command}` produces it (the manifest names no `build` command for it; "
                f"`cascade build show {recipe}` lists the recipe's sources and parameters)"
            )
        return "no recipe builds it yet" if self.is_lake else "no build command is recorded"

    @property
    def table(self) -> str | None:
        """The lake table a `name@version` reference names (None for a file)."""
        return self.ref.split("@", 1)[0] if self.is_lake else None


class BatchSpec(_Strict):
    """SFT: global batch = micro batch x accumulation x data-parallel ranks (in sequences)."""

    global_batch_size: int = Field(gt=0)
    micro_batch_size: int = Field(gt=0)
    gradient_accumulation_steps: int | None = Field(
        None, gt=0, description="derived from the other two and the world size when omitted"
    )

    @model_validator(mode="after")
    def _divisible(self) -> BatchSpec:
        unit = self.micro_batch_size * (self.gradient_accumulation_steps or 1)
        if self.global_batch_size % unit:
            raise ValueError(
                f"global_batch_size {self.global_batch_size} is not a multiple of "
                f"micro_batch_size x gradient_accumulation_steps = {unit}"
            )
        return self

    def accumulation_for(self, world_size: int) -> int:
        """Accumulation steps for `world_size` ranks; raises if the numbers do not add up."""
        per_step = self.micro_batch_size * world_size
        if self.global_batch_size % per_step:
            raise ValueError(
                f"global_batch_size {self.global_batch_size} is not divisible by "
                f"micro_batch_size {self.micro_batch_size} x world size {world_size}"
            )
        derived = self.global_batch_size // per_step
        if self.gradient_accumulation_steps not in (None, derived):
            raise ValueError(
                f"gradient_accumulation_steps {self.gradient_accumulation_steps} does not match "
                f"global {self.global_batch_size} / (micro {self.micro_batch_size} x world "
                f"{world_size}) = {derived}"
            )
        return derived


class RolloutBatchSpec(_Strict):
    """RL: one step = `prompts_per_step` prompts x `rollouts_per_prompt` responses.

    The update runs over those responses in micro batches of `micro_batch_size` responses
    (packed into one row each), split evenly over the data-parallel ranks; exactly one
    optimizer step follows.
    """

    prompts_per_step: int = Field(gt=0)
    rollouts_per_prompt: int = Field(gt=0)
    micro_batch_size: int = Field(1, gt=0, description="responses per forward/backward")

    @property
    def responses_per_step(self) -> int:
        return self.prompts_per_step * self.rollouts_per_prompt

    def accumulation_for(self, world_size: int) -> int:
        """Micro batches per rank per step; raises if the responses do not split evenly."""
        per_round = self.micro_batch_size * world_size
        if self.responses_per_step % per_round:
            raise ValueError(
                f"{self.prompts_per_step} prompts x {self.rollouts_per_prompt} rollouts = "
                f"{self.responses_per_step} responses do not split into micro batches of "
                f"{self.micro_batch_size} over {world_size} rank(s)"
            )
        return self.responses_per_step // per_round


class DeepSpeedSpec(_Strict):
    """The parts of a DeepSpeed config a person chooses; the rest is derived."""

    zero_stage: Literal[0, 1, 2, 3] = 2
    offload_optimizer: bool = False
    offload_params: bool = False
    bf16: bool = True
    gradient_clipping: float = Field(1.0, ge=0)

    @model_validator(mode="after")
    def _offload_needs_zero(self) -> DeepSpeedSpec:
        if self.offload_params and self.zero_stage != 3:
            raise ValueError("offload_params requires zero_stage 3")
        if self.offload_optimizer and self.zero_stage == 0:
            raise ValueError("offload_optimizer requires zero_stage >= 1")
        return self


class OptimizerSpec(_Strict):
    """AdamW with a warmup + decay schedule."""

    learning_rate: float = Field(gt=0)
    min_learning_rate_ratio: float = Field(0.0, ge=0, le=1)
    schedule: Literal["cosine", "linear", "constant"] = "cosine"
    warmup_ratio: float = Field(0.0, ge=0, lt=1)
    warmup_steps: int | None = Field(None, ge=0, description="instead of warmup_ratio")
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = Field(1e-8, gt=0)

    @model_validator(mode="after")
    def _schedule_fields_apply(self) -> OptimizerSpec:
        if self.warmup_steps is not None and "warmup_ratio" in self.model_fields_set:
            raise ValueError("give warmup_ratio or warmup_steps, not both")
        if self.schedule == "constant" and "min_learning_rate_ratio" in self.model_fields_set:
            raise ValueError(
                "min_learning_rate_ratio is the floor of a cosine or linear decay; a constant "
                "schedule does not read it"
            )
        return self


class RolloutEngineSpec(_Strict):
    """Which engine samples the responses, and how many it decodes at once."""

    engine: Literal["hf", "vllm"] = "hf"
    batch_size: int = Field(
        64, gt=0, description="hf: rows decoded together (finished rows are refilled)"
    )
    gpu_memory_utilization: float = Field(0.3, gt=0, le=1, description="vllm only")

    @model_validator(mode="after")
    def _engine_fields_apply(self) -> RolloutEngineSpec:
        if self.engine == "vllm" and "batch_size" in self.model_fields_set:
            raise ValueError("batch_size is the hf engine's decoding width; vllm does not read it")
        if self.engine == "hf" and "gpu_memory_utilization" in self.model_fields_set:
            raise ValueError(
                "gpu_memory_utilization is the vllm engine's memory share; hf does not read it"
            )
        return self


class EvalSpec(_Strict):
    """Held-out prompts scored with the stage's reward every `every_steps` steps (rank 0)."""

    dataset: DatasetRef
    every_steps: int = Field(gt=0)
    samples_per_prompt: int = Field(1, gt=0)
    temperature: float = Field(0.0, ge=0, description="0 = greedy")
    max_response_len: int | None = Field(
        None,
        gt=0,
        description="the response budget of held-out samples; unset = the stage's. Set it where"
        " stages of one curriculum train at different budgets, so their scores compare",
    )


class EpisodeSpec(_Strict):
    """Limits of one agentic episode (`schemas.environment.EpisodeLimits`); a turn's own cap is
    the stage's max_response_len."""

    max_turns: int = Field(8, gt=0, description="model turns, the final answer included")
    max_total_tokens: int = Field(
        4096, gt=0, description="the whole conversation: opening, turns and tool results"
    )
    tool_timeout_s: float = Field(10.0, gt=0, description="wall seconds per tool call")
    max_tool_output_chars: int = Field(
        4000, gt=0, description="a longer tool output is cut, with a marker saying so"
    )


class _StageBase(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    datasets: list[DatasetRef] = Field(min_length=1)
    optimizer: OptimizerSpec
    deepspeed: DeepSpeedSpec = DeepSpeedSpec()
    seed: int = 1234
    checkpoint_every_steps: int = Field(100, gt=0)
    keep_checkpoints: int = Field(2, gt=0, description="newest step checkpoints kept on disk")
    gradient_checkpointing: bool = True
    notes: str | None = Field(None, description="provenance of the numbers, caveats")


class SFTStage(_StageBase):
    """Supervised fine-tuning on chat data, packed to `max_seq_len`."""

    type: Literal["sft"]
    batch: BatchSpec
    max_seq_len: int = Field(gt=0)
    epochs: float | None = Field(None, gt=0)
    max_steps: int | None = Field(None, gt=0, description="instead of epochs")
    packing: bool = True

    @model_validator(mode="after")
    def _length_given(self) -> SFTStage:
        if self.epochs is None and self.max_steps is None:
            raise ValueError("give epochs or max_steps")
        if self.epochs is not None and self.max_steps is not None:
            raise ValueError("give epochs or max_steps, not both")
        for i, ref in enumerate(self.datasets):
            if ref.prompt_column is not None and ref.response_column is None:
                raise ValueError(f"datasets[{i}]: prompt_column needs response_column")
            if ref.reasoning_column is not None and ref.response_column is None:
                raise ValueError(f"datasets[{i}]: reasoning_column needs response_column")
        return self


class LengthCurriculumSpec(_Strict):
    """A phase of the math length curriculum (recipe 7.4: 100-200 steps per phase, until the
    clip ratio reaches ~10%): it runs at least `min_steps`, then ends once the share of
    responses cut at max_response_len, smoothed over the recent steps, is at or below
    `truncated_share`; max_steps stays the upper bound. A single step's share is too noisy to
    end a phase on (a 32K phase starts at 5-10% cut)."""

    truncated_share: float = Field(
        gt=0, lt=1, description="end the phase once the smoothed truncated share is at or below"
    )
    min_steps: int = Field(gt=0, description="steps the phase runs before it may end")
    smoothing_steps: int = Field(
        10,
        gt=0,
        description="span N of the exponential moving average of the truncated share "
        "(alpha = 2 / (N + 1)); 1 = each step's own share",
    )


class _RLStageBase(_StageBase):
    """What every on-policy RL stage shares: prompts, sampling, rollout engine, filtering."""

    batch: RolloutBatchSpec
    max_steps: int = Field(gt=0)
    temperature: float = Field(gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int | None = Field(None, gt=0)
    stop_tokens: list[str] = Field(
        default_factory=list, description="extra tokens that end a response (<|im_end|> always)"
    )
    max_prompt_len: int | None = Field(None, gt=0, description="prompts longer are dropped")
    max_response_len: int = Field(gt=0)
    thinking_fraction: float = Field(
        1.0, ge=0, le=1, description="share of each batch's prompts in think mode"
    )
    rollout: RolloutEngineSpec = RolloutEngineSpec()
    length_curriculum: LengthCurriculumSpec | None = Field(
        None, description="a phase of the math length curriculum: when it may end early"
    )

    @model_validator(mode="after")
    def _rl_datasets(self) -> _RLStageBase:
        curriculum = self.length_curriculum
        if curriculum is not None and curriculum.min_steps > self.max_steps:
            raise ValueError(
                f"length_curriculum.min_steps {curriculum.min_steps} exceeds max_steps "
                f"{self.max_steps}"
            )
        for i, ref in enumerate(self.datasets):
            check_prompt_ref(ref, f"datasets[{i}]", self.thinking_fraction)
        return self


def check_prompt_ref(ref: DatasetRef, where: str, thinking_fraction: float) -> None:
    """An RL stage's prompts: no reply columns, no upsampling, a mode that agrees with the
    stage's thinking_fraction (RL modes come from it)."""
    for column in ("response_column", "reasoning_column", "mode_column", "tools_column"):
        if column in ref.model_fields_set and getattr(ref, column) is not None:
            raise ValueError(
                f"{where}: {column} is for SFT data; RL responses are sampled and modes come "
                "from thinking_fraction"
            )
    if "upsample" in ref.model_fields_set:
        raise ValueError(
            f"{where}: upsample applies to SFT and reward-model data; an RL stage draws each "
            "prompt once per pass"
        )
    wanted = {"think": 1.0, "no_think": 0.0}.get(ref.mode)
    if wanted is not None and thinking_fraction != wanted:
        raise ValueError(
            f"{where}: mode {ref.mode!r} contradicts thinking_fraction {thinking_fraction}"
        )


REWARD_MODEL_FORMS = (
    "a name in training.reward_clients.REWARD_MODEL_HOOKS, `stage:<name>` (an earlier reward_model "
    "stage's final model), an http(s):// URL of `cascade serve-reward`, or a local dir / hub "
    "id of a sequence-classification model"
)


class PatchJudgeSpec(_Strict):
    """The LLM judge of SWE RL's semantic reward (recipe 7.3: Kimi-Dev-72B asked whether a
    patch is equivalent to the gold patch), behind any OpenAI-compatible chat server; see
    `curation.verify.patch_judge`."""

    base_url: str = Field(
        description="the server's OpenAI-compatible URL ending in /v1, or `env:NAME` to read it "
        "from that environment variable when training starts (refused while it is unset)"
    )
    model: str = Field(description="the model name the server serves")
    api_key_env: str | None = Field(
        None, description="environment variable holding the API key (None: no key is sent)"
    )
    max_tokens: int = Field(1024, gt=0, description="the judge's reply budget, reasoning included")
    top_logprobs: int = Field(
        5, ge=0, le=20, description="alternatives per token for P(YES); 0 = 1/0 from the text"
    )
    concurrency: int = Field(8, gt=0, description="judge requests in flight per reward worker")
    timeout_s: float = Field(600.0, gt=0, description="seconds per judge request")

    @field_validator("base_url")
    @classmethod
    def _url_form(cls, value: str) -> str:
        if value.startswith(("http://", "https://")) or ENV_REF.match(value):
            return value
        raise ValueError(f"expected an http(s):// URL or env:NAME, got {value!r}")

    def resolved_base_url(self) -> str:
        """The URL itself, or the one in the environment variable `env:NAME` names; ValueError
        (one sentence) while that variable is unset or not a URL."""
        named = ENV_REF.match(self.base_url)
        if named is None:
            return self.base_url
        value = os.environ.get(named[1], "").strip()
        if not value.startswith(("http://", "https://")):
            state = "is not set" if not value else f"is {value!r}, not an http(s):// URL"
            raise ValueError(
                f"the patch judge's base_url reads ${named[1]}, which {state}; set it to the "
                f"/v1 URL of an OpenAI-compatible server serving {self.model}"
            )
        return value


class GRPOStage(_RLStageBase):
    """Strict on-policy GRPO (recipe 7.1): group z-score advantages, one update per batch."""

    type: Literal["grpo"]
    reward: Literal[
        "reward_model",
        "if_verifier",
        "if_verifier+reward_model",
        "math_verifier",
        "code_tests",
        "multiple_choice",
        "swe_patch_similarity",
        "swe_patch_judge",
        "swe_tests",
        "workplace_state",
    ]
    reward_model: str | None = Field(
        None,
        description=f"rewards reward_model and if_verifier+reward_model: {REWARD_MODEL_FORMS}",
    )
    reward_model_batch_size: int = Field(
        8,
        gt=0,
        description="responses per forward of an in-process reward model (a model dir, hub id "
        "or stage:<name>; a served one batches itself)",
    )
    patch_judge: PatchJudgeSpec | None = Field(
        None, description="reward swe_patch_judge: the judge of patch equivalence"
    )
    code_switch_reward: float | Literal["batch_min_minus_10"] | None = Field(
        None,
        description="reward for a reply that switches language; batch_min_minus_10 = lowest "
        "reward in the batch minus 10 (Cascade-1 RLHF); None = no penalty",
    )
    overlong_filtering: bool = Field(
        description="True: capped responses get no gradient; False: they stay with low reward"
    )
    loss_level: Literal["token", "sequence"] = Field(
        "token",
        description="token: mean over every response token of the batch; sequence: mean over "
        "responses of each response's token mean (RLHF stabilizer)",
    )
    reward_shaping: Literal["none", "tanh"] = Field(
        "none", description="tanh: group z-score squashed into [-1, 1] (RLHF stabilizer)"
    )
    kl_coef: float = Field(0.0, ge=0, description="KL to the frozen stage-start policy")
    entropy_coef: float = Field(0.0, ge=0)
    dynamic_filtering: Literal["none", "batch", "epoch"] = "none"
    max_resample_rounds: int = Field(
        4, ge=0, description="batch filtering: extra sampling rounds to fill the batch"
    )
    readmit_hard: float = Field(0.10, ge=0, le=1, description="epoch filtering: p(re-admit 0%)")
    readmit_easy: float = Field(0.01, ge=0, le=1, description="epoch filtering: p(re-admit 100%)")
    reward_workers: int = Field(4, gt=0, description="threads scoring groups during generation")
    no_signal_patience: int = Field(
        5,
        ge=0,
        description="fail the stage after this many steps in a row in which no group's "
        "rewards differ (no gradient: the policy solves nothing or everything, or the reward "
        "cannot decide); 0 = never, for a plumbing check that expects no signal",
    )
    evaluation: EvalSpec | None = None
    environment: Literal["python", "workplace", "swe"] | None = Field(
        None,
        description="agentic episodes: the model may call this environment's tools over several"
        " turns (python: code run in the sandbox; workplace: people, calendar, mail; swe: a"
        " repository to view, edit and test); `reward`"
        " scores the episode (workplace_state: the state its calls leave). The names"
        " are curation.environments.ENVIRONMENTS' (tests/test_reward_registry.py ties them)",
    )
    episode: EpisodeSpec | None = Field(
        None, description="limits of each episode of an environment stage (defaults if unset)"
    )

    @model_validator(mode="after")
    def _grpo_consistent(self) -> GRPOStage:
        if self.episode is not None and self.environment is None:
            raise ValueError("episode limits apply to a stage with an environment")
        uses_rm = "reward_model" in self.reward
        if uses_rm and not self.reward_model:
            raise ValueError(f"reward {self.reward!r} needs reward_model")
        if self.reward_model is not None and not uses_rm:
            raise ValueError(
                f"reward_model is read only by the reward_model and if_verifier+reward_model "
                f"rewards, not by {self.reward!r}"
            )
        served = (self.reward_model or "").startswith(("http://", "https://"))
        if "reward_model_batch_size" in self.model_fields_set and (not uses_rm or served):
            raise ValueError(
                "reward_model_batch_size batches a reward model scored in-process (a model dir, "
                "hub id or stage:<name>); this stage has none"
            )
        judged = self.reward == "swe_patch_judge"
        if judged and self.patch_judge is None:
            raise ValueError("reward 'swe_patch_judge' needs patch_judge (the judge's server)")
        if self.patch_judge is not None and not judged:
            raise ValueError(
                f"patch_judge is read only by the swe_patch_judge reward, not by {self.reward!r}"
            )
        filtering = {
            "max_resample_rounds": "batch",
            "readmit_hard": "epoch",
            "readmit_easy": "epoch",
        }
        for name, mode in filtering.items():
            if name in self.model_fields_set and self.dynamic_filtering != mode:
                raise ValueError(
                    f"{name} applies to dynamic_filtering {mode!r}, not {self.dynamic_filtering!r}"
                )
        if self.evaluation is not None:
            check_prompt_ref(self.evaluation.dataset, "evaluation.dataset", self.thinking_fraction)
        if self.batch.rollouts_per_prompt < 2:
            raise ValueError("GRPO needs rollouts_per_prompt >= 2 (a group to compare within)")
        return self


class MOPDStage(_RLStageBase):
    """Multi-domain on-policy distillation (Cascade 2): reverse-KL token advantages.

    a_t = log pi_teacher(y_t) - log pi_train(y_t) on the sampled tokens, weighted by
    1[ratio_low <= pi_train / pi_rollout <= ratio_high]; one teacher per prompt domain, all
    sharing the policy's tokenizer. A teacher is `stage:<name>` (that stage's final model),
    `init` (the model this stage starts from) or a local dir / hub id.
    """

    type: Literal["mopd"]
    teachers: dict[str, str] = Field(min_length=1, description="domain -> teacher model")
    domain_column: str | None = Field(
        None, description="row column naming the domain; None = the single teacher for all"
    )
    ratio_low: float = Field(0.5, gt=0)
    ratio_high: float = Field(2.0, gt=0)

    @model_validator(mode="after")
    def _teachers_consistent(self) -> MOPDStage:
        if self.domain_column is None and len(self.teachers) != 1:
            raise ValueError("several teachers need a domain_column to choose between them")
        if self.ratio_low >= self.ratio_high:
            raise ValueError(f"ratio_low {self.ratio_low} must be below ratio_high")
        return self


class RewardModelStage(_StageBase):
    """A Bradley-Terry reward model (recipe 5.1): a causal LM backbone with a linear head on the
    last token's hidden state, trained on `preference_pairs` rows (messages, chosen, rejected)
    with -log sigmoid(r(x, y+) - r(x, y-)), AdamW, 1 epoch by default (longer did worse).

    (prompt, response) is rendered with the backbone's own chat template. Pairs whose
    `prompt_id` falls in the seeded held-out share are kept out of training and scored after
    it (pairwise accuracy per source and category, RewardBench style). Batch sizes count pairs.
    """

    type: Literal["reward_model"]
    backbone: str = Field(
        description="causal LM the RM starts from: a local dir, a hub id, `stage:<name>` (an "
        "earlier policy stage's final model) or tiny-random:<arch>"
    )
    backbone_overrides: dict[str, int | float | str | bool] | None = Field(
        None, description="config fields for a tiny-random:<arch> backbone"
    )
    tokenizer: str | None = Field(
        None,
        description="default: the backbone's (with its chat template); in-process-bpe:<vocab> "
        "trains one on the pairs (tiny-random backbones)",
    )
    batch: BatchSpec
    max_seq_len: int = Field(
        gt=0, description="tokens of a rendered (prompt, response); longer pairs are dropped"
    )
    epochs: float | None = Field(1.0, gt=0)
    max_steps: int | None = Field(None, gt=0, description="instead of epochs")
    heldout_fraction: float = Field(
        0.05, ge=0, lt=1, description="share of prompt_ids held out for evaluation"
    )
    heldout_seed: int = 0
    eval_every_steps: int | None = Field(
        None, gt=0, description="also evaluate every N steps (always before and after training)"
    )
    eval_micro_batch_size: int = Field(8, gt=0, description="pairs per forward when evaluating")

    @model_validator(mode="after")
    def _rm_consistent(self) -> RewardModelStage:
        tiny = self.backbone.startswith("tiny-random:")
        if tiny and self.backbone.split(":", 1)[1] not in TINY_RANDOM_ARCHS:
            raise ValueError(
                f"unknown tiny-random architecture {self.backbone.split(':', 1)[1]!r}; "
                f"known: {', '.join(TINY_RANDOM_ARCHS)}"
            )
        if tiny and self.tokenizer is None:
            raise ValueError("a tiny-random backbone needs an explicit tokenizer")
        if self.backbone_overrides and not tiny:
            raise ValueError("backbone_overrides only applies to a tiny-random:<arch> backbone")
        if self.tokenizer and self.tokenizer.startswith("in-process-bpe:"):
            size = self.tokenizer.split(":", 1)[1]
            if not size.isdigit() or int(size) < 64:
                raise ValueError(f"in-process-bpe needs a vocabulary size >= 64, got {size!r}")
        if self.max_steps is not None and "epochs" in self.model_fields_set:
            raise ValueError("give epochs or max_steps, not both")
        if self.heldout_fraction == 0:
            for name in ("heldout_seed", "eval_every_steps", "eval_micro_batch_size"):
                if name in self.model_fields_set:
                    raise ValueError(
                        f"{name} applies to the held-out pairs; heldout_fraction 0 holds none out"
                    )
        for i, ref in enumerate(self.datasets):
            for column in ("response_column", "reasoning_column", "mode_column", "tools_column"):
                if column in ref.model_fields_set and getattr(ref, column) is not None:
                    raise ValueError(
                        f"datasets[{i}]: {column} is for SFT data; a reward-model stage reads "
                        "preference pairs (messages or prompt_column, chosen, rejected)"
                    )
            if ref.mode != "infer":
                raise ValueError(
                    f"datasets[{i}]: mode is for policy stages; a reward model reads each pair "
                    "with its backbone's own chat template, without a mode flag"
                )
        return self


Stage = Annotated[SFTStage | GRPOStage | MOPDStage | RewardModelStage, Field(discriminator="type")]
RLStage = GRPOStage | MOPDStage
PolicyStage = SFTStage | GRPOStage | MOPDStage
AnyStage = SFTStage | GRPOStage | MOPDStage | RewardModelStage


class BenchmarkSuite(_Strict):
    """Benchmarks scored after every stage (`cascade eval`'s settings), so a run shows what each
    stage gained and what it lost: `<output_dir>/evaluation.json` and the per-stage table."""

    benchmarks: list[str] = Field(
        min_length=1,
        description="registered names, jsonl files relative to the manifest, or lake tables "
        "(`lake:math_rl_v2_heldout`)",
    )
    preset: Literal["cascade1", "cascade2"] = "cascade1"
    settings: dict[str, int | float | str | None] = Field(
        default_factory=dict, description="overrides: `k`, `max_new_tokens`, `aime24.k`, ..."
    )
    benchmark_dir: str | None = Field(None, description="local benchmark jsonl directory")
    limit: int | None = Field(None, gt=0, description="only each benchmark's first N items")
    backend: Literal["hf", "vllm"] = "hf"


class TrainingManifest(_Strict):
    """A cascade: base model -> stage 1 -> stage 2 -> ..., each from the previous checkpoint."""

    name: str
    base_model: str
    model_overrides: dict[str, int | float | str | bool] | None = Field(
        None, description="config fields for a tiny-random:<arch> base model"
    )
    tokenizer: str | None = None
    chat_template: Literal["chatml-think-flags"] = "chatml-think-flags"
    attn_implementation: Literal["auto", "sdpa", "eager", "flash_attention_2", "flex_attention"] = (
        "auto"
    )
    output_dir: str
    stages: list[Stage] = Field(min_length=1)
    evaluation: BenchmarkSuite | None = Field(
        None, description="benchmarks scored after every policy stage (`cascade train`)"
    )

    @field_validator("base_model")
    @classmethod
    def _tiny_arch(cls, value: str) -> str:
        if value.startswith("tiny-random:") and value.split(":", 1)[1] not in TINY_RANDOM_ARCHS:
            raise ValueError(
                f"unknown tiny-random architecture {value.split(':', 1)[1]!r}; "
                f"known: {', '.join(TINY_RANDOM_ARCHS)}"
            )
        return value

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer_form(cls, value: str | None) -> str | None:
        if value and value.startswith("in-process-bpe:"):
            size = value.split(":", 1)[1]
            if not size.isdigit() or int(size) < 64:
                raise ValueError(f"in-process-bpe needs a vocabulary size >= 64, got {size!r}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> TrainingManifest:
        names = [s.name for s in self.stages]
        reward_stages = {s.name for s in self.stages if isinstance(s, RewardModelStage)}
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"stage names must be unique; repeated: {dupes}")
        if self.model_overrides and not self.base_model.startswith("tiny-random:"):
            raise ValueError("model_overrides only applies to a tiny-random:<arch> base_model")
        if self.tokenizer is None and self.base_model.startswith("tiny-random:"):
            raise ValueError("a tiny-random base_model needs an explicit tokenizer")
        policy = [s for s in self.stages if not isinstance(s, RewardModelStage)]
        if (
            policy
            and not isinstance(policy[0], SFTStage)
            and self.tokenizer
            and (self.tokenizer.startswith("in-process-bpe:"))
        ):
            raise ValueError("an in-process-bpe tokenizer is trained on SFT data: start with SFT")
        for i, stage in enumerate(self.stages):
            if isinstance(stage, MOPDStage):
                for domain, teacher in stage.teachers.items():
                    if teacher.startswith("stage:") and teacher[6:] not in names[:i]:
                        raise ValueError(
                            f"stages[{i}] teacher {domain!r} = {teacher!r} names no earlier stage"
                        )
                    if teacher.startswith("stage:") and teacher[6:] in reward_stages:
                        raise ValueError(
                            f"stages[{i}] teacher {domain!r} = {teacher!r} is a reward model"
                        )
            if isinstance(stage, RewardModelStage) and stage.backbone.startswith("stage:"):
                earlier = [s.name for s in policy if s.name in names[:i]]
                if stage.backbone[6:] not in earlier:
                    raise ValueError(
                        f"stages[{i}] backbone {stage.backbone!r} names no earlier policy stage "
                        f"(earlier policy stages: {earlier or 'none'})"
                    )
            if isinstance(stage, GRPOStage) and (stage.reward_model or "").startswith("stage:"):
                named = stage.reward_model[6:]  # type: ignore[index]
                earlier = [s.name for s in self.stages[:i] if isinstance(s, RewardModelStage)]
                if named not in earlier:
                    raise ValueError(
                        f"stages[{i}] reward_model {stage.reward_model!r} names no earlier "
                        f"reward_model stage (earlier reward_model stages: {earlier or 'none'})"
                    )
        return self

    def stage(self, name: str) -> AnyStage:
        """The stage called `name`, or KeyError listing the stage names."""
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(
            f"no stage {name!r} in manifest {self.name!r}; stages: {[s.name for s in self.stages]}"
        )
