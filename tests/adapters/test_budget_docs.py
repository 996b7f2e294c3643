"""docs/adapters.md's budgets table is the code's: every documented limit the adapters keep under."""

from __future__ import annotations

from pathlib import Path

from coven_codex.adapters.discord import rest
from coven_codex.adapters.kit.budget import Rate
from coven_codex.adapters.kit.config import TelegramSection
from coven_codex.adapters.slack import platform
from coven_codex.adapters.telegram import platform as telegram

DOC = Path(__file__).resolve().parents[2] / "docs" / "adapters.md"


def _row(name: str, method: str, rate: Rate) -> str:
    return f"| {name} | {method} | {rate.calls:g} | {rate.per:g} s | {rate.scope.value} | {rate.source} |"


def test_the_budgets_table_lists_every_budget_as_the_code_sets_it() -> None:
    text = DOC.read_text(encoding="utf-8")
    table = text.split("<!-- budgets-table -->\n", 1)[1].split("<!-- /budgets-table -->", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| platform")]
    expected = [_row("Slack", f"`{method}`", rate) for method, rate in platform.rates().items()]
    expected += [_row("Discord", "every REST request", rate) for rate in rest.RATES.values()]
    defaults = telegram.budgets(TelegramSection(allow_users=["1"])).rates
    expected += [_row("Telegram", f"every call ({scope})", rate) for scope, rate in defaults.items()]
    assert rows == expected
    assert len(rest.RATES) == 1 and rest.REQUEST in rest.RATES  # the one Discord row names what it covers
