"""SWE patch reward: exact, empty, unparsable, partial similarity and shaping."""

from __future__ import annotations

import pytest

from curation.verify.swe import changed_lines, patch_similarity, swe_reward, verify_patch

GOLD = """diff --git a/pkg/util.py b/pkg/util.py
--- a/pkg/util.py
+++ b/pkg/util.py
@@ -10,6 +10,7 @@ def parse(value):
     text = value.strip()
-    if not text:
-        return None
+    if text is None or not text:
+        raise ValueError("empty value")
+    text = text.lower()
     return int(text)
 
 
@@ -40,2 +41,2 @@ def render(x):
-    return str(x)
+    return repr(x)
 
"""

# the same change, other context lines, offsets, paths without a/ b/ and trailing blanks
SAME_CHANGE = """--- pkg/util.py
+++ pkg/util.py
@@ -11,3 +11,4 @@
-    if not text:   
-        return None
+    if text is None or not text:
+        raise ValueError("empty value")
+    text = text.lower()
     return int(text)
@@ -40,1 +41,1 @@
-    return str(x)
+    return repr(x)
"""

PARTIAL = """--- a/pkg/util.py
+++ b/pkg/util.py
@@ -11,3 +11,3 @@
-    if not text:
-        return None
+    if not text:
+        return 0
     return int(text)
"""

NOOP = """--- a/pkg/util.py
+++ b/pkg/util.py
@@ -11,2 +11,2 @@
-    if not text:
+    if not text:
     return int(text)
"""


def test_identical_change_scores_one() -> None:
    assert patch_similarity(SAME_CHANGE, GOLD) == 1.0
    assert verify_patch(f"<think>plan</think>Fix:\n```diff\n{GOLD}```", GOLD).score == 1.0


def test_empty_noop_and_unparsable() -> None:
    assert verify_patch("", GOLD).score == 0.0
    assert changed_lines(NOOP) == []
    noop = verify_patch(NOOP, GOLD)
    assert noop.score == 0.0 and noop.passed is False and "no-op" in noop.detail
    garbage = verify_patch("I think you should change the parser.", GOLD)
    assert garbage.score == -1.0 and "no parsable patch" in garbage.detail
    broken_hunk = "--- a/x.py\n+++ b/x.py\n@@ -1,5 +1,5 @@\n-a\n+b\n"
    assert verify_patch(broken_hunk, GOLD).score == -1.0


def test_partial_patch_scores_strictly_between_zero_and_one() -> None:
    score = patch_similarity(PARTIAL, GOLD)
    assert 0.0 < score < 1.0
    other_file = PARTIAL.replace("pkg/util.py", "pkg/other.py")
    assert patch_similarity(other_file, GOLD) < score  # same text, wrong file: less similar


def test_shaping_maps_low_similarity_to_zero_and_keeps_the_format_penalty() -> None:
    raw = verify_patch(PARTIAL, GOLD)
    shaped = verify_patch(PARTIAL, GOLD, shaped=True)
    assert raw.score < 0.5 and shaped.score == 0.0
    assert verify_patch("prose", GOLD, shaped=True).score == -1.0
    assert verify_patch(SAME_CHANGE, GOLD, shaped=True).score == 1.0


def test_unusable_reference_is_undecided_and_reward_is_trl_style() -> None:
    assert verify_patch(GOLD, "").passed is None
    rewards = swe_reward(
        ["p"] * 3, [GOLD, "", [{"role": "assistant", "content": "x"}]], patch=[GOLD] * 3
    )
    assert rewards == [1.0, 0.0, -1.0]
    assert swe_reward(["p"], [GOLD], patch=[""]) == [None]


# --------------------------------------------------------------- SEARCH/REPLACE answers
# What the repair prompts ask for: edits inside <solution>, applied to the files the prompt
# showed (a swe_rl row's context_files / context_contents), then compared with the gold patch.

UTIL = """def parse(value):
    text = value.strip()
    if not text:
        return None
    return int(text)


def render(x):
    return str(x)
"""
UTIL_GOLD = """diff --git a/pkg/util.py b/pkg/util.py
--- a/pkg/util.py
+++ b/pkg/util.py
@@ -1,9 +1,9 @@
 def parse(value):
     text = value.strip()
     if not text:
-        return None
+        raise ValueError("empty value")
     return int(text)
 
 
 def render(x):
-    return str(x)
+    return repr(x)
"""
SHOWN = {
    "context_files": [["pkg/util.py", "pkg/other.py"]],
    "context_contents": [[UTIL, "x = 1\n"]],
}
RAISE = ("pkg/util.py", "        return None\n", '        raise ValueError("empty value")\n')
REPR = ("pkg/util.py", "    return str(x)\n", "    return repr(x)\n")


def repair(*blocks: tuple[str, str, str], close: bool = True) -> str:
    body = "".join(
        f"### {path}\n<<<<<<< SEARCH\n{old}=======\n{new}>>>>>>> REPLACE\n"
        for path, old, new in blocks
    )
    end = "</solution>" if close else ""
    return f"<think>\nparse should raise; render should use repr.\n</think>\n<solution>\n```python\n{body}```\n{end}"


def scored(response: str) -> float | None:
    return swe_reward(["p"], [response], patch=[UTIL_GOLD], **SHOWN)[0]


def test_search_replace_answers_score_by_the_recipe_rule() -> None:
    assert scored(repair(RAISE, REPR)) == 1.0  # the gold fix, as the prompt asks for it
    assert scored(repair(REPR, RAISE)) == 1.0  # edit order does not matter
    # half of the fix: 2 of the gold's 4 changed lines -> difflib ratio 2 * 2 / (2 + 4)
    assert scored(repair(REPR)) == pytest.approx(2 / 3)
    assert scored(repair(("pkg/util.py", "    return str(x)\n", "    return str(x)\n"))) == 0.0
    # malformed or unappliable edits: the format penalty
    assert scored(repair(("pkg/util.py", "    return nothing\n", "x\n"))) == -1.0
    assert scored(repair(RAISE, REPR, close=False)) == -1.0  # <solution> never closed
    assert scored(repair(("pkg/missing.py", "a\n", "b\n"))) == -1.0  # a file the prompt lacks
    assert scored(repair(RAISE, REPR).replace("<think>", "")) == -1.0
    # an empty SEARCH creates a new file: a change the gold patch does not make
    assert 0 < scored(repair(REPR, ("pkg/new.py", "", "y = 2\n"))) < 2 / 3


def test_a_diff_answer_still_counts_and_edits_take_precedence() -> None:
    assert scored(f"<think>\nok\n</think>\n```diff\n{UTIL_GOLD}```") == 1.0
    both = repair(REPR) + f"\n```diff\n{UTIL_GOLD}```"
    assert scored(both) == pytest.approx(2 / 3)  # the SEARCH/REPLACE edits are scored
    # edits without the files they apply to cannot be scored: undecided, not -1
    verdict = verify_patch(repair(RAISE, REPR), UTIL_GOLD)
    assert verdict.passed is None and verdict.bad_input == "files"
    with pytest.raises(ValueError, match="row 0: context_files has 2 paths but"):
        swe_reward(
            ["p"],
            [repair(REPR)],
            patch=[UTIL_GOLD],
            context_files=[["a", "b"]],
            context_contents=[["x"]],
        )
