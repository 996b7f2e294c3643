"""The house's shape: no import cycles between the package's modules (issue 29).

The layers themselves are import-linter's contracts (``[tool.importlinter]`` in ``pyproject.toml``,
run by ``scripts/test.sh``); this file keeps the one rule a layers contract cannot state for modules of
one package, and the docs' table of layers equal to those contracts.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if child < len(edges[node]):
                work.append((node, child + 1))
                nxt = edges[node][child]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def test_no_two_modules_import_each_other_even_through_others_or_for_type_checking_only() -> None:
    graph = grimp.build_graph("coven_codex", "mcp_shim", include_external_packages=False, cache_dir=None)
    assert _cycles(graph) == []


def _documented_layers() -> list[set[str]]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text.split("## Packages and layers", 1)[1].split("\n\n")
    rows = next(block for block in table if block.startswith("| layer |")).splitlines()[2:]
    return [set(re.findall(r"`([\w]+)`", row.split("|")[2])) for row in rows]


def _contract_layers() -> list[set[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    layers = next(c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "layers")["layers"]
    return [{name.strip() for name in re.split(r"[|:]", layer)} for layer in layers]


def test_the_docs_table_of_layers_is_the_import_linter_contract() -> None:
    assert _documented_layers() == _contract_layers()


def test_every_package_and_top_level_module_of_coven_codex_is_in_a_layer() -> None:
    source = ROOT / "coven_codex"
    packages = {p.name for p in source.iterdir() if (p / "__init__.py").exists()}
    modules = {p.stem for p in source.glob("*.py") if p.stem != "__init__"}
    assert packages | modules == set().union(*_contract_layers())


SIZED = [
    "coven_codex/daemon",
    "coven_codex/conversation",
    "coven_codex/codex/appserver",
    "coven_codex/codex/drivers",
    "coven_codex/codex/tasks.py",
]
"""The core (the composition root and the daemon, the conversation, the drivers, the app-server layer):
no function over 60 lines, no class over 400."""


def _oversized(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        lines = (node.end_lineno or node.lineno) - node.lineno + 1 if isinstance(node, ast.stmt) else 0
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and lines > 60:
            found.append(f"{path.relative_to(ROOT)}: {node.name} has {lines} lines")
        elif isinstance(node, ast.ClassDef) and lines > 400:
            found.append(f"{path.relative_to(ROOT)}: class {node.name} has {lines} lines")
    return found


def test_no_function_over_60_lines_and_no_class_over_400_in_the_core() -> None:
    paths = [p for name in SIZED for p in ([ROOT / name] if name.endswith(".py") else (ROOT / name).glob("*.py"))]
    assert {"session.py", "app_server.py", "connection.py", "pool.py", "daemon.py"} <= {p.name for p in paths}
    assert [line for path in paths for line in _oversized(path)] == []
