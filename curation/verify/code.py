"""Code verifier: extract the program from a response and run it against its tests.

Tests come in the shapes our sources use, all turned into sandbox tests by `parse_tests`:
- LeetCode / rllm: `{"functional": "def check(candidate): ...\\ncheck(Solution().f)"}`
- HumanEval: `{"test": "def check(candidate): ...", "entry_point": "f"}`
- stdin/stdout: `[{"input": ..., "output": ...}, ...]` or `{"inputs": [...], "outputs": [...]}`
- either of the above as a JSON or Python-literal string (code_contests stores the latter).
The reward is strict: 1 when every test passes, else 0.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from typing import Any

from curation.verify.result import Verdict, completion_text, final_answer_part
from curation.verify.sandbox import (
    FunctionalTest,
    Sandbox,
    SandboxLimits,
    StdioTest,
    Test,
    default_sandbox,
)

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+#-]*)[^\n]*\n(.*?)```", re.DOTALL)
_PYTHON_TAGS = {"python", "py", "python3", ""}


def extract_code(response: str, language: str = "python") -> str | None:
    """The last fenced code block of `language` (or untagged) in the final answer part."""
    tags = _PYTHON_TAGS if language == "python" else {language.lower(), ""}
    blocks = [
        body for tag, body in _FENCE.findall(final_answer_part(response)) if tag.lower() in tags
    ]
    return blocks[-1] if blocks else None


def parse_tests(reference: Any) -> list[Test]:
    """Turn a source's test description into sandbox tests; ValueError says what is wrong."""
    if isinstance(reference, str):
        text = reference.strip()
        try:
            reference = json.loads(text)
        except json.JSONDecodeError:
            try:
                reference = ast.literal_eval(text)
            except (ValueError, SyntaxError) as exc:
                raise ValueError(f"tests are neither JSON nor a Python literal: {exc}") from None
        if isinstance(reference, str):
            raise ValueError("tests string decodes to another string, not a test description")
    if isinstance(reference, dict):
        # tables that mix test shapes hold every key, with nulls for the absent ones
        reference = {k: v for k, v in reference.items() if v is not None}
        if "functional" in reference:
            return [FunctionalTest(str(reference["functional"]))]
        if "test" in reference and "entry_point" in reference:
            return [FunctionalTest(f"{reference['test']}\ncheck({reference['entry_point']})\n")]
        if "inputs" in reference and "outputs" in reference:
            inputs, outputs = reference["inputs"], reference["outputs"]
            if len(inputs) != len(outputs):
                raise ValueError(f"tests have {len(inputs)} inputs but {len(outputs)} outputs")
            return [StdioTest(_text(i), _text(o)) for i, o in zip(inputs, outputs, strict=True)]
        raise ValueError(f"unknown tests dict with keys {sorted(reference)}")
    if isinstance(reference, Sequence):
        tests: list[Test] = []
        for n, item in enumerate(reference):
            if not isinstance(item, dict) or "input" not in item or "output" not in item:
                raise ValueError(f"test {n} is not an {{'input', 'output'}} object: {item!r:.80}")
            tests.append(StdioTest(_text(item["input"]), _text(item["output"])))
        return tests
    raise ValueError(f"cannot read tests of type {type(reference).__name__}")


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    return str(value)


def verify_code_batch(
    responses: Sequence[str],
    tests: Sequence[Any],
    *,
    sandbox: Sandbox | None = None,
    limits: SandboxLimits | None = None,
    extract: bool = True,
) -> list[Verdict]:
    """Verify many responses in parallel. `extract=False` treats responses as bare programs."""
    if len(responses) != len(tests):
        raise ValueError(f"{len(responses)} responses but {len(tests)} test sets")
    verdicts: list[Verdict | None] = [None] * len(responses)
    jobs: list[tuple[str, list[Test]]] = []
    where: list[int] = []
    for i, (response, reference) in enumerate(zip(responses, tests, strict=True)):
        try:
            parsed = parse_tests(reference)
        except ValueError as exc:
            verdicts[i] = Verdict(None, 0.0, f"unusable tests: {exc}", bad_input="reference")
            continue
        program = extract_code(response) if extract else response
        if program is None:
            verdicts[i] = Verdict(False, 0.0, "no code block in the response")
            continue
        jobs.append((program, parsed))
        where.append(i)
    box = sandbox or default_sandbox()
    for i, result in zip(where, box.run_many(jobs, limits=limits), strict=True):
        if result.harness_error:
            verdicts[i] = Verdict(None, 0.0, result.summary())
        else:
            verdicts[i] = Verdict(result.passed, float(result.passed), result.summary())
    return [v for v in verdicts if v is not None]


def verify_code(response: str, tests: Any, **kwargs: Any) -> Verdict:
    """Verify one response against its tests (see `verify_code_batch` for options)."""
    return verify_code_batch([response], [tests], **kwargs)[0]


def code_reward(
    prompts: Sequence[Any], completions: Sequence[Any], tests: Sequence[Any], **_: Any
) -> list[float | None]:
    """TRL-style reward: 1.0 if the completion's last code block passes all tests, else 0.0;
    None when the tests themselves are unusable or the sandbox failed."""
    verdicts = verify_code_batch([completion_text(c) for c in completions], tests)
    return [v.reward() for v in verdicts]
