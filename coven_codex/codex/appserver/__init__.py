"""Where a Codex process lives: the shared ``codex app-server`` processes and their wire.

:mod:`~coven_codex.codex.appserver.pool` keeps a small pool of app-server processes for one
CODEX_HOME; :mod:`~coven_codex.codex.appserver.connection` is one of them: the process, the
JSON-RPC wire and the routing of messages by thread. A conversation lives elsewhere: in its
session (:mod:`coven_codex.conversation.session`) and its thread's driver
(:mod:`coven_codex.codex.drivers.app_server`), which attaches to a connection while it is open.
This package imports nothing of the drivers: what both use (settings, process exits, the task runner)
is in :mod:`coven_codex.codex.driver_settings`, :mod:`coven_codex.codex.errors` and
:mod:`coven_codex.codex.tasks`.
"""

from coven_codex.codex.appserver.connection import AppServerConnection, ThreadClient
from coven_codex.codex.appserver.pool import AppServerPool, raise_fd_limit
from coven_codex.jsonrpc import RpcError

__all__ = ["AppServerConnection", "AppServerPool", "RpcError", "ThreadClient", "raise_fd_limit"]
