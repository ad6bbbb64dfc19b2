// Round trips against `sbox mcp --provider local` with the official MCP TypeScript SDK clients,
// over stdio and over streamable HTTP (`--http 127.0.0.1:0`), in both protocol eras:
//
// - protocol 2025-11-25 with the 1.x SDK (`@modelcontextprotocol/sdk`): `initialize`, then a
//   session (over HTTP an `Mcp-Session-Id`, one tool state per session);
// - protocol 2026-07-28 with `@modelcontextprotocol/client` 2.x pinned to that revision: the
//   connect-time `server/discover` must offer it, then stateless requests carrying the
//   protocol version in `_meta`, no session.
//
// Each round trip lists the tools, calls run / write / str_replace / read / apply_patch, runs
// code whose displayed PNG must come back as an image content block, and checks a failure
// comes back as a tool result with isError. Over HTTP, the client sends the
// server's bearer token (from a private `--token-file`) in `requestInit.headers`, and a client
// without it (or with another) is refused in either era. Exits non-zero on any failure.
//
// Usage: node check.mjs [path/to/sbox]   (default: $SBOX_BIN, else ../../target/debug/sbox)

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  Client as ModernClient,
  StreamableHTTPClientTransport as ModernHttpTransport,
} from "@modelcontextprotocol/client";
import { StdioClientTransport as ModernStdioTransport } from "@modelcontextprotocol/client/stdio";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const sbox = resolve(process.argv[2] ?? process.env.SBOX_BIN ?? join(here, "../../target/debug/sbox"));
const root = mkdtempSync(join(tmpdir(), "sbox-mcp-client-"));
const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", SBOX_LOCAL_ROOT: join(root, "root") };
// The HTTP server's token, in a file only this user can read, as sbox requires.
const token = randomBytes(32).toString("hex");
const tokenFile = join(root, "token");
writeFileSync(tokenFile, `${token}\n`, { mode: 0o600 });

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

function newClient() {
  return new Client({ name: "sbox-mcp-client-check", version: "0.0.0" });
}

// The protocol revision the 2.x client is pinned to: it connects with `server/discover` and
// fails unless the server offers exactly this one.
const MODERN = "2026-07-28";

function newModernClient() {
  return new ModernClient(
    { name: "sbox-mcp-client-check", version: "0.0.0" },
    { versionNegotiation: { mode: { pin: MODERN } } },
  );
}

// A 1x1 PNG, which a cell displays through an object's `_repr_png_`.
const PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

async function ok(client, name, args) {
  const result = await client.callTool({ name, arguments: args });
  assert.notEqual(result.isError, true, `${name} failed: ${JSON.stringify(result)}`);
  return result;
}

