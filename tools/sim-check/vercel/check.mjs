// Drives the official Vercel Sandbox JS SDK (npm `@vercel/sandbox`, pinned in package.json)
// through its documented usage against the Vercel simulator. `cargo xtask sim-check` starts
// the simulator and sets VERCEL_TOKEN, VERCEL_TEAM_ID, VERCEL_PROJECT_ID (the credential triple
// the SDK takes as parameters) and VERCEL_API_URL. The SDK has no base-URL option, so its
// public `fetch` option rewrites its base `https://vercel.com/api` to the simulator's URL.
// Prints one line per check; exits non-zero when any check fails.

import { APIError, Sandbox } from '@vercel/sandbox'

for (const name of ['VERCEL_TOKEN', 'VERCEL_TEAM_ID', 'VERCEL_PROJECT_ID', 'VERCEL_API_URL']) {
  if (!process.env[name]) {
    console.error(`${name} is not set: run this through \`cargo xtask sim-check\``)
    process.exit(2)
  }
}

const BASE = 'https://vercel.com/api'
const target = process.env.VERCEL_API_URL.replace(/\/$/, '')

/** The SDK's requests, sent to the simulator instead of Vercel. */
function simFetch(input, init) {
  const url = typeof input === 'string' ? input : input.url
  if (!url.startsWith(BASE)) throw new Error(`the SDK called ${url}, outside ${BASE}`)
  return fetch(target + url.slice(BASE.length), init)
}

const credentials = {
  token: process.env.VERCEL_TOKEN,
  teamId: process.env.VERCEL_TEAM_ID,
  projectId: process.env.VERCEL_PROJECT_ID,
  fetch: simFetch,
}

let failures = 0
let passed = 0

async function check(name, fn) {
  try {
    await fn()
    passed++
    console.log(`ok   ${name}`)
  } catch (e) {
    failures++
    console.log(`FAIL ${name}: ${e?.stack ?? e}${e?.json ? ` ${JSON.stringify(e.json)}` : ''}`)
  }
}

function assert(condition, message) {
  if (!condition) throw new Error(message)
}

/** `value` with every object's keys sorted, so maps compare by content. */
function sorted(value) {
  if (Array.isArray(value)) return value.map(sorted)
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.keys(value).sort().map((k) => [k, sorted(value[k])]))
  }
  return value
}

function equal(actual, expected, what) {
  const a = JSON.stringify(sorted(actual))
  const b = JSON.stringify(sorted(expected))
  assert(a === b, `${what}: got ${a}, expected ${b}`)
}

/** The APIError `promise` rejects with, checked for `status`. */
async function rejectsWith(promise, status, what) {
  try {
    await promise
  } catch (e) {
    assert(e instanceof APIError, `${what}: expected an APIError, got ${e?.constructor?.name}: ${e?.message}`)
    equal(e.response.status, status, `${what}: status`)
    return e
  }
  throw new Error(`${what}: expected an APIError ${status}, but it succeeded`)
}

const run = `r${Date.now().toString(36)}`
const name = `sim-check-${run}`
let sbx
let second

await check('create (v2, runtime) with name, ports, env, tags and timeout', async () => {
  sbx = await Sandbox.create({
    ...credentials,
    name,
    runtime: 'node24',
    ports: [3000],
    env: { GREETING: 'hello', SHADOWED: 'sandbox' },
    tags: { suite: 'sim-check', run },
    timeout: 120_000,
  })
  equal(sbx.name, name, 'name')
  equal(sbx.persistent, true, 'persistent by default')
  equal(sbx.status, 'running', 'status')
  equal(sbx.runtime, 'node24', 'runtime')
  equal(sbx.tags, { suite: 'sim-check', run }, 'tags')
  equal(sbx.cwd, '/vercel/sandbox', 'cwd')
  const domain = sbx.domain(3000)
  assert(/^https:\/\/[a-z0-9-]+\.vercel\.run$/.test(domain), `domain(3000) is ${domain}`)
  let threw = false
  try {
    sbx.domain(4000)
  } catch {
    threw = true
  }
  assert(threw, 'domain() of an undeclared port throws')
})

await check('create (v3, no runtime) with a name the server makes', async () => {
  second = await Sandbox.create({ ...credentials, tags: { suite: 'sim-check', run } })
  assert(/^[A-Za-z0-9_-]{1,128}$/.test(second.name), `generated name ${second.name}`)
  assert(second.name !== name, 'a name of its own')
  assert(second.image, 'a v3 sandbox shows its image')
})

await check('a duplicate name is a 400 that names the conflict', async () => {
  const e = await rejectsWith(Sandbox.create({ ...credentials, name, runtime: 'node24' }), 400, 'duplicate create')
  equal(e.json?.error?.code, 'bad_request', 'code')
  assert(/already exists/.test(e.json?.error?.message ?? ''), `message: ${e.json?.error?.message}`)
})

