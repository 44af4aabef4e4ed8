"""On-policy RL stages, GRPO (recipe 7.1) and MOPD (Cascade 2), as one loop read top to bottom.

Each step: sync the policy's weights into the rollout engine -> draw prompts -> G rollouts
each (groups are scored by worker threads as soon as they finish, while decoding goes on) ->
filters -> group z-score advantages -> exactly one optimizer step over the whole batch
(strict on-policy: the importance ratio is 1, no clipping) -> log -> checkpoint.

The only contract between rollout and update is the `Episode` (training/episode.py); the loss
is in training/policy_loss.py, rewards in training/rewards.py (the kinds in
curation/verify/rewards.py), prompt order and epoch-level filtering in training/rl_data.py, the
engines in training/rollout/.

Several processes (`torchrun --nproc_per_node N`): every rank draws the same prompts, rolls
out its share (every N-th prompt), and the episodes are gathered so every rank holds the
whole batch; each rank then updates on its slice of the micro batches and DeepSpeed averages
the gradients. Rollouts are seeded per (stage seed, draw, sample), so the batch, and hence the
update, is the one a single process with the same global batch computes.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from curation.verify.reward_model_score import RewardModel
from curation.verify.rewards import reward_named
from schemas.training_manifest import GRPOStage, MOPDStage
from training import checkpoint as ckpt
from training.chat_template import IGNORE_INDEX, IM_END, tokenize_prompt
from training.datasets import load
from training.distributed import (
    enable_gradient_checkpointing,
    grad_norm,
    init_distributed,
    make_engine,
    optimizer_step,
)
from training.episode import Episode, group_advantages, has_signal, shuffle_rewards
from training.models import build_model, load_tokenizer, pick_attn_implementation
from training.policy_loss import grpo_loss_sum, mopd_loss_sum, token_entropy, token_weights
from training.reward_clients import load_reward_model
from training.rewards import RewardPool, StageRewards
from training.rl_data import (
    EpochFilter,
    Prompt,
    PromptStream,
    load_prompts,
    rollout_seed,
    thinking_mode,
)
from training.rollout import RolloutEngine, RolloutRequest, SamplingParams, sampling_logprobs
from training.rollout import make_engine as make_rollout_engine
from training.stage import StageContext, StageResult, stage_model, stage_tokenizer
from training.step_log import StepLog
from training.stopping import LengthCurriculum, NoLearningSignal, SignalWatch, max_steps_reason

STEP_DELAY_ENV = "CASCADE_TRAIN_STEP_DELAY_S"  # tests: slow steps so a kill lands mid-run


def run_rl_stage(ctx: StageContext) -> StageResult:
    """Train one GRPO or MOPD stage to its final model directory (resumable)."""
    stage: GRPOStage | MOPDStage = ctx.stage  # type: ignore[assignment]
    grpo = isinstance(stage, GRPOStage)

    # ================================================================ setup ====================
    rank, world, device = init_distributed()
    ctx.stage_dir.mkdir(parents=True, exist_ok=True)
    ckpt.refuse_to_overwrite(ctx.checkpoint_dir, stage.name, ctx.resume)
    tokenizer = stage_tokenizer(ctx, rank)
    sampling = sampling_params(stage, tokenizer)

    # ================================================================ data =====================
    datasets = [load(v) for v in ctx.datasets]
    needs = reward_named(stage.reward).columns if grpo and ctx.reward_fn is None else ()
    prompts, too_long = fitting_prompts(load_prompts(datasets, needs), tokenizer, stage)
    epoch_filter = (
        EpochFilter(stage.seed, stage.readmit_hard, stage.readmit_easy)
        if grpo and stage.dynamic_filtering == "epoch"
        else None
    )
    stream = PromptStream(prompts, stage.seed, epoch_filter)
    eval_prompts = (
        load_prompts([load(ctx.eval_dataset)], needs) if ctx.eval_dataset is not None else []
    )

    # ================================================================ models ===================
    attn = pick_attn_implementation(ctx.manifest.attn_implementation, device.type == "cuda")
    model = stage_model(ctx, len(tokenizer), attn)
    bf16 = stage.deepspeed.bf16 and device.type == "cuda"
    frozen_dtype = torch.bfloat16 if bf16 else torch.float32
    reference = (
        frozen(stage_model(ctx, len(tokenizer), attn), device, frozen_dtype)
        if kl_on(stage)
        else None
    )
    if stage.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    model.config.use_cache = False
    engine, scheduler = make_engine(
        model,
        stage.optimizer,
        stage.deepspeed,
        stage.batch.micro_batch_size,
        stage.batch.accumulation_for(world),
        stage.max_steps,
        bf16,
    )
    vocab = tokenizer.get_vocab()
    teachers = {} if grpo else load_teachers(ctx, attn, device, frozen_dtype, vocab)
    rollout = make_rollout_engine(
        stage.rollout.engine,
        engine.module,
        device=device,
        batch_size=stage.rollout.batch_size,
        model_dir=str(ctx.init_from or ctx.manifest.base_model),
        gpu_memory_utilization=stage.rollout.gpu_memory_utilization,
        seed=stage.seed,
    )
    reward_model = reward_model_for(ctx) if grpo else None
    rewards = StageRewards(stage, ctx.reward_fn, reward_model) if grpo else None
    pool = RewardPool(rewards, stage.reward_workers) if rewards is not None else None
    judge = rewards  # evaluation scores with the stage's own reward, even under an override
    rm_free = grpo and "reward_model" not in reward_named(stage.reward).clients
    if grpo and ctx.reward_fn is not None and (rm_free or reward_model):
        judge = StageRewards(stage, None, reward_model)

    # ================================================================ stopping rules ===========
    curriculum = LengthCurriculum(stage.length_curriculum) if stage.length_curriculum else None
    watch = signal_watch(ctx) if grpo else None

    # ================================================================ resume ===================
    fingerprint = {"datasets": [d.ref.content_hash for d in datasets], "prompts": len(prompts)}
    torch.manual_seed(stage.seed)
    start_step, stopped, stop_reason = 0, False, None
    client = ckpt.resume(engine, ctx, fingerprint, rank)
    if client is not None:
        start_step, stopped = client["step"], client["stopped"]
        stop_reason = client.get("stop_reason")
        stream.load_state_dict(client["stream"])
        if curriculum is not None and client.get("curriculum"):
            curriculum.load_state_dict(client["curriculum"])
        if watch is not None and client.get("signal"):
            watch.load_state_dict(client["signal"])
    record = ckpt.provenance(
        ctx,
        [d.describe() for d in datasets],
        prompts=len(prompts),
        prompts_too_long=too_long,
        world_size=world,
        bf16=bf16,
        attn_implementation=attn,
        rollout_engine=stage.rollout.engine,
        control=ctx.control,
    )

    # ================================================================ the loop =================
    delay = float(os.environ.get(STEP_DELAY_ENV, "0") or 0)
    step, last_loss, failure = start_step, None, None
    bar = "reward_mean" if grpo else "reverse_kl"
    with StepLog(
        ctx.stage_dir, stage.name, stage.max_steps, start_step, rank, ctx.show_progress, bar
    ) as log:
        if start_step == 0 and eval_prompts:
            sync_weights(rollout, engine, stage)
            log.write({"step": 0, **evaluate(rollout, eval_prompts, tokenizer, stage, judge)})
        while step < stage.max_steps and not stopped:
            timer = StepTimer()
            # --- the rollout engine gets the policy's current weights ----------------------
            with timer("sync_s"):
                sync_weights(rollout, engine, stage)
            # --- prompts -> G rollouts each -> rewards (batch-level filtering refills) -----
            batch = collect_batch(stream, rollout, sampling, tokenizer, stage, pool, timer)
            # --- a control run cuts the link between responses and rewards ----------------
            if ctx.control == "shuffled-rewards":
                shuffle_rewards(batch.episodes, random.Random(f"{stage.seed}:control:{step}"))
            # --- advantages: group z-scores over the episodes that are trained on ----------
            if grpo:
                assign_advantages(batch.groups, stage.reward_shaping)
            # --- exactly one optimizer step over the whole batch ---------------------------
            with timer("update_s"):
                stats = update(engine, batch.episodes, stage, reference, teachers, device)
            step += 1
            last_loss = stats["loss"]
            # --- log, evaluate, checkpoint, stopping rules ----------------------------------
            summary = batch.summary()
            entry = {
                "step": step,
                **stats,
                **summary,
                "lr": scheduler.get_last_lr()[0],
                "grad_norm": grad_norm(engine),
                **timer.seconds,
            }
            if curriculum is not None:
                entry["truncated_share_smoothed"] = curriculum.observe(summary["truncated_share"])
                stop_reason = curriculum.stop_reason(step)
            failure = watch.observe(batch.groups) if watch is not None else None
            if failure is not None:  # no checkpoint, no final model: the stage failed
                log.write({**entry, "stop_reason": failure})
                break
            stopped = stop_reason is not None
            if step == stage.max_steps and not stopped:
                stop_reason = max_steps_reason(stage.max_steps, curriculum)
            if stop_reason is not None:
                entry["stop_reason"] = stop_reason
            if eval_prompts and (
                step % stage.evaluation.every_steps == 0 or step == stage.max_steps or stopped
            ):  # type: ignore[union-attr]
                sync_weights(rollout, engine, stage)
                entry.update(evaluate(rollout, eval_prompts, tokenizer, stage, judge))
            log.write(entry)
            if step % stage.checkpoint_every_steps == 0 or step == stage.max_steps or stopped:
                ckpt.save_step(
                    engine,
                    ctx.checkpoint_dir,
                    step,
                    {
                        "data": fingerprint,
                        "stream": stream.state_dict(),
                        "stopped": stopped,
                        "stop_reason": stop_reason,
                        "curriculum": curriculum.state_dict() if curriculum else None,
                        "signal": watch.state_dict() if watch else None,
                    },
                    {**record, "step": step},
                    rank,
                    stage.keep_checkpoints,
                )
            if delay:
                time.sleep(delay)

    # ================================================================ final model ==============
    if pool is not None:
        pool.close()
    rollout.close()
    if failure is not None:
        engine.destroy()
        raise NoLearningSignal(failure)
    signal = watch.summary() if watch is not None else None
    record.update(
        step=step, stopped_early=step < stage.max_steps, stop_reason=stop_reason, signal=signal
    )
    ckpt.save_final(engine, tokenizer, ctx.final_dir, record, rank, stage.deepspeed.zero_stage)
    engine.destroy()
    ended = f"ended: {stop_reason}" if stop_reason else None
    said = "; ".join(part for part in (ended, signal) if part) or None
    return StageResult(ctx.final_dir, step, last_loss, said)


# ==================================================================== rollouts ================


@dataclass
class RolloutBatch:
    """A step's groups (one per prompt, G episodes each) and how they were collected."""

    groups: list[list[Episode]]
    rounds: int = 1
    drawn: int = 0
    filtered_groups: int = 0

    @property
    def episodes(self) -> list[Episode]:
        return [e for g in self.groups for e in g]

    def summary(self) -> dict:
        eps = self.episodes
        decided = [e.reward for e in eps if e.reward is not None]
        lengths = [len(e.response_ids) for e in eps]
        mean = sum(decided) / len(decided) if decided else None
        return {
            "reward_mean": mean,
            "pass_rate": sum(e.solved for e in eps) / len(eps),
            "signal_groups": sum(
                has_signal([e.reward for e in g if e.trained]) for g in self.groups
            ),
            "trained_episodes": sum(e.trained for e in eps),
            "truncated_share": sum(e.truncated for e in eps) / len(eps),
            "response_len_mean": sum(lengths) / len(lengths),
            "response_len_max": max(lengths),
            "code_switched": sum(e.code_switched for e in eps),
            "think_share": sum(e.mode == "think" for e in eps) / len(eps),
            "sampling_rounds": self.rounds,
            "prompts_drawn": self.drawn,
            "filtered_groups": self.filtered_groups,
        }


