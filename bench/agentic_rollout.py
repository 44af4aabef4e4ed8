"""Multi-turn rollout throughput: independent episodes against turn-synchronous loops.

Every loop runs the same episodes through `curation.environments.runner.EpisodeRunner` with the
`hf` rollout engine (a random tiny Qwen2 decoding every turn for real). `independent` (the
default): each episode's calls start the moment its turn is decoded and its next turn joins
the running batch as soon as its own calls return, reusing the cache of its earlier turns.
`turn_synchronous`: the same engine, but turn t+1 of any episode starts only when every
episode's turn t and its tools are done (each turn waits for the batch's slowest call): only
the scheduling differs. `turn_sync_rounds`: turn-synchronous as a plain loop does it, each
turn a new generate call that prefills every episode's whole conversation again.

The tiny model cannot call tools, so what each turn says is scripted (`--calls` python calls,
one per turn, then an answer) while its tokens stay the model's (`--turn-tokens` per turn).
Every call runs in the sandbox (`print(i)`) after a latency drawn from a long-tailed mix
(seeded, the same draws in every loop): most calls are quick, a few slow, as code execution
and web tools are.

    python bench/agentic_rollout.py --episodes 32 --calls 6 --seeds 0,1,2
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from curation.environments.python import PythonEnvironment  # noqa: E402
from curation.environments.runner import EpisodeRunner, EpisodeStart, episode_stats  # noqa: E402
from curation.verify.sandbox import Sandbox  # noqa: E402
from schemas.environment import EpisodeLimits  # noqa: E402
from schemas.generation import (  # noqa: E402
    Completion,
    GenerationRequest,
    RequestFeed,
    SamplingParams,
)
from schemas.tool_calls import ToolCall  # noqa: E402
from training.models import build_model, train_bpe_tokenizer  # noqa: E402
from training.rollout.hf import HfEngine  # noqa: E402

LATENCY_MIX = ((0.80, 0.02), (0.15, 0.25), (0.05, 1.5))
"""(share, seconds) of tool-call latencies: long-tailed, as code and web tools are."""


def latency(episode: int, call: int, seed: int) -> float:
    draw = random.Random(f"{seed}:{episode}:{call}").random()
    for share, seconds in LATENCY_MIX:
        if draw < share:
            return seconds
        draw -= share
    return LATENCY_MIX[-1][1]


class SlowPython(PythonEnvironment):
    """The python environment with each call delayed by its drawn latency first; with
    `run=False` the call is its latency alone (a remote tool: no CPU of this machine)."""

    def __init__(self, sandbox: Sandbox, seed: int, run: bool = True) -> None:
        super().__init__(sandbox=sandbox)
        self.seed, self.run = seed, run

    def open(self, row):
        opening, session = super().open(row)
        episode, seed, inner, run = int(row["episode"]), self.seed, session, self.run
        calls = iter(range(1000))

        class Delayed:
            def call(self, call: ToolCall, timeout_s: float) -> str:
                time.sleep(latency(episode, next(calls), seed))
                return inner.call(call, timeout_s) if run else "0\n"

            def close(self) -> None:
                inner.close()

        return opening, Delayed()


class ScriptedTurns:
    """The hf engine decodes each turn for real (`turn_tokens` tokens); what the turn *says*
    is the script's (a python call while calls remain, then the answer), given to the runner
    through `ScriptedReading`. The tokens stay the model's own, so the engine's reuse of an
    episode's cached turns works as it would for a model that calls tools."""

    name = "scripted-hf"

    def __init__(self, engine: HfEngine, calls: int) -> None:
        self.engine, self.calls = engine, calls
        self.turns: dict[int, int] = {}
        self.says: dict[tuple[int, ...], str] = {}

    def generate(self, requests: Sequence[GenerationRequest]) -> Iterator[Completion]:
        return self._scripted(self.engine.generate(requests))

    def generate_feed(self, feed: RequestFeed) -> Iterator[Completion]:
        return self._scripted(self.engine.generate_feed(feed))

    def _scripted(self, decoded: Iterator[Completion]) -> Iterator[Completion]:
        for done in decoded:
            key = int(done.key)
            turn = self.turns.get(key, 0)
            self.turns[key] = turn + 1
            text = (
                ToolCall("python", json.dumps({"code": f"print({turn})"})).text()
                if turn < self.calls
                else "\\boxed{0}"
            )
            ids = tuple(done.token_ids or ())
            self.says[ids] = self.says[ids[:-1]] = text
            yield replace(done, finish_reason="stop")  # the turn ends where the script says

    def close(self) -> None:
        self.engine.close()


class ScriptedReading:
    """The policy's tokenizer, except that a scripted turn's tokens read as its script."""

    def __init__(self, tokenizer, turns: ScriptedTurns) -> None:
        self._tokenizer, self._turns = tokenizer, turns

    def decode(self, ids, **kwargs) -> str:
        said = self._turns.says.get(tuple(ids))
        return said if said is not None else self._tokenizer.decode(ids, **kwargs)

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._tokenizer, name)


