"""The toy world's patch judge: an OpenAI-compatible chat server on 127.0.0.1 that stands in
for Kimi-Dev-72B behind SWE RL's `swe_patch_judge` reward (recipe 7.3), as the toy models
stand in for the teachers.

It answers the request `curation.verify.patch_judge` sends (`JUDGE_TEMPLATE`) for the toy
repositories, whose fixes change `return <expression in x>` lines of one-function modules:
YES when the candidate and the reference patch change the same files and their new return
expressions agree on every x in -20..20 (`x * 2` for `x + x` is the same fix, written
otherwise), NO for anything else. It replies `<judgement>YES</judgement>` as text, without
log-probs, so the reward reads 1 or 0.

    python -m builders.worlds.toy_judge cascade --lake toy-lake train --manifest M

starts the judge on a free port, runs the command with `CASCADE_PATCH_JUDGE_URL` set to its
/v1 URL (what the toy manifest's `patch_judge.base_url` reads) and stops it when the command
ends; `serve_toy_judge()` does the same around Python code.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

MODEL = "toy-judge"
URL_ENV = "CASCADE_PATCH_JUDGE_URL"
PROBES = range(-20, 21)
_PATCH = r"### {name} patch\n```diff\n(.*?)\n```"


def new_returns(diff: str) -> dict[str, list[str]] | None:
    """{file: the expressions of the `return` lines the diff adds}; None if it is no diff."""
    try:
        patch = PatchSet(diff if diff.endswith("\n") else diff + "\n")
    except UnidiffParseError:
        return None
    out: dict[str, list[str]] = {}
    for changed in patch:
        added = [line.value.strip() for hunk in changed for line in hunk if line.is_added]
        out[changed.path] = [a.removeprefix("return ").strip() for a in added]
    return out or None


def value(expression: str, x: int) -> int | None:
    """An integer expression in `x` (+, -, *, //, %, unary -) at x; None if it is not one."""

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name) and node.id == "x":
            return x
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if isinstance(node, ast.BinOp):
            left, right = walk(node.left), walk(node.right)
            ops = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__}
            if type(node.op) in ops:
                return ops[type(node.op)](left, right)
            if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right != 0:
                return left // right if isinstance(node.op, ast.FloorDiv) else left % right
        raise ValueError(expression)

    try:
        return walk(ast.parse(expression, mode="eval"))
    except (SyntaxError, ValueError, RecursionError):
        return None


def same_fix(candidate: str, reference: str) -> bool:
    """Whether two toy patches change the same files to return the same values."""
    ours, theirs = new_returns(candidate), new_returns(reference)
    if ours is None or theirs is None or ours.keys() != theirs.keys():
        return False
    for path, expressions in theirs.items():
        if len(ours[path]) != len(expressions):
            return False
        for mine, gold in zip(ours[path], expressions, strict=True):
            values = [(value(mine, x), value(gold, x)) for x in PROBES]
            if any(a is None or a != b for a, b in values):
                return False
    return True


def verdict(request_text: str) -> str:
    """The judge's reply to one `JUDGE_TEMPLATE` request."""
    patches = [_PATCH.format(name=n) for n in ("Reference", "Candidate")]
    found = [re.search(p, request_text, re.DOTALL) for p in patches]
    if not all(found):
        return "The request shows no reference and candidate patch. <judgement>NO</judgement>"
    reference, candidate = (m.group(1) for m in found if m is not None)
    answer = "YES" if same_fix(candidate, reference) else "NO"
    return f"Compared the new return values. <judgement>{answer}</judgement>"


class ToyJudgeServer:
    """`with ToyJudgeServer() as judge:` then `judge.base_url` (an OpenAI-style /v1 URL)."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v1/chat/completions" or body.get("model") != MODEL:
                    self._send(404, {"error": {"message": f"no model {body.get('model')!r}"}})
                    return
                user = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
                text = verdict(user)
                choice = {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
                usage = {"prompt_tokens": len(user.split()), "completion_tokens": len(text.split())}
                self._send(
                    200,
                    {"id": "toy", "object": "chat.completion", "model": MODEL,
                     "choices": [choice], "usage": usage},
                )  # fmt: skip

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def __enter__(self) -> ToyJudgeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()


@contextmanager
def serve_toy_judge() -> Iterator[str]:
    """Run the toy judge with `CASCADE_PATCH_JUDGE_URL` pointing at it; yields the URL."""
    before = os.environ.get(URL_ENV)
    with ToyJudgeServer() as judge:
        os.environ[URL_ENV] = judge.base_url
        try:
            yield judge.base_url
        finally:
            if before is None:
                os.environ.pop(URL_ENV, None)
            else:
                os.environ[URL_ENV] = before


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m builders.worlds.toy_judge COMMAND [ARGS...]")
    with serve_toy_judge():
        sys.exit(subprocess.call(sys.argv[1:]))


if __name__ == "__main__":
    main()