await check('runCommand: exit codes', async () => {
  const ok = await sbx.runCommand('sh', ['-c', 'exit 0'])
  equal(ok.exitCode, 0, 'exit 0')
  const three = await sbx.runCommand('sh', ['-c', 'exit 3'])
  equal(three.exitCode, 3, 'exit 3')
  const missing = await sbx.runCommand('no-such-program-here')
  equal(missing.exitCode, 127, 'a missing program')
})

await check('runCommand: stdout and stderr apart', async () => {
  const out = await sbx.runCommand('sh', ['-c', 'printf out; printf err >&2; printf more'])
  equal(await out.stdout(), 'outmore', 'stdout')
  equal(await out.stderr(), 'err', 'stderr')
  equal(out.exitCode, 0, 'exit')
})

await check('runCommand: the sandbox env, overridden per command', async () => {
  const out = await sbx.runCommand({
    cmd: 'sh',
    args: ['-c', 'printf "%s %s %s" "$GREETING" "$SHADOWED" "$ONLY_HERE"'],
    env: { SHADOWED: 'command', ONLY_HERE: 'yes' },
  })
  equal(await out.stdout(), 'hello command yes', 'env')
})

await check('mkDir, then runCommand with a relative and an absolute cwd', async () => {
  await sbx.mkDir('work/sub')
  await sbx.runCommand({ cmd: 'sh', args: ['-c', 'echo here > marker'], cwd: 'work/sub' })
  const rel = await sbx.readFileToBuffer({ path: 'work/sub/marker' })
  equal(rel?.toString(), 'here\n', 'a file written in a relative cwd')
  const abs = await sbx.runCommand({ cmd: 'cat', args: ['marker'], cwd: '/vercel/sandbox/work/sub' })
  equal(await abs.stdout(), 'here\n', 'read in an absolute cwd')
})

await check('detached command: wait, exit code, output', async () => {
  const cmd = await sbx.runCommand({
    cmd: 'sh',
    args: ['-c', 'sleep 0.3; echo done; echo warn >&2; exit 4'],
    detached: true,
  })
  assert(cmd.cmdId, 'a command id')
  equal(cmd.exitCode, null, 'no exit code yet')
  const finished = await cmd.wait()
  equal(finished.exitCode, 4, 'exit code')
  equal(await finished.stdout(), 'done\n', 'stdout')
  equal(await finished.stderr(), 'warn\n', 'stderr')
  const again = await sbx.getCommand(cmd.cmdId)
  equal(again.exitCode, 4, 'getCommand after the end')
})

await check('logs stream while the command runs', async () => {
  const cmd = await sbx.runCommand({
    cmd: 'sh',
    args: ['-c', 'for i in 1 2 3; do echo line$i; sleep 0.1; done; echo oops >&2'],
    detached: true,
  })
  const seen = []
  for await (const log of cmd.logs()) seen.push(`${log.stream}:${log.data}`)
  equal(seen.join(''), 'stdout:line1\nstdout:line2\nstdout:line3\nstderr:oops\n', 'log lines')
  equal((await cmd.wait()).exitCode, 0, 'exit')
})

await check('kill: SIGTERM by default, SIGKILL by name', async () => {
  const term = await sbx.runCommand({ cmd: 'sleep', args: ['30'], detached: true })
  await term.kill()
  equal((await term.wait()).exitCode, 143, 'exit after SIGTERM')
  const kill = await sbx.runCommand({ cmd: 'sleep', args: ['30'], detached: true })
  await kill.kill('SIGKILL')
  equal((await kill.wait()).exitCode, 137, 'exit after SIGKILL')
})

await check('a command timeout kills it (exit 137)', async () => {
  const out = await sbx.runCommand({ cmd: 'sleep', args: ['30'], timeoutMs: 300 })
  equal(out.exitCode, 137, 'exit')
})

await check('writeFiles and readFileToBuffer: relative, absolute, binary, modes', async () => {
  const binary = Buffer.from(Array.from({ length: 256 }, (_, i) => i))
  await sbx.writeFiles([
    { path: 'files/hello.txt', content: Buffer.from('hello world') },
    { path: '/tmp/sim-check/data.bin', content: binary },
    { path: 'files/run.sh', content: Buffer.from('#!/bin/sh\necho ran\n'), mode: 0o755 },
  ])
  equal((await sbx.readFileToBuffer({ path: 'files/hello.txt' }))?.toString(), 'hello world', 'relative')
  const abs = await sbx.readFileToBuffer({ path: '/vercel/sandbox/files/hello.txt' })
  equal(abs?.toString(), 'hello world', 'the same file by its absolute path')
  const back = await sbx.readFileToBuffer({ path: '/tmp/sim-check/data.bin' })
  assert(back && Buffer.compare(back, binary) === 0, 'binary round trip')
  const ran = await sbx.runCommand('./files/run.sh')
  equal(await ran.stdout(), 'ran\n', 'the mode made it executable')
  const stream = await sbx.readFile({ path: 'files/hello.txt' })
  let text = ''
  for await (const chunk of stream) text += chunk
  equal(text, 'hello world', 'readFile streams')
})

