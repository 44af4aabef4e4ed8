"""The folders are floors: each package imports only from floors below it, and no module
import cycle exists (counting imports inside functions too, so no arrow is hidden)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("schemas", "lake", "curation", "builders", "training", "cli")
ALLOWED = {
    "schemas": {"schemas"},
    "lake": {"schemas", "lake"},
    "curation": {"schemas", "lake", "curation"},
    "builders": {"schemas", "lake", "curation", "builders", "training"},
    # architecture.md: the trainer takes rewards from curation.verify and episodes from
    # curation.environments; what it shares with the teachers (the chat format, seeded
    # sampling) is a contract in schemas.
    "training": {"schemas", "lake", "training", "curation.verify", "curation.environments"},
    "cli": set(PACKAGES),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports() -> dict[str, set[str]]:
    """module -> project modules it imports (anywhere in its body)."""
    modules = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            found: list[str] = []
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                found = [base] + [f"{base}.{a.name}" for a in node.names]
            for target in found:
                # the longest project module that the import names
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def test_each_floor_imports_only_from_floors_below() -> None:
    wrong = []
    for module, targets in _imports().items():
        floor = module.split(".")[0]
        for target in targets:
            if not any(target == a or target.startswith(a + ".") for a in ALLOWED[floor]):
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_no_import_cycles() -> None:
    graph = _imports()
    # Package __init__ files that only re-export their own modules are not edges back up.
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt.startswith(node + "."):
                continue  # a package importing its own submodules
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt] if nxt in stack else [node, nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_recipes_reach_the_fixtures_only_in_their_profiles() -> None:
    """The demo corpus and toy world (`builders.worlds`) are fixtures: a recipe module may name
    them inside its `demo` / `toy` profile functions, never at import time."""
    wrong = []
    for path in sorted((ROOT / "builders").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("builders"):
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                if any(n == "builders.worlds" or n.startswith("builders.worlds.") for n in names):
                    wrong.append(f"{path.name} -> {node.module}")
            elif isinstance(node, ast.Import):
                wrong += [
                    f"{path.name} -> {a.name}" for a in node.names if "builders.worlds" in a.name
                ]
    assert wrong == []


def test_schemas_import_light() -> None:
    """Every module of schemas imports without torch or transformers (a contract is cheap)."""
    modules = sorted(_module_name(p) for p in (ROOT / "schemas").rglob("*.py"))
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in ('torch', 'transformers', 'duckdb') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert len(modules) > 5
    assert out.stdout.strip() == "[]"
