"""The documentation stays true: every setting is documented, every documented key exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from coven_codex.cli.main import build_parser
from coven_codex.cli.run import TABLE_SETTINGS, default_text
from coven_codex.rollout.translator import SKIPPED_ENVELOPES, TURN_END_STATES
from coven_codex.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


def test_every_setting_is_in_the_configuration_reference() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    table = doc[doc.index("## Every setting") : doc.index("A `coven.toml`")]
    documented = set(re.findall(r"^\| `\[?([a-z_]+)\]?` \|", table, re.M))
    assert documented == set(Settings.model_fields)


def test_the_example_coven_toml_is_valid() -> None:
    import tomllib

    doc = (ROOT / "docs" / "configuration.md").read_text()
    example = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    Settings.model_validate(tomllib.loads(example))


def test_the_thought_limits_table_matches_the_code() -> None:
    from coven_codex.support.limits import MAX_CONVERSATION_CHARS, MAX_ID_CHARS, MAX_THOUGHT_CHARS

    doc = (ROOT / "docs" / "journal-protocol.md").read_text()
    table = doc[doc.index("## Limits") : doc.index("## Positions")]
    documented = {name: int(limit) for name, limit in re.findall(r"^\| `([a-z_]+)` \| (\d+) \|", table, re.M)}
    assert documented == {"conversation": MAX_CONVERSATION_CHARS, "id": MAX_ID_CHARS, "text": MAX_THOUGHT_CHARS}


def _run_options() -> dict[str, str]:
    """``dest`` → help text of every ``coven-codex run`` option."""
    parser, _ = build_parser()
    sub = next(action for action in parser._actions if action.dest == "command")
    run = sub.choices["run"]  # type: ignore[attr-defined]
    return {action.dest: action.help or "" for action in run._actions}


def test_every_setting_is_a_run_flag_whose_help_shows_its_default() -> None:
    """docs/configuration.md: every key except the tables is also a flag of `coven-codex run`."""
    options = _run_options()
    assert set(Settings.model_fields) - TABLE_SETTINGS <= set(options)
    doc = (ROOT / "docs" / "configuration.md").read_text()
    assert all(f"`[{table}]`" in doc.split("## Every setting")[0] for table in TABLE_SETTINGS)
    for name in set(Settings.model_fields) - TABLE_SETTINGS:
        if default_text(name):
            assert "default" in options[name], f"run --help does not show the default of {name}"


def test_every_status_state_the_daemon_writes_is_in_the_protocol_table() -> None:
    doc = (ROOT / "docs" / "journal-protocol.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith("| `status` |"))
    sources = [
        *(ROOT / "coven_codex" / "conversation").glob("*.py"),
        ROOT / "coven_codex" / "rollout" / "translator.py",
    ]
    written = {
        state
        for path in sources
        for state in re.findall(r'"((?:session|turn|approval|cancel)_[a-z_]+)"', path.read_text())
    }
    written -= {kind for kind, _ in SKIPPED_ENVELOPES}
    assert written >= TURN_END_STATES
    assert {state for state in written if f"`{state}`" not in row} == set()
    ends = next(line for line in doc.splitlines() if line.startswith("A turn ends with"))
    assert all(f"`{state}`" in ends for state in TURN_END_STATES)


def test_nothing_cites_a_design_document_outside_the_repository() -> None:
    """Contracts live in docs/; a citation of that document's sections points at nothing a reader has."""
    folders = ("coven_codex", "mcp_shim", "docs", "tests", "benchmarks", "examples")
    files = [ROOT / "README.md"] + [
        path
        for folder in folders
        for path in (ROOT / folder).rglob("*")
        if path.suffix in (".py", ".md", ".toml", ".sh")
    ]
    citing = [
        str(path.relative_to(ROOT)) for path in files if re.search("DESIGN" + r"\s*§", path.read_text(encoding="utf-8"))
    ]
    assert citing == []


