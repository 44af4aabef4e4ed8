"""The `python` environment: tool-integrated reasoning (Cascade 2's Python-tool math).

The model may call `python` with code; the code runs in the sandbox
(`curation.verify.sandbox`: a fresh jailed process per call, no network, the call's time and
memory limits) and the model sees what it printed. The reward is the stage's reward kind on
the final answer (math_verifier by default), computed outside the sandbox from the model's
text: nothing a program prints or does can set its episode's reward.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from curation.environments.answer import AnswerScoring, opening_messages
from curation.verify.rewards import Reward, reward_named
from curation.verify.sandbox import CaptureRun, Sandbox, SandboxLimits, default_sandbox
from schemas.environment import Opening, ToolError
from schemas.tool_calls import ToolCall

PYTHON_TOOL = {
    "type": "function",
    "function": {
        "name": "python",
        "description": (
            "Run a Python 3 program and return what it prints. Each call is a fresh process: "
            "print every value you need."
        ),
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "the program"}},
            "required": ["code"],
        },
    },
}


class PythonSession:
    """One episode's python tool: each call runs its code in the sandbox."""

    def __init__(self, sandbox: Sandbox, memory_mb: int, max_output_bytes: int) -> None:
        self.sandbox = sandbox
        self.memory_mb = memory_mb
        self.max_output_bytes = max_output_bytes

    def call(self, call: ToolCall, timeout_s: float) -> str:
        if call.name != "python":
            raise ToolError(f"unknown tool {call.name!r}; this task offers: python")
        code = json.loads(call.arguments).get("code")
        if not isinstance(code, str):
            raise ToolError('python takes {"code": "<program>"}')
        limits = SandboxLimits(
            time_limit_s=timeout_s,
            memory_mb=self.memory_mb,
            max_output_bytes=self.max_output_bytes,
            max_processes=4,
        )
        result = self.sandbox.run(code, [CaptureRun()], limits=limits, prelude=None)
        if result.harness_error:
            raise ToolError("the sandbox failed to run the program")
        if result.compile_error is not None:
            raise ToolError(result.compile_error)
        outcome = result.outcomes[0]
        if outcome.status == "passed":
            return outcome.detail
        if outcome.status == "timeout":
            raise ToolError(f"the program ran past {timeout_s:g} s and was stopped")
        if outcome.status == "output_limit":
            raise ToolError(f"the program printed more than {self.max_output_bytes} bytes")
        raise ToolError(outcome.detail.strip() or f"the program ended: {outcome.status}")

    def close(self) -> None:
        pass


class PythonEnvironment(AnswerScoring):
    """The python tool over the row's chat, scored by `reward` on the final answer."""

    name = "python"

    def __init__(
        self,
        reward: Reward | None = None,
        *,
        sandbox: Sandbox | None = None,
        memory_mb: int = 512,
        max_output_bytes: int = 1 << 16,
        **clients: Any,
    ) -> None:
        super().__init__(reward or reward_named("math_verifier"), **clients)
        self._sandbox = sandbox
        self.memory_mb = memory_mb
        self.max_output_bytes = max_output_bytes

    def open(self, row: Mapping[str, Any]) -> tuple[Opening, PythonSession]:
        sandbox = self._sandbox or default_sandbox()
        session = PythonSession(sandbox, self.memory_mb, self.max_output_bytes)
        return Opening(opening_messages(row), (PYTHON_TOOL,)), session
