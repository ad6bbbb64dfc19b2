// Drives the official E2B JS SDK (npm `e2b`, pinned in package.json) through its documented
// usage against the E2B simulator. `cargo xtask sim-check` starts the simulator and sets
// E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL (documented SDK environment variables) to point
// the SDK at it. Prints one line per check; exits non-zero when any check fails.

import {
  AuthenticationError,
  CommandExitError,
  FileType,
  NotFoundError,
  Sandbox,
} from 'e2b'
import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'

for (const name of ['E2B_API_KEY', 'E2B_API_URL', 'E2B_SANDBOX_URL']) {
  if (!process.env[name]) {
    console.error(`${name} is not set: run this through \`cargo xtask sim-check\``)
    process.exit(2)
  }
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
    console.log(`FAIL ${name}: ${e?.stack ?? e}`)
  }
}

function assert(condition, message) {
  if (!condition) throw new Error(message)
}

function equal(actual, expected, what) {
  const a = JSON.stringify(actual)
  const b = JSON.stringify(expected)
  assert(a === b, `${what}: got ${a}, expected ${b}`)
}

async function rejects(promise, type, what) {
  try {
    await promise
  } catch (e) {
    assert(e instanceof type, `${what}: expected ${type.name}, got ${e?.constructor?.name}: ${e?.message}`)
    return e
  }
  throw new Error(`${what}: expected ${type.name}, but it succeeded`)
}