def collect_batch(
    stream: PromptStream,
    rollout: RolloutEngine,
    sampling: SamplingParams,
    tokenizer: object,
    stage: GRPOStage | MOPDStage,
    pool: RewardPool | None,
    timer: StepTimer,
) -> RolloutBatch:
    """`prompts_per_step` groups; with batch-level filtering, groups whose rewards are all
    equal (no gradient) are replaced by fresh prompts, for at most `max_resample_rounds`
    extra rounds; if still short, filtered groups fill the batch untrained."""
    want = stage.batch.prompts_per_step
    batch_filter = isinstance(stage, GRPOStage) and stage.dynamic_filtering == "batch"
    kept: list[list[Episode]] = []
    spare: list[list[Episode]] = []
    n, rounds, drawn = want, 0, 0
    while True:
        draws = stream.take(n)
        drawn += len(draws)
        groups = rollout_groups(draws, rollout, sampling, tokenizer, stage, pool, timer)
        for group in groups:
            decided = [e for e in group if e.reward is not None]
            stream.observe(group[0].prompt_uid, sum(e.solved for e in decided), len(decided))
            for e in group:  # undecided rewards and (if filtering) capped responses: no gradient
                e.trained = e.reward is not None or not isinstance(stage, GRPOStage)
                if e.truncated and stage_filters_overlong(stage):
                    e.trained = False
        if not batch_filter:
            return RolloutBatch(groups, rounds + 1, drawn)
        for group in groups:
            signal = has_signal([e.reward for e in group if e.trained])
            (kept if signal else spare).append(group)
        if len(kept) >= want or rounds >= stage.max_resample_rounds:  # type: ignore[union-attr]
            break
        rounds += 1
        keep_rate = max(len(kept) / drawn, 0.25)
        n = min(want, math.ceil((want - len(kept)) / keep_rate))
    fill = spare[: max(0, want - len(kept))]
    for group in fill:
        for e in group:
            e.trained = False
    return RolloutBatch(kept[:want] + fill, rounds + 1, drawn, len(spare))


