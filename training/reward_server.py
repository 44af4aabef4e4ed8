"""A reward model over HTTP: `cascade serve-reward --model DIR --port N`.

A big reward model runs on its own GPUs and scores rollouts for a trainer elsewhere; the GRPO
stage names it by URL (`reward_model: http://host:port`) and `training.reward_clients.RemoteRewardModel`
is the client. The API is small and JSON, in the OpenAI style (`/v1/...`, a `data` list with
`index`):

- `POST /v1/rewards` `{"prompts": [[{"role", "content"}, ...], ...], "responses": [str, ...]}`
  -> `{"object": "list", "model": NAME, "data": [{"object": "reward", "index": i, "score": x}]}`.
  Each prompt is the conversation the response answers (ending with the user's turn); the
  server renders (prompt, response) with the reward model's own chat template and scores
  exactly the text it receives (the client has already cut a thinking reply to its answer).
- `GET /v1/models` -> the one model served; `GET /health` -> `{"status": "ok"}`.

A malformed request gets HTTP 400 with `{"error": {"message": ...}}` naming the field.
The standard library's threading HTTP server serves it; the scorer serializes requests on the
model and batches within each request.
"""

from __future__ import annotations

import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from curation.verify.reward_model_score import RewardModel

ROLES = ("system", "user", "assistant", "tool")


class RequestError(ValueError):
    """A request body that cannot be scored; the message names the field."""


def parse_request(body: object) -> tuple[list[list[dict]], list[str]]:
    """(prompts, responses) of a `/v1/rewards` body, or RequestError naming what is wrong.

    >>> parse_request({"prompts": [[{"role": "user", "content": "Hi"}]], "responses": ["Hello"]})
    ([[{'role': 'user', 'content': 'Hi'}]], ['Hello'])
    """
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    prompts, responses = body.get("prompts"), body.get("responses")
    if not isinstance(prompts, list) or not isinstance(responses, list):
        raise RequestError("'prompts' and 'responses' must be lists")
    if len(prompts) != len(responses):
        raise RequestError(f"{len(prompts)} prompts but {len(responses)} responses")
    for i, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        if not isinstance(response, str):
            raise RequestError(f"responses[{i}] is not a string")
        if not isinstance(prompt, list) or not prompt:
            raise RequestError(f"prompts[{i}] is not a non-empty list of turns")
        for j, turn in enumerate(prompt):
            if not isinstance(turn, dict) or turn.get("role") not in ROLES:
                raise RequestError(f"prompts[{i}][{j}] needs a role in {ROLES}")
            if not isinstance(turn.get("content"), str):
                raise RequestError(f"prompts[{i}][{j}] has no string content")
    return prompts, responses


class RewardServer:
    """`with RewardServer(scorer, "my-rm").start() as server:` then `server.base_url`."""

    def __init__(
        self, scorer: RewardModel, name: str, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.scorer = scorer
        self.name = name
        self.requests = 0
        self.scored = 0
        self._count = threading.Lock()
        self.httpd = ThreadingHTTPServer((host, port), self._handler())
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def start(self) -> RewardServer:
        """Serve from a background thread (tests, notebooks)."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> RewardServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def score(self, body: object) -> dict:
        """The `/v1/rewards` answer to a parsed JSON body."""
        prompts, responses = parse_request(body)
        scores = self.scorer.score(prompts, responses) if responses else []
        with self._count:
            self.requests += 1
            self.scored += len(scores)
        return {
            "object": "list",
            "model": self.name,
            "data": [
                {"object": "reward", "index": i, "score": float(s)} for i, s in enumerate(scores)
            ],
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path == "/health":
                    self._send(HTTPStatus.OK, {"status": "ok"})
                elif self.path == "/v1/models":
                    model = {"id": server.name, "object": "model", "owned_by": "cascade"}
                    self._send(HTTPStatus.OK, {"object": "list", "data": [model]})
                else:
                    self._error(HTTPStatus.NOT_FOUND, f"no route {self.path}")

            def do_POST(self) -> None:  # noqa: N802
                if self.path != "/v1/rewards":
                    self._error(HTTPStatus.NOT_FOUND, f"no route {self.path}")
                    return
                try:
                    length = int(self.headers.get("Content-Length", "0"))
                    body = json.loads(self.rfile.read(length) or b"null")
                    self._send(HTTPStatus.OK, server.score(body))
                except (json.JSONDecodeError, RequestError) as exc:
                    self._error(HTTPStatus.BAD_REQUEST, str(exc))
                except Exception as exc:  # noqa: BLE001 - the client must hear why, not hang
                    self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")

            def _error(self, status: HTTPStatus, message: str) -> None:
                self._send(status, {"error": {"message": message, "code": int(status)}})

            def _send(self, status: HTTPStatus, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
