// Starts an MCP server on stdio with the official TypeScript SDK client, lists its tools, calls
// call_jobs and closes the client (which ends the server's stdin), as an MCP host does at the end of
// a session (test_mcp_serve_e2e.py). Usage: node ts_close_client.mjs SDK_DIR '{"command":..,"args":[..]}'
import path from "node:path";
import { pathToFileURL } from "node:url";

const [sdkDir, launchJson] = process.argv.slice(2);
const sdk = (sub) => import(pathToFileURL(path.join(sdkDir, "node_modules/@modelcontextprotocol/sdk/dist/esm", sub)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");

const launch = JSON.parse(launchJson);
const transport = new StdioClientTransport({ command: launch.command, args: launch.args, stderr: "inherit" });
const client = new Client({ name: "ts-close", version: "1.0.0" });
await client.connect(transport);
const tools = (await client.listTools()).tools.map((tool) => tool.name);
const jobs = (await client.callTool({ name: "call_jobs", arguments: {} })).structuredContent;
await client.close();
console.log(JSON.stringify({ tools, jobs }));
