// Round trip against `sbox mcp --provider local` with the official MCP TypeScript SDK client:
// initialize, list the tools, call run / write / str_replace / read / apply_patch, and check a
// failure comes back as a tool result with isError. Exits non-zero on any failure.
//
// Usage: node check.mjs [path/to/sbox]   (default: $SBOX_BIN, else ../../target/debug/sbox)

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const sbox = resolve(process.argv[2] ?? process.env.SBOX_BIN ?? join(here, "../../target/debug/sbox"));
const root = mkdtempSync(join(tmpdir(), "sbox-mcp-client-"));

const transport = new StdioClientTransport({
  command: sbox,
  args: ["mcp", "--provider", "local"],
  env: { PATH: process.env.PATH ?? "/usr/bin:/bin", SBOX_LOCAL_ROOT: join(root, "root") },
  stderr: "inherit",
});
const client = new Client({ name: "sbox-mcp-client-check", version: "0.0.0" });

let passed = 0;
let failed = 0;
async function step(name, body) {
  try {
    await body();
    passed += 1;
    console.log(`ok - ${name}`);
  } catch (error) {
    failed += 1;
    console.log(`not ok - ${name}: ${error?.stack ?? error}`);
  }
}

async function ok(name, args) {
  const result = await client.callTool({ name, arguments: args });
  assert.notEqual(result.isError, true, `${name} failed: ${JSON.stringify(result)}`);
  return result;
}

try {
  await client.connect(transport);
  await step("initialize names the server and offers tools", async () => {
    assert.equal(client.getServerVersion()?.name, "sbox");
    assert.ok(client.getServerCapabilities()?.tools);
  });
  await step("tools/list offers the tools with schemas and annotations", async () => {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name);
    for (const want of ["sandbox_create_v1", "sandbox_run_v1", "sandbox_file_write_v1",
      "sandbox_editor_v1", "sandbox_file_read_v1", "sandbox_apply_patch_v1"]) {
      assert.ok(names.includes(want), `${want} missing from ${names}`);
    }
    for (const tool of tools) {
      assert.equal(tool.inputSchema.type, "object", tool.name);
      assert.ok(tool.description, tool.name);
    }
    assert.equal(tools.find((t) => t.name === "sandbox_run_v1").annotations.destructiveHint, true);
  });
  await step("create a sandbox", async () => {
    const r = await ok("sandbox_create_v1", { idempotency_key: "node-client" });
    assert.equal(typeof r.structuredContent.sandbox_id, "string");
  });
  await step("run keeps stdout, stderr and the exit code apart", async () => {
    const r = await ok("sandbox_run_v1", { command: "echo out; echo err >&2; exit 3" });
    assert.equal(r.structuredContent.exit_code, 3);
    assert.equal(r.structuredContent.stdout.text, "out\n");
    assert.equal(r.structuredContent.stderr.text, "err\n");
  });
  await step("write, str_replace, read", async () => {
    await ok("sandbox_file_write_v1", { path: "app.py", content: "print('hi')\nx = 1\n" });
    await ok("sandbox_editor_v1", { command: "str_replace", path: "app.py", old_str: "x = 1", new_str: "x = 2" });
    const r = await ok("sandbox_file_read_v1", { path: "app.py" });
    assert.equal(r.content[0].text, "print('hi')\nx = 2\n");
  });
  await step("apply_patch updates and adds files", async () => {
    const patch = "*** Begin Patch\n*** Update File: app.py\n@@\n-x = 2\n+x = 3\n*** Add File: notes.md\n+# notes\n*** End Patch";
    await ok("sandbox_apply_patch_v1", { patch });
    const r = await ok("sandbox_file_read_v1", { path: "app.py" });
    assert.equal(r.content[0].text, "print('hi')\nx = 3\n");
    const n = await ok("sandbox_run_v1", { command: "cat notes.md" });
    assert.equal(n.structuredContent.stdout.text, "# notes\n");
  });
  await step("a failing call is a tool result with isError", async () => {
    const r = await client.callTool({
      name: "sandbox_editor_v1",
      arguments: { command: "str_replace", path: "none.txt", old_str: "a", new_str: "b" },
    });
    assert.equal(r.isError, true);
    assert.equal(r.structuredContent.error.kind, "not_found");
  });
} catch (error) {
  failed += 1;
  console.log(`not ok - session: ${error?.stack ?? error}`);
} finally {
  await client.close().catch(() => {});
  rmSync(root, { recursive: true, force: true });
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);
