#!/usr/bin/env bash
# Install the pinned MCP Inspector (its CLI, `mcp-inspector --cli`) from the npm registry into
# .mcp-inspector/ (ignored by git) for tests/agent/test_mcp_serve_e2e.py, and print that directory.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version=2.12.0
dir="$root/.mcp-inspector"
package="$dir/node_modules/@modelcontextprotocol/inspector/package.json"
if [ ! -f "$package" ] || ! grep -q "\"version\": \"$version\"" "$package"; then
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "@modelcontextprotocol/inspector@$version" >&2
fi
echo "$dir"
