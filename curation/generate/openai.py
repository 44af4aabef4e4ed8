"""OpenAI-compatible backend: any `/v1/chat/completions` server (vLLM serve, SGLang, APIs).

The server renders the prompt with its own chat template; Qwen3-style switches travel as
`chat_template_kwargs` (understood by vLLM and SGLang). One HTTP request per sample, so
each sample has its own `seed`. Requests run on a bounded thread pool; throttling (429),
server errors (5xx), timeouts and dropped connections are retried with exponential backoff
and jitter (honouring `Retry-After`); other client errors (400, 401, 404) fail at once
with the server's message. With `top_logprobs` > 0 each completion also carries the
generated tokens' log-probs and their top alternatives (`logprobs: true`, as vLLM, SGLang
and the OpenAI API take it), e.g. for a judge's P("YES"). Uses only the standard library's
HTTP client.
"""

from __future__ import annotations

import json
import os
import random
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from curation.generate.backend import BackendError
from schemas.generation import Completion, GenerationRequest

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class OpenAIBackend:
    """Chat completions from an OpenAI-compatible server at `base_url` (ending in /v1)."""

    name = "openai"
    concurrent_requests = True  # generate() may run from several threads at once

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "http://127.0.0.1:8000/v1",
        api_key_env: str | None = "OPENAI_API_KEY",
        concurrency: int = 8,
        timeout: float = 600.0,
        max_retries: int = 5,
        backoff_base: float = 1.0,
        backoff_max: float = 60.0,
        top_logprobs: int = 0,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if not 0 <= top_logprobs <= 20:
            raise ValueError(f"top_logprobs must be in [0, 20], got {top_logprobs}")
        self.model = model
        self.top_logprobs = top_logprobs
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.concurrency = concurrency
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._api_key = os.environ.get(api_key_env) if api_key_env else None

    def payload(self, request: GenerationRequest) -> dict[str, Any]:
        """The JSON body for one request (top_k, stop tokens, template switches and log-probs
        only when set; `stop_token_ids` is vLLM's and SGLang's extension)."""
        body: dict[str, Any] = {
            "model": request.model,
            "messages": [dict(m) for m in request.messages],
            "max_tokens": request.sampling.max_new_tokens,
            "temperature": request.sampling.temperature,
            "top_p": request.sampling.top_p,
            "seed": request.seed,
            "n": 1,
        }
        if request.sampling.top_k > 0:
            body["top_k"] = request.sampling.top_k
        if request.sampling.stop_token_ids:
            body["stop_token_ids"] = list(request.sampling.stop_token_ids)
        if request.template_kwargs:
            body["chat_template_kwargs"] = dict(request.template_kwargs)
        if self.top_logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = self.top_logprobs
        if request.tools:
            body["tools"] = list(request.tools)
        return body

    def generate(self, requests: Sequence[GenerationRequest]) -> Iterator[Completion]:
        """Keep at most `concurrency` requests in flight; yield each as it completes."""
        queue = list(reversed(requests))
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            in_flight: set[Future[Completion]] = set()
            try:
                while queue or in_flight:
                    while queue and len(in_flight) < self.concurrency:
                        in_flight.add(pool.submit(self.complete, queue.pop()))
                    finished, in_flight = wait(in_flight, return_when=FIRST_COMPLETED)
                    for future in finished:
                        yield future.result()
            finally:
                for future in in_flight:
                    future.cancel()

    def complete(self, request: GenerationRequest) -> Completion:
        """One request with retries; raise BackendError saying what failed and how often."""
        data = json.dumps(self.payload(request)).encode()
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        last_error = ""
        for attempt in range(self.max_retries + 1):
            retry_after: float | None = None
            http = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(http, timeout=self.timeout) as response:
                    body = json.loads(response.read())
                return self._completion(request, body)
            except urllib.error.HTTPError as exc:
                detail = _error_text(exc)
                last_error = f"HTTP {exc.code}: {detail}"
                if exc.code not in RETRYABLE_STATUS:
                    raise BackendError(
                        f"{self.url} refused request {request.key[:12]} for model "
                        f"{request.model!r}: {last_error}"
                    ) from None
                retry_after = _retry_after_seconds(exc.headers.get("Retry-After"))
            except TimeoutError:
                last_error = f"no response within {self.timeout:g}s"
            except urllib.error.URLError as exc:
                last_error = f"connection failed: {exc.reason}"
            except (ConnectionError, json.JSONDecodeError) as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            if attempt < self.max_retries:
                time.sleep(retry_after if retry_after is not None else self._backoff(attempt))
        raise BackendError(
            f"{self.url}: request {request.key[:12]} for model {request.model!r} failed after "
            f"{self.max_retries + 1} attempts; last error: {last_error}"
        )

    def _backoff(self, attempt: int) -> float:
        """Full-jitter exponential backoff: uniform in [0, min(max, base * 2**attempt)]."""
        return random.uniform(0, min(self.backoff_max, self.backoff_base * 2**attempt))

    def _completion(self, request: GenerationRequest, body: dict[str, Any]) -> Completion:
        try:
            choice = body["choices"][0]
            message = choice["message"]
            usage = body["usage"]
            logprobs = (choice.get("logprobs") or {}).get("content") if self.top_logprobs else None
            return Completion(
                key=request.key,
                text=with_native_calls(message.get("content") or "", message.get("tool_calls")),
                prompt_tokens=int(usage["prompt_tokens"]),
                completion_tokens=int(usage["completion_tokens"]),
                finish_reason=str(choice.get("finish_reason") or "stop"),
                reasoning=message.get("reasoning_content") or message.get("reasoning"),
                top_logprobs=tuple(logprobs) if logprobs is not None else None,
            )
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise BackendError(
                f"{self.url}: malformed chat completion for request {request.key[:12]} "
                f"(missing {exc}); body starts {json.dumps(body)[:200]}"
            ) from None

    def close(self) -> None:
        """Nothing to free: connections are per request."""


def with_native_calls(content: str, tool_calls: object) -> str:
    """A reply's text with the server's parsed `tool_calls` written back as `<tool_call>`
    blocks (arguments kept as the server sent them: a malformed call stays malformed, for the
    reader to answer with an error turn)."""
    if not tool_calls:
        return content
    blocks = []
    for call in tool_calls if isinstance(tool_calls, list) else []:
        function = call.get("function", call) if isinstance(call, dict) else {}
        arguments = function.get("arguments", "{}")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        name = json.dumps(function.get("name"), ensure_ascii=False)
        blocks.append(f'<tool_call>\n{{"name": {name}, "arguments": {arguments}}}\n</tool_call>')
    return "\n".join(part for part in (content.strip(), *blocks) if part)


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read().decode(errors="replace")
    except OSError:
        return exc.reason or ""
    try:
        parsed = json.loads(raw)
        error = parsed.get("error", parsed)
        return str(error.get("message", error) if isinstance(error, dict) else error)[:300]
    except (json.JSONDecodeError, AttributeError):
        return raw[:300]


def _retry_after_seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
