// Preloaded into the conformance CLI (`node --import ./bearer.mjs ...`, as `cargo xtask
// mcp-check` runs it): every HTTP request the CLI makes to the `sbox mcp --http` under test
// carries `Authorization: Bearer <token>`, and no other header changes. The CLI has no option
// for request headers, and sbox requires the token on every request.
//
// Both ways the CLI sends requests go through undici's global dispatcher: Node's `fetch` (the
// MCP SDK client) and undici's `request` (its raw checks, such as DNS rebinding, which sets its
// own Host and Origin). The token is added only for requests to the server's own origin.
//
// Environment: SBOX_MCP_URL (the endpoint sbox printed), SBOX_MCP_TOKEN_FILE (the file given
// to sbox's --token-file).

import { readFileSync } from "node:fs";
import { getGlobalDispatcher, setGlobalDispatcher } from "undici";

const url = process.env.SBOX_MCP_URL;
const tokenFile = process.env.SBOX_MCP_TOKEN_FILE;
if (!url || !tokenFile) {
  throw new Error("bearer.mjs needs SBOX_MCP_URL and SBOX_MCP_TOKEN_FILE");
}
const server = new URL(url).origin;
const authorization = `Bearer ${readFileSync(tokenFile, "utf8").trim()}`;

// The request's headers as one object, in any of the shapes undici accepts, with ours added.
function withAuthorization(headers) {
  const out = {};
  const put = (name, value) => {
    if (String(name).toLowerCase() !== "authorization") out[name] = value;
  };
  if (headers == null) {
    // none
  } else if (Array.isArray(headers)) {
    if (headers.length > 0 && Array.isArray(headers[0])) {
      for (const [name, value] of headers) put(name, value);
    } else {
      for (let i = 0; i + 1 < headers.length; i += 2) put(headers[i], headers[i + 1]);
    }
  } else if (typeof headers[Symbol.iterator] === "function") {
    for (const [name, value] of headers) put(name, value);
  } else {
    for (const [name, value] of Object.entries(headers)) put(name, value);
  }
  out.authorization = authorization;
  return out;
}

setGlobalDispatcher(
  getGlobalDispatcher().compose((dispatch) => (options, handler) => {
    const origin = options.origin == null ? null : new URL(String(options.origin)).origin;
    if (origin === server) {
      options = { ...options, headers: withAuthorization(options.headers) };
    }
    return dispatch(options, handler);
  }),
);
