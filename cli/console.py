"""Shared CLI state (lake path, --debug) and the rich console."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console

console = Console(stderr=False)
err_console = Console(stderr=True)


class CascadeError(Exception):
    """An error whose message is meant for the user as one sentence."""


@dataclass
class CliState:
    lake_path: str = "lake"
    debug: bool = False


state = CliState()