def rollout_groups(
    draws: list[tuple[int, Prompt]],
    rollout: RolloutEngine,
    sampling: SamplingParams,
    tokenizer: object,
    stage: GRPOStage | MOPDStage,
    pool: RewardPool | None,
    timer: StepTimer,
) -> list[list[Episode]]:
    """This rank's share of `draws`, G rollouts each, scored as each group completes; then
    every rank's groups, gathered in draw order."""
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    mine = draws[rank::world]
    g = stage.batch.rollouts_per_prompt
    requests, where = [], []
    for slot, (draw, prompt) in enumerate(mine):
        mode = thinking_mode(draw, stage.thinking_fraction)
        ids = tokenize_prompt(tokenizer, prompt.messages, mode)  # type: ignore[arg-type]
        for sample in range(g):
            requests.append(
                RolloutRequest(len(requests), ids, rollout_seed(stage.seed, draw, sample))
            )
            where.append((slot, sample, mode))
    groups: list[list[Episode | None]] = [[None] * g for _ in mine]
    left = [g] * len(mine)
    futures = []
    stops = set(sampling.stop_token_ids)
    with timer("rollout_s"):
        for r in rollout.generate(requests, sampling):
            slot, sample, mode = where[r.key]
            draw, prompt = mine[slot]
            text_ids = r.token_ids[:-1] if r.token_ids and r.token_ids[-1] in stops else r.token_ids
            groups[slot][sample] = Episode(
                draw=draw,
                sample=sample,
                prompt_uid=prompt.uid,
                mode=mode,  # type: ignore[arg-type]
                prompt_ids=list(requests[r.key].prompt_ids),
                response_ids=r.token_ids,
                rollout_logprobs=r.logprobs,
                finish_reason=r.finish_reason,
                domain=domain_of(stage, prompt),
                response_text=tokenizer.decode(text_ids, skip_special_tokens=False),  # type: ignore[attr-defined]
            )
            left[slot] -= 1
            if left[slot] == 0 and pool is not None:
                futures.append(pool.submit(prompt, groups[slot]))  # type: ignore[arg-type]
    with timer("reward_wait_s"):
        for future in futures:
            future.result()
    done: list[list[Episode]] = groups  # type: ignore[assignment]
    if world > 1:
        gathered: list = [None] * world
        torch.distributed.all_gather_object(gathered, done)
        done = sorted((grp for part in gathered for grp in part), key=lambda grp: grp[0].draw)
    if pool is not None:
        pool.rewards.finish_batch([e for grp in done for e in grp])
    return done


