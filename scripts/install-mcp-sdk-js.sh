#!/usr/bin/env bash
# Install the pinned official TypeScript MCP SDK from the npm registry into .mcp-sdk-js/
# (ignored by git) for tests/mcp/test_conformance_clients.py, and print that directory.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version=1.32.2
dir="$root/.mcp-sdk-js"
package="$dir/node_modules/@modelcontextprotocol/sdk/package.json"
if [ ! -f "$package" ] || ! grep -q "\"version\": \"$version\"" "$package"; then
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "@modelcontextprotocol/sdk@$version" >&2
fi
echo "$dir"