def test_the_architecture_says_elicitations_are_relayed_as_approvals() -> None:
    """The app-server driver maps an elicitation to an approval; the docs must not say it is refused."""
    from coven_codex.codex.drivers import app_server

    assert "mcpServer/elicitation/request" in app_server.RELAYED_REQUESTS
    doc = " ".join((ROOT / "docs" / "architecture.md").read_text().split())
    assert "relays `mcpServer/elicitation/request`" in doc
    assert "`mcpServer/elicitation/request` and other server requests it does not handle" not in doc


def test_the_protocol_doc_says_what_happens_to_a_line_without_ts(tmp_path: Path) -> None:
    """A line without ``ts`` gets none on disk: each read assigns the reading time (as documented)."""
    import time

    from coven_codex.entries import ThoughtEntry, parse_entry_json

    line = '{"kind":"thought","text":"hi"}'
    first = parse_entry_json(line).ts
    time.sleep(0.01)
    assert parse_entry_json(line).ts > first
    assert '"ts":' in ThoughtEntry(text="hi").to_json()
    doc = (ROOT / "docs" / "journal-protocol.md").read_text()
    row = next(row for row in doc.splitlines() if row.startswith("| `ts` |"))
    assert "assigned if omitted" not in row and "readers then see the time they read it" in row


def test_the_exec_options_table_lists_every_exec_flag() -> None:
    """docs/exec.md, Options: one row per flag of `coven-codex exec`, and no row for a flag it lacks."""
    parser, _ = build_parser()
    sub = next(action for action in parser._actions if action.dest == "command")
    exec_parser = sub.choices["exec"]  # type: ignore[attr-defined]
    flags = {
        option
        for action in exec_parser._actions
        for option in action.option_strings
        if option not in {"-h", "--help", "--log-level"}
    }
    doc = (ROOT / "docs" / "exec.md").read_text()
    table = doc[doc.index("## Options") : doc.index("## The workspace")]
    documented = {
        flag for cell in re.findall(r"^\| ([^|]+) \|", table, re.M) for flag in re.findall(r"`(-[-\w]+)", cell)
    }
    assert documented == flags


def test_the_trace_table_matches_what_each_version_is_known_to_export() -> None:
    from coven_codex.codex.version import parse_version
    from coven_codex.traces.otel_config import exported_signals

    doc = (ROOT / "docs" / "exec.md").read_text()
    rows = re.findall(r"^\| (\d+\.\d+\.\d+) \| (yes|no) \| (yes|no) \|", doc, re.M)
    assert rows
    for version, logs, traces in rows:
        signals = exported_signals(parse_version(f"codex-cli {version}"))
        assert ("logs" in signals, "traces" in signals) == (logs == "yes", traces == "yes"), version


SESSION_TIMERS = (
    ("kill_grace", "interrupt grace"),
    ("release_thread_after", "idle release of the thread"),
    ("restart_backoff", "restart backoff"),
)
DRIVER_TIMERS = (
    ("turn_timeout", "turn deadline"),
    ("stream_idle_timeout", "stream-idle bound"),
    ("approval_timeout", "approval timeout"),
)


def timed_by(setting: str, code: str) -> bool:
    """``code`` computes a wait or a deadline from ``setting`` (not merely quotes it in a message)."""
    return re.search(rf"(?:[-+*(,]|sleep\()\s*self\.(?:_)?settings\.{setting}\b", code) is not None


def test_the_session_docstring_names_its_own_timers_and_the_drivers() -> None:
    """Issue 10 item 7: the ``session.py`` docstring listed timers that had moved to the drivers."""
    session = (ROOT / "coven_codex" / "conversation" / "session.py").read_text()
    core = "\n".join(path.read_text() for path in (ROOT / "coven_codex" / "conversation").glob("*.py"))
    drivers = "\n".join(path.read_text() for path in (ROOT / "coven_codex" / "codex" / "drivers").glob("*.py"))
    docstring = " ".join((ast.get_docstring(ast.parse(session)) or "").split())
    own = docstring[docstring.index("its own timers") : docstring.index("Delivering a thought")]
    mine, theirs = own.split("drivers'", 1)[0].split("The turn deadline", 1)
    theirs = "The turn deadline" + theirs
    for setting, words in SESSION_TIMERS:
        assert timed_by(setting, session + core) and words in mine, setting
    for setting, words in DRIVER_TIMERS:
        assert not timed_by(setting, session + core) and timed_by(setting, drivers), setting
        assert words in theirs and words not in mine, setting