/** Waits (bounded) until `condition()` holds. */
async function eventually(condition, what) {
  for (let i = 0; i < 200; i++) {
    if (await condition()) return
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
  throw new Error(`${what} did not happen`)
}

const run = `r${Date.now().toString(36)}`
const home = '/home/user'
let sbx

await check('create with metadata, env and timeout', async () => {
  sbx = await Sandbox.create({
    metadata: { suite: 'sim-check', run },
    envs: { GREETING: 'hello' },
    timeoutMs: 120_000,
  })
  assert(/^i[a-z0-9]{20}$/.test(sbx.sandboxId), `sandbox id ${sbx.sandboxId}`)
  const info = await sbx.getInfo()
  equal([info.metadata.suite, info.metadata.run], ['sim-check', run], 'metadata')
  equal(info.state, 'running', 'state')
  assert(info.endAt > info.startedAt, 'endAt after startedAt')
})

if (!sbx) {
  console.log(`0 passed, ${failures} failed`)
  process.exit(1)
}

await check('run: stdout and exit code 0, sandbox env', async () => {
  const r = await sbx.commands.run('echo $GREETING')
  equal(r.stdout, 'hello\n', 'stdout')
  equal(r.exitCode, 0, 'exit code')
})

await check('non-zero exit is CommandExitError with stderr', async () => {
  const e = await rejects(sbx.commands.run('echo oops >&2; exit 3'), CommandExitError, 'exit 3')
  equal(e.exitCode, 3, 'exit code')
  equal(e.stderr, 'oops\n', 'stderr')
})

await check('per-command env and cwd', async () => {
  equal(await sbx.files.makeDir(`${home}/work`), true, 'makeDir')
  const r = await sbx.commands.run('printf "%s|%s" "$X" "${PWD##*/}"', {
    envs: { X: "it's \"quoted\"" },
    cwd: `${home}/work`,
  })
  equal(r.stdout, 'it\'s "quoted"|work', 'stdout')
})

await check('streaming callbacks see output as it comes', async () => {
  const chunks = []
  const errs = []
  const r = await sbx.commands.run('printf one; sleep 0.5; printf two; printf e >&2', {
    onStdout: (d) => chunks.push(d),
    onStderr: (d) => errs.push(d),
  })
  equal(chunks.join(''), 'onetwo', 'stdout chunks')
  assert(chunks.length >= 2, `expected at least 2 stdout chunks, got ${chunks.length}`)
  equal(errs.join(''), 'e', 'stderr chunks')
  equal(r.stdout, 'onetwo', 'result stdout')
})

await check('background process is listed and killed', async () => {
  const h = await sbx.commands.run('sleep 30', { background: true })
  const listed = await sbx.commands.list()
  assert(listed.some((p) => p.pid === h.pid), `pid ${h.pid} not in ${JSON.stringify(listed)}`)
  equal(await h.kill(), true, 'kill')
  const e = await rejects(h.wait(), CommandExitError, 'wait after kill')
  equal(e.exitCode, -1, 'exit code of a killed process')
  await eventually(async () => !(await sbx.commands.list()).some((p) => p.pid === h.pid), 'the killed process leaving the list')
})

await check('connect to a running background process', async () => {
  const h = await sbx.commands.run('sleep 1; echo done', { background: true })
  const joined = await sbx.commands.connect(h.pid)
  const r = await joined.wait()
  equal(r.stdout, 'done\n', 'joined stdout')
  equal(r.exitCode, 0, 'exit code')
})

await check('stdin: send and close', async () => {
  const h = await sbx.commands.run('cat', { background: true, stdin: true })
  await sbx.commands.sendStdin(h.pid, 'abc\n')
  await sbx.commands.closeStdin(h.pid)
  const r = await h.wait()
  equal(r.stdout, 'abc\n', 'cat stdout')
})

await check('pty of the requested size', async () => {
  const out = []
  const h = await sbx.pty.create({ cols: 100, rows: 30, onData: (d) => out.push(Buffer.from(d)) })
  await sbx.pty.sendInput(h.pid, new TextEncoder().encode('stty size; exit\n'))
  await h.wait()
  const text = Buffer.concat(out).toString()
  assert(text.includes('30 100'), `pty output ${JSON.stringify(text)}`)
})

await check('files: write, read, getInfo, list', async () => {
  const info = await sbx.files.write(`${home}/dir/a.txt`, 'hello')
  equal([info.name, info.path], ['a.txt', `${home}/dir/a.txt`], 'write info')
  equal(await sbx.files.read(`${home}/dir/a.txt`), 'hello', 'read text')
  const stat = await sbx.files.getInfo(`${home}/dir/a.txt`)
  equal([stat.type, stat.size], [FileType.FILE, 5], 'getInfo')
  await sbx.files.makeDir(`${home}/dir/sub`)
  const entries = await sbx.files.list(`${home}/dir`)
  equal(entries.map((e) => [e.name, e.type]).sort(), [['a.txt', FileType.FILE], ['sub', FileType.DIR]], 'list')
})

await check('files: binary round trip and several files at once', async () => {
  const bytes = new Uint8Array(256).map((_, i) => i)
  await sbx.files.write(`${home}/bin/data.bin`, bytes)
  const back = await sbx.files.read(`${home}/bin/data.bin`, { format: 'bytes' })
  equal(Array.from(back), Array.from(bytes), 'bytes')
  const many = await sbx.files.write([
    { path: `${home}/many/1.txt`, data: 'one' },
    { path: `${home}/many/2.txt`, data: 'two' },
  ])
  equal(many.map((f) => f.name).sort(), ['1.txt', '2.txt'], 'written files')
  equal((await sbx.commands.run('cat many/1.txt many/2.txt')).stdout, 'onetwo', 'seen by a command')
})

await check('files: rename, remove, exists', async () => {
  await sbx.files.write(`${home}/m/old.txt`, 'x')
  const moved = await sbx.files.rename(`${home}/m/old.txt`, `${home}/m/new.txt`)
  equal(moved.path, `${home}/m/new.txt`, 'renamed path')
  equal(await sbx.files.exists(`${home}/m/old.txt`), false, 'old gone')
  equal(await sbx.files.read(`${home}/m/new.txt`), 'x', 'new content')
  await sbx.files.remove(`${home}/m/new.txt`)
  equal(await sbx.files.exists(`${home}/m/new.txt`), false, 'removed')
})

await check('files: missing file is NotFoundError', async () => {
  await rejects(sbx.files.read(`${home}/missing.txt`), NotFoundError, 'read missing')
  await rejects(sbx.files.getInfo(`${home}/missing.txt`), NotFoundError, 'getInfo missing')
})

await check('watchDir sees a new file', async () => {
  await sbx.files.makeDir(`${home}/watched`)
  const events = []
  const handle = await sbx.files.watchDir(`${home}/watched`, (e) => events.push(e))
  await sbx.files.write(`${home}/watched/w.txt`, 'w')
  await eventually(() => events.some((e) => e.name === 'w.txt'), 'a watch event for w.txt')
  await handle.stop()
})

await check('setTimeout and metrics', async () => {
  await sbx.setTimeout(60_000)
  const metrics = await sbx.getMetrics()
  assert(metrics.length > 0 && metrics[0].cpuCount > 0, `metrics ${JSON.stringify(metrics)}`)
})

await check('pause, then connect resumes with state kept', async () => {
  await sbx.files.write(`${home}/kept.txt`, 'kept')
  const bg = await sbx.commands.run('sleep 60', { background: true })
  equal(await sbx.pause(), true, 'pause')
  equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused', 'state after pause')
  equal(await sbx.pause(), false, 'pause of a paused sandbox')
  const again = await Sandbox.connect(sbx.sandboxId)
  equal((await again.getInfo()).state, 'running', 'state after connect')
  equal((await again.commands.run('cat kept.txt')).stdout, 'kept', 'files kept')
  assert((await again.commands.list()).some((p) => p.pid === bg.pid), 'processes kept')
  await again.commands.kill(bg.pid)
})

let second
await check('list by metadata, paginated', async () => {
  second = await Sandbox.create({ metadata: { suite: 'sim-check', run } })
  const paginator = Sandbox.list({ query: { metadata: { run } }, limit: 1 })
  const seen = []
  while (paginator.hasNext) seen.push(...(await paginator.nextItems()))
  equal(seen.map((s) => s.sandboxId).sort(), [sbx.sandboxId, second.sandboxId].sort(), 'listed ids')
  const none = await Sandbox.list({ query: { metadata: { run: 'no-such-run' } } }).nextItems()
  equal(none.length, 0, 'no match')
  const running = await Sandbox.list({ query: { metadata: { run }, state: ['running'] } }).nextItems()
  equal(running.length, 2, 'running filter')
})

await check('not found: connect, kill, getInfo of a missing sandbox', async () => {
  const missing = 'i00000000000000000000'
  await rejects(Sandbox.connect(missing), NotFoundError, 'connect missing')
  equal(await Sandbox.kill(missing), false, 'kill missing')
  await rejects(Sandbox.getInfo(missing), NotFoundError, 'getInfo missing')
})

await check('a wrong API key is AuthenticationError', async () => {
  await rejects(Sandbox.create({ apiKey: `e2b_${'0'.repeat(40)}` }), AuthenticationError, 'create with a wrong key')
})

await check('kill destroys the sandboxes', async () => {
  equal(await sbx.kill(), true, 'kill')
  if (second) equal(await second.kill(), true, 'kill second')
  equal(await sbx.isRunning(), false, 'isRunning after kill')
  await rejects(Sandbox.getInfo(sbx.sandboxId), NotFoundError, 'getInfo after kill')
  const left = await Sandbox.list({ query: { metadata: { run } } }).nextItems()
  equal(left.length, 0, 'sandboxes left')
})

// The code interpreter (npm `@e2b/code-interpreter`, pinned), on its default template
// `code-interpreter-v1`, whose server the simulator runs on port 49999.
let code
await check('code interpreter: state across runs, streamed stdout', async () => {
  code = await CodeSandbox.create({ metadata: { suite: 'sim-check', run: `${run}-code` } })
  const seen = []
  const first = await code.runCode('x = 41\nprint("hi")', { onStdout: (m) => seen.push(m.line) })
  equal(first.logs.stdout, ['hi\n'], 'stdout of the first cell')
  equal(seen, ['hi\n'], 'onStdout')
  equal(first.results.length, 0, 'results of an assignment')
  const second = await code.runCode('x + 1')
  equal(second.text, '42', 'state across runs')
  assert(second.executionCount > first.executionCount, `execution count ${first.executionCount} then ${second.executionCount}`)
})

await check('code interpreter: an error with its traceback, state kept', async () => {
  const errors = []
  const failed = await code.runCode('1/0', { onError: (e) => errors.push(e.name) })
  equal(failed.error?.name, 'ZeroDivisionError', 'error name')
  assert(failed.error.traceback.includes('ZeroDivisionError'), `traceback: ${failed.error.traceback}`)
  equal(errors, ['ZeroDivisionError'], 'onError')
  equal((await code.runCode('x')).text, '41', 'state after the error')
})

await check('code interpreter: display() results and the main result', async () => {
  const results = []
  const png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=='
  const cell = [
    'import base64',
    'class Dot:',
    '    def _repr_png_(self):',
    `        return base64.b64decode('${png}')`,
    "display({'a': 1})",
    'display(Dot())',
    "'done'",
  ].join('\n')
  const shown = await code.runCode(cell, { onResult: (r) => results.push(r) })
  equal(shown.results.length, 3, 'results')
  equal(shown.results.map((r) => r.isMainResult), [false, false, true], 'which is main')
  equal(shown.results[1].png, png, 'png of the display result')
  assert(shown.results[1].formats().includes('png'), `formats: ${shown.results[1].formats()}`)
  equal(shown.text, 'done', 'main result')
  equal(results.length, 3, 'onResult')
})

await check('code interpreter: contexts are apart, listed, restarted, removed', async () => {
  const one = await code.createCodeContext()
  const two = await code.createCodeContext({ cwd: '/home/user' })
  assert(one.id !== two.id, 'two ids')
  equal(two.cwd, '/home/user', 'cwd')
  await code.runCode('a = 1', { context: one })
  equal((await code.runCode('a', { context: one })).text, '1', 'state in its context')
  equal((await code.runCode('a', { context: two })).error?.name, 'NameError', 'apart')
  const listed = (await code.listCodeContexts()).map((c) => c.id)
  assert(listed.includes(one.id) && listed.includes(two.id), `listed: ${listed}`)
  await code.restartCodeContext(one)
  equal((await code.runCode('a', { context: one })).error?.name, 'NameError', 'restart clears')
  await code.removeCodeContext(two)
  assert(!(await code.listCodeContexts()).some((c) => c.id === two.id), 'removed')
})

await check('code interpreter: a timeout interrupts the cell and keeps the state', async () => {
  await code.runCode('y = 7')
  const started = Date.now()
  let timedOut = false
  try {
    await code.runCode('import time\ntime.sleep(30)', { timeoutMs: 1000 })
  } catch (e) {
    timedOut = e?.name === 'TimeoutError' || /timed out/i.test(e?.message ?? '')
    if (!timedOut) throw e
  }
  assert(timedOut, 'sleep(30) with timeoutMs 1000 ended without a timeout')
  // The next cell waits behind the interrupted one: it runs only once the interrupt worked.
  equal((await code.runCode('y')).text, '7', 'state after the timeout')
  assert(Date.now() - started < 20000, 'the interrupted cell held the context')
})

await check('code interpreter: kill', async () => {
  equal(await code.kill(), true, 'kill')
})

console.log(`${passed} passed, ${failures} failed`)
process.exit(failures === 0 ? 0 : 1)
