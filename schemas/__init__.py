"""Contracts only: Arrow schemas of lake tables and pydantic models of manifests.

Nothing here does I/O or imports anything heavier than pyarrow and pydantic.
"""
