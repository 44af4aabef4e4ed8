"""Benchmark decontamination (see `curation.decontaminate.tokens` for the whole design)."""

from curation.decontaminate.tokens import (
    DEFAULT_N,
    LAYOUT_COMMANDS,
    RULES,
    BenchmarkIndex,
    ContaminationRule,
    StockNgrams,
    build_stock_ngrams,
    decide,
    decontaminate,
    normalize_text,
    rule_named,
    tokenize,
)

__all__ = [
    "DEFAULT_N",
    "LAYOUT_COMMANDS",
    "RULES",
    "BenchmarkIndex",
    "ContaminationRule",
    "StockNgrams",
    "build_stock_ngrams",
    "decide",
    "decontaminate",
    "normalize_text",
    "rule_named",
    "tokenize",
]