def assign_advantages(groups: list[list[Episode]], shaping: str) -> None:
    """Each trained episode's advantage: its group's z-scored reward (untrained ones: 0)."""
    for group in groups:
        rewards = [e.reward if e.trained else None for e in group]
        for episode, advantage in zip(group, group_advantages(rewards, shaping), strict=True):
            episode.advantage = advantage


def sync_weights(rollout: RolloutEngine, engine: object, stage: GRPOStage | MOPDStage) -> None:
    """Copy the policy's parameters into the rollout engine (gathered under ZeRO-3)."""
    module = engine.module  # type: ignore[attr-defined]
    if stage.deepspeed.zero_stage != 3:
        rollout.load_weights((n, p.data) for n, p in module.named_parameters())
        return
    import deepspeed

    def gathered() -> Iterator[tuple[str, torch.Tensor]]:
        for name, param in module.named_parameters():
            with deepspeed.zero.GatheredParameters([param]):
                yield name, param.data

    rollout.load_weights(gathered())


# ==================================================================== the update ==============


@dataclass
class PackedEpisodes:
    """A micro batch: its episodes packed into one row (positions restart per episode)."""

    input_ids: torch.Tensor  # [1, T]
    position_ids: torch.Tensor  # [1, T]
    labels: torch.Tensor  # [1, T], the next token at response positions, else IGNORE_INDEX
    response: torch.Tensor  # [1, T] bool: the position predicts a response token
    trained: torch.Tensor  # [1, T] bool: ... of an episode that is trained on
    advantage: torch.Tensor  # [1, T]
    length: torch.Tensor  # [1, T] the response length of the position's episode
    rollout_logp: torch.Tensor  # [1, T]
    episode: torch.Tensor  # [1, T] index of the episode within the micro batch (-1: none)