def test_every_subcommand_is_in_the_readme_commands_table() -> None:
    from coven_codex.cli.main import SUBCOMMANDS

    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## The commands") : readme.index("Every command has `--help`")]
    listed = set(re.findall(r"^\| `coven-codex ([a-z-]+)", table, re.M))
    assert listed == set(SUBCOMMANDS)


def test_the_thread_options_table_matches_the_entries() -> None:
    from coven_codex.entries import ThoughtEntry

    doc = (ROOT / "docs" / "journal-protocol.md").read_text()
    table = doc[doc.index("### Thread options") : doc.index("### Images")]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", table, re.M))
    options = set(ThoughtEntry.model_fields) - {"id", "kind", "conversation", "sender", "text", "ts", "attachments"}
    assert documented == options


def test_the_jobs_doc_lists_every_record_field_state_and_tool() -> None:
    from coven_codex.jobs.mcp_tools import job_tools
    from coven_codex.jobs.records import JOB_STATES, JobRecord
    from coven_codex.journal import MemoryJournal

    doc = (ROOT / "docs" / "jobs.md").read_text()
    states = doc[doc.index("| state | when |") : doc.index("are final")]
    assert re.findall(r"^\| `([a-z_]+)` \|", states, re.M) == list(JOB_STATES)
    fields = doc[doc.index("| field | meaning |") : doc.index("## The command line")]
    documented = {name for row in re.findall(r"^\| (.+?) \|", fields, re.M) for name in re.findall(r"`([a-z_]+)`", row)}
    assert documented == set(JobRecord.model_fields)
    tools = doc[doc.index("| tool | arguments | returns |") : doc.index("The arguments mean")]
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| (.*?) \|", tools, re.M))
    registry = job_tools(MemoryJournal())
    assert set(rows) == {spell.name for spell in registry}
    for spell in registry:
        arguments = set(re.findall(r"`([a-z_]+)`", rows[spell.name]))
        assert arguments == set(spell.tool_definition()["inputSchema"].get("properties", {})), spell.name


def test_the_job_turn_states_are_the_translators() -> None:
    from coven_codex.agent import job_names as names
    from coven_codex.rollout import translator

    assert (names.TURN_COMPLETED, names.TURN_FAILED, names.TURN_ABORTED) == (
        translator.TURN_COMPLETED,
        translator.TURN_FAILED,
        translator.TURN_ABORTED,
    )
    assert {names.TURN_COMPLETED, names.TURN_FAILED, names.TURN_ABORTED} == TURN_END_STATES


def test_the_journal_command_table_lists_every_action_and_option() -> None:
    """docs/journal-protocol.md's table of ``coven-codex journal`` rows equals the command's actions and options."""
    parser, _ = build_parser()
    sub = next(action for action in parser._actions if action.dest == "command")
    journal = sub.choices["journal"]  # type: ignore[attr-defined]
    actions = next(action for action in journal._actions if action.dest == "action").choices
    doc = (ROOT / "docs" / "journal-protocol.md").read_text().split("## The journal command", 1)[1].split("\n## ")[0]
    rows = dict(re.findall(r"^\| `coven-codex journal ([a-z]+) ([^`]*)` \|", doc, flags=re.MULTILINE))
    assert set(rows) == set(actions)
    for name, action in actions.items():
        options = {o for a in action._actions for o in a.option_strings if o.startswith("--")} - {
            "--help",
            "--config",
            "--log-level",
        }
        assert options == set(re.findall(r"--[a-z-]+", rows[name])), name


