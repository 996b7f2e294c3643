"""A real run scraped and drawn as the Grafana dashboard's panels: docs/images/dashboard.png.

Run: ``.venv/bin/python benchmarks/dashboard_render.py [--conversations 12] [--seconds 120]``
(needs ``matplotlib``, which coven-codex does not depend on: ``pip install matplotlib``).

Grafana is not packaged for this machine's Debian (``apt-cache policy grafana``: none), so this is
the static render the issue allows: the daemon (``python -m coven_codex run --metrics-port 0``,
a process of its own) serves N conversations with the real Codex CLI 0.169.0 against the
scripted model server for the given time, each sending a thought every 4-12 s (one in 8 asks
for the spell ``shout``, one in 15 is refused by the model as unauthorised: an ``AUTH`` error);
``/readyz`` is probed and ``/metrics`` scraped every 2 s, and each panel of ``examples/grafana-dashboard.json`` is drawn
from those scrapes by the same arithmetic as its PromQL (``rate`` over 30 s, ``histogram_quantile``
by linear interpolation within a bucket). Panels of what the run has not (adapters, a cluster)
show their zero lines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

import tomlkit

from coven_codex.entries import ThoughtEntry
from coven_codex.journal import FileJournal
from coven_codex.metrics.scrape import get, samples
from coven_codex.testing.codex_config import DEFAULT_ENV_KEY, codex_config
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.request_log import RecordedRequest
from coven_codex.testing.responders import last_user_text, pending_tool_output
from coven_codex.testing.steps import CallTool, HttpError, Reply, TurnScript

ROOT = Path(__file__).resolve().parent.parent
CODEX = ROOT / ".codex-cli" / "0.169.0" / "node_modules" / ".bin" / "codex"
DASHBOARD = ROOT / "examples" / "grafana-dashboard.json"
OUTPUT = ROOT / "docs" / "images" / "dashboard.png"
SCRAPE_EVERY = 2.0
WINDOW = 30.0
SPELLS = '''
def shout(text: str) -> str:
    """Upper-case the text."""
    return text.upper() + "!"
'''

Scrape = dict[tuple[str, tuple[tuple[str, str], ...]], float]
Points = list[tuple[float, float]]


def respond(request: RecordedRequest) -> TurnScript:
    output = pending_tool_output(request)
    if output is not None:
        return Reply(f"the spell says {output.output}")
    text = last_user_text(request)
    if text.startswith("spell"):
        return CallTool("coven.shout", {"text": text})
    if text.startswith("fail"):
        return HttpError(401, "Incorrect API key provided")
    return Reply(f"echo: {text}", chunk_size=6, delay=random.uniform(0.02, 0.15))


async def run(conversations: int, seconds: float, folder: Path) -> list[tuple[float, Scrape]]:
    workspace, journal_path = folder / "ws", folder / "journal.jsonl"
    workspace.mkdir()
    (folder / "dash_spells.py").write_text(SPELLS)
    scrapes: list[tuple[float, Scrape]] = []
    async with ScriptedModelServer(responder=respond) as server:
        config = folder / "base.toml"
        config.write_text(tomlkit.dumps(codex_config(server.base_url)))
        env = {k: v for k, v in os.environ.items() if k not in {"CODEX_HOME", "OPENAI_API_KEY"}}
        env |= {DEFAULT_ENV_KEY: "scripted", "PYTHONUNBUFFERED": "1", "XDG_STATE_HOME": str(folder / "state")}
        log_path = folder / "daemon.log"
        with log_path.open("wb") as log:
            daemon = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "coven_codex", "run", "--workspace", str(workspace),
                "--journal", str(journal_path), "--codex-config", str(config), "--codex-path", str(CODEX),
                "--spells", "dash_spells:shout", "--metrics-port", "0", "--max-sessions", str(conversations),
                stdout=log, stderr=log, env=env, cwd=str(folder),
            )  # fmt: skip
        try:
            url = ""
            async with asyncio.timeout(120):
                while not url:
                    found = re.search(r"metrics and health probes on (http://[0-9.]+:\d+)", log_path.read_text())
                    url = found.group(1) if found else ""
                    await asyncio.sleep(0.2)
                while "ready (pid" not in log_path.read_text():
                    await asyncio.sleep(0.2)
            journal = FileJournal(journal_path, durability="never")
            start = time.monotonic()

            async def talk(name: str) -> None:
                count = 0
                while time.monotonic() - start < seconds:
                    count += 1
                    kind = "spell" if count % 8 == 3 else "fail" if count % 15 == 7 else "ask"
                    await journal.append(ThoughtEntry(conversation=name, text=f"{kind} {name} {count}"))
                    await asyncio.sleep(random.uniform(4, 12))

            async def scrape_loop() -> None:
                while time.monotonic() - start < seconds + 20:
                    await get(url, "/readyz")  # (what a readiness probe does; it sets coven_journal_reachable)
                    status, text = await get(url, "/metrics")
                    if status == 200:
                        scrapes.append((time.monotonic() - start, samples(text)))
                    await asyncio.sleep(SCRAPE_EVERY)

            async with asyncio.TaskGroup() as group:
                for index in range(conversations):
                    group.create_task(talk(f"c{index}"))
                group.create_task(scrape_loop())
            await journal.aclose()
        finally:
            daemon.send_signal(signal.SIGTERM)
            await asyncio.wait_for(daemon.wait(), 60)
    return scrapes


def series(scrapes: list[tuple[float, Scrape]], name: str) -> dict[tuple[tuple[str, str], ...], Points]:
    found: dict[tuple[tuple[str, str], ...], Points] = {}
    for t, page in scrapes:
        for (sample, labels), value in page.items():
            if sample == name:
                found.setdefault(labels, []).append((t, value))
    return found


def rate(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out = []
    for t, v in points:
        earlier = [(t0, v0) for t0, v0 in points if t - WINDOW <= t0 < t]
        if earlier:
            t0, v0 = earlier[0]
            out.append((t, max(0.0, v - v0) / (t - t0)))
    return out


def quantile(scrapes: list[tuple[float, Scrape]], name: str, q: float) -> list[tuple[float, float]]:
    buckets = series(scrapes, name + "_bucket")
    out = []
    times = [t for t, _ in scrapes]
    for t in times:
        deltas = []
        for labels, points in buckets.items():
            le = float(dict(labels)["le"])
            now = [v for tt, v in points if tt == t]
            before = [v for tt, v in points if t - WINDOW <= tt < t]
            if now and before:
                deltas.append((le, now[0] - before[0]))
        deltas.sort()
        if not deltas or deltas[-1][1] <= 0:
            continue
        rank, lower, prev = q * deltas[-1][1], 0.0, 0.0
        for le, count in deltas:
            if count >= rank:
                upper = le if le != float("inf") else lower
                out.append((t, lower + (upper - lower) * ((rank - prev) / (count - prev) if count > prev else 0)))
                break
            lower, prev = le, count
    return out


def draw(scrapes: list[tuple[float, Scrape]], output: Path) -> None:
    import matplotlib  # (a tool of this script only, not a dependency)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    rows = (len(panels) + 1) // 2
    figure, axes = plt.subplots(rows, 2, figsize=(16, 3.1 * rows), facecolor="#111217")
    for ax in axes.flat:
        ax.set_visible(False)
    for panel, ax in zip(panels, axes.flat, strict=False):
        ax.set_visible(True)
        ax.set_facecolor("#181b1f")
        ax.set_title(panel["title"], color="#d8d9da", fontsize=10, loc="left")
        ax.tick_params(colors="#8e8e8e", labelsize=7)
        for spine in ax.spines.values():
            spine.set_color("#2c3235")
        ax.grid(color="#2c3235", linewidth=0.5)
        for target in panel["targets"]:
            for label, points in evaluate(scrapes, target["expr"], target["legendFormat"]):
                if points:
                    ax.plot([p[0] for p in points], [p[1] for p in points], linewidth=1.3, label=label)
        if ax.lines:
            ax.legend(fontsize=7, loc="upper left", facecolor="#181b1f", labelcolor="#d8d9da", edgecolor="#2c3235")
        ax.set_xlabel("seconds into the run", color="#8e8e8e", fontsize=7)
    figure.suptitle(
        "coven-codex dashboard (examples/grafana-dashboard.json), static render of a real run's scrapes",
        color="#d8d9da",
        fontsize=12,
    )
    figure.tight_layout(rect=(0, 0, 1, 0.98))
    figure.savefig(output, dpi=80, facecolor=figure.get_facecolor())


def evaluate(scrapes: list[tuple[float, Scrape]], expr: str, legend: str) -> list[tuple[str, Points]]:
    """The few PromQL shapes the dashboard uses, over the scrapes (one process: sums are the series)."""
    name = re.findall(r"\b(coven_[a-z_]+)\b", expr)[0]
    scale = 60.0 if expr.endswith("* 60") else 1000.0 if expr.endswith("* 1000") else 1.0

    def label(labels: tuple[tuple[str, str], ...]) -> str:
        values = dict(labels) | {"job": "daemon", "instance": "daemon"}
        return re.sub(r"\{\{(\w+)\}\}", lambda m: values.get(m.group(1), ""), legend).strip() or name

    if expr.startswith("histogram_quantile"):
        q = float(expr.split("(", 1)[1].split(",", 1)[0])
        return [(legend.replace("{{spell}}", "every spell"), quantile(scrapes, name.removesuffix("_bucket"), q))]
    found = series(scrapes, name)
    if expr.startswith(("rate", "sum by", "increase")):
        window_scale = WINDOW if expr.startswith("increase") else 1.0
        return [(label(lb), [(t, v * scale * window_scale) for t, v in rate(pts)]) for lb, pts in found.items()]
    return [(label(lb), [(t, v * scale) for t, v in pts]) for lb, pts in found.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="coven-dashboard-") as folder:
        scrapes = asyncio.run(run(args.conversations, args.seconds, Path(folder)))
    last = scrapes[-1][1]
    shown = {name: value for (name, labels), value in last.items() if name.endswith("_total") or "count" in name}
    print(json.dumps({f"{n}": v for n, v in sorted(shown.items())}, indent=1))
    draw(scrapes, args.output)
    print(f"{len(scrapes)} scrapes drawn into {args.output}")


if __name__ == "__main__":
    main()