// The round trip every transport must pass; `label` names the transport in each step. With
// `explicit`, every call after the create names its sandbox (requests without a session have no
// current sandbox).
async function roundTrip(label, client, { explicit = false } = {}) {
  let target = {};
  await step(`${label}: the server names itself and offers tools`, async () => {
    assert.equal(client.getServerVersion()?.name, "sbox");
    assert.ok(client.getServerCapabilities()?.tools);
  });
  await step(`${label}: tools/list offers the tools with schemas and annotations`, async () => {
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
  await step(`${label}: create a sandbox`, async () => {
    const r = await ok(client, "sandbox_create_v1", { idempotency_key: `node-client-${label}` });
    assert.equal(typeof r.structuredContent.sandbox_id, "string");
    if (explicit) target = { sandbox_id: r.structuredContent.sandbox_id };
  });
  await step(`${label}: run keeps stdout, stderr and the exit code apart`, async () => {
    const r = await ok(client, "sandbox_run_v1", { ...target, command: "echo out; echo err >&2; exit 3" });
    assert.equal(r.structuredContent.exit_code, 3);
    assert.equal(r.structuredContent.stdout.text, "out\n");
    assert.equal(r.structuredContent.stderr.text, "err\n");
  });
  await step(`${label}: write, str_replace, read`, async () => {
    await ok(client, "sandbox_file_write_v1", { ...target, path: "app.py", content: "print('hi')\nx = 1\n" });
    await ok(client, "sandbox_editor_v1", { ...target, command: "str_replace", path: "app.py", old_str: "x = 1", new_str: "x = 2" });
    const r = await ok(client, "sandbox_file_read_v1", { ...target, path: "app.py" });
    assert.equal(r.content[0].text, "print('hi')\nx = 2\n");
  });
  await step(`${label}: apply_patch updates and adds files`, async () => {
    const patch = "*** Begin Patch\n*** Update File: app.py\n@@\n-x = 2\n+x = 3\n*** Add File: notes.md\n+# notes\n*** End Patch";
    await ok(client, "sandbox_apply_patch_v1", { ...target, patch });
    const r = await ok(client, "sandbox_file_read_v1", { ...target, path: "app.py" });
    assert.equal(r.content[0].text, "print('hi')\nx = 3\n");
    const n = await ok(client, "sandbox_run_v1", { ...target, command: "cat notes.md" });
    assert.equal(n.structuredContent.stdout.text, "# notes\n");
  });
  await step(`${label}: run_code keeps state and returns a displayed PNG as an image block`, async () => {
    const { tools } = await client.listTools();
    assert.ok(tools.some((t) => t.name === "sandbox_run_code_v1"), "sandbox_run_code_v1 not listed");
    await ok(client, "sandbox_run_code_v1", { ...target, code: "x = 41" });
    const code = [
      "import base64",
      "class Dot:",
      `    def _repr_png_(self): return base64.b64decode('${PNG_1X1}')`,
      "display(Dot())",
      "x + 1",
    ].join("\n");
    const r = await ok(client, "sandbox_run_code_v1", { ...target, code });
    assert.equal(r.content[0].type, "text");
    assert.match(r.content[0].text, /\n42\n/);
    const images = r.content.filter((c) => c.type === "image");
    assert.equal(images.length, 1, JSON.stringify(r.content));
    assert.equal(images[0].mimeType, "image/png");
    assert.equal(images[0].data, PNG_1X1);
  });
  await step(`${label}: a failing call is a tool result with isError`, async () => {
    const r = await client.callTool({
      name: "sandbox_editor_v1",
      arguments: { ...target, command: "str_replace", path: "none.txt", old_str: "a", new_str: "b" },
    });
    assert.equal(r.isError, true);
    assert.equal(r.structuredContent.error.kind, "not_found");
  });
}

// A streamable HTTP transport to `url` that sends `bearer` (if any) as the bearer token, the way
// an MCP client configuration's headers do.
function httpTransport(url, bearer) {
  const requestInit = bearer ? { headers: { Authorization: `Bearer ${bearer}` } } : undefined;
  return new StreamableHTTPClientTransport(new URL(url), { requestInit });
}

// Starts `sbox mcp --http 127.0.0.1:0 --token-file ...` and resolves with the child and the
// URL it prints.
function startHttpServer() {
  const args = ["mcp", "--provider", "local", "--http", "127.0.0.1:0", "--token-file", tokenFile];
  const child = spawn(sbox, args, {
    env,
    stdio: ["ignore", "pipe", "inherit"],
  });
  return new Promise((resolveUrl, reject) => {
    child.on("error", reject);
    child.on("exit", (code) => reject(new Error(`sbox mcp --http exited (${code}) before printing its URL`)));
    createInterface({ input: child.stdout }).once("line", (line) => resolveUrl({ child, url: line.trim() }));
  });
}

async function overStdio() {
  const client = newClient();
  try {
    await client.connect(new StdioClientTransport({ command: sbox, args: ["mcp", "--provider", "local"], env, stderr: "inherit" }));
    await roundTrip("stdio", client);
  } catch (error) {
    failed += 1;
    console.log(`not ok - stdio session: ${error?.stack ?? error}`);
  } finally {
    await client.close().catch(() => {});
  }
}

async function overHttp() {
  let server;
  const first = newClient();
  const second = newClient();
  try {
    server = await startHttpServer();
    assert.match(server.url, /^http:\/\/127\.0\.0\.1:\d+\/mcp$/);
    await step("http: a client without the token, or with another, is refused with 401", async () => {
      for (const bearer of [undefined, randomBytes(32).toString("hex")]) {
        const outsider = newClient();
        await assert.rejects(outsider.connect(httpTransport(server.url, bearer)), (error) => {
          assert.equal(error.code, 401, String(error));
          return true;
        });
        await outsider.close().catch(() => {});
      }
    });
    const transport = httpTransport(server.url, token);
    await first.connect(transport);
    await step("http: the server gave the client a session", async () => {
      assert.equal(typeof transport.sessionId, "string");
    });
    await roundTrip("http", first);
    await step("http: a second client is a second session, with no current sandbox of its own yet", async () => {
      await second.connect(httpTransport(server.url, token));
      const r = await second.callTool({ name: "sandbox_run_v1", arguments: { command: "true" } });
      assert.equal(r.isError, true, JSON.stringify(r));
      assert.match(r.content[0].text, /no current sandbox/);
      // The first session still works on its own sandbox.
      const again = await ok(first, "sandbox_run_v1", { command: "cat notes.md" });
      assert.equal(again.structuredContent.stdout.text, "# notes\n");
    });
  } catch (error) {
    failed += 1;
    console.log(`not ok - http session: ${error?.stack ?? error}`);
  } finally {
    await first.close().catch(() => {});
    await second.close().catch(() => {});
    server?.child.kill();
  }
}

// Protocol 2026-07-28 over stdio: one process, so one tool state, as a session was.
async function overStdioModern() {
  const client = newModernClient();
  const label = `stdio ${MODERN}`;
  try {
    await client.connect(new ModernStdioTransport({ command: sbox, args: ["mcp", "--provider", "local"], env, stderr: "inherit" }));
    await step(`${label}: server/discover offers ${MODERN} and the client speaks it`, async () => {
      assert.equal(client.getNegotiatedProtocolVersion(), MODERN);
    });
    await roundTrip(label, client);
  } catch (error) {
    failed += 1;
    console.log(`not ok - ${label}: ${error?.stack ?? error}`);
  } finally {
    await client.close().catch(() => {});
  }
}

// Protocol 2026-07-28 over HTTP: stateless requests, the same bearer token.
async function overHttpModern() {
  let server;
  const client = newModernClient();
  const label = `http ${MODERN}`;
  try {
    server = await startHttpServer();
    await step(`${label}: a client without the token, or with another, is refused`, async () => {
      for (const bearer of [undefined, randomBytes(32).toString("hex")]) {
        const outsider = newModernClient();
        const headers = bearer ? { Authorization: `Bearer ${bearer}` } : undefined;
        await assert.rejects(
          outsider.connect(new ModernHttpTransport(new URL(server.url), { requestInit: { headers } })),
          (error) => {
            assert.match(String(error), /401|authoriz/i, String(error));
            return true;
          },
        );
        await outsider.close().catch(() => {});
      }
    });
    const transport = new ModernHttpTransport(new URL(server.url), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    });
    await client.connect(transport);
    await step(`${label}: server/discover offers ${MODERN}; no session is made`, async () => {
      assert.equal(client.getNegotiatedProtocolVersion(), MODERN);
      assert.equal(transport.sessionId, undefined);
    });
    await roundTrip(label, client, { explicit: true });
    await step(`${label}: without a session there is no current sandbox: a call names its own`, async () => {
      const r = await client.callTool({ name: "sandbox_run_v1", arguments: { command: "true" } });
      assert.equal(r.isError, true, JSON.stringify(r));
      assert.match(r.content[0].text, /sandbox_id is required/);
    });
  } catch (error) {
    failed += 1;
    console.log(`not ok - ${label}: ${error?.stack ?? error}`);
  } finally {
    await client.close().catch(() => {});
    server?.child.kill();
  }
}

await overStdio();
await overHttp();
await overStdioModern();
await overHttpModern();
rmSync(root, { recursive: true, force: true });

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);
