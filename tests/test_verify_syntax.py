"""Tree-sitter syntax checks and code-switching detection."""

from __future__ import annotations

import pytest

from curation.verify.language import (
    code_switching_penalty,
    foreign_letters,
    is_english_prompt,
    verify_no_code_switching,
)
from curation.verify.syntax import code_blocks, syntax_error, verify_syntax


@pytest.mark.parametrize(
    ("language", "good", "bad"),
    [
        ("python", "def f(x):\n    return [i for i in x]\n", "def f(x:\n    return x\n"),
        (
            "cpp",
            "#include <vector>\nint main() { std::vector<int> v{1}; return v[0]; }\n",
            "int main() { int x = ; return 0 }\n",
        ),
        ("java", "class A { int f() { return 1; } }\n", "class A { int f() { return 1 }\n"),
    ],
)
def test_syntax_error_per_language(language: str, good: str, bad: str) -> None:
    assert syntax_error(good, language) is None
    error = syntax_error(bad, language)
    assert error is not None and error.startswith("line 1")


def test_verify_syntax_over_response_blocks() -> None:
    response = (
        "<think>```python\ndef broken(:\n```</think>"
        "```python\nprint('ok')\n```\n```bash\nls -((\n```\n```java\nclass A {}\n```"
    )
    assert [lang for lang, _ in code_blocks(response)] == ["python", "java"]
    assert verify_syntax(response).passed is True  # the think block and bash are not checked
    bad = verify_syntax("```py\nx = 1\n```\n```c++\nint main( {\n```")
    assert bad.passed is False and bad.detail.startswith("block 2 (cpp) line 1")
    assert verify_syntax("just prose").passed is None


def test_code_switching_detects_foreign_scripts_only() -> None:
    prompt = "Find the value of x such that 2x + 3 = 7."
    assert is_english_prompt(prompt)
    clean = "Subtract 3: 2x = 4, so x = 2. With θ = π/2 and a café naïve résumé, still English."
    assert verify_no_code_switching(prompt, clean).passed is True
    for mixed, script in [
        ("So x = 2, 所以答案是 2.", "CJK"),
        ("Итак, x = 2.", "CYRILLIC"),
        ("x = 2 لذلك", "ARABIC"),
        ("x는 2입니다", "HANGUL"),
    ]:
        verdict = verify_no_code_switching(prompt, mixed)
        assert verdict.passed is False and script in verdict.detail
        assert script in foreign_letters(mixed)
    assert verify_no_code_switching("求解方程 2x+3=7", "答案是 2").passed is None


def test_code_switching_penalty_trl_style() -> None:
    prompts = ["Solve 1+1.", [{"role": "user", "content": "Solve 1+1."}], "解方程"]
    completions = ["It is 2.", "答案 2", "答案 2"]
    assert code_switching_penalty(prompts, completions) == [0.0, -1.0, 0.0]
