#!/usr/bin/env bash
# Install a pinned npm package from the npm registry into its own folder (ignored by git) and print
# that folder. usage: scripts/install-npm-pinned.sh NAME, with NAME one of:
#   mcp-sdk-js     the official TypeScript MCP SDK, into .mcp-sdk-js/ (tests/mcp/test_conformance_clients.py)
#   mcp-inspector  the MCP Inspector (its CLI, `mcp-inspector --cli`), into .mcp-inspector/
#                  (tests/agent/test_mcp_serve_e2e.py)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
case "${1:-}" in
  mcp-sdk-js) package=@modelcontextprotocol/sdk version=1.32.2 ;;
  mcp-inspector) package=@modelcontextprotocol/inspector version=2.12.0 ;;
  *)
    echo "usage: $0 mcp-sdk-js|mcp-inspector (the pinned npm package to install)" >&2
    exit 2
    ;;
esac
dir="$root/.$1"
manifest="$dir/node_modules/$package/package.json"
if [ ! -f "$manifest" ] || ! grep -q "\"version\": \"$version\"" "$manifest"; then
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "$package@$version" >&2
fi
echo "$dir"