def pack_episodes(episodes: list[Episode], device: torch.device) -> PackedEpisodes:
    """Position t predicts token t+1: a response of R tokens after a prompt of P tokens is
    predicted at positions P-1 .. P+R-2 of its sequence."""
    cols: dict[str, list] = {k: [] for k in PackedEpisodes.__dataclass_fields__}
    for i, e in enumerate(episodes):
        n_prompt, n_resp = len(e.prompt_ids), len(e.response_ids)
        n = n_prompt + n_resp
        at_response = [False] * (n_prompt - 1) + [True] * n_resp + [False]
        cols["input_ids"] += e.prompt_ids + e.response_ids
        cols["position_ids"] += range(n)
        cols["labels"] += [IGNORE_INDEX] * (n_prompt - 1) + e.response_ids + [IGNORE_INDEX]
        cols["response"] += at_response
        cols["trained"] += [r and e.trained for r in at_response]
        cols["advantage"] += [e.advantage] * n
        cols["length"] += [n_resp] * n
        cols["rollout_logp"] += [0.0] * (n_prompt - 1) + e.rollout_logprobs + [0.0]
        cols["episode"] += [i] * n
    dtypes = {"response": torch.bool, "trained": torch.bool, "advantage": torch.float32}
    dtypes |= {"rollout_logp": torch.float32}
    return PackedEpisodes(
        **{
            k: torch.tensor(v, dtype=dtypes.get(k, torch.long), device=device)[None]
            for k, v in cols.items()
        }
    )


def packed_logits(model: torch.nn.Module, batch: PackedEpisodes) -> torch.Tensor:
    """Logits of a packed row. No cache and no attention mask: that is how transformers reads
    restarting position ids as sequence boundaries (with a cache, episodes would see each
    other)."""
    return model(input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False).logits


