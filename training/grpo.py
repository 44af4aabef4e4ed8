"""On-policy RL stages, GRPO (recipe 7.1) and MOPD (Cascade 2), as one loop read top to bottom.

Each step: sync the policy's weights into the rollout engine -> draw prompts -> G rollouts
each (groups are scored by worker threads as soon as they finish, while decoding goes on) ->
filters -> the objective prepares the batch (GRPO: group z-score advantages) -> exactly one
optimizer step over the whole batch (strict on-policy: the importance ratio is 1, no
clipping) -> log -> checkpoint.

What GRPO and MOPD do differently (scoring, advantages, loss, their log fields) is their
objective's, in training/objectives/; this loop holds no branch on the stage type. The only
contract between rollout and update is the `Episode` (training/episode.py); the losses are in
training/policy_loss.py, rewards in training/rewards.py (the kinds in
curation/verify/rewards.py), prompt order and epoch-level filtering in training/rl_data.py, the
engines in training/rollout/.

A stage with an `environment` rolls out agentic episodes instead of single replies
(`curation.environments.runner`): the model's turns alternate with tool results until it
answers; the episode's tokens carry a mask (tool results and template tokens are context: no
gradient, no log-prob) and the reward reads the whole episode. Its rollouts depend on tool
timing (which turns share a batch), so unlike one-turn stages they are not guaranteed bit-identical
across a resume.

Several processes (`torchrun --nproc_per_node N`): every rank draws the same prompts, rolls
out its share (every N-th prompt), and the episodes are gathered so every rank holds the
whole batch; each rank then updates on its slice of the micro batches and DeepSpeed averages
the gradients. Rollouts are seeded per (stage seed, draw, sample), so the batch, and hence the
update, is the one a single process with the same global batch computes.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch

from curation.environments.runner import EpisodeStart, RunnerTimes, episode_stats
from schemas.chat_template import IM_END, tokenize_prompt
from schemas.generation import SamplingParams
from schemas.training_manifest import EvalSpec, GRPOStage, MOPDStage
from training import checkpoint as ckpt
from training.datasets import load
from training.distributed import grad_norm, optimizer_step
from training.episode import Episode, has_signal, shuffle_rewards
from training.objectives import MicroBatch, Objective, objective_for
from training.packed_episodes import pack_episodes, packed_logits
from training.rewards import RewardPool
from training.rl_data import Prompt, PromptStream, load_prompts, rollout_seed, thinking_mode
from training.rollout import (
    RolloutEngine,
    make_rollout_engine,
    rollout_request,
    sampling_logprobs,
)
from training.stage import (
    StageContext,
    StageResult,
    resume_stage,
    stage_engine,
    stage_model,
    stage_tokenizer,
    start_stage,
    step_delay,
)
from training.step_log import StepLog
from training.stopping import LengthCurriculum, NoLearningSignal, max_steps_reason


def run_rl_stage(ctx: StageContext) -> StageResult:
    """Train one GRPO or MOPD stage to its final model directory (resumable)."""
    stage: GRPOStage | MOPDStage = ctx.stage  # type: ignore[assignment]

    # ================================================================ setup ====================
    setup = start_stage(ctx)
    rank, world, device = setup.rank, setup.world, setup.device
    tokenizer = stage_tokenizer(ctx, rank)
    sampling = sampling_params(stage, tokenizer)
    objective = objective_for(ctx)  # GRPO or MOPD; its models load once the policy's engine is up

    # ================================================================ data =====================
    datasets = [load(v) for v in ctx.datasets]
    needs = objective.reward_columns
    prompts, too_long = fitting_prompts(load_prompts(datasets, needs), tokenizer, stage)
    stream = PromptStream(prompts, stage.seed, objective.epoch_filter())
    eval_prompts = (
        load_prompts([load(ctx.eval_dataset)], needs) if ctx.eval_dataset is not None else []
    )

    # ================================================================ models ===================
    model = stage_model(ctx, len(tokenizer), setup.attn)
    engine, scheduler = stage_engine(model, stage, world, stage.max_steps, setup.bf16)
    objective.load(ctx, setup, tokenizer)  # frozen models (KL reference, teachers), rewards
    rollout = make_rollout_engine(
        stage.rollout.engine,
        engine.module,
        device=device,
        batch_size=stage.rollout.batch_size,
        model_dir=str(ctx.init_from or ctx.manifest.base_model),
        gpu_memory_utilization=stage.rollout.gpu_memory_utilization,
        seed=stage.seed,
    )

    # ================================================================ stopping rules ===========
    curriculum = LengthCurriculum(stage.length_curriculum) if stage.length_curriculum else None
    watch = objective.watch

    # ================================================================ resume ===================
    data_identity = {"datasets": [d.ref.content_hash for d in datasets], "prompts": len(prompts)}
    start_step, stopped, stop_reason = 0, False, None
    client = resume_stage(engine, ctx, data_identity, rank)
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
        bf16=setup.bf16,
        attn_implementation=setup.attn,
        rollout_engine=stage.rollout.engine,
        control=ctx.control,
    )

    # ================================================================ the loop =================
    delay = step_delay()
    spec = objective.evaluation
    step, last_loss, failure = start_step, None, None
    with StepLog(
        ctx.stage_dir,
        stage.name,
        stage.max_steps,
        start_step,
        rank,
        objective.progress,
    ) as log:
        if start_step == 0 and eval_prompts:
            sync_weights(rollout, engine, stage)
            log.write({"step": 0, **evaluate(rollout, eval_prompts, tokenizer, stage, objective)})
        while step < stage.max_steps and not stopped:
            timer = StepTimer()
            # --- the rollout engine gets the policy's current weights ----------------------
            with timer("sync_s"):
                sync_weights(rollout, engine, stage)
            # --- prompts -> G rollouts each -> rewards (batch-level filtering refills) -----
            batch = collect_batch(stream, rollout, sampling, tokenizer, stage, objective, timer)
            # --- a control run cuts the link between responses and rewards ----------------
            if ctx.control == "shuffled-rewards":
                shuffle_rewards(batch.episodes, random.Random(f"{stage.seed}:control:{step}"))
            # --- the objective's view of the batch (GRPO: group z-score advantages) --------
            objective.prepare(batch.groups)
            # --- exactly one optimizer step over the whole batch ---------------------------
            with timer("update_s"):
                stats = update(engine, batch.episodes, stage, objective, device)
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
            if watch is not None and watch.exhausted and stop_reason is None:
                stop_reason = watch.exhausted  # learned what these prompts teach: end here
            stopped = stop_reason is not None
            if step == stage.max_steps and not stopped:
                stop_reason = max_steps_reason(stage.max_steps, curriculum)
            if stop_reason is not None:
                entry["stop_reason"] = stop_reason
            if (
                eval_prompts
                and spec is not None
                and (step % spec.every_steps == 0 or step == stage.max_steps or stopped)
            ):
                sync_weights(rollout, engine, stage)
                entry.update(evaluate(rollout, eval_prompts, tokenizer, stage, objective))
            log.write(entry)
            if step % stage.checkpoint_every_steps == 0 or step == stage.max_steps or stopped:
                ckpt.save_step(
                    engine,
                    ctx.checkpoint_dir,
                    step,
                    {
                        "data": data_identity,
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
    objective.close()
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
    drawn_rewards: list[float] | None = None  # every drawn group's, filtered ones too

    @property
    def episodes(self) -> list[Episode]:
        return [e for g in self.groups for e in g]

    def summary(self) -> dict:
        eps = self.episodes
        decided = [e.reward for e in eps if e.reward is not None]
        lengths = [e.model_tokens for e in eps]
        mean = sum(decided) / len(decided) if decided else None
        drawn = decided if self.drawn_rewards is None else self.drawn_rewards
        return {
            "reward_mean": mean,
            # Under batch filtering `reward_mean` is the trained groups' (mixed ones, near 0.5
            # by construction); how the policy scores on what it drew is this one.
            "drawn_reward_mean": sum(drawn) / len(drawn) if drawn else None,
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
            **agentic_summary(eps),
        }


def collect_batch(
    stream: PromptStream,
    rollout: RolloutEngine,
    sampling: SamplingParams,
    tokenizer: object,
    stage: GRPOStage | MOPDStage,
    objective: Objective,
    timer: StepTimer,
) -> RolloutBatch:
    """`prompts_per_step` groups; with batch-level filtering, groups whose rewards are all
    equal (no gradient) are replaced by fresh prompts, for at most `max_resample_rounds`
    extra rounds; if still short, filtered groups fill the batch untrained."""
    want = stage.batch.prompts_per_step
    pool, extra_rounds = objective.pool, objective.resample_rounds
    kept: list[list[Episode]] = []
    spare: list[list[Episode]] = []
    drawn_rewards: list[float] = []
    n, rounds, drawn = want, 0, 0
    while True:
        draws = stream.take(n)
        drawn += len(draws)
        groups = sample_groups(
            draws,
            rollout,
            sampling,
            tokenizer,
            stage,
            objective,
            samples=stage.batch.rollouts_per_prompt,
            seed=stage.seed,
            pool=pool,
            timer=timer,
        )
        if pool is not None:
            pool.rewards.finish_batch([e for group in groups for e in group])
        for group in groups:
            decided = [e for e in group if e.reward is not None]
            stream.observe(group[0].prompt_uid, sum(e.solved for e in decided), len(decided))
            for e in group:  # e.g. undecided rewards, capped responses: no gradient
                e.trained = objective.trains_on(e)
        if extra_rounds is None:
            return RolloutBatch(groups, rounds + 1, drawn)
        drawn_rewards += [e.reward for group in groups for e in group if e.reward is not None]
        for group in groups:
            signal = has_signal([e.reward for e in group if e.trained])
            (kept if signal else spare).append(group)
        if len(kept) >= want or rounds >= extra_rounds:
            break
        rounds += 1
        keep_rate = max(len(kept) / drawn, 0.25)
        n = min(want, math.ceil((want - len(kept)) / keep_rate))
    fill = spare[: max(0, want - len(kept))]
    for group in fill:
        for e in group:
            e.trained = False
    return RolloutBatch(kept[:want] + fill, rounds + 1, drawn, len(spare), drawn_rewards)


def sample_groups(
    draws: list[tuple[int, Prompt]],
    rollout: RolloutEngine,
    sampling: SamplingParams,
    tokenizer: object,
    stage: GRPOStage | MOPDStage,
    objective: Objective,
    *,
    samples: int,
    seed: int,
    pool: RewardPool | None,
    timer: StepTimer,
) -> list[list[Episode]]:
    """This rank's share of `draws`, `samples` rollouts each (seeded by (seed, draw, sample)),
    scored by `pool` as each group completes; then every rank's groups, gathered in draw
    order. Training batches and held-out evaluation both sample this way."""
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    mine = draws[rank::world]
    if objective.episodes is not None:
        done = agentic_groups(
            mine,
            rollout,
            sampling,
            tokenizer,
            stage,
            objective,
            samples=samples,
            seed=seed,
            pool=pool,
            timer=timer,
        )
        return gather_groups(done, world)
    plan = rollout_plan(mine, samples, seed, stage)
    modes = {slot: mode for slot, _, mode, _ in plan}
    prompt_ids = {
        slot: tokenize_prompt(tokenizer, mine[slot][1].messages, mode)  # type: ignore[arg-type]
        for slot, mode in modes.items()
    }
    requests = [
        rollout_request(key, prompt_ids[slot], sampling, sample_seed)
        for key, (slot, _, _, sample_seed) in enumerate(plan)
    ]
    groups = Groups(mine, samples, pool)
    stops = set(sampling.stop_token_ids)
    with timer("rollout_s"):
        for r in rollout.generate(requests):
            slot, sample, mode, _ = plan[r.key]
            draw, prompt = mine[slot]
            text_ids = r.token_ids[:-1] if r.token_ids and r.token_ids[-1] in stops else r.token_ids
            episode = Episode(
                draw=draw,
                sample=sample,
                prompt_uid=prompt.uid,
                mode=mode,  # type: ignore[arg-type]
                prompt_ids=list(requests[r.key].prompt_ids),
                response_ids=r.token_ids,
                rollout_logprobs=r.logprobs,
                finish_reason=r.finish_reason,
                domain=objective.domain(prompt),
                response_text=tokenizer.decode(text_ids, skip_special_tokens=False),  # type: ignore[attr-defined]
            )
            groups.put(slot, sample, episode)
    return gather_groups(groups.scored(timer), world)


def rollout_plan(
    mine: list[tuple[int, Prompt]], samples: int, seed: int, stage: GRPOStage | MOPDStage
) -> list[tuple[int, int, str, int]]:
    """(slot, sample, mode, seed) of every rollout of `mine`, in request order: a draw's mode
    from the stage's thinking fraction, a sample's seed from (seed, draw, sample)."""
    plan = []
    for slot, (draw, _) in enumerate(mine):
        mode = thinking_mode(draw, stage.thinking_fraction)
        plan += [
            (slot, sample, mode, rollout_seed(seed, draw, sample)) for sample in range(samples)
        ]
    return plan


class Groups:
    """Rollouts collected into their prompt's group; a group goes to the reward pool the
    moment its last rollout arrives, so scoring overlaps the rest of the decoding."""

    def __init__(
        self, mine: list[tuple[int, Prompt]], samples: int, pool: RewardPool | None
    ) -> None:
        self.mine, self.pool = mine, pool
        self.groups: list[list[Episode | None]] = [[None] * samples for _ in mine]
        self.left = [samples] * len(mine)
        self.futures: list = []

    def put(self, slot: int, sample: int, episode: Episode) -> None:
        self.groups[slot][sample] = episode
        self.left[slot] -= 1
        if self.left[slot] == 0 and self.pool is not None:
            self.futures.append(self.pool.submit(self.mine[slot][1], self.groups[slot]))  # type: ignore[arg-type]

    def scored(self, timer: StepTimer) -> list[list[Episode]]:
        """Every group, once the pool has scored them all."""
        with timer("reward_wait_s"):
            for future in self.futures:
                future.result()
        return self.groups  # type: ignore[return-value]


def gather_groups(done: list[list[Episode]], world: int) -> list[list[Episode]]:
    """Every rank's groups, in draw order, on every rank."""
    if world > 1:
        gathered: list = [None] * world
        torch.distributed.all_gather_object(gathered, done)
        done = sorted((grp for part in gathered for grp in part), key=lambda grp: grp[0].draw)
    return done


