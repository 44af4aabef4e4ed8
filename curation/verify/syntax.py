"""Syntax check of the fenced code blocks in a response, with tree-sitter grammars.

A cheap filter for SFT data: a response whose Python / C++ / Java block does not even parse
is dropped before anything is executed. Blocks in other languages are ignored.
"""

from __future__ import annotations

import re
from functools import cache

from tree_sitter import Language, Node, Parser

from curation.verify.result import Verdict, final_answer_part

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+#-]*)[^\n]*\n(.*?)```", re.DOTALL)
LANGUAGE_TAGS = {
    "python": "python",
    "py": "python",
    "python3": "python",
    "cpp": "cpp",
    "c++": "cpp",
    "cc": "cpp",
    "cxx": "cpp",
    "java": "java",
}


@cache
def parser_for(language: str) -> Parser:
    """A tree-sitter parser for 'python', 'cpp' or 'java'."""
    if language == "python":
        import tree_sitter_python as grammar
    elif language == "cpp":
        import tree_sitter_cpp as grammar
    elif language == "java":
        import tree_sitter_java as grammar
    else:
        raise ValueError(f"no grammar for {language!r}; known: python, cpp, java")
    return Parser(Language(grammar.language()))


def _first_error(node: Node) -> Node | None:
    if node.type == "ERROR" or node.is_missing:
        return node
    for child in node.children:
        if child.has_error:
            found = _first_error(child)
            if found is not None:
                return found
    return node if node.has_error else None


def syntax_error(code: str, language: str) -> str | None:
    """None if `code` parses, else where it breaks ('line L, column C: ...')."""
    tree = parser_for(language).parse(code.encode())
    if not tree.root_node.has_error:
        return None
    node = _first_error(tree.root_node) or tree.root_node
    row, col = node.start_point
    kind = f"missing {node.type}" if node.is_missing else "unexpected input"
    return f"line {row + 1}, column {col + 1}: {kind}"


def code_blocks(response: str) -> list[tuple[str, str]]:
    """(language, code) for every fenced block in a known language, in order."""
    text = final_answer_part(response)
    return [
        (LANGUAGE_TAGS[tag.lower()], body)
        for tag, body in _FENCE.findall(text)
        if tag.lower() in LANGUAGE_TAGS
    ]


def verify_syntax(response: str) -> Verdict:
    """Passed when every Python/C++/Java block parses; undecided when there is none."""
    blocks = code_blocks(response)
    if not blocks:
        return Verdict(None, 0.0, "no python/cpp/java code block")
    for n, (language, code) in enumerate(blocks, start=1):
        error = syntax_error(code, language)
        if error is not None:
            return Verdict(False, 0.0, f"block {n} ({language}) {error}")
    return Verdict(True, 1.0, f"{len(blocks)} block(s) parse")
