"""The `hf` rollout engine: a transformers model decoding rows that refill as they finish.

RL response lengths have long tails: in a plain `generate` batch, every row waits for the
longest, so most of the batch decodes padding at the end. Here a fixed set of row slots shares
one static KV cache (`RowCache`, allocated once per width and reused); each row writes at its
own positions, so the moment a row stops (stop token or length cap) the next prompt is
prefilled into that slot and decoding goes on at full width.

Sampling is per row and seeded per request (inverse-CDF sampling on uniforms drawn from the
request's own generator), with temperature, then transformers' top-k and top-p warpers, the
same sampler as the hf teacher's (`schemas.sampling`): a sample depends only on the
weights, its prompt and its seed, not on what else shared the batch.
Greedy decoding (temperature 0) takes the argmax, token for token what `model.generate` does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch

from schemas.generation import Completion, GenerationRequest, RequestFeed, SamplingParams
from schemas.sampling import inverse_cdf_sample, seeded_uniforms, truncate
from training.rollout.engine import rollout_prompt


class RowCache:
    """Static K/V tensors [slots, kv_heads, width, head_dim] per layer, written per row.

    Before each forward the engine sets `rows` (the slots in this forward, None = all slots in
    order) and `positions` ([rows, query_len] cache columns the new keys go to); `update` writes
    there and returns the first `width_used` columns of those rows. The attention mask the
    engine passes keeps each row to its own written columns.
    """

    def __init__(
        self,
        layers: int,
        slots: int,
        kv_heads: int,
        width: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        shape = (slots, kv_heads, width, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.slots, self.width = slots, width
        self.rows: torch.Tensor | None = None
        self.positions = torch.zeros(0)
        self.width_used = 0

    def update(
        self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, kwargs: object = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        rows = self.rows
        index_rows = torch.arange(key.shape[0], device=key.device) if rows is None else rows
        rows_2d = index_rows[:, None].expand_as(self.positions)
        # [b, heads, q, dim] -> [b, q, heads, dim] to match cache[rows, :, positions]
        self.keys[layer_idx][rows_2d, :, self.positions] = key.transpose(1, 2)
        self.values[layer_idx][rows_2d, :, self.positions] = value.transpose(1, 2)
        width = self.width_used
        if rows is None:
            return self.keys[layer_idx][:, :, :width], self.values[layer_idx][:, :, :width]
        return self.keys[layer_idx][rows, :, :width], self.values[layer_idx][rows, :, :width]


@dataclass
class _Slot:
    request: int
    pos: int  # next cache column to write (= tokens so far)
    cap: int  # max new tokens for this request
    last: int  # last sampled token, fed at the next decode step
    tokens: list[int]
    logprobs: list[float]


class HfEngine:
    """`batch_size` row slots decoding together; see the module docstring."""

    name = "hf"

    def __init__(
        self, model: torch.nn.Module, batch_size: int, refill_at: int | None = None
    ) -> None:
        """`refill_at`: free slots that trigger a refill (default: an eighth of the slots), so
        one prefill forward serves several finished rows instead of one each."""
        config = model.config
        if "sliding_attention" in (getattr(config, "layer_types", None) or []):
            raise ValueError("the hf rollout engine does not support sliding-window layers")
        self.model = model.eval()
        self.batch_size = batch_size
        self.refill_at = refill_at or max(1, batch_size // 8)
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self._cache: RowCache | None = None

    @classmethod
    def from_policy(
        cls, policy: torch.nn.Module, batch_size: int, device: torch.device | None = None
    ) -> HfEngine:
        """An inference copy of `policy`'s architecture and dtype (SDPA, no grad) on `device`
        (default: the policy's); weights come from `load_weights`, which the loop calls before
        every rollout (under ZeRO-3 the policy's own parameters are partitioned)."""
        from transformers import AutoModelForCausalLM

        param = next(policy.parameters())
        model = AutoModelForCausalLM.from_config(
            policy.config, attn_implementation="sdpa", dtype=param.dtype
        )
        model.requires_grad_(False)
        return cls(model.to(device or param.device), batch_size)

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        own = dict(self.model.named_parameters())
        seen = set()
        for name, tensor in weights:
            name = name.removeprefix("module.")
            if name not in own:
                raise KeyError(f"rollout model has no parameter {name!r}")
            own[name].copy_(tensor)
            seen.add(name)
        missing = sorted(set(own) - seen)
        if missing:
            raise KeyError(f"weights for {missing[:3]} (and {len(missing) - 3} more) not given")

    def close(self) -> None:
        self._cache = None

    # ------------------------------------------------------------------ decoding -------------

    def generate(self, requests: Sequence[GenerationRequest]) -> Iterator[Completion]:
        """Yield a Completion per request as each finishes (see the module docstring);
        requests that sample alike (all but their length cap) decode together."""
        alike: dict[tuple, list[GenerationRequest]] = {}
        for request in requests:
            s = request.sampling
            alike.setdefault((s.temperature, s.top_p, s.top_k, s.stop_token_ids), []).append(
                request
            )
        for group in alike.values():
            yield from self._generate_alike(group)

    def generate_feed(self, feed: RequestFeed) -> Iterator[Completion]:
        """Yield a Completion per request of `feed` as each finishes, admitting requests into
        free rows as they arrive, until the feed is closed and drained. Every request must
        sample alike but for its cap (an RL stage's requests do)."""
        first = feed.take(wait_s=3600.0)
        while not first and not feed.closed:
            first = feed.take(wait_s=3600.0)
        if first:
            yield from self._generate_alike(first, feed)

    def _generate_alike(
        self, requests: list[GenerationRequest], feed: RequestFeed | None = None
    ) -> Iterator[Completion]:
        """Decode requests that share their sampling but for `max_new_tokens` (each's cap);
        with a `feed`, more arrive while decoding and join as rows come free."""
        sampling = requests[0].sampling
        requests = list(requests)
        prompts = [rollout_prompt(r) for r in requests]
        caps = [r.sampling.max_new_tokens for r in requests]
        width = max(len(p) + cap for p, cap in zip(prompts, caps, strict=True))
        slots_wanted = min(self.batch_size, len(requests))
        if feed is not None:
            width, slots_wanted = max(width, feed.max_tokens), self.batch_size
        cache = self._cache_for(slots_wanted, width)
        stops = set(sampling.stop_token_ids)
        longest = max(caps) if feed is None else max(*caps, feed.max_new_tokens)
        uniforms = torch.zeros(cache.slots, longest, device=self.device)
        slots: list[_Slot | None] = [None] * cache.slots
        pending = deque(range(len(requests)))
        kept: dict[int, list[int]] = {}  # free slot -> the tokens its cache columns hold

        def arrivals(wait_s: float) -> None:
            for request in feed.take(wait_s) if feed is not None else ():
                if request.sampling.max_new_tokens > longest:
                    raise ValueError(f"request {request.key}: over the feed's max_new_tokens")
                prompt = rollout_prompt(request)
                if len(prompt) + request.sampling.max_new_tokens > width:
                    raise ValueError(f"request {request.key}: over the feed's max_tokens")
                requests.append(request)
                prompts.append(prompt)
                caps.append(request.sampling.max_new_tokens)
                pending.append(len(requests) - 1)

        def record(slot: int, token: int, logprob: float) -> Completion | None:
            state = slots[slot]
            assert state is not None
            state.tokens.append(token)
            state.logprobs.append(logprob)
            state.last = token
            stopped = token in stops
            if stopped or len(state.tokens) >= state.cap:
                slots[slot] = None
                if feed is not None:  # what the slot's cache holds: all but the last token
                    kept[slot] = [*prompts[state.request], *state.tokens][: state.pos]
                return Completion(
                    requests[state.request].key,
                    "",
                    len(prompts[state.request]),
                    len(state.tokens),
                    "stop" if stopped else "length",
                    token_ids=state.tokens,
                    logprobs=state.logprobs,
                )
            return None

        def busy() -> bool:
            return any(s is not None for s in slots)

        with torch.inference_mode():
            while pending or busy() or (feed is not None and not feed.closed):
                arrivals(0.0 if pending or busy() else 0.05)
                # --- refill free slots: prefill their prompts, sample each first token -------
                admitted = []
                free = [i for i in range(cache.slots) if slots[i] is None]
                # Refill once enough slots are free (one prefill forward for several rows), or
                # when nothing else is decoding. From a feed, requests arrive one by one: admit
                # them once a few are waiting, so one prefill serves several.
                refill = len(free) >= min(self.refill_at, len(pending)) or len(free) == cache.slots
                if feed is not None and len(free) < cache.slots:
                    refill = bool(free) and len(pending) >= min(self.refill_at, len(free))
                offsets = []
                while refill and free and pending:
                    index = pending.popleft()
                    slot, offset = self._slot_for(prompts[index], free, kept)
                    cap = caps[index]
                    slots[slot] = _Slot(index, len(prompts[index]), cap, -1, [], [])
                    draws = seeded_uniforms(requests[index].seed, cap)
                    uniforms[slot, :cap] = draws.to(self.device)
                    admitted.append(slot)
                    offsets.append(offset)
                if admitted:
                    logits = self._prefill(
                        cache, admitted, [prompts[slots[s].request] for s in admitted], offsets
                    )  # type: ignore[union-attr]
                    for slot, token, logprob in self._sample(
                        logits, admitted, slots, uniforms, sampling
                    ):
                        if (done := record(slot, token, logprob)) is not None:
                            yield done
                # --- one decode step for every row that has a token to feed ------------------
                live = [s for s in range(cache.slots) if slots[s] is not None and slots[s].tokens]  # type: ignore[union-attr]
                if not live:
                    continue
                logits = self._decode(cache, live, slots)
                for slot, token, logprob in self._sample(logits, live, slots, uniforms, sampling):
                    if (done := record(slot, token, logprob)) is not None:
                        yield done

    @staticmethod
    def _slot_for(
        prompt: Sequence[int], free: list[int], kept: dict[int, list[int]]
    ) -> tuple[int, int]:
        """A free slot for `prompt` and how many of its first tokens that slot's cache already
        holds: the slot that kept the longest beginning of the prompt (an episode's earlier
        turns; only the rest is prefilled), else one that keeps nothing, else the first. The
        slot leaves `free` and `kept`."""
        best, offset = None, 0
        for slot in free:
            held = kept.get(slot)
            if held and offset < len(held) < len(prompt) and list(prompt[: len(held)]) == held:
                best, offset = slot, len(held)
        if best is None:
            best = next((slot for slot in free if slot not in kept), free[0])
        free.remove(best)
        kept.pop(best, None)
        return best, offset

    def _cache_for(self, slots: int, width: int) -> RowCache:
        """Reuse the static cache when it is large enough; grow it otherwise."""
        cached = self._cache
        if cached is None or cached.slots < slots or cached.width < width:
            config = self.model.config
            heads = config.num_attention_heads
            head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
            cached = RowCache(
                config.num_hidden_layers,
                max(slots, cached.slots if cached else 0),
                getattr(config, "num_key_value_heads", None) or heads,
                max(width, cached.width if cached else 0),
                head_dim,
                self.dtype,
                self.device,
            )
            self._cache = cached
        return cached

    def _prefill(
        self,
        cache: RowCache,
        admitted: list[int],
        prompts: list[Sequence[int]],
        offsets: list[int] | None = None,
    ) -> torch.Tensor:
        """Run the new rows' prompts (right-padded) into their slots; last-token logits. A
        row with an offset already holds its prompt's first `offset` tokens in its slot (an
        episode's earlier turns): only the rest is run, at positions from the offset on."""
        offsets = offsets or [0] * len(admitted)
        news = [list(p)[o:] for p, o in zip(prompts, offsets, strict=True)]
        lengths = [len(n) for n in news]
        longest = max(lengths)
        ids = torch.zeros(len(admitted), longest, dtype=torch.long)
        for i, new in enumerate(news):
            ids[i, : lengths[i]] = torch.as_tensor(new, dtype=torch.long)
        start = torch.tensor(offsets, device=self.device)[:, None]
        # Padded tail positions are written too, then overwritten by decoding before any
        # real token can attend to them (the mask lets a row see only columns <= its position).
        positions = (start + torch.arange(longest, device=self.device)).clamp(max=cache.width - 1)
        width = min(cache.width, max(offsets) + longest)
        columns = torch.arange(width, device=self.device)
        mask = columns[None, None, :] <= positions[:, :, None]
        cache.rows = torch.tensor(admitted, device=self.device)
        cache.positions = positions
        cache.width_used = width
        last = torch.tensor(lengths, device=self.device)[:, None] - 1
        out = self.model(
            input_ids=ids.to(self.device),
            position_ids=positions,
            attention_mask=mask[:, None],
            cache=cache,
            use_cache=True,
            logits_to_keep=last,
        )
        return out.logits[:, -1]

    def _decode(self, cache: RowCache, live: list[int], slots: list[_Slot | None]) -> torch.Tensor:
        """Feed each live row its last token at its own position; next-token logits."""
        states = [slots[s] for s in live]
        pos = torch.tensor([s.pos for s in states], device=self.device)  # type: ignore[union-attr]
        tokens = torch.tensor([[s.last] for s in states], device=self.device)  # type: ignore[union-attr]
        cache.rows = (
            None if live == list(range(cache.slots)) else torch.tensor(live, device=self.device)
        )
        cache.positions = pos[:, None]
        cache.width_used = int(pos.max()) + 1
        columns = torch.arange(cache.width_used, device=self.device)
        mask = (columns[None, :] <= pos[:, None])[:, None, None, :]
        out = self.model(
            input_ids=tokens,
            position_ids=pos[:, None],
            attention_mask=mask,
            cache=cache,
            use_cache=True,
        )
        for state in states:
            state.pos += 1  # type: ignore[union-attr]
        return out.logits[:, -1]

    def _sample(
        self,
        logits: torch.Tensor,
        rows: list[int],
        slots: list[_Slot | None],
        uniforms: torch.Tensor,
        sampling: SamplingParams,
    ) -> list[tuple[int, int, float]]:
        """(slot, token, log-prob) per row: argmax when greedy, else seeded inverse-CDF."""
        logits = logits.float()
        if sampling.temperature == 0:
            tokens = logits.argmax(dim=-1)
            logprobs = torch.log_softmax(logits, dim=-1)
        else:
            scaled = logits / sampling.temperature
            logprobs = torch.log_softmax(scaled, dim=-1)
            steps = torch.tensor([len(slots[r].tokens) for r in rows], device=logits.device)  # type: ignore[union-attr]
            draws = uniforms[torch.tensor(rows, device=logits.device), steps]
            tokens = inverse_cdf_sample(truncate(scaled, sampling), draws)
        chosen = logprobs.gather(1, tokens[:, None]).squeeze(1)
        return list(zip(rows, tokens.tolist(), chosen.tolist(), strict=True))
