"""SWE patch reward: exact, empty, unparsable, partial similarity and shaping."""

from __future__ import annotations

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