def test_the_spell_server_table_names_every_module_of_coven_codex_mcp() -> None:
    """docs/architecture.md's table of the spell server's layers names exactly the modules of ``coven_codex/mcp/``."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    table = doc[doc.index("**The spell server**") : doc.index("Under `connection.py`")]
    documented = set(re.findall(r"`([a-z_]+\.py)`", "\n".join(re.findall(r"^\| ([^|]+) \|", table, re.M))))
    modules = {path.name for path in (ROOT / "coven_codex" / "mcp").glob("*.py")} - {"__init__.py"}
    assert documented == modules
    for name in ("messages.py", "framing.py", "peer.py"):
        assert name in doc[doc.index("Under `connection.py`") :].split("\n\n")[0]


DESIGN_CARD_PACKAGES = ("watchfiles", "aiofiles", "pydantic", "tomlkit", "jsonrpcserver", "psutil", "pytest-asyncio")
"""The packages the design card named, in its order (issue 34)."""


def _requirement_name(spec: str) -> str:
    return re.split(r"[<>=!~ \[;]", spec, maxsplit=1)[0].lower()


def test_the_dependency_table_is_the_design_cards_packages_as_pyproject_declares_them() -> None:
    """docs/architecture.md, "Dependencies against the design card": one row per package of the card, in its
    order; each row says where pyproject.toml declares it (exactly), and a package in use at run time is a
    dependency while a replaced one is none (issue 34)."""
    import tomllib

    doc = (ROOT / "docs" / "architecture.md").read_text()
    start = doc.index("## Dependencies against the design card")
    section = doc[start : doc.index("\n## ", start + 1)]
    rows = re.findall(r"^\| `([^`]+)` \| ([^|]*) \| (used|replaced) \|", section, re.M)
    assert [name for name, _, _ in rows] == list(DESIGN_CARD_PACKAGES)
    stated = section.split("\n\n")[1]
    assert re.findall(r"`([a-z-]+)`", stated) == list(DESIGN_CARD_PACKAGES), "the card's list, as the section states it"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    places: dict[str, set[str]] = {}
    for spec in project["dependencies"]:
        places.setdefault(_requirement_name(spec), set()).add("dependencies")
    for extra, specs in project["optional-dependencies"].items():
        for spec in specs:
            places.setdefault(_requirement_name(spec), set()).add(extra)
    shipped = [*(ROOT / "coven_codex").rglob("*.py"), *(ROOT / "mcp_shim").rglob("*.py")]
    code = "\n".join(path.read_text(encoding="utf-8") for path in shipped)
    for name, declared, status in rows:
        assert set(re.findall(r"`([a-z]+)`", declared)) == places.get(name, set()), name
        if status == "replaced":
            assert "dependencies" not in places.get(name, set()), name
            assert not re.search(rf"^\s*(?:import|from) {name}\b", code, re.M), f"{name} is said replaced"
        elif name != "pytest-asyncio":
            assert "dependencies" in places[name], name
    assert "dev" in places["pytest-asyncio"]


def test_the_metrics_table_names_every_metric_of_the_registry() -> None:
    """docs/operations.md, Metrics and health: one row per metric family, with its type and labels."""
    from coven_codex.metrics.instruments import Instruments

    doc = (ROOT / "docs" / "operations.md").read_text()
    table = doc[doc.index("| metric | type | labels |") : doc.index("`examples/grafana-dashboard.json`")]
    documented = {
        name: (kind, tuple(re.findall(r"`([a-z_]+)`", labels)))
        for name, kind, labels in re.findall(r"^\| `(coven_[a-z_]+)` \| (\w+) \|([^|]*)\|", table, re.M)
    }
    registry = Instruments().registry
    families = {}
    for metric in registry.collect():
        name = metric.name + ("_total" if metric.type == "counter" else "")
        labels: tuple[str, ...] = ()
        collector = registry._names_to_collectors.get(name) or registry._names_to_collectors.get(metric.name)
        if collector is not None:
            labels = tuple(getattr(collector, "_labelnames", ()))
        families[name] = (metric.type, labels)
    assert documented == families


def test_the_architecture_holds_the_conversations_state_diagram_drawn_from_the_table() -> None:
    from coven_codex.conversation.phases import state_diagram

    doc = (ROOT / "docs" / "architecture.md").read_text()
    block = doc[doc.index("<!-- phases:begin -->") : doc.index("<!-- phases:end -->")]
    assert block == "<!-- phases:begin -->\n```mermaid\n" + state_diagram() + "```\n"
