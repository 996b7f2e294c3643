"""The package's bookkeeping stays honest: declared dependencies are used, one logger name."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMPORT_NAMES = {
    "jsonrpcserver": "jsonrpcserver",
    "pydantic": "pydantic",
    "tomlkit": "tomlkit",
    "watchfiles": "watchfiles",
    "psutil": "psutil",
    "opentelemetry-proto": "opentelemetry.proto",
}


def sources() -> list[Path]:
    return sorted([*(ROOT / "coven_codex").rglob("*.py"), *(ROOT / "mcp_shim").rglob("*.py")])


def test_every_declared_dependency_is_imported() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[<>=!~ \[;]", spec, maxsplit=1)[0] for spec in project["dependencies"]]
    code = "\n".join(path.read_text(encoding="utf-8") for path in sources())
    unused = [
        name for name in names if not re.search(rf"^\s*(?:import|from) {IMPORT_NAMES.get(name, name)}\b", code, re.M)
    ]
    assert unused == []


def test_every_module_names_its_logger_log() -> None:
    other = [
        str(path.relative_to(ROOT))
        for path in sources()
        if re.search(r"^(?!log = )\w+ = logging\.getLogger\(", path.read_text(encoding="utf-8"), re.M)
    ]
    assert other == []
