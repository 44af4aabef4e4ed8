"""The toy world's patch judge (`builders.worlds.toy_judge`): behaviour-equal toy fixes are YES,
others NO, served over HTTP to the real `swe_patch_judge` reward."""

from __future__ import annotations

import os
import subprocess
import sys

from builders.worlds.toy_judge import MODEL, URL_ENV, same_fix, serve_toy_judge
from curation.verify.patch_judge import PatchJudge
from curation.verify.rewards import reward_named

SOURCE = 'def tweak(x):\n    """Return x plus 4."""\n    return x * 4\n'
GOLD = """diff --git a/pkg/tweak.py b/pkg/tweak.py
--- a/pkg/tweak.py
+++ b/pkg/tweak.py
@@ -1,3 +1,3 @@
 def tweak(x):
     \"\"\"Return x plus 4.\"\"\"
-    return x * 4
+    return x + 4
"""


def diff_to(expression: str, path: str = "pkg/tweak.py") -> str:
    return GOLD.replace("pkg/tweak.py", path).replace(
        "+    return x + 4", f"+    return {expression}"
    )


def answer(new_line: str) -> str:
    return (
        "<think>\nfix the return.\n</think>\n<solution>\n### pkg/tweak.py\n<<<<<<< SEARCH\n"
        f"    return x * 4\n=======\n{new_line}\n>>>>>>> REPLACE\n</solution>"
    )


def test_same_fix_compares_return_values_not_text() -> None:
    assert same_fix(diff_to("4 + x"), GOLD)
    assert same_fix(diff_to("(x + 2) + 2"), GOLD)
    assert not same_fix(diff_to("x + 5"), GOLD)
    assert not same_fix(diff_to("x + 4", path="pkg/other.py"), GOLD)
    assert not same_fix(diff_to("__import__('os').getpid()"), GOLD)
    assert not same_fix("no diff at all", GOLD)


def test_the_swe_patch_judge_reward_reads_the_toy_judge_over_http() -> None:
    reward = reward_named("swe_patch_judge")
    replies = [
        answer("    return x + 4"),  # the gold change: 1 without asking the judge
        answer("    return 4 + x"),  # the same behaviour written otherwise: YES
        answer("    return x + 5"),  # another behaviour: NO
        answer("    return x * 4"),  # unchanged: 0
    ]
    with serve_toy_judge() as url:
        assert os.environ[URL_ENV] == url
        judge = PatchJudge(url, MODEL, top_logprobs=0, max_tokens=16)
        n = len(replies)
        scores = reward.bind(patch_judge=judge)(
            ["prompt"] * n,
            replies,
            patch=[GOLD] * n,
            problem_statement=["`tweak(3)` returns 12 but it should return 7."] * n,
            context_files=[["pkg/tweak.py"]] * n,
            context_contents=[[SOURCE]] * n,
        )
    assert scores == [1.0, 1.0, 0.0, 0.0]
    assert URL_ENV not in os.environ or os.environ[URL_ENV] != url


def test_the_command_form_sets_the_url_for_the_command() -> None:
    code = f"import os; print(os.environ['{URL_ENV}'])"
    out = subprocess.run(
        [sys.executable, "-m", "builders.worlds.toy_judge", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.startswith("http://127.0.0.1:") and out.stdout.strip().endswith("/v1")
