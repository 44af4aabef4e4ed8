"""A scripted OpenAI-compatible chat server on 127.0.0.1 for exact tests.

Each model is a function `(user text, sample index) -> reply text` (or, with a `reads_body`
attribute, `(request body, sample index) -> {"content", "tool_calls"}`: a server with a native
tool-call parser); the sample index is the
request's `seed` minus the base seed the test uses (cascade asks for sample i with seed
`seed + i`). So a test knows, per prompt and model, exactly which samples are right, and
therefore every pass rate, majority answer and judge verdict.

A reply may also be a list of tokens, each a string (probability 1) or `{token: probability}`
whose first key is the sampled token: the text is the sampled tokens joined, and a request
with `logprobs: true` gets each token's log-prob and its `top_logprobs` alternatives back, as
vLLM's OpenAI server returns them.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Token = str | dict[str, float]
Reply = Callable[[str, int], str | list[Token]]


def token_logprobs(tokens: list[Token], top: int) -> list[dict]:
    """The `logprobs.content` entries of a tokenized reply (top `top` alternatives each)."""
    out = []
    for token in tokens:
        probs = {token: 1.0} if isinstance(token, str) else token
        ranked = sorted(probs.items(), key=lambda kv: -kv[1])[:top]
        sampled, p = next(iter(probs.items()))
        out.append(
            {
                "token": sampled,
                "logprob": math.log(p),
                "top_logprobs": [{"token": t, "logprob": math.log(q)} for t, q in ranked],
            }
        )
    return out


class ScriptedServer:
    """`with ScriptedServer({"weak": reply, ...}) as server:` then use `server.base_url`."""

    def __init__(self, models: dict[str, Reply], base_seed: int = 0) -> None:
        self.models = models
        self.base_seed = base_seed
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests.append(body)
                reply = server.models.get(body.get("model"))
                if self.path != "/v1/chat/completions" or reply is None:
                    self._send(404, {"error": {"message": f"no model {body.get('model')!r}"}})
                    return
                user = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
                index = int(body.get("seed", server.base_seed)) - server.base_seed
                if getattr(reply, "reads_body", False):  # a native tool-calling server
                    answer = reply(body, index)
                else:
                    answer = reply(user, index)
                calls = None
                if isinstance(answer, dict):  # {"content": ..., "tool_calls": [...]}
                    answer, calls = answer.get("content") or "", answer.get("tool_calls")
                tokens = [answer] if isinstance(answer, str) else answer
                text = "".join(t if isinstance(t, str) else next(iter(t)) for t in tokens)
                words = len(text.split())
                message: dict = {"role": "assistant", "content": text or None}
                if calls:
                    message["tool_calls"] = calls
                choice: dict = {"index": 0, "message": message, "finish_reason": "stop"}
                if body.get("logprobs"):
                    top = int(body.get("top_logprobs") or 0)
                    choice["logprobs"] = {"content": token_logprobs(tokens, top)}
                self._send(
                    200,
                    {
                        "id": "scripted",
                        "object": "chat.completion",
                        "model": body["model"],
                        "choices": [choice],
                        "usage": {"prompt_tokens": len(user.split()), "completion_tokens": words},
                    },
                )

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True  # a stalled reply must not hold up shutdown
        self._http.block_on_close = False
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def requests_for(self, model: str) -> int:
        with self._lock:
            return sum(1 for r in self.requests if r.get("model") == model)

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()
