// Drives `coven-codex mcp-serve` with the official TypeScript MCP SDK client (test_mcp_serve_e2e.py).
// Usage: node ts_jobs_client.mjs SDK_DIR '{"command":..,"args":[..],"env":{..}}'
// Prints one JSON object with what it saw.
import path from "node:path";
import { pathToFileURL } from "node:url";

const [sdkDir, launchJson] = process.argv.slice(2);
const sdk = (sub) => import(pathToFileURL(path.join(sdkDir, "node_modules/@modelcontextprotocol/sdk/dist/esm", sub)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");

const launch = JSON.parse(launchJson);
const transport = new StdioClientTransport({ command: launch.command, args: launch.args, env: launch.env, stderr: "pipe" });
const client = new Client({ name: "ts-jobs", version: "1.0.0" });
const text = (result) => result.content.filter((block) => block.type === "text").map((block) => block.text).join("");
const out = {};

await client.connect(transport);
out.tools = (await client.listTools()).tools.map((tool) => tool.name);
const started = await client.callTool({ name: "call_codex", arguments: { prompt: "hello ts" } });
out.started = started.structuredContent;
let record = out.started;
for (let i = 0; i < 1200 && !["succeeded", "failed", "cancelled", "timed_out"].includes(record.state); i++) {
  await new Promise((resolve) => setTimeout(resolve, 100));
  record = (await client.callTool({ name: "call_status", arguments: { job_id: out.started.id } })).structuredContent;
}
out.done = record;
out.listed = (await client.callTool({ name: "call_jobs", arguments: {} })).structuredContent.jobs.map((job) => job.id);
const bad = await client.callTool({ name: "call_status", arguments: { job_id: 7 } });
out.bad = { isError: bad.isError, text: text(bad) };
await client.close();
console.log(JSON.stringify(out));
