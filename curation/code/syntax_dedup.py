"""Dedup programs by normalized syntax: renamed, re-commented or re-formatted copies are one.

A program is parsed with tree-sitter (Python, C++, Java; the grammars of
`curation.verify.syntax`) and written back as its syntax tree with:

- identifiers renamed by order of first appearance (`v0`, `v1`, ...): consistent renaming
  keeps the data flow (`a + b` and `a + a` stay different) while `total`/`s` do not matter;
- literals replaced by their kind (`NUM`, `STR`, `CHR`): `x + 1` and `x + 2` are one shape;
- comments and Python docstrings removed; whitespace, indentation and line breaks carry
  nothing because the tree's nesting is written out instead.

Two programs with the same normalized tree are type-2 clones in the code-clone literature:
the same program up to names and constants. Among the responses of one prompt (the default
grouping), the first keeps its place and every later clone is dropped naming it.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl
import xxhash
from tree_sitter import Node

from curation.verify.syntax import LANGUAGE_TAGS, code_blocks, parser_for
from lake.operators import counted
from lake.steps import StepResult

COMMENTS = frozenset({"comment", "line_comment", "block_comment"})
LITERALS: dict[str, str] = {
    # python
    "string": "STR",
    "concatenated_string": "STR",
    "integer": "NUM",
    "float": "NUM",
    # c++
    "string_literal": "STR",
    "raw_string_literal": "STR",
    "char_literal": "CHR",
    "number_literal": "NUM",
    # java
    "character_literal": "CHR",
    "text_block": "STR",
    "decimal_integer_literal": "NUM",
    "hex_integer_literal": "NUM",
    "octal_integer_literal": "NUM",
    "binary_integer_literal": "NUM",
    "decimal_floating_point_literal": "NUM",
    "hex_floating_point_literal": "NUM",
}


def _is_docstring(node: Node) -> bool:
    return (
        node.type == "expression_statement"
        and node.named_child_count == 1
        and node.named_children[0].type in ("string", "concatenated_string")
    )


def normalized_tokens(code: str, language: str) -> list[str]:
    """The normalized syntax tree of `code` as tokens (see the module docstring).

    >>> a = normalized_tokens("def f(n):\\n    return n + 1  # one\\n", "python")
    >>> a == normalized_tokens("def g(x):\\n    '''doc'''\\n    return x+2\\n", "python")
    True
    """
    tree = parser_for(language).parse(code.encode())
    names: dict[str, str] = {}
    tokens: list[str] = []
    stack: list[Node | str] = [tree.root_node]
    while stack:  # explicit stack: deeply nested programs must not hit the recursion limit
        item = stack.pop()
        if isinstance(item, str):
            tokens.append(item)
            continue
        node = item
        if node.type in COMMENTS or _is_docstring(node):
            continue
        if node.type in LITERALS:
            tokens.append(LITERALS[node.type])
        elif node.child_count == 0:
            if node.type.endswith("identifier"):
                text = node.text.decode(errors="replace") if node.text else ""
                tokens.append(names.setdefault(text, f"v{len(names)}"))
            elif node.is_named:
                tokens.append(node.type)
            else:
                tokens.append(node.text.decode(errors="replace") if node.text else node.type)
        else:
            if node.is_named:
                tokens.append(f"({node.type}")
                stack.append(")")
            stack.extend(reversed(node.children))
    return tokens


def syntax_fingerprint(code: str, language: str) -> tuple[str, int]:
    """(xxh3-128 hex of the normalized tokens, number of tokens)."""
    tokens = normalized_tokens(code, language)
    return xxhash.xxh3_128_hexdigest("\x1f".join(tokens).encode()), len(tokens)


def _programs(
    texts: list[str | None], extract: bool, language: str
) -> Iterator[tuple[str, str] | None]:
    for text in texts:
        if text is None:
            yield None
        elif extract:
            blocks = code_blocks(text)
            yield blocks[-1] if blocks else None
        else:
            yield (language, text)


def dedup_by_syntax(
    df: pl.DataFrame,
    *,
    code_column: str = "response",
    id_column: str = "id",
    group_column: str | None = "prompt_id",
    extract: bool = True,
    language: str = "python",
) -> StepResult:
    """Drop programs whose normalized syntax tree equals an earlier row's in the same group.

    `extract=True` reads the last fenced Python / C++ / Java block of each response (after
    `</think>`); `extract=False` takes `code_column` as a bare program in `language`.
    `group_column=None` compares across the whole table. Every row gets `syntax_language`,
    `syntax_fingerprint` and `syntax_tokens` (null when it has no program, and such rows are
    kept); dropped rows carry reason `syntax_duplicate` and `duplicate_of`, the kept twin's id.
    """
    for name in (code_column, id_column, *([group_column] if group_column else [])):
        if name not in df.columns:
            raise ValueError(f"syntax dedup input has no column {name!r}; it has {df.columns}")
    if not extract and language not in set(LANGUAGE_TAGS.values()):
        raise ValueError(f"no grammar for {language!r}; known: python, cpp, java")
    langs, prints, sizes = [], [], []
    for program in _programs(df.get_column(code_column).to_list(), extract, language):
        if program is None:
            langs.append(None)
            prints.append(None)
            sizes.append(None)
            continue
        lang, code = program
        fingerprint, size = syntax_fingerprint(code, lang)
        langs.append(lang)
        prints.append(f"{lang}:{fingerprint}")
        sizes.append(size)
    measured = df.with_columns(
        pl.Series("syntax_language", langs, dtype=pl.String),
        pl.Series("syntax_fingerprint", prints, dtype=pl.String),
        pl.Series("syntax_tokens", sizes, dtype=pl.Int64),
    ).with_row_index("__row")
    keys = ["syntax_fingerprint", *([group_column] if group_column else [])]
    firsts = (
        measured.filter(pl.col("syntax_fingerprint").is_not_null())
        .group_by(keys, maintain_order=True)
        .agg(pl.col("__row").first().alias("__first"), pl.col(id_column).first().alias("__twin"))
    )
    joined = measured.join(firsts, on=keys, how="left", nulls_equal=False).sort("__row")
    is_copy = pl.col("__first").is_not_null() & (pl.col("__first") != pl.col("__row"))
    kept = joined.filter(~is_copy).drop("__row", "__first", "__twin")
    dropped = (
        joined.filter(is_copy)
        .with_columns(
            pl.lit("syntax_duplicate").alias("reason"),
            pl.col("__twin").cast(pl.String).alias("duplicate_of"),
        )
        .drop("__row", "__first", "__twin")
    )
    stats = {
        "without_program": sum(p is None for p in prints),
        "by_language": dict(
            measured.group_by("syntax_language")
            .len()
            .drop_nulls()
            .sort("syntax_language")
            .iter_rows()
        ),
    }
    return counted(df.height, kept, dropped, stats)
