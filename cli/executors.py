"""Which executor a command runs its steps on: `--executor local|ray [--ray-address ADDR]`.

`executor_from_options("ray", address)` builds a `lake.cluster.RayExecutor` with
`curation.cluster_plans.CLUSTER_PLANS` (the operators' distributed plans, each next to its
operator in `curation/*/on_cluster.py`); `executor_session` holds it for the length of a
command. Ray is imported only when `--executor ray` is asked for.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import typer

from cli.console import CascadeError

if TYPE_CHECKING:
    from lake.steps import Executor

EXECUTORS = ("local", "ray")

EXECUTOR_OPTION = typer.Option(
    "local", "--executor", help="local (this process) or ray (a Ray cluster)."
)
RAY_ADDRESS_OPTION = typer.Option(
    None,
    "--ray-address",
    envvar="RAY_ADDRESS",
    help="With --executor ray: the head's host:port (default: start Ray in this process).",
)
"""The two options every command that runs steps takes (build, decontaminate, dedup, verify,
generate)."""


def executor_from_options(name: str = "local", address: str | None = None) -> Executor:
    """The executor for `--executor NAME [--ray-address ADDR]` (ADDR: `host:port` of a running
    cluster's head, `auto`, or none to start Ray inside this process). The Ray executor's
    block size and shuffle partitions come from `CASCADE_RAY_BLOCK_ROWS` and
    `CASCADE_RAY_PARTITIONS` when set (see "Scale-out" in lake/cluster/__init__.py)."""
    if name == "local":
        if address:
            raise CascadeError("--ray-address needs --executor ray")
        from lake.steps import LocalExecutor

        return LocalExecutor()
    if name == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise CascadeError(
                "--executor ray needs Ray: pip install 'cascade-curation[cluster]'"
            ) from None
        settings: dict[str, int] = {}
        for key, env in (
            ("block_rows", "CASCADE_RAY_BLOCK_ROWS"),
            ("partitions", "CASCADE_RAY_PARTITIONS"),
        ):
            value = os.environ.get(env)
            if value:
                if not value.isdigit() or int(value) < 1:
                    raise CascadeError(f"{env}={value!r}: expected a positive integer")
                settings[key] = int(value)
        from curation.cluster_plans import CLUSTER_PLANS
        from lake.cluster import RayExecutor

        return RayExecutor(address=address, plans=CLUSTER_PLANS, **settings)
    raise CascadeError(f"--executor must be one of {', '.join(EXECUTORS)}, got {name!r}")


@contextlib.contextmanager
def executor_session(name: str = "local", address: str | None = None) -> Iterator[Executor]:
    """`executor_from_options` for the length of a command: a cluster that cannot be reached
    is one sentence (CascadeError), and a Ray instance started here stops at the end."""
    runner = executor_from_options(name, address)
    from lake.cluster import ClusterError, RayExecutor

    try:
        yield runner
    except ClusterError as exc:
        raise CascadeError(str(exc)) from None
    finally:
        if isinstance(runner, RayExecutor):
            runner.close()


__all__ = ["EXECUTORS", "executor_from_options", "executor_session"]