await check('reading a missing file is null', async () => {
  equal(await sbx.readFileToBuffer({ path: 'no/such/file' }), null, 'missing')
  equal(await sbx.readFile({ path: '/nowhere/at/all' }), null, 'missing absolute')
})

await check('list: by tag, paged, and every sandbox', async () => {
  const tagged = await Sandbox.list({ ...credentials, tags: { run }, limit: 1 })
  equal(tagged.sandboxes.length, 1, 'first page')
  assert(tagged.pagination.next, 'a next cursor')
  const all = await tagged.toArray()
  equal(all.map((s) => s.name).sort(), [name, second.name].sort(), 'every page')
  const none = await Sandbox.list({ ...credentials, tags: { run: 'no-such-run' } })
  equal(none.sandboxes.length, 0, 'no match')
  const byName = await Sandbox.list({ ...credentials, sortBy: 'name', namePrefix: name })
  equal(byName.sandboxes.map((s) => s.name), [name], 'namePrefix')
})

await check('get by name (no resume) sees the same session', async () => {
  const got = await Sandbox.get({ ...credentials, name })
  equal(got.name, name, 'name')
  equal(got.status, 'running', 'status')
  assert(got.currentSession().sessionId, 'a session id')
  equal(got.currentSession().sessionId, sbx.currentSession().sessionId, 'session')
  const out = await got.runCommand('cat', ['files/hello.txt'])
  equal(await out.stdout(), 'hello world', 'its files')
})

await check('extendTimeout adds to the session timeout', async () => {
  const before = sbx.currentSession().timeout
  await sbx.extendTimeout(60_000)
  equal(sbx.currentSession().timeout, before + 60_000, 'timeout')
})

await check('stop, then a command resumes a new session with the disk kept', async () => {
  const session = sbx.currentSession().sessionId
  const stopped = await sbx.stop()
  assert(['stopping', 'stopped'].includes(stopped.status), `status after stop: ${stopped.status}`)
  for (let i = 0; i < 100; i++) {
    const seen = await Sandbox.get({ ...credentials, name })
    if (seen.status === 'stopped') break
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
  equal((await Sandbox.get({ ...credentials, name })).status, 'stopped', 'status')
  const out = await sbx.runCommand('cat', ['files/hello.txt'])
  equal(await out.stdout(), 'hello world', 'the disk after resume')
  assert(sbx.currentSession().sessionId !== session, 'a new session')
})

await check('snapshot stops the session; fork starts from it', async () => {
  await sbx.writeFiles([{ path: 'snap.txt', content: Buffer.from('in the snapshot') }])
  const snapshot = await sbx.snapshot()
  assert(/^snap_/.test(snapshot.snapshotId), `snapshot id ${snapshot.snapshotId}`)
  const child = await Sandbox.fork({ ...credentials, sourceSandbox: name, tags: { suite: 'sim-check', run, fork: 'yes' } })
  assert(child.name !== name, 'a new name')
  const read = await child.readFileToBuffer({ path: 'snap.txt' })
  equal(read?.toString(), 'in the snapshot', 'the fork has the snapshot')
  await child.delete()
})

await check('not found: get, and a command of a deleted session', async () => {
  const e = await rejectsWith(Sandbox.get({ ...credentials, name: 'no-such-sandbox' }), 404, 'get missing')
  equal(e.json?.error?.code, 'not_found', 'code')
})

await check('a wrong token is 401', async () => {
  await rejectsWith(Sandbox.get({ ...credentials, token: 'vcp_wrong', name }), 401, 'get with a wrong token')
  await rejectsWith(Sandbox.list({ ...credentials, token: 'vcp_wrong' }), 401, 'list with a wrong token')
})

await check('delete removes the sandboxes', async () => {
  await sbx.delete()
  if (second) await second.delete()
  await rejectsWith(Sandbox.get({ ...credentials, name }), 404, 'get after delete')
  const left = await Sandbox.list({ ...credentials, tags: { run } })
  equal(left.sandboxes.length, 0, 'sandboxes left')
})

console.log(`${passed} passed, ${failures} failed`)
process.exit(failures === 0 ? 0 : 1)
