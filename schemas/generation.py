"""Generation's one vocabulary, and the contract of the `generations` table.

Teacher generation (SFT data) and policy rollouts (RL episodes) speak the same types: a
`GenerationRequest` (a prompt, its `SamplingParams`, one seed) goes to a `Generator`, which
gives back a `Completion` (the text, and the token ids and log-probs where it has them).
Thinking mode (`Mode`) and how a teacher is put in it (`ModeSwitch`) are defined here too.

A `generations` row is one sample of one teacher, for one prompt, in one mode, with one seed.
`id` is the fingerprint of everything that determines the sample (model, prompt messages,
mode, how the mode was selected, sampling parameters, seed), so a re-run finds what it already
has by id and computes only the rest. The response is stored raw and split into `reasoning`
(the `<think>` part, null when there is none) and `final_answer` (the text after it), so SFT
examples can be rendered later in the student's own chat template.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

import pyarrow as pa

from schemas.tables import TableContract, register_contract

Mode = Literal["think", "no_think"]
MODES: tuple[Mode, ...] = ("think", "no_think")
"""Thinking mode answers with `<think>...</think>` reasoning first; non-thinking does not."""

MODE_FLAGS: dict[Mode, str] = {"think": "/think", "no_think": "/no_think"}
"""The flag a user turn ends with to ask for a mode (Nemotron-Cascade's chat format)."""

ModeSwitch = Literal["model", "template", "flag"]
MODE_SWITCHES: tuple[ModeSwitch, ...] = ("model", "template", "flag")
"""How a teacher is put in a mode: one model per mode, the chat template's `enable_thinking`,
or a mode flag on every user turn (the `mode_switch` column)."""


@dataclass(frozen=True)
class SamplingParams:
    """How one response is sampled, for a teacher and for the policy alike.

    `temperature=0` is greedy decoding (seeds then make no difference); `top_k=0` disables
    top-k. `stop_token_ids` end a response besides the model's own end tokens; the rollout
    engines need them (the end-of-turn token), the teachers stop at their model's end tokens.
    """

    max_new_tokens: int = 1024
    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 0
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")

    def as_dict(self) -> dict[str, Any]:
        """The fields as hashed into a generation's fingerprint: stop tokens only when set,
        so the ids of samples generated before they existed stay the same."""
        values = asdict(self)
        if not self.stop_token_ids:
            del values["stop_token_ids"]
        return values

    @property
    def logprob_temperature(self) -> float:
        """The temperature log-probs are taken at (1 for greedy decoding)."""
        return self.temperature if self.temperature > 0 else 1.0


@dataclass(frozen=True)
class GenerationRequest:
    """One sample to generate: a prompt for one model, with its sampling and one seed.

    The prompt is `messages`, a chat the generator renders with its chat template (any mode
    flag already added; `template_kwargs` go to the template, e.g. Qwen3's `enable_thinking`,
    locally or as a server's `chat_template_kwargs`), or `prompt_ids`, a prompt already
    rendered to token ids (what the RL loop sends the rollout engines). A sample depends only
    on (weights, prompt, sampling, seed), never on which other requests share its batch, so it
    is cacheable and the same on one rank or eight. `key` is the caller's id for the result
    (the teacher's cache fingerprint, the RL loop's request index). `tools`: JSON schemas sent
    through a server's native tool-calling API (OpenAI `tools`; `messages` then in OpenAI's
    form, calls with ids and tool results with `tool_call_id`); the server's calls come back
    in the text convention of `schemas.tool_calls`, so a reader parses one form.
    """

    key: str | int
    model: str
    messages: tuple[dict[str, str], ...]
    sampling: SamplingParams
    seed: int
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    prompt_ids: Sequence[int] | None = None
    tools: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Completion:
    """What a generator returns for one request.

    `finish_reason` is `stop` (the model ended) or `length` (cut at max_new_tokens).
    `reasoning` is set only when the backend got it separately (server-side reasoning
    parser); `opened_in_prompt` when the rendered prompt ended with `<think>`.
    `token_ids` (with the stop token when it stopped) and `logprobs` (per token, log
    softmax(logits / temperature) of the sampled token, before top-k / top-p) are set by the
    generators that report them (the rollout engines, which leave `text` empty: the RL loop
    decodes). `top_logprobs`, when asked for (the openai backend's `top_logprobs`), is one
    entry per generated token as OpenAI-compatible servers give it: `{"token", "logprob",
    "top_logprobs": [{"token", "logprob"}, ...]}`.
    """

    key: str | int
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    reasoning: str | None = None
    opened_in_prompt: bool = False
    top_logprobs: tuple[dict[str, Any], ...] | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None


class Generator(Protocol):
    """What turns requests into completions: a teacher backend (`curation.generate.Backend`,
    bound to one model) or a rollout engine (`training.rollout.RolloutEngine`, which also
    takes the policy's new weights), so an environment runner can drive either."""

    name: str

    def generate(self, requests: Sequence[GenerationRequest]) -> Iterator[Completion]:
        """Yield one Completion per request, in any order, as soon as each is done."""
        ...

    def close(self) -> None:
        """Free the model / connections (a run may load another model next)."""
        ...


class RequestFeed:
    """Requests that arrive while a generator is decoding: an agentic episode's next turn is
    ready only once its tools return. A generator with `generate_feed(feed)` (the hf rollout
    engine) admits each request into a free row as it arrives, so the batch stays full without
    waiting for whole rounds. `max_tokens` bounds any request's prompt plus its new tokens and
    `max_new_tokens` its new tokens (what the engine sizes its cache by); thread-safe."""

    def __init__(self, max_tokens: int, max_new_tokens: int) -> None:
        import threading

        self.max_tokens, self.max_new_tokens = max_tokens, max_new_tokens
        self._items: list[GenerationRequest] = []
        self._closed = False
        self._ready = threading.Condition()

    def put(self, request: GenerationRequest) -> None:
        with self._ready:
            self._items.append(request)
            self._ready.notify_all()

    def close(self) -> None:
        """No more requests will come: the generator ends once it has decoded what it has."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()

    def take(self, wait_s: float = 0.0) -> list[GenerationRequest]:
        """The requests that arrived since the last call (waiting up to `wait_s` for one)."""
        with self._ready:
            if not self._items and not self._closed and wait_s > 0:
                self._ready.wait(wait_s)
            items, self._items = self._items, []
            return items

    @property
    def closed(self) -> bool:
        with self._ready:
            return self._closed and not self._items


FINISH_REASONS = ("stop", "length")
"""`stop`: the model ended its answer; `length`: cut at max_new_tokens (see `truncated`)."""

GENERATIONS = TableContract(
    kind="generations",
    schema=pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("prompt_id", pa.string(), nullable=False),
            pa.field("model", pa.string(), nullable=False),
            pa.field("backend", pa.string(), nullable=False),
            pa.field("mode", pa.string(), nullable=False),
            pa.field("mode_switch", pa.string(), nullable=False),
            pa.field("sample_index", pa.int32(), nullable=False),
            pa.field("seed", pa.int64(), nullable=False),
            pa.field("temperature", pa.float64(), nullable=False),
            pa.field("top_p", pa.float64(), nullable=False),
            pa.field("top_k", pa.int32(), nullable=False),
            pa.field("max_new_tokens", pa.int32(), nullable=False),
            pa.field("messages", pa.string(), nullable=False),
            pa.field("response", pa.string(), nullable=False),
            pa.field("reasoning", pa.string()),
            pa.field("final_answer", pa.string(), nullable=False),
            pa.field("prompt_tokens", pa.int64(), nullable=False),
            pa.field("completion_tokens", pa.int64(), nullable=False),
            pa.field("finish_reason", pa.string(), nullable=False),
            pa.field("truncated", pa.bool_(), nullable=False),
        ]
    ),
    description=(
        "One teacher sample per row. id: fingerprint of (model, messages, mode, mode_switch, "
        "sampling parameters, seed), the cache key. prompt_id: id of the input prompt. "
        "mode: think | no_think; mode_switch: how it was selected (model | template | "
        "flag). top_k 0 means disabled. messages: the chat sent to the teacher (JSON list of "
        "{role, content}, before any mode flag was added). response: raw text; reasoning: the "
        "<think> part (null if none); final_answer: the text after </think> (all of it if no reasoning). "
        "truncated: cut at max_new_tokens (finish_reason 'length') or reasoning never closed."
    ),
)

register_contract(GENERATIONS)