LOOPS = {
    "independent": {"turn_synchronous": False},
    "turn_synchronous": {"turn_synchronous": True},
    "turn_sync_rounds": {"turn_synchronous": True, "use_feed": False},
}
"""The loops compared: independent episodes (feed, cached turns); turn-synchronous on the same
engine (feed, cached turns: only the scheduling differs); turn-synchronous in rounds, each
turn a new generate call that prefills every episode's whole context again."""


def run_once(loop: str, args, model, tokenizer, sandbox) -> dict:
    engine = HfEngine.from_policy(model, batch_size=args.episodes)
    engine.load_weights(model.named_parameters())
    # the model never says <|im_end|> on cue, so each turn decodes exactly turn_tokens tokens
    never = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    sampling = SamplingParams(args.turn_tokens, temperature=1.0, stop_token_ids=(never,))
    limits = EpisodeLimits(max_turns=args.calls + 1, max_total_tokens=100_000, tool_timeout_s=10)
    runner = EpisodeRunner(
        SlowPython(sandbox, args.seed, run=args.tool == "python"),
        limits,
        tool_workers=args.episodes,
        **LOOPS[loop],
    )
    starts = [
        EpisodeStart(
            i, {"episode": i, "prompt": f"Task {i}: call python {args.calls} times."}, "no_think", i
        )
        for i in range(args.episodes)
    ]
    began = time.perf_counter()
    policy = ScriptedTurns(engine, args.calls)
    episodes = list(runner.run(policy, starts, sampling, ScriptedReading(tokenizer, policy)))

    seconds = time.perf_counter() - began
    stats = episode_stats([e.transcript for e in episodes])
    assert stats["tool_errors"] == 0 and stats["end_reasons"] == {"answered": args.episodes}, stats
    return {
        "seconds": seconds,
        "episodes_per_s": len(episodes) / seconds,
        "decode_s": runner.times.decode_s,
        "tool_wait_s": runner.times.tool_wait_s,
        "tool_call_s": runner.times.tool_call_s,
    }


def latency_bounds(episodes: int, calls: int, seed: int) -> tuple[float, float]:
    """Seconds of tool latency no scheduler can hide, decoding aside: independent episodes
    wait for the unluckiest episode's chain of calls; turn-synchronous ones for each turn's
    slowest call, turn after turn."""
    drawn = [[latency(e, c, seed) for c in range(calls)] for e in range(episodes)]
    chain = max(sum(row) for row in drawn)
    lockstep = sum(max(row[c] for row in drawn) for c in range(calls))
    return chain, lockstep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--calls", type=int, default=6, help="tool calls per episode")
    parser.add_argument("--turn-tokens", type=int, default=24, help="tokens decoded per turn")
    parser.add_argument("--rounds", type=int, default=2, help="alternating runs of each loop")
    parser.add_argument(
        "--seeds", default="0", help="latency draws to run, comma-separated (e.g. 0,1,2)"
    )
    parser.add_argument(
        "--tool",
        choices=("python", "latency"),
        default="python",
        help="python: each call runs in the sandbox after its latency (its process shares "
        "this machine's cores with decoding); latency: the latency alone, as a remote tool",
    )
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    torch.manual_seed(0)
    tokenizer = train_bpe_tokenizer(["python print tool_call arguments code boxed Task call"], 300)
    model = build_model("tiny-random:qwen2", None, len(tokenizer), "sdpa", seed=0).eval()
    mix = f"{args.episodes} episodes x {args.calls} calls, {args.tool} tool, latency mix {LATENCY_MIX}"
    ratios: dict[str, list[float]] = {"turn_synchronous": [], "turn_sync_rounds": []}
    with Sandbox(workers=4) as sandbox:
        for seed in seeds:
            args.seed = seed
            results: dict[str, list[dict]] = {name: [] for name in LOOPS}
            for _ in range(args.rounds):
                for name in results:
                    results[name].append(run_once(name, args, model, tokenizer, sandbox))
            best = {name: min(runs, key=lambda r: r["seconds"]) for name, runs in results.items()}
            chain, lockstep = latency_bounds(args.episodes, args.calls, seed)
            print(
                f"latency draw {seed}: tool-latency bound {chain:.2f} s independent, "
                f"{lockstep:.2f} s turn-synchronous (at most {lockstep / chain:.2f}x)"
            )
            for name, r in best.items():
                print(
                    f"  {name:17s} {r['seconds']:6.2f} s  {r['episodes_per_s']:6.2f} episodes/s  "
                    f"decode {r['decode_s']:.2f} s  waiting on tools {r['tool_wait_s']:.2f} s  "
                    f"tool calls {r['tool_call_s']:.1f} s (summed)"
                )
            for baseline, seen in ratios.items():
                ratio = best[baseline]["seconds"] / best["independent"]["seconds"]
                seen.append(ratio)
                print(f"  independent / {baseline}: {ratio:.2f}x")
    for baseline, seen in ratios.items():
        mean = math.exp(sum(math.log(r) for r in seen) / len(seen))
        print(f"independent / {baseline}: {mean:.2f}x (geometric mean of {len(seen)} draws; {mix})")


if __name__ == "__main__":
    main()
