"""``coven-codex mcp-serve``: the job tools as a stdio MCP server, for any MCP client (docs/jobs.md).

It serves :func:`coven_codex.jobs.mcp_tools.job_tools` with the spell server's MCP session and
connection (no handshake: the client is the process that started it), and talks to the daemon
through the journal. Log lines go to stderr; stdout carries MCP only.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from coven_codex.jobs.client import JobUsageError, check_journal, open_journal
from coven_codex.jobs.mcp_tools import job_tools
from coven_codex.mcp.connection import Connection, ConnectionLimits
from coven_codex.mcp.session import McpSession
from coven_codex.support.stdio import StdioError, stdio_streams

HELP = "serve the job tools (call_codex, call_status, call_jobs, call_cancel) to an MCP client on stdio"


def configure(parser: argparse.ArgumentParser) -> None:
    """``--journal``: the journal the daemon follows."""
    parser.add_argument("--journal", type=Path, required=True, help="the journal the daemon follows")


def execute(args: argparse.Namespace) -> int:
    """Serve until the client closes stdin (0); 2 if the journal cannot serve jobs or there is no stdout."""
    try:
        check_journal(args.journal)
    except JobUsageError as exc:
        print(f"coven-codex mcp-serve: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(args.journal))
    except StdioError as exc:
        print(f"coven-codex mcp-serve: {exc}", file=sys.stderr)
        return 2
    return 0


async def serve(journal_path: Path) -> None:
    """Answer MCP on stdin/stdout (pipes, sockets, terminals or regular files) until stdin ends;
    calls still running then get :class:`ConnectionLimits`' ``eof_grace`` to answer."""
    journal = open_journal(journal_path)
    try:
        async with stdio_streams(limit=2**20) as (reader, writer):
            session = McpSession(job_tools(journal), server_name="coven-codex-jobs", label="mcp-serve")
            await Connection(reader, writer, session, None, ConnectionLimits()).run()
    finally:
        await journal.aclose()
