"""Option help texts and defaults that come from a heavy module, read only when they are needed.

Every `cascade` start registers every command, so an option written
`typer.Option(ROWS_PER_SHARD, help="|".join(FORMATS))` would load the module defining those
(and Polars, PyArrow, ...) for `cascade --help` too. Such an option is written with a
placeholder (`None`) instead, and its command takes `cls=lazy_options(fill)`: `fill()` imports
the module and returns the real values, set on the options when the command parses its
arguments or shows its help (`--help` is handled while parsing), the only times they are read.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from typer.core import TyperCommand

Fill = Callable[[], dict[str, dict[str, Any]]]
"""Parameter name (the function argument's) -> option attributes to set: "help", "default"."""


def lazy_options(fill: Fill) -> type[TyperCommand]:
    """A command class for `app.command(..., cls=...)` whose options get `fill()`'s values
    before the command reads its arguments or renders its help."""

    class LazyOptionsCommand(TyperCommand):
        _filled = False

        def fill_options(self) -> None:
            if self._filled:
                return
            values = fill()
            for param in self.params:
                for name, value in values.get(param.name or "", {}).items():
                    if name == "help":
                        value = inspect.cleandoc(value)  # as Typer does with a help text
                    setattr(param, name, value)
            self._filled = True

        def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
            self.fill_options()
            return super().parse_args(ctx, args)

        def format_help(self, ctx: Any, formatter: Any) -> None:
            self.fill_options()
            super().format_help(ctx, formatter)

    return LazyOptionsCommand
