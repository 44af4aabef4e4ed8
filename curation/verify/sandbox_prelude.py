"""What a sandboxed program and its checker start from: warm imports and the LeetCode prelude.

The worker imports `PRELOADED` and runs `LEETCODE_PRELUDE` once, before it forks anything, so
every program and checker process finds them ready (no import or exec per job).
"""

from __future__ import annotations

import builtins
from types import FunctionType
from typing import Any

# Modules competitive-programming and LeetCode programs commonly import, loaded once here so a
# forked child finds them warm.
PRELOADED = (
    "array bisect collections copy decimal fractions functools heapq itertools json math "
    "operator random re statistics string typing sortedcontainers"
)

LEETCODE_PRELUDE = """
from typing import *
from collections import *
from heapq import *
from bisect import *
from itertools import *
from functools import *
from math import *
from string import *
from operator import *
import collections, heapq, bisect, itertools, functools, math, string, re, random, operator
import datetime
try:
    from sortedcontainers import SortedList, SortedDict, SortedSet
except ImportError:
    pass
inf = float("inf")


class ListNode:
    def __init__(self, val=0, next=None):
        self.val = val
        self.next = next


class TreeNode:
    def __init__(self, val=0, left=None, right=None):
        self.val = val
        self.left = left
        self.right = right


def list_node(values):
    head = ListNode()
    node = head
    for v in values:
        node.next = ListNode(v)
        node = node.next
    return head.next


def is_same_list(a, b):
    while a is not None and b is not None:
        if a.val != b.val:
            return False
        a, b = a.next, b.next
    return a is None and b is None


def tree_node(values):
    if not values or values[0] is None:
        return None
    root = TreeNode(values[0])
    queue = deque([root])
    i = 1
    while queue and i < len(values):
        node = queue.popleft()
        for side in ("left", "right"):
            if i < len(values) and values[i] is not None:
                child = TreeNode(values[i])
                setattr(node, side, child)
                queue.append(child)
            i += 1
    return root


def is_same_tree(a, b):
    if a is None or b is None:
        return a is b
    return a.val == b.val and is_same_tree(a.left, b.left) and is_same_tree(a.right, b.right)
"""


_PRELUDES: dict[str, dict[str, Any]] = {}


def prelude_namespace(source: str | None) -> dict[str, Any]:
    """Globals a program and its functional tests start from: the prelude ("leetcode" or
    source) run once per process that asks (the worker: before it forks anything)."""
    if not source:
        return {}
    if source == "leetcode":
        source = LEETCODE_PRELUDE
    if source not in _PRELUDES:
        namespace: dict[str, Any] = {"__name__": "__main__"}
        exec(compile(source, "<prelude>", "exec"), namespace)
        namespace.pop("__builtins__", None)
        _PRELUDES[source] = namespace
    return _PRELUDES[source]


_BUILTINS: dict[str, dict[str, Any]] = {}


def program_builtins(source: str | None) -> dict[str, Any]:
    """The builtins a functional test's program runs with: Python's, then the prelude's
    names over them (as if the prelude had run in the program's namespace)."""
    key = source or ""
    if key not in _BUILTINS:
        _BUILTINS[key] = {**builtins.__dict__, **prelude_namespace(source)}
    return _BUILTINS[key]


def prelude_helpers(namespace: dict[str, Any]) -> set[str]:
    """The names a prelude defines itself (ListNode, list_node, is_same_list, ...): a test
    always uses the checker's own, whatever the program redefines."""
    return {
        name
        for name, value in namespace.items()
        if getattr(value, "__module__", None) == "__main__"
        and isinstance(value, type | FunctionType)
    }
