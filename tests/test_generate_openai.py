"""The OpenAI-compatible backend over real HTTP, against a local server serving a tiny model.

The server (stdlib `http.server` on 127.0.0.1) answers `/v1/chat/completions` with the hf
backend, honouring seed, sampling parameters and `chat_template_kwargs`, so the same
request must give the same sample over HTTP as in-process. It can also fail, stall or
answer garbage on demand, to test retries, timeouts and errors.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

from curation.generate import (
    BackendError,
    GenerationRequest,
    SamplingParams,
    Teacher,
    generate_to_lake,
)
from curation.generate.hf import HfBackend
from curation.generate.openai import OpenAIBackend
from curation.generate.plan import prompts_from_records
from curation.generate.tiny_teacher import build_tiny_teacher
from lake.catalog import Lake

torch.set_num_threads(1)
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def math_rows(n: int) -> list[dict]:
    with open(SHARED / "sources" / "math_train.jsonl") as fh:
        return [json.loads(line) for _, line in zip(range(n), fh, strict=False)]


class TinyChatServer:
    """A chat-completions server for one local model, with fault injection."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.backend = HfBackend(model, batch_size=1, num_threads=1)
        self.model_lock = threading.Lock()
        self.count_lock = threading.Lock()
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.in_flight = 0
        self.spans: list[tuple[str, float, float]] = []  # (last user text, start, end)
        self.fail_next = 0  # answer 503 to this many requests
        self.delay = 0.0  # seconds to stall before answering
        self.garbage = False  # answer a body without choices
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.count_lock:
                    server.bodies.append(body)
                    server.headers.append(dict(self.headers))
                    server.in_flight += 1
                    fail = server.fail_next > 0
                    server.fail_next -= int(fail)
                    started = time.monotonic()
                try:
                    time.sleep(server.delay)
                    if self.path != "/v1/chat/completions":
                        self.reply(404, {"error": {"message": f"no route {self.path}"}})
                    elif fail:
                        self.reply(503, {"error": {"message": "overloaded"}}, retry_after="0")
                    elif body["model"] != server.model:
                        msg = f"The model `{body['model']}` does not exist."
                        self.reply(404, {"error": {"message": msg}})
                    elif server.garbage:
                        self.reply(200, {"id": "x", "object": "chat.completion"})
                    else:
                        self.reply(200, server.complete(body))
                finally:
                    with server.count_lock:
                        server.in_flight -= 1
                        text = body["messages"][-1]["content"]
                        # the request ended when its answer started to go out: the client may
                        # send its next one the moment it has the answer, before this line runs
                        ended = getattr(self, "answered_at", None) or time.monotonic()
                        server.spans.append((text, started, ended))

            def reply(self, status: int, payload: dict, retry_after: str | None = None) -> None:
                self.answered_at = time.monotonic()
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if retry_after is not None:
                    self.send_header("Retry-After", retry_after)
                self.end_headers()
                with contextlib.suppress(BrokenPipeError):  # the client gave up (timeouts)
                    self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def complete(self, body: dict) -> dict:
        sampling = SamplingParams(
            max_new_tokens=body["max_tokens"],
            temperature=body["temperature"],
            top_p=body["top_p"],
            top_k=body.get("top_k", 0),
        )
        request = GenerationRequest(
            "r",
            self.model,
            tuple(body["messages"]),
            sampling,
            body["seed"],
            body.get("chat_template_kwargs", {}),
        )
        with self.model_lock:
            (done,) = list(self.backend.generate([request]))
        return {
            "object": "chat.completion",
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": done.text},
                    "finish_reason": done.finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": done.prompt_tokens,
                "completion_tokens": done.completion_tokens,
                "total_tokens": done.prompt_tokens + done.completion_tokens,
            },
        }

    def reset(self) -> None:
        deadline = time.monotonic() + 10
        while self.in_flight and time.monotonic() < deadline:  # stalled replies of a test
            time.sleep(0.05)
        self.bodies.clear()
        self.headers.clear()
        self.spans.clear()
        self.fail_next, self.delay, self.garbage = 0, 0.0, False

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def teacher_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    corpus = [r["problem"] for r in math_rows(300)]
    return str(build_tiny_teacher(tmp_path_factory.mktemp("teacher"), corpus))


@pytest.fixture(scope="module")
def server(teacher_path: str) -> Iterator[TinyChatServer]:
    served = TinyChatServer(teacher_path)
    yield served
    served.close()


@pytest.fixture
def fresh(server: TinyChatServer) -> TinyChatServer:
    server.reset()
    return server


def chat_request(model: str, text: str = "What is 2+2?", seed: int = 0) -> GenerationRequest:
    return GenerationRequest(
        f"{text}|{seed}",
        model,
        ({"role": "user", "content": text},),
        SamplingParams(max_new_tokens=6, temperature=1.0),
        seed,
    )