def agentic_groups(
    mine: list[tuple[int, Prompt]],
    rollout: RolloutEngine,
    sampling: SamplingParams,
    tokenizer: object,
    stage: GRPOStage | MOPDStage,
    objective: Objective,
    *,
    samples: int,
    seed: int,
    pool: RewardPool | None,
    timer: StepTimer,
) -> list[list[Episode]]:
    """`sample_groups` for an environment stage: each rollout an episode of several turns
    (`curation.environments.runner`), scored on its final answer as its group completes."""
    runner = objective.episodes
    plan = rollout_plan(mine, samples, seed, stage)
    starts = []
    for slot, _, mode, sample_seed in plan:
        prompt = mine[slot][1]
        row = {"messages": [{"role": m.role, "content": m.content} for m in prompt.messages]}
        starts.append(EpisodeStart(len(starts), {**prompt.columns, **row}, mode, sample_seed))  # type: ignore[arg-type]
    groups = Groups(mine, samples, pool)
    runner.times = RunnerTimes()
    with timer("rollout_s"):
        for agent in runner.run(rollout, starts, sampling, tokenizer):
            slot, sample, mode, _ = plan[agent.key]
            draw, prompt = mine[slot]
            episode = Episode(
                draw=draw,
                sample=sample,
                prompt_uid=prompt.uid,
                mode=mode,  # type: ignore[arg-type]
                prompt_ids=agent.prompt_ids,
                response_ids=agent.response_ids,
                rollout_logprobs=agent.logprobs,
                finish_reason=agent.finish_reason,
                domain=objective.domain(prompt),
                response_text=agent.transcript.final,
                response_mask=agent.response_mask,
                transcript=agent.transcript,
            )
            groups.put(slot, sample, episode)
    timer.seconds["tool_wait_s"] = timer.seconds.get("tool_wait_s", 0.0) + runner.times.tool_wait_s
    timer.seconds["tool_call_s"] = timer.seconds.get("tool_call_s", 0.0) + runner.times.tool_call_s
    return groups.scored(timer)