def update(
    engine: object,
    episodes: list[Episode],
    stage: GRPOStage | MOPDStage,
    reference: torch.nn.Module | None,
    teachers: dict[str, torch.nn.Module],
    device: torch.device,
) -> dict:
    """One optimizer step over all episodes: this rank's micro batches, each backward scaled
    so that the gradient DeepSpeed averages over ranks is the global-batch loss's."""
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    micro = stage.batch.micro_batch_size
    chunks = [episodes[i : i + micro] for i in range(0, len(episodes), micro)]
    per_rank = len(chunks) // world
    grpo = isinstance(stage, GRPOStage)
    level = stage.loss_level if grpo else "token"
    trained = [e for e in episodes if e.trained]
    normalizer = (
        sum(len(e.response_ids) for e in trained) if level == "token" else len(trained)
    ) or 1
    temperature = stage.temperature
    sums = {"loss": 0.0, "logprob_gap": 0.0, "response_tokens": 0.0, "kl": 0.0, "entropy": 0.0}
    sums["reverse_kl"] = 0.0
    for chunk in chunks[rank * per_rank : (rank + 1) * per_rank]:
        batch = pack_episodes(chunk, device)
        logits = packed_logits(engine, batch)  # type: ignore[arg-type]
        labels = batch.labels.clamp(min=0)
        logp_all = sampling_logprobs(logits, labels, temperature)
        sel = batch.trained
        logp = logp_all[sel]
        weights = token_weights(batch.length[sel], level)
        if grpo:
            ref_logp = entropy = None
            if reference is not None:
                with torch.no_grad():
                    ref_logits = packed_logits(reference, batch)
                ref_logp = sampling_logprobs(ref_logits, labels, temperature)[sel]
                r = ref_logp - logp.detach()
                sums["kl"] += float((torch.exp(r) - r - 1).sum())
            if stage.entropy_coef:  # type: ignore[union-attr]
                entropy = token_entropy(logits[sel], temperature)
                sums["entropy"] += float(entropy.detach().sum())
            loss = grpo_loss_sum(
                logp,
                batch.advantage[sel],
                weights,
                kl_coef=stage.kl_coef,  # type: ignore[union-attr]
                ref_logp=ref_logp,
                entropy_coef=stage.entropy_coef,  # type: ignore[union-attr]
                entropy=entropy,
            )
        else:
            teacher_logp = teacher_logprobs(teachers, chunk, batch, labels, temperature)[sel]
            loss, _ = mopd_loss_sum(
                logp,
                teacher_logp,
                batch.rollout_logp[sel],
                stage.ratio_low,
                stage.ratio_high,  # type: ignore[union-attr]
            )
            sums["reverse_kl"] += float((logp.detach() - teacher_logp).sum())
        # `+ 0 * logits.sum()` keeps the graph when no token of this micro batch is trained.
        engine.backward((loss + 0.0 * logits.sum()) * (world / normalizer), scale_wrt_gas=False)  # type: ignore[attr-defined]
        optimizer_step(engine)
        sums["loss"] += float(loss.detach())
        gap = (logp_all.detach() - batch.rollout_logp).abs()[batch.response]
        sums["logprob_gap"] += float(gap.sum())
        sums["response_tokens"] += float(batch.response.sum())
    if world > 1:
        values = torch.tensor(list(sums.values()), dtype=torch.float64, device=device)
        torch.distributed.all_reduce(values)
        sums = dict(zip(sums, values.tolist(), strict=True))
    n_trained_tokens = max(1, sum(len(e.response_ids) for e in trained))
    out = {
        "loss": sums["loss"] / normalizer,
        "logprob_gap": sums["logprob_gap"] / max(1.0, sums["response_tokens"]),
    }
    if grpo and reference is not None:
        out["kl"] = sums["kl"] / n_trained_tokens
    if grpo and stage.entropy_coef:  # type: ignore[union-attr]
        out["entropy"] = sums["entropy"] / n_trained_tokens
    if not grpo:
        out["reverse_kl"] = sums["reverse_kl"] / n_trained_tokens
    return out


def teacher_logprobs(
    teachers: dict[str, torch.nn.Module],
    chunk: list[Episode],
    batch: PackedEpisodes,
    labels: torch.Tensor,
    temperature: float,
) -> torch.Tensor:
    """MOPD: each position's log-prob under its episode's domain teacher ([1, T])."""
    out = torch.zeros_like(batch.advantage)
    with torch.no_grad():
        for domain in sorted({e.domain for e in chunk}):  # type: ignore[type-var]
            teacher = teachers[domain]  # type: ignore[index]
            logits = packed_logits(teacher, batch)
            mine = torch.tensor(
                [i for i, e in enumerate(chunk) if e.domain == domain], device=out.device
            )
            where = torch.isin(batch.episode, mine)
            out[where] = sampling_logprobs(logits, labels, temperature)[where]
    return out


