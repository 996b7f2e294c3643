// Drives the coven shim with the official TypeScript MCP SDK client (test_conformance_clients.py).
// Usage: node ts_sdk_client.mjs SDK_DIR '{"command":..,"args":[..],"env":{..}}' SCENARIO
// Prints one JSON object with what the scenario saw.
import path from "node:path";
import { pathToFileURL } from "node:url";

const [sdkDir, launchJson, scenario] = process.argv.slice(2);
const sdk = (sub) => import(pathToFileURL(path.join(sdkDir, "node_modules/@modelcontextprotocol/sdk/dist/esm", sub)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");

const launch = JSON.parse(launchJson);
const transport = new StdioClientTransport({ command: launch.command, args: launch.args, env: launch.env, stderr: "pipe" });
const client = new Client({ name: "ts-conformance", version: "1.0.0" });
const text = (result) => result.content.filter((block) => block.type === "text").map((block) => block.text).join("");
const out = {};

try {
  if (scenario === "wrong_secret") {
    try {
      await client.connect(transport);
      out.connected = true;
    } catch (error) {
      out.error = String(error && error.message);
    }
  } else {
    await client.connect(transport);
    out.serverName = client.getServerVersion().name;
    if (scenario === "basic") {
      const names = [];
      let cursor;
      let pages = 0;
      do {
        const page = await client.listTools(cursor ? { cursor } : {});
        pages += 1;
        names.push(...page.tools.map((tool) => tool.name));
        cursor = page.nextCursor;
      } while (cursor);
      out.pages = pages;
      out.names = names;
      out.add = text(await client.callTool({ name: "add", arguments: { a: 40, b: 2 } }));
      const failed = await client.callTool({ name: "explode", arguments: { message: "ts" } });
      out.explode = { isError: failed.isError, text: text(failed) };
      const loose = await client.callTool({ name: "add", arguments: { a: "2", b: 3 } });
      out.strict = { isError: loose.isError, text: text(loose) };
      // The SDK runs notification handlers a microtask later but answers synchronously, and the
      // answer removes the call's progress handler: progress read in the same chunk as the answer
      // (a loaded machine) never reaches `onprogress`. So what arrived is recorded at the
      // transport, in arrival order with the answer, and `onprogress` must see a prefix of it.
      const arrived = [];
      const deliver = transport.onmessage;
      transport.onmessage = (message, extra) => {
        if (message.method === "notifications/progress") {
          const p = message.params;
          arrived.push([p.progress, p.total ?? null, p.message ?? null]);
        } else if (message.result && arrived.length > 0 && !arrived.answered) {
          arrived.push("answer");
          arrived.answered = true;
        }
        deliver(message, extra);
      };
      const progress = [];
      const done = await client.callTool({ name: "progress", arguments: { steps: 3 } }, undefined, {
        onprogress: (p) => progress.push([p.progress, p.total ?? null, p.message ?? null]),
      });
      transport.onmessage = deliver;
      out.progress = { text: text(done), seen: arrived, delivered: progress };
      const structured = await client.callTool({ name: "stats", arguments: { points: [{ x: 1, y: 2 }] } });
      out.structured = structured.structuredContent;
      try {
        await client.callTool({ name: "no_such_spell", arguments: {} });
        out.unknown = "no error";
      } catch (error) {
        out.unknown = { code: error.code, message: String(error.message) };
      }
      await client.ping();
      out.ping = true;
    } else if (scenario === "abort") {
      const controller = new AbortController();
      const call = client.callTool({ name: "linger", arguments: { tag: "ts-abort" } }, undefined, { signal: controller.signal });
      setTimeout(() => controller.abort("user pressed stop"), 500);
      try {
        await call;
        out.aborted = false;
      } catch (error) {
        out.aborted = true;
      }
      out.after = text(await client.callTool({ name: "add", arguments: { a: 1, b: 1 } }));
    } else if (scenario === "close") {
      client.callTool({ name: "linger", arguments: { tag: "ts-close" } }).catch(() => {});
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  }
} catch (error) {
  out.unexpected = String(error && error.stack);
}
await client.close().catch(() => {});
process.stdout.write(JSON.stringify(out) + "\n");
process.exit(0);
