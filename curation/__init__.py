"""Curation: the operators that turn source rows into training data, one package or module per
operator family (ingest, dedup, decontamination, generation, verification, filters, ...), and
the cluster plans that run some of them on Ray (`cluster_plans`).

Operators are plain functions over Polars/Arrow tables that return what they keep and what
they drop with a reason (see `lake.steps.StepResult`); the lake they read and write is the
floor below (`lake`).
"""
