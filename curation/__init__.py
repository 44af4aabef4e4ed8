"""The engine: the lake, sources, and one module per operator family.

Operators are plain functions over Polars/Arrow tables that return what they keep and what
they drop with a reason (see `lake.steps.StepResult`).
"""
