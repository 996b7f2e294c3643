// One long `call_codex` with wait_for_result through the official TypeScript MCP SDK client, with
// its default request timeout (60 s) reset by progress notifications (test_mcp_serve_e2e.py).
// Usage: node ts_long_job_client.mjs SDK_DIR '{"command":..,"args":[..],"env":{..}}' PROMPT
// Prints one JSON object: the record, the progress notifications seen, the call's error if any.
import path from "node:path";
import { pathToFileURL } from "node:url";

const [sdkDir, launchJson, prompt] = process.argv.slice(2);
const sdk = (sub) => import(pathToFileURL(path.join(sdkDir, "node_modules/@modelcontextprotocol/sdk/dist/esm", sub)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");

const launch = JSON.parse(launchJson);
const transport = new StdioClientTransport({ command: launch.command, args: launch.args, env: launch.env, stderr: "pipe" });
const client = new Client({ name: "ts-long-job", version: "1.0.0" });
const out = { progress: [] };
await client.connect(transport);
try {
  const result = await client.callTool(
    { name: "call_codex", arguments: { prompt, wait_for_result: true } },
    undefined,
    { onprogress: (update) => out.progress.push(update), resetTimeoutOnProgress: true },
  );
  out.record = result.structuredContent;
} catch (error) {
  out.error = String(error);
}
await client.close();
console.log(JSON.stringify(out));
