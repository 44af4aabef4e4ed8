"""Run agentic episodes: a model and an environment take turns until the model answers.

An episode is one token sequence: the opening (chat and tools, rendered by the chat template),
then each model turn as the generator sampled it (ending with `<|im_end|>`), then the tool
results as one user turn and the next assistant header (`tokenize_tool_turn`), and so on. The
mask marks the model's tokens, the only ones with log-probs and the only ones trained; every
other token is context, exactly as `tokenize_chat` masks the transcript for SFT.

Episodes are independent. Each model turn's tool calls run in a thread pool the moment that
turn is decoded, while the generator goes on decoding the other episodes' turns; an episode
whose tools are done goes to the next decoding round, whoever else is still waiting on a tool
(the runner gives other tools `regroup_s` to finish too, so a round is not one episode wide).
Decoding runs in its own thread. An engine with `generate_feed` (the hf rollout engine) takes
each turn into its running batch as soon as it is ready, reusing the cache of the episode's
earlier turns; another local engine decodes one round at a time, the tools that finish
meanwhile making up the next; a server (`concurrent_requests = True` on the backend) gets each
episode's next turn at once, so no turn waits for a slow reply to another episode.
Nothing waits for the slowest tool of the batch (`turn_synchronous=True` does, as the baseline
of bench/agentic_rollout.py).

The runner, not the environment, reads the calls out of a turn, answers malformed and unknown
calls with an error turn, applies `EpisodeLimits`, truncates long outputs with a marker and
records why each episode ended.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from curation.generate.plan import Teacher
from curation.generate.split import split_response
from schemas.chat_template import (
    parse_chat_tools,
    parse_prompt,
    tokenize_prompt,
    tokenize_tool_turn,
)
from schemas.environment import (
    TRUNCATION_MARKER,
    Environment,
    EpisodeLimits,
    ToolError,
    ToolSession,
    Transcript,
)
from schemas.generation import (
    Completion,
    GenerationRequest,
    Generator,
    Mode,
    RequestFeed,
    SamplingParams,
)
from schemas.tool_calls import (
    ToolCall,
    ToolCallError,
    openai_chat,
    split_tool_calls,
    text_chat,
    tool_name,
)


@dataclass(frozen=True)
class EpisodeStart:
    """One episode to run: its key (the caller's), the row, the thinking mode, its seed."""

    key: Any
    row: Mapping[str, Any]
    mode: Mode
    seed: int


@dataclass
class AgentEpisode:
    """A finished episode: the opening's tokens, then every later token with whether the model
    produced it (`response_mask`) and its log-prob (0 where it did not), and the transcript."""

    key: Any
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[bool]
    logprobs: list[float]
    transcript: Transcript

    @property
    def finish_reason(self) -> str:
        """`stop` when the model answered, `length` when a limit cut the episode."""
        return "stop" if self.transcript.end_reason == "answered" else "length"


@dataclass
class RunnerTimes:
    """Wall seconds of a run: decoding, waiting on tools with nothing to decode, tool calls
    (summed over calls, so above the wall time when they overlap)."""

    decode_s: float = 0.0
    tool_wait_s: float = 0.0
    tool_call_s: float = 0.0


@dataclass
class _Live:
    start: EpisodeStart
    session: ToolSession
    tool_names: frozenset[str]
    prompt_ids: list[int]
    transcript: Transcript
    response_ids: list[int] = field(default_factory=list)
    mask: list[bool] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    tokens_used: int = 0  # a teacher's episode: the last reply's prompt + completion tokens

    def context(self) -> list[int]:
        return self.prompt_ids + self.response_ids


def model_turn_seed(seed: int, turn: int) -> int:
    """The seed of an episode's `turn`-th model turn: the episode's own for the first, so a
    one-turn episode samples exactly what a single-turn rollout with that seed does."""
    return seed if turn == 0 else (seed * 1_000_003 + turn) % (1 << 63)


class EpisodeRunner:
    """Runs episodes of one environment under `limits` (see the module docstring)."""

    def __init__(
        self,
        environment: Environment,
        limits: EpisodeLimits | None = None,
        *,
        tool_workers: int = 16,
        turn_synchronous: bool = False,
        regroup_s: float = 0.02,
        use_feed: bool = True,
    ) -> None:
        self.environment = environment
        self.limits = limits or EpisodeLimits()
        self.tool_workers = tool_workers
        self.turn_synchronous = turn_synchronous
        self.regroup_s = regroup_s
        self.use_feed = use_feed
        self.times = RunnerTimes()

    def run(
        self,
        generator: Generator,
        starts: Sequence[EpisodeStart],
        sampling: SamplingParams,
        tokenizer: Any = None,
        teacher: Teacher | None = None,
        native_tools: bool = False,
    ) -> Iterator[AgentEpisode]:
        """Yield each episode as it ends (in any order); `sampling.max_new_tokens` caps each
        model turn.

        With a `tokenizer` (the policy's: a rollout engine), episodes are token sequences and
        `sampling.stop_token_ids` must hold the end-of-turn token. Without one, `generator`
        is a teacher backend sent chats (`schemas.tool_calls.text_chat`: tools in the system
        prompt, calls read from the reply text) in `teacher`'s mode switch; episodes are then
        transcripts only, their token budget counted from the backend's token counts.
        `native_tools`: send the chat in OpenAI's form with the tools in the request (a server
        with a tool-call parser) instead of the text convention.
        """
        if tokenizer is not None and not sampling.stop_token_ids:
            raise ValueError("give the end-of-turn token as a stop token: turns end there")
        if tokenizer is None and teacher is None:
            raise ValueError("give the policy's tokenizer (rollouts) or a teacher (chats)")
        self._tokenizer, self._teacher, self._native = tokenizer, teacher, native_tools
        live = {i: self._open(s, tokenizer) for i, s in enumerate(starts)}
        events: queue.Queue = queue.Queue()
        ready, rounds, decoding, running_tools = list(live), 0, 0, 0
        # a server takes a new round while others are in flight; a local engine decodes one
        overlap = bool(getattr(generator, "concurrent_requests", False))
        feed = None  # an engine that admits requests while decoding gets them one by one
        if self.use_feed and hasattr(generator, "generate_feed"):
            feed = RequestFeed(self.limits.max_total_tokens, sampling.max_new_tokens)
            rounds = 1
            decoder = threading.Thread(
                target=self._decode, args=(generator, feed, events), daemon=True
            )
            decoder.start()

        def handle(kind: str, payload: Any) -> list[AgentEpisode]:
            nonlocal rounds, decoding, running_tools
            finished = []
            if kind == "round":
                rounds -= 1
                if isinstance(payload, BaseException):
                    raise payload
            elif kind == "turn":
                decoding -= 1
                i = int(payload.key)
                outcome = self._take_turn(live[i], payload, sampling, tokenizer)
                if isinstance(outcome, str):
                    finished.append(self._finish(live.pop(i), outcome))
                else:
                    running_tools += 1
                    future = pool.submit(self._call_tools, live[i], outcome)
                    future.add_done_callback(lambda f, i=i: events.put(("tools", (i, f))))
            else:
                running_tools -= 1
                i, future = payload
                if self._append_results(live[i], future.result(), tokenizer):
                    ready.append(i)
                else:
                    finished.append(self._finish(live.pop(i), "max_tokens"))
            return finished

        try:
            with ThreadPoolExecutor(self.tool_workers, thread_name_prefix="tool") as pool:
                while live:
                    free = feed is not None or overlap or rounds == 0
                    if self.turn_synchronous:  # a turn starts once the last one is all done
                        free = decoding == 0 and running_tools == 0 and (feed or rounds == 0)
                    if ready and free:
                        if feed is None and running_tools and not rounds:
                            # tools finishing together share the round (regroup_s at most)
                            deadline = time.perf_counter() + self.regroup_s
                            while running_tools and (left := deadline - time.perf_counter()) > 0:
                                try:
                                    kind, payload = events.get(timeout=left)
                                except queue.Empty:
                                    break
                                yield from handle(kind, payload)
                        requests = []
                        for i in ready:
                            request = self._request(i, live[i], sampling)
                            if request is None:  # the episode's token budget is spent
                                yield self._finish(live.pop(i), "max_tokens")
                            else:
                                requests.append(request)
                        ready.clear()
                        decoding += len(requests)
                        if feed is not None:
                            for request in requests:
                                feed.put(request)
                        elif requests:
                            rounds += 1
                            threading.Thread(
                                target=self._decode,
                                args=(generator, requests, events),
                                daemon=True,
                            ).start()
                        continue
                    if not decoding and not running_tools and (feed is not None or not rounds):
                        break  # nothing in flight and nothing to send: a turn went missing
                    began = time.perf_counter()
                    kind, payload = events.get()
                    if not decoding:
                        self.times.tool_wait_s += time.perf_counter() - began
                    yield from handle(kind, payload)
        finally:
            if feed is not None:
                feed.close()
                decoder.join(timeout=60)
        for episode in live.values():  # only reached when the generator dropped a request
            episode.session.close()
        if live:
            raise RuntimeError(f"the generator returned no completion for {len(live)} turns")

    def _decode(
        self,
        generator: Generator,
        requests: list[GenerationRequest] | RequestFeed,
        events: queue.Queue,
    ) -> None:
        """One decoding round (or the whole run, from a feed), in its own thread: each turn
        to `events` as it finishes."""
        began = time.perf_counter()
        try:
            if isinstance(requests, RequestFeed):
                completions = generator.generate_feed(requests)  # type: ignore[attr-defined]
            else:
                completions = generator.generate(requests)
            for completion in completions:
                events.put(("turn", completion))
        except BaseException as exc:  # the loop raises it
            events.put(("round", exc))
            return
        finally:
            self.times.decode_s += time.perf_counter() - began
        events.put(("round", None))

    # ------------------------------------------------------------------ one episode ----------

    def _open(self, start: EpisodeStart, tokenizer: Any) -> _Live:
        opening, session = self.environment.open(start.row)
        where = f"episode {start.key}"
        messages = parse_prompt(list(opening.messages), where)
        tools = parse_chat_tools(list(opening.tools), where)
        ids = [] if tokenizer is None else tokenize_prompt(tokenizer, messages, start.mode, tools)
        turns = [dict(m) for m in opening.messages]
        transcript = Transcript(turns, tuple(tools), "", opening_turns=len(turns))
        names = frozenset(n for n in (tool_name(t) for t in tools) if n)
        return _Live(start, session, names, ids, transcript)

    def _request(self, i: int, ep: _Live, sampling: SamplingParams) -> GenerationRequest | None:
        room = self.limits.max_total_tokens - max(len(ep.context()), ep.tokens_used)
        if room < 1:
            return None
        turn_sampling = replace(sampling, max_new_tokens=min(sampling.max_new_tokens, room))
        seed = model_turn_seed(ep.start.seed, ep.transcript.turns)
        teacher = self._teacher
        if self._tokenizer is not None or teacher is None:
            return GenerationRequest(i, "policy", (), turn_sampling, seed, prompt_ids=ep.context())
        mode, tools = ep.start.mode, ep.transcript.tools
        if self._native:
            chat, sent_tools = openai_chat(ep.transcript.messages), tools
        else:
            chat, sent_tools = text_chat(ep.transcript.messages, tools), ()
        chat = teacher.messages_for(chat, mode)
        kwargs = teacher.template_kwargs_for(mode)
        model = teacher.model_for(mode)
        return GenerationRequest(i, model, chat, turn_sampling, seed, kwargs, tools=sent_tools)

    def _take_turn(
        self, ep: _Live, completion: Completion, sampling: SamplingParams, tokenizer: Any
    ) -> str | list[ToolCall | ToolError]:
        """Record the model's turn; its calls to run, or why the episode ends here."""
        ep.transcript.turns += 1
        if tokenizer is None:  # a teacher's reply: text, and the backend's token counts
            ep.tokens_used = completion.prompt_tokens + completion.completion_tokens
            split = split_response(
                completion.text,
                opened_in_prompt=completion.opened_in_prompt,
                reasoning=completion.reasoning,
            )
        else:
            ids = list(completion.token_ids or [])
            ep.response_ids += ids
            ep.mask += [True] * len(ids)
            ep.logprobs += list(completion.logprobs or [0.0] * len(ids))
            stops = set(sampling.stop_token_ids)
            text_ids = ids[:-1] if ids and ids[-1] in stops else ids
            split = split_response(tokenizer.decode(text_ids, skip_special_tokens=False))
        message: dict[str, Any] = {"role": "assistant", "content": split.answer}
        if split.reasoning is not None:
            message["reasoning"] = split.reasoning
        ep.transcript.messages.append(message)
        if completion.finish_reason == "length":
            used = max(len(ep.context()), ep.tokens_used)
            cut_by_budget = used >= self.limits.max_total_tokens
            return "max_tokens" if cut_by_budget else "length"
        if not split.reasoning_closed:
            return "answered"  # thinking never closed: no calls to read, a (wrong) final turn
        try:
            content, calls = split_tool_calls(split.answer)
        except ToolCallError as exc:
            ep.transcript.tool_calls += 1
            return [
                ToolError(
                    f'{exc}; write each call as <tool_call>{{"name": ..., "arguments": {{...}}}}</tool_call>'
                )
            ]
        if not calls:
            return "answered"
        message["content"] = content
        message["tool_calls"] = [call.as_dict() for call in calls]
        ep.transcript.tool_calls += len(calls)
        if ep.transcript.turns >= self.limits.max_turns:
            return "max_turns"
        return list(calls)

    def _call_tools(
        self, ep: _Live, calls: list[ToolCall | ToolError]
    ) -> list[tuple[str, bool, float]]:
        """Each call's (output or error text, failed, seconds), in order; in a tool thread."""
        out = []
        limit = self.limits.tool_timeout_s
        for call in calls:
            if isinstance(call, ToolError):
                out.append((f"error: {call}", True, 0.0))
                continue
            if call.name not in ep.tool_names:
                offered = ", ".join(sorted(ep.tool_names)) or "none"
                out.append((f"error: unknown tool {call.name!r}; tools: {offered}", True, 0.0))
                continue
            began = time.perf_counter()
            try:
                text, failed = ep.session.call(call, limit), False
            except ToolError as exc:
                text, failed = f"error: {exc}", True
            except Exception as exc:  # a tool's own bug is the model's error turn, not a crash
                text, failed = f"error: the tool failed ({type(exc).__name__}: {exc})", True
            seconds = time.perf_counter() - began
            if seconds > limit and not failed:  # a session that overran its deadline
                text, failed = (
                    f"error: the tool took {seconds:.1f} s, over the {limit:g} s limit",
                    True,
                )
            out.append((text, failed, seconds))
        return out

    def _append_results(
        self, ep: _Live, results: list[tuple[str, bool, float]], tokenizer: Any
    ) -> bool:
        """Append the tool turn; False when it would not leave the model a token to speak."""
        cap = self.limits.max_tool_output_chars
        texts = []
        for text, failed, seconds in results:
            ep.transcript.tool_errors += failed
            ep.transcript.tool_seconds += seconds
            self.times.tool_call_s += seconds
            if len(text) > cap:
                ep.transcript.truncated_outputs += 1
                text = text[:cap] + TRUNCATION_MARKER.format(dropped=len(text) - cap)
            texts.append(text)
        if tokenizer is None:  # a teacher's episode: the next reply's prompt count tells
            ep.transcript.messages += [{"role": "tool", "content": t} for t in texts]
            return True
        ids = tokenize_tool_turn(tokenizer, texts)
        if len(ep.context()) + len(ids) >= self.limits.max_total_tokens:
            return False
        ep.transcript.messages += [{"role": "tool", "content": t} for t in texts]
        ep.response_ids += ids
        ep.mask += [False] * len(ids)
        ep.logprobs += [0.0] * len(ids)
        return True

    def _finish(self, ep: _Live, reason: str) -> AgentEpisode:
        ep.session.close()
        ep.transcript.end_reason = reason
        return AgentEpisode(
            ep.start.key, ep.prompt_ids, ep.response_ids, ep.mask, ep.logprobs, ep.transcript
        )


def episode_stats(transcripts: Sequence[Transcript]) -> dict[str, Any]:
    """What a stage log records of a batch of episodes: turns and calls per episode, errors,
    truncated outputs and the end reasons."""
    n = max(1, len(transcripts))
    reasons: dict[str, int] = {}
    for t in transcripts:
        reasons[t.end_reason] = reasons.get(t.end_reason, 0) + 1
    return {
        "turns_mean": sum(t.turns for t in transcripts) / n,
        "tool_calls_mean": sum(t.tool_calls for t in transcripts) / n,
        "tool_errors": sum(t.tool_errors for t in transcripts),
        "tool_outputs_truncated": sum(t.truncated_outputs for t in transcripts),
        "end_reasons": dict(sorted(reasons.items())),
    }
