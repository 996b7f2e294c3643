"""Every public function and class of the packages has a docstring (issue 10 item 9).

"Public" means the name does not start with ``_``, at module level or inside a public class;
dunder methods therefore do not count. ``@overload`` signatures are exempt: the implementation
they describe carries the docstring.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("coven_codex", "mcp_shim")

Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _is_overload(node: Definition) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Name) and target.id == "overload":
            return True
        if isinstance(target, ast.Attribute) and target.attr == "overload":
            return True
    return False


def _undocumented(node: ast.AST, path: str, prefix: str) -> list[str]:
    missing: list[str] = []
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if child.name.startswith("_"):
            continue
        if ast.get_docstring(child) is None and not _is_overload(child):
            missing.append(f"{path}:{child.lineno} {prefix}{child.name}")
        if isinstance(child, ast.ClassDef):
            missing.extend(_undocumented(child, path, f"{prefix}{child.name}."))
    return missing


def test_every_public_function_and_class_has_a_docstring() -> None:
    missing: list[str] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            missing.extend(_undocumented(tree, str(path.relative_to(ROOT)), ""))
    assert not missing, f"{len(missing)} public definitions without a docstring:\n" + "\n".join(missing)
