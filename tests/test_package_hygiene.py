"""The package's bookkeeping stays honest: declared dependencies are used, one logger name."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMPORT_NAMES = {
    "pydantic": "pydantic",
    "tomlkit": "tomlkit",
    "watchfiles": "watchfiles",
    "psutil": "psutil",
    "opentelemetry-proto": "opentelemetry.proto",
    "prometheus-client": "prometheus_client",
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


DRIVER_EVENTS_MODULE = "coven_codex.codex.drivers.events"


def _driver_event_names() -> set[str]:
    """The classes of the ``DriverEvent`` union of ``coven_codex/codex/drivers/events.py``."""
    tree = ast.parse((ROOT / "coven_codex" / "codex" / "drivers" / "events.py").read_text(encoding="utf-8"))
    union = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "DriverEvent" for t in node.targets)
    )
    return {n.id for n in ast.walk(union) if isinstance(n, ast.Name)}


def _driver_event_fields() -> dict[str, list[tuple[str, ast.expr | None]]]:
    """Each driver event class of ``coven_codex/codex/drivers/events.py``: its fields, each with its default."""
    tree = ast.parse((ROOT / "coven_codex" / "codex" / "drivers" / "events.py").read_text(encoding="utf-8"))
    names = _driver_event_names()
    fields: dict[str, list[tuple[str, ast.expr | None]]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in names:
            fields[node.name] = [
                (item.target.id, item.value)
                for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            ]
    assert set(fields) == names
    return fields


def test_every_driver_event_field_carries_something() -> None:
    """A field of a driver event that every construction in the package fills with the same constant is a
    dead branch in the session (issue 10 item 10: ``rollout_path`` was always None, ``expected`` always False)."""
    fields = _driver_event_fields()
    informative: dict[str, set[str]] = {name: set() for name in fields}
    constructions = 0
    for path in sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == DRIVER_EVENTS_MODULE
            for alias in node.names
        }
        for call in ast.walk(tree):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
                continue
            name = call.func.id
            if name not in fields or name not in imported:
                continue
            constructions += 1
            names = [field for field, _ in fields[name]]
            given: dict[str, ast.expr] = dict(zip(names, call.args, strict=False))
            given.update({kw.arg: kw.value for kw in call.keywords if kw.arg is not None})
            informative[name].update(field for field, value in given.items() if not isinstance(value, ast.Constant))
    assert constructions >= len(fields), "every driver event is built somewhere in the package"
    constant = sorted(
        f"{name}.{field}" for name, entries in fields.items() for field, _ in entries if field not in informative[name]
    )
    assert constant == [], "driver event fields only ever given a constant (or their default)"


def test_the_session_consumes_every_driver_event_as_the_driver_emits_it() -> None:
    """Issue 12 item 5: no layer renames the drivers' events for the session. The session handles
    each class of the ``DriverEvent`` union itself, and no other module of the agent names them."""
    events = _driver_event_names()
    core = ROOT / "coven_codex" / "conversation"
    session = ast.parse((core / "session.py").read_text(encoding="utf-8"))
    handled = {
        node.args[1].id
        for node in ast.walk(session)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "isinstance"
        and len(node.args) == 2
        and isinstance(node.args[1], ast.Name)
    }
    assert sorted(events - handled) == []
    others = {
        str(path.relative_to(ROOT))
        for folder in (core, ROOT / "coven_codex" / "agent")
        for path in folder.rglob("*.py")
        if path.name not in ("session.py",)
        and any(
            isinstance(node, ast.ClassDef) and node.name in events
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        )
    }
    assert sorted(others) == [], "a module of the core declares its own version of a driver event"


def test_a_thought_has_one_shape_from_admission_to_the_driver() -> None:
    """One ``Thought`` value goes from the conversation's admission to the driver's edge: it is declared
    once, and neither the conversation core nor the drivers declare another shape of it (the session's
    ``PendingThought`` and the driver's ``TurnInput`` were two)."""
    defined = [
        (str(path.relative_to(ROOT)), node.name)
        for path in sources()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and node.name in {"Thought", "PendingThought", "TurnInput"}
    ]
    assert defined == [("coven_codex/codex/thought.py", "Thought")]


def test_every_subcommand_is_implemented() -> None:
    """Each ``coven-codex`` subcommand has its module with help, options and an implementation; no scaffolding."""
    from coven_codex.cli import main

    for name in main.SUBCOMMANDS:
        module = importlib.import_module(f"coven_codex.cli.{name.replace('-', '_')}")
        assert isinstance(module.HELP, str) and module.HELP, name
        assert callable(module.configure) and callable(module.execute), name
    text = (ROOT / "coven_codex" / "cli" / "main.py").read_text(encoding="utf-8")
    assert "not implemented" not in text.lower()


def test_no_module_imports_a_private_module_of_a_dependency() -> None:
    """Private API may change in any release (issue 10 item 9, issue 34): the package imports none of
    its dependencies' ``_private`` modules (the watchfiles waker runs on the public ``watch()``)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[<>=!~ \[;]", spec, maxsplit=1)[0] for spec in project["dependencies"]]
    modules = {IMPORT_NAMES.get(name, name).split(".")[0] for name in names}
    private: set[str] = set()
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            imported: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            for name in imported:
                top, *rest = name.split(".")
                if top in modules and any(part.startswith("_") for part in rest):
                    private.add(f"{path.relative_to(ROOT)}: {name}")
    assert sorted(private) == []


def test_the_code_is_ruff_formatted_and_the_test_script_checks_it() -> None:
    """Issue 10 item 9: the repository is ``ruff format``-ted, and ``scripts/test.sh`` (what CI runs) enforces it."""
    paths = ["coven_codex", "mcp_shim", "tests", "benchmarks", "examples"]
    script = (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")
    assert f"ruff format --check {' '.join(paths)}" in script
    ruff = Path(sys.executable).with_name("ruff")
    done = subprocess.run(
        [str(ruff), "format", "--check", *paths], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