def agentic_summary(episodes: list[Episode]) -> dict:
    """Turns, calls, errors and end reasons of a batch's episodes (empty for one-turn stages)."""
    transcripts = [e.transcript for e in episodes if e.transcript is not None]
    return episode_stats(transcripts) if transcripts else {}


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


def update(
    engine: object,
    episodes: list[Episode],
    stage: GRPOStage | MOPDStage,
    objective: Objective,
    device: torch.device,
) -> dict:
    """One optimizer step over all episodes: this rank's micro batches, each backward scaled
    so that the gradient DeepSpeed averages over ranks is the global-batch loss's."""
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    micro = stage.batch.micro_batch_size
    chunks = [episodes[i : i + micro] for i in range(0, len(episodes), micro)]
    per_rank = len(chunks) // world
    trained = [e for e in episodes if e.trained]
    normalizer = (
        sum(e.model_tokens for e in trained) if objective.level == "token" else len(trained)
    ) or 1
    temperature = stage.temperature
    sums = {"loss": 0.0, "logprob_gap": 0.0, "response_tokens": 0.0}
    sums |= dict.fromkeys(objective.sum_names, 0.0)
    for chunk in chunks[rank * per_rank : (rank + 1) * per_rank]:
        batch = pack_episodes(chunk, device)
        logits = packed_logits(engine, batch)  # type: ignore[arg-type]
        labels = batch.labels.clamp(min=0)
        logp_all = sampling_logprobs(logits, labels, temperature)
        logp = logp_all[batch.trained]
        loss, parts = objective.loss(MicroBatch(chunk, batch, logits, labels, logp, temperature))
        for name, value in parts.items():
            sums[name] += value
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
    n_trained_tokens = max(1, sum(e.model_tokens for e in trained))
    return {
        "loss": sums["loss"] / normalizer,
        "logprob_gap": sums["logprob_gap"] / max(1.0, sums["response_tokens"]),
        **objective.stats(sums, n_trained_tokens),
    }