# ==================================================================== evaluation ==============


def evaluate(
    rollout: RolloutEngine,
    prompts: list[Prompt],
    tokenizer: object,
    stage: GRPOStage | MOPDStage,
    rewards: StageRewards | None,
) -> dict:
    """Held-out prompts scored with the stage's reward: mean reward and pass rate.

    Greedy by default (the spec's temperature otherwise, seeded per prompt); every rank scores
    its share and the results are gathered, so all ranks log the same numbers.
    """
    spec = getattr(stage, "evaluation", None)
    if spec is None or rewards is None:
        return {}
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    sampling = replace(sampling_params(stage, tokenizer), temperature=spec.temperature)
    sampling = replace(sampling, top_p=1.0 if spec.temperature == 0 else sampling.top_p)
    k = spec.samples_per_prompt
    mine = list(enumerate(prompts))[rank::world]
    requests, where = [], []
    for draw, prompt in mine:
        mode = thinking_mode(draw, stage.thinking_fraction)
        ids = tokenize_prompt(tokenizer, prompt.messages, mode)  # type: ignore[arg-type]
        for sample in range(k):
            requests.append(
                RolloutRequest(len(requests), ids, rollout_seed(-1 - stage.seed, draw, sample))
            )
            where.append((draw, prompt, mode, sample))
    by_draw: dict[int, list[Episode]] = {}
    stops = set(sampling.stop_token_ids)
    for r in rollout.generate(requests, sampling):
        draw, prompt, mode, sample = where[r.key]
        ids = r.token_ids[:-1] if r.token_ids and r.token_ids[-1] in stops else r.token_ids
        by_draw.setdefault(draw, []).append(
            Episode(
                draw,
                sample,
                prompt.uid,
                mode,
                [],
                r.token_ids,
                r.logprobs,
                r.finish_reason,
                response_text=tokenizer.decode(ids, skip_special_tokens=False),
            )  # type: ignore[attr-defined]
        )
    scored = []
    for draw, prompt in mine:
        group = sorted(by_draw[draw], key=lambda e: e.sample)
        rewards.score_group(prompt, group)
        scored += [(e.reward, e.solved) for e in group]
    if world > 1:
        gathered: list = [None] * world
        torch.distributed.all_gather_object(gathered, scored)
        scored = [item for part in gathered for item in part]
    decided = [r for r, _ in scored if r is not None]
    return {
        "eval_reward_mean": sum(decided) / len(decided) if decided else None,
        "eval_pass_rate": sum(s for _, s in scored) / len(scored),
        "eval_samples": len(scored),
    }


# ==================================================================== small pieces ============


