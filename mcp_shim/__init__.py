"""The coven MCP shim: what Codex launches as its stdio MCP server.

It relays newline-delimited JSON-RPC between its stdin/stdout and the coven daemon's Unix
socket after proving, in a one-line handshake, that this daemon configured it. Standard
library only, so that it starts in milliseconds (run it with ``python -S -m mcp_shim``).
"""

from mcp_shim.wire import SHIM_VERSION as __version__

__all__ = ["__version__"]
