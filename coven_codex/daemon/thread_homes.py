"""Where each Codex thread of the daemon lives, for the built-in ``send_file``
(:data:`~coven_codex.attachments.ThreadHomes`).

The spells are served before the daemon runs (Codex's config must name them), so this is handed
the daemon once there is one; until then no conversation holds a thread.
"""

from __future__ import annotations

from pathlib import Path

from coven_codex.attachments import ThreadHome
from coven_codex.daemon.daemon import Daemon


class DaemonThreadHomes:
    """The conversation holding a thread and the thread's working directory, from the daemon's
    conversations: their state names their thread and its directory (set by a ``cwd``, a
    ``/project`` or a take-over), not what the journal's entries suggest."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.daemon: Daemon | None = None
        """Set once the daemon exists (by ``run_daemon``)."""

    def __call__(self, thread_id: str) -> ThreadHome | None:
        manager = self.daemon.manager if self.daemon is not None else None
        found = manager.thread_home(thread_id) if manager is not None else None
        if found is None:
            return None
        conversation, directory = found
        cwd = Path(directory) if directory else self.workspace
        return ThreadHome(conversation, cwd if cwd.is_absolute() else self.workspace / cwd)
