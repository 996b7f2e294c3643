"""``coven-codex job``: submit Codex jobs through the journal and follow them (docs/jobs.md).

``submit`` appends a thought for the new conversation ``job:<id>`` and prints the id (or, with
``--wait``, waits for the end and prints the record); ``status``, ``list`` and ``result`` derive
records from the journal; ``cancel`` appends a ``cancel``. A running daemon on the same journal
does the work.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from coven_codex.jobs.client import (
    CLI_WORDING,
    JobRequest,
    JobUsageError,
    cancel,
    check_journal,
    find,
    make_spec,
    open_journal,
    submit,
    wait,
)
from coven_codex.jobs.records import JOB_STATES, JobRecord, read_jobs

HELP = "submit Codex jobs through the journal and follow them (submit, status, list, cancel, result)"

EXIT_FAILED = 1
"""``submit --wait`` / ``result``: the job ended but did not succeed."""
EXIT_USAGE = 2
EXIT_NOT_DONE = 3
"""``submit --wait`` gave up waiting: the job is still queued or running."""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``job``'s subcommands (each with ``--journal``) to ``parser``."""
    actions = parser.add_subparsers(dest="job_command", metavar="ACTION", required=True)

    def action(name: str, text: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=text, description=text)
        sub.add_argument("--journal", type=Path, required=True, help="the journal the daemon follows")
        return sub

    sub = action("submit", "queue a job; prints its id (or, with --wait, its record once it is over)")
    sub.add_argument("--prompt", required=True, help="what Codex is asked to do")
    sub.add_argument("--cwd", help="the directory Codex works in (inside the daemon's workspace or workspace_roots)")
    sub.add_argument("--model", help="the model (default: Codex's configured one)")
    group = sub.add_mutually_exclusive_group()
    group.add_argument("--resume", metavar="THREAD_ID", help="continue this very Codex thread (the job takes it over)")
    group.add_argument(
        "--fork", metavar="THREAD_ID", help="start a new Codex thread from this thread's history (a copy of it)"
    )
    group.add_argument(
        "--continue-latest", action="store_true", help="continue the thread of the newest job (in the same --cwd)"
    )
    sub.add_argument("--timeout", type=float, help="seconds the job may run (at most the daemon's turn_timeout)")
    sub.add_argument(
        "--no-continue",
        action="store_true",
        help="never continue this job after a daemon or Codex death cut its turn short (it fails instead)",
    )
    sub.add_argument(
        "--check",
        action="append",
        default=[],
        metavar="CMD",
        help="a shell command run in the job's cwd after each attempt; exit status 0 passes (repeatable)",
    )
    sub.add_argument("--require-diff", action="store_true", help="a gate: the git work tree must have changes")
    sub.add_argument(
        "--no-conflict-markers", action="store_true", help="a gate: no file may hold a merge conflict marker"
    )
    sub.add_argument("--judge", action="store_true", help="after the gates pass, a judge turn gives a JSON verdict")
    sub.add_argument("--max-attempts", type=int, default=3, metavar="N", help="attempts at most (default 3)")
    sub.add_argument("--check-timeout", type=float, default=600.0, metavar="S", help="seconds each check may run")
    sub.add_argument(
        "--notify", metavar="CONVERSATION", help="a chat conversation told of the job's success or hard failure"
    )
    sub.add_argument("--wait", action="store_true", help="wait until the job is over")
    sub.add_argument("--json", action="store_true", help="print JSON (with --wait: the whole record)")
    sub = action("status", "show a job's state")
    sub.add_argument("id", help="the job id")
    sub.add_argument("--json", action="store_true", help="print the record as JSON")
    sub = action("list", "list the jobs in the journal")
    sub.add_argument("--state", choices=JOB_STATES, help="only jobs in this state")
    sub.add_argument("--json", action="store_true", help="print the records as JSON, one per line")
    sub = action("cancel", "cancel a job (a running one is interrupted, a queued one never starts)")
    sub.add_argument("id", help="the job id")
    sub = action("result", "show a finished job's final message (or, with --json, its record)")
    sub.add_argument("id", help="the job id")
    sub.add_argument("--events", action="store_true", help="include the job's event stream")
    sub.add_argument("--json", action="store_true", help="print the record as JSON")


def execute(args: argparse.Namespace) -> int:
    """Run ``coven-codex job ACTION``; the exit code (2 for a request to fix)."""
    try:
        check_journal(args.journal)
        return asyncio.run(_run(args))
    except JobUsageError as exc:
        print(f"coven-codex job {args.job_command}: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _line(job: JobRecord) -> str:
    extra = f" thread {job.thread_id}" if job.thread_id else ""
    if len(job.attempts) > 1:
        extra += f" attempts {len(job.attempts)}"
    if job.error is not None and job.done:
        extra += f" ({job.error.code}: {job.error.message})"
    return f"{job.id} {job.state}{extra}"


def _show(job: JobRecord, as_json: bool) -> None:
    if as_json:
        print(job.model_dump_json(exclude_none=False))
    else:
        print(_line(job))


async def _run(args: argparse.Namespace) -> int:
    journal = open_journal(args.journal)
    try:
        command = args.job_command
        if command == "submit":
            request = JobRequest(
                prompt=args.prompt,
                cwd=args.cwd,
                model=args.model,
                resume_thread=args.resume,
                fork_thread=args.fork,
                continue_latest=args.continue_latest,
                timeout=args.timeout,
                spec=make_spec(
                    CLI_WORDING,
                    continue_after_restart=not args.no_continue,
                    checks=args.check,
                    require_diff=args.require_diff,
                    no_conflict_markers=args.no_conflict_markers,
                    judge=args.judge,
                    max_attempts=args.max_attempts,
                    check_timeout=args.check_timeout,
                    notify=args.notify,
                ),
            )
            job_id = await submit(journal, request)
            if not args.wait:
                print(f'{{"id": "{job_id}"}}' if args.json else job_id)
                return 0
            job = await wait(journal, job_id)
            _show(job, args.json)
            if not job.done:
                print(
                    f"coven-codex job submit: job {job_id} is still {job.state}; follow it with `job status`",
                    file=sys.stderr,
                )
                return EXIT_NOT_DONE
            return 0 if job.state == "succeeded" else EXIT_FAILED
        if command == "status":
            _show(await find(journal, args.id), args.json)
            return 0
        if command == "list":
            for job in (await read_jobs(journal)).jobs.values():
                if args.state is None or job.state == args.state:
                    _show(job, args.json)
            return 0
        if command == "cancel":
            job = await cancel(journal, args.id)
            if job.done:
                print(f"job {job.id} is already over ({job.state}); nothing to cancel")
            else:
                print(f"job {job.id}: cancel requested")
            return 0
        job = await find(journal, args.id, events=args.events)
        if args.json:
            _show(job, True)
        elif not job.done:
            print(f"job {job.id} is still {job.state}; no result yet")
            return EXIT_NOT_DONE
        else:
            if args.events:
                for event in job.events or []:
                    print(f"[{event.kind}{'/' + event.state if event.state else ''}] {event.text}")
            if job.final_message is not None:
                print(job.final_message)
            if job.error is not None:
                print(f"{job.state}: {job.error.code}: {job.error.message}\nhint: {job.error.hint}", file=sys.stderr)
        return 0 if job.state == "succeeded" else (EXIT_FAILED if job.done else EXIT_NOT_DONE)
    finally:
        await journal.aclose()