# ==================================================================== evaluation ==============


def evaluate(
    rollout: RolloutEngine,
    prompts: list[Prompt],
    tokenizer: object,
    stage: GRPOStage | MOPDStage,
    objective: Objective,
) -> dict:
    """Held-out prompts scored with the objective's judge: mean reward and pass rate.

    Greedy by default (the spec's temperature otherwise, seeded per prompt), at the spec's
    response budget where it sets one (a length curriculum's phases then score alike); a
    response cut at that budget is scored as the stage scores one. Every rank scores
    its share and the groups are gathered, so all ranks log the same numbers.
    """
    spec: EvalSpec | None = objective.evaluation
    if spec is None or objective.judge is None:
        return {}
    sampling = replace(
        sampling_params(stage, tokenizer),
        temperature=spec.temperature,
        max_new_tokens=spec.max_response_len or stage.max_response_len,
    )
    sampling = replace(sampling, top_p=1.0 if spec.temperature == 0 else sampling.top_p)
    groups = sample_groups(
        list(enumerate(prompts)),
        rollout,
        sampling,
        tokenizer,
        stage,
        objective,
        samples=spec.samples_per_prompt,
        seed=-1 - stage.seed,
        pool=objective.judge,
        timer=StepTimer(),
    )
    scored = [(e.reward, e.solved) for group in groups for e in group]
    decided = [r for r, _ in scored if r is not None]
    episodes = agentic_summary([e for group in groups for e in group])
    return {
        "eval_reward_mean": sum(decided) / len(decided) if decided else None,
        "eval_pass_rate": sum(s for _, s in scored) / len(scored),
        "eval_samples": len(scored),
        **{f"eval_{name}": value for name, value in episodes.items()},
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