class StepTimer:
    """Wall seconds per phase of a step, summed over rounds."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.started = time.perf_counter()

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start


def sampling_params(stage: GRPOStage | MOPDStage, tokenizer: object) -> SamplingParams:
    """The stage's sampling, with `<|im_end|>` and the stage's stop tokens as token ids."""
    stop = []
    for token in [IM_END, *stage.stop_tokens]:
        token_id = tokenizer.convert_tokens_to_ids(token)  # type: ignore[attr-defined]
        if token_id is None or token_id == tokenizer.unk_token_id:  # type: ignore[attr-defined]
            raise ValueError(f"stage {stage.name!r}: stop token {token!r} is not one token")
        stop.append(int(token_id))
    return SamplingParams(
        max_new_tokens=stage.max_response_len,
        temperature=stage.temperature,
        top_p=stage.top_p,
        top_k=stage.top_k or 0,
        stop_token_ids=tuple(stop),
    )


def fitting_prompts(
    prompts: list[Prompt], tokenizer: object, stage: GRPOStage | MOPDStage
) -> tuple[list[Prompt], int]:
    """Drop prompts longer than `max_prompt_len` tokens (rendered with the longer flag)."""
    if stage.max_prompt_len is None:
        return prompts, 0
    kept = [
        p
        for p in prompts
        if len(tokenize_prompt(tokenizer, p.messages, "no_think")) <= stage.max_prompt_len
    ]
    if not kept:
        raise ValueError(f"stage {stage.name!r}: no prompt fits max_prompt_len")
    return kept, len(prompts) - len(kept)


def stage_filters_overlong(stage: GRPOStage | MOPDStage) -> bool:
    return isinstance(stage, GRPOStage) and stage.overlong_filtering


def kl_on(stage: GRPOStage | MOPDStage) -> bool:
    return isinstance(stage, GRPOStage) and stage.kl_coef > 0


def signal_watch(ctx: StageContext) -> SignalWatch:
    """The no-learning-signal check of a GRPO stage, naming its reward in failures."""
    stage: GRPOStage = ctx.stage  # type: ignore[assignment]
    custom = ctx.reward_fn is not None
    return SignalWatch(
        stage_name=stage.name,
        reward="a custom reward function" if custom else stage.reward,
        patience=stage.no_signal_patience,
        columns=() if custom else reward_named(stage.reward).columns,
        max_response_len=stage.max_response_len,
    )


def domain_of(stage: GRPOStage | MOPDStage, prompt: Prompt) -> str | None:
    """MOPD: the prompt's teacher domain (the only one when there is no domain column)."""
    if not isinstance(stage, MOPDStage):
        return None
    if stage.domain_column is None:
        return next(iter(stage.teachers))
    domain = prompt.columns.get(stage.domain_column)
    if domain not in stage.teachers:
        raise ValueError(
            f"{prompt.origin}: domain {domain!r} has no teacher (teachers: {sorted(stage.teachers)})"
        )
    return domain


def frozen(model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """An eval-mode, gradient-free model on `device` (the KL reference, MOPD teachers)."""
    model.requires_grad_(False)
    return model.to(device=device, dtype=dtype).eval()


def load_teachers(
    ctx: StageContext, attn: str, device: torch.device, dtype: torch.dtype, vocab: dict[str, int]
) -> dict[str, torch.nn.Module]:
    """MOPD teachers by domain: `stage:<name>`, `init`, or a model directory / hub id.

    They must share the policy's tokenizer (the recipe's teachers come from the same SFT
    run); a different vocabulary is refused.
    """
    stage: MOPDStage = ctx.stage  # type: ignore[assignment]
    loaded: dict[str, torch.nn.Module] = {}
    by_source: dict[str, torch.nn.Module] = {}
    for domain, spec in stage.teachers.items():
        if spec == "init":
            source = str(ctx.init_from) if ctx.init_from else ctx.manifest.base_model
        elif spec.startswith("stage:"):
            source = str(ctx.stage_finals[spec[len("stage:") :]])
        else:  # a path relative to the manifest, an absolute path, or a hub id
            beside = ctx.manifest_path.parent / spec
            source = str(beside.resolve()) if beside.exists() else spec
        if source not in by_source:
            if source.startswith("tiny-random:"):
                raise ValueError(f"MOPD teacher {domain!r} must be a trained model, not {source}")
            if not Path(source).exists() and source.startswith(("/", ".")):
                raise FileNotFoundError(f"MOPD teacher {domain!r}: {source} does not exist")
            if load_tokenizer(source).get_vocab() != vocab:
                raise ValueError(f"MOPD teacher {domain!r} ({source}) has another tokenizer")
            teacher = build_model(source, None, 0, attn, stage.seed)
            by_source[source] = frozen(teacher, device, dtype)
        loaded[domain] = by_source[source]
    return loaded


def reward_model_for(ctx: StageContext) -> RewardModel | None:
    """The stage's reward model (`reward_model`: a hook name, `stage:<name>`, a URL of
    `cascade serve-reward`, or a model dir / hub id; see
    `training.reward_clients.load_reward_model`)."""
    stage: GRPOStage = ctx.stage  # type: ignore[assignment]
    if "reward_model" not in reward_named(stage.reward).clients or stage.reward_model is None:
        return None
    return load_reward_model(
        stage.reward_model,
        stage_finals=ctx.stage_finals,
        base_dir=ctx.manifest_path.parent,
        batch_size=stage.reward_model_batch_size,
    )