def test_samples_over_http_equal_in_process_samples(
    tmp_path: Path, fresh: TinyChatServer, teacher_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_TEACHER_KEY", "sk-local-test")
    prompts = prompts_from_records(math_rows(3), origin="math_train")
    common = dict(
        output="gens",
        teacher=Teacher(teacher_path),
        modes=["think", "no_think"],
        k=2,
        sampling=SamplingParams(max_new_tokens=8, temperature=0.9, top_p=0.9, top_k=40),
        seed=11,
    )
    over_http = Lake(tmp_path / "http")
    report = generate_to_lake(
        over_http,
        prompts,
        backend="openai",
        backend_options={
            "base_url": fresh.url,
            "api_key_env": "TEST_TEACHER_KEY",
            "concurrency": 4,
            "backoff_base": 0.01,
        },
        **common,
    )
    assert report.generated == 12
    local = Lake(tmp_path / "local")
    generate_to_lake(local, prompts, backend="hf", backend_options={"num_threads": 1}, **common)
    fields = ("response", "prompt_tokens", "completion_tokens", "finish_reason", "seed")
    got = {r["id"]: tuple(r[f] for f in fields) for r in over_http.read("gens").to_pylist()}
    want = {r["id"]: tuple(r[f] for f in fields) for r in local.read("gens").to_pylist()}
    assert got == want
    assert {r["backend"] for r in over_http.read("gens").to_pylist()} == {"openai"}
    # What went over the wire: the template switch, top_k, the seed and the key.
    switches = sorted(b["chat_template_kwargs"]["enable_thinking"] for b in fresh.bodies)
    assert switches == [False] * 6 + [True] * 6
    assert {b["top_k"] for b in fresh.bodies} == {40}
    assert sorted({b["seed"] for b in fresh.bodies}) == [11, 12]
    assert {h.get("Authorization") for h in fresh.headers} == {"Bearer sk-local-test"}


def test_server_errors_are_retried(fresh: TinyChatServer, teacher_path: str) -> None:
    fresh.fail_next = 2
    backend = OpenAIBackend(teacher_path, base_url=fresh.url, max_retries=3, backoff_base=0.01)
    (done,) = list(backend.generate([chat_request(teacher_path)]))
    assert done.completion_tokens > 0
    assert len(fresh.bodies) == 3


def test_retries_run_out_with_a_clear_error(fresh: TinyChatServer, teacher_path: str) -> None:
    fresh.fail_next = 10
    backend = OpenAIBackend(teacher_path, base_url=fresh.url, max_retries=2, backoff_base=0.01)
    with pytest.raises(
        BackendError,
        match=r"failed after 3 attempts; last error: HTTP 503: "
        r"overloaded",
    ):
        list(backend.generate([chat_request(teacher_path)]))
    assert len(fresh.bodies) == 3


def test_client_errors_fail_at_once(fresh: TinyChatServer) -> None:
    backend = OpenAIBackend("no-such-model", base_url=fresh.url, max_retries=5)
    with pytest.raises(BackendError, match=r"HTTP 404: The model `no-such-model` does not exist"):
        list(backend.generate([chat_request("no-such-model")]))
    assert len(fresh.bodies) == 1


def test_per_request_timeout(fresh: TinyChatServer, teacher_path: str) -> None:
    fresh.delay = 1.5
    backend = OpenAIBackend(
        teacher_path, base_url=fresh.url, timeout=0.3, max_retries=1, backoff_base=0.01
    )
    started = time.monotonic()
    with pytest.raises(
        BackendError,
        match=r"failed after 2 attempts; last error: no response "
        r"within 0.3s",
    ):
        list(backend.generate([chat_request(teacher_path)]))
    assert time.monotonic() - started < 1.4


def test_unreachable_server(teacher_path: str) -> None:
    backend = OpenAIBackend(
        teacher_path, base_url="http://127.0.0.1:9/v1", max_retries=1, backoff_base=0.01
    )
    with pytest.raises(BackendError, match="connection failed"):
        list(backend.generate([chat_request(teacher_path)]))


def test_malformed_reply(fresh: TinyChatServer, teacher_path: str) -> None:
    fresh.garbage = True
    backend = OpenAIBackend(teacher_path, base_url=fresh.url)
    with pytest.raises(BackendError, match=r"malformed chat completion .* \(missing 'choices'\)"):
        list(backend.generate([chat_request(teacher_path)]))


def test_concurrency_is_bounded(fresh: TinyChatServer, teacher_path: str) -> None:
    fresh.delay = 0.2
    backend = OpenAIBackend(teacher_path, base_url=fresh.url, concurrency=3)
    requests = [chat_request(teacher_path, "bounded?", seed=s) for s in range(9)]
    done = list(backend.generate(requests))
    assert sorted(c.key for c in done) == sorted(r.key for r in requests)
    # Counted over this test's own requests: a stalled retry of an earlier test's timed-out
    # request can still reach the shared server late, under load.
    assert most_at_once(fresh.spans, "bounded?") == 3


def most_at_once(spans: list[tuple[str, float, float]], text: str) -> int:
    """The most requests with this text the server was handling at the same moment."""
    events = sorted(
        [(start, 1) for t, start, _ in spans if t == text]
        + [(end, -1) for t, _, end in spans if t == text]
    )
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak
