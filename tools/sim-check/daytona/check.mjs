// The official Daytona TypeScript SDK (@daytonaio/sdk, pinned in package.json) driven through its
// documented usage against the Daytona simulator (`cargo xtask sim-check`). Configured only by
// the environment the simulator hands out: DAYTONA_API_URL and DAYTONA_API_KEY.
// Prints one line per check and exits non-zero when any fails.

import { Daytona, DaytonaNotFoundError, DaytonaAuthenticationError } from '@daytonaio/sdk'

let failures = 0
const check = async (name, body) => {
  try {
    const detail = await body()
    console.log(`ok   ${name}${detail ? ` (${detail})` : ''}`)
  } catch (e) {
    failures++
    console.log(`FAIL ${name}: ${e?.stack ?? e}`)
  }
}
const expect = (cond, what) => {
  if (!cond) throw new Error(what)
}
const expectEq = (got, want, what) => {
  if (JSON.stringify(got) !== JSON.stringify(want)) {
    throw new Error(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`)
  }
}
const rejects = async (promise, ErrorClass, what) => {
  try {
    await promise
  } catch (e) {
    expect(e instanceof ErrorClass, `${what}: ${e?.constructor?.name}: ${e?.message}`)
    return e
  }
  throw new Error(`${what}: no error`)
}

const run = `r${Date.now().toString(36)}`
const daytona = new Daytona()
let sandbox

await check('a wrong API key is DaytonaAuthenticationError', async () => {
  const wrong = new Daytona({ apiKey: 'dtn_wrong', apiUrl: process.env.DAYTONA_API_URL })
  const e = await rejects(wrong.get('anything'), DaytonaAuthenticationError, 'get with a wrong key')
  return `${e.statusCode}`
})

await check('create with labels and env waits until started', async () => {
  sandbox = await daytona.create({
    labels: { suite: 'sim-check', run },
    envVars: { GREETING: 'hello from env' },
  })
  expectEq(sandbox.state, 'started', 'state')
  expectEq(sandbox.labels.run, run, 'label')
  return sandbox.id
})

const { process: proc, fs } = sandbox

await check('executeCommand returns the output and exit code 0', async () => {
  const r = await proc.executeCommand('echo "$GREETING"')
  expectEq(r.exitCode, 0, 'exit code')
  expectEq(r.result, 'hello from env\n', 'result')
})

await check('executeCommand reports exit code 3', async () => {
  const r = await proc.executeCommand('echo before; exit 3')
  expectEq([r.exitCode, r.result], [3, 'before\n'], 'exit code and result')
})

await check('executeCommand applies per-command env and cwd', async () => {
  await fs.createFolder('work/sub', '755')
  const r = await proc.executeCommand('basename "$(pwd)"; echo "$FOO"', 'work/sub', { FOO: 'bar' })
  expectEq(r.result, 'sub\nbar\n', 'result')
})

await check('executeCommand past its timeout is a timeout error', async () => {
  const started = Date.now()
  const e = await rejects(proc.executeCommand('sleep 10', undefined, undefined, 1), Error, 'timeout')
  expectEq(e.statusCode, 408, 'status')
  expect(Date.now() - started < 8000, 'the command was stopped at its timeout')
})

const sid = `s-${run}`
await check('a session keeps stdout and stderr apart and persists cd', async () => {
  await proc.createSession(sid)
  await proc.executeSessionCommand(sid, { command: 'cd work && export ANSWER=42' })
  const r = await proc.executeSessionCommand(sid, { command: 'echo "$ANSWER in $(basename "$PWD")"; echo oops >&2; false' })
  expectEq([r.exitCode, r.stdout, r.stderr], [1, '42 in work\n', 'oops\n'], 'exit, stdout, stderr')
})

await check('an async command streams its output through the log callbacks', async () => {
  const { cmdId } = await proc.executeSessionCommand(sid, {
    command: 'for i in 1 2 3; do echo "line $i"; sleep 0.2; done; echo warn >&2',
    runAsync: true,
  })
  const out = []
  const err = []
  const stamps = []
  await proc.getSessionCommandLogs(sid, cmdId, (c) => { out.push(c); stamps.push(Date.now()) }, (c) => err.push(c))
  expectEq(out.join(''), 'line 1\nline 2\nline 3\n', 'stdout')
  expectEq(err.join(''), 'warn\n', 'stderr')
  expect(stamps.length >= 2 && stamps[stamps.length - 1] - stamps[0] >= 200, 'output arrived as it was written')
  const cmd = await proc.getSessionCommand(sid, cmdId)
  expectEq(cmd.exitCode, 0, 'exit code')
  const logs = await proc.getSessionCommandLogs(sid, cmdId)
  expectEq([logs.stdout, logs.stderr], ['line 1\nline 2\nline 3\n', 'warn\n'], 'logs')
})

await check('a background command is listed and killed with its session', async () => {
  const bg = `bg-${run}`
  await proc.createSession(bg)
  const { cmdId } = await proc.executeSessionCommand(bg, { command: 'sleep 60', runAsync: true })
  const running = await proc.getSessionCommand(bg, cmdId)
  expectEq(running.exitCode, undefined, 'no exit code while running')
  const sessions = await proc.listSessions()
  expect(sessions.some((s) => s.sessionId === bg), 'listed')
  await proc.deleteSession(bg)
  await rejects(proc.getSessionCommand(bg, cmdId), DaytonaNotFoundError, 'command after its session was deleted')
})

const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i))
await check('files: upload, download, list, details', async () => {
  await fs.uploadFile(bytes, 'files/data.bin')
  const back = await fs.downloadFile('files/data.bin')
  expect(Buffer.compare(back, bytes) === 0, 'downloaded bytes differ')
  const list = await fs.listFiles('files')
  expectEq(list.map((f) => [f.name, f.size, f.isDir]), [['data.bin', 256, false]], 'list')
  const info = await fs.getFileDetails('files/data.bin')
  expectEq([info.name, info.size, info.isDir], ['data.bin', 256, false], 'details')
})

await check('files: mkdir, move, remove, missing', async () => {
  await fs.createFolder('files/dir', '750')
  const dir = await fs.getFileDetails('files/dir')
  expectEq([dir.isDir, dir.permissions], [true, '0750'], 'folder')
  await fs.moveFiles('files/data.bin', 'files/dir/moved.bin')
  await rejects(fs.getFileDetails('files/data.bin'), DaytonaNotFoundError, 'moved source')
  await fs.deleteFile('files/dir', true)
  await rejects(fs.downloadFile('files/dir/moved.bin'), DaytonaNotFoundError, 'removed file')
})

await check('labels, autostop, previews and ssh access', async () => {
  const labels = await sandbox.setLabels({ suite: 'sim-check', run, extra: 'yes' })
  expectEq(labels.extra, 'yes', 'labels')
  await sandbox.setAutostopInterval(30)
  await sandbox.refreshData()
  expectEq(sandbox.autoStopInterval, 30, 'autostop')
  const preview = await sandbox.getPreviewLink(8080)
  expect(preview.url.startsWith('http://8080-') && preview.token, 'preview link')
  const signed = await sandbox.getSignedPreviewUrl(8080, 120)
  expect(signed.url.includes(signed.token), 'signed preview url')
  await sandbox.expireSignedPreviewUrl(8080, signed.token)
  const ssh = await sandbox.createSshAccess(5)
  expect((await sandbox.validateSshAccess(ssh.token)).valid, 'ssh token valid')
  const second = await sandbox.createSshAccess(5)
  expect(!(await sandbox.validateSshAccess(ssh.token)).valid, 'a new token revokes the old one')
  await sandbox.revokeSshAccess(second.token)
  expect(!(await sandbox.validateSshAccess(second.token)).valid, 'revoked')
})

await check('code interpreter: state across runs, streamed stdout', async () => {
  const ci = sandbox.codeInterpreter
  const seen = []
  const first = await ci.runCode('x = 41\nprint("hi")', { onStdout: (m) => seen.push(m.output) })
  expectEq(first.stdout, 'hi\n', 'stdout')
  expectEq(seen.join(''), 'hi\n', 'onStdout')
  const second = await ci.runCode('print(x + 1)')
  expectEq(second.stdout, '42\n', 'state across runs')
})

await check('code interpreter: an error with its traceback, state kept', async () => {
  const ci = sandbox.codeInterpreter
  const failed = await ci.runCode('1/0')
  expectEq(failed.error?.name, 'ZeroDivisionError', 'error name')
  expect(failed.error.traceback.includes('ZeroDivisionError'), `traceback: ${failed.error.traceback}`)
  expectEq((await ci.runCode('print(x)')).stdout, '41\n', 'state after the error')
})

await check('code interpreter: contexts are apart, listed and deleted', async () => {
  const ci = sandbox.codeInterpreter
  const ctx = await ci.createContext()
  expect(ctx.id && ctx.language === 'python' && ctx.active, `context: ${JSON.stringify(ctx)}`)
  await ci.runCode('a = 1', { context: ctx })
  expectEq((await ci.runCode('print(a)', { context: ctx })).stdout, '1\n', 'state in its context')
  expectEq((await ci.runCode('print(a)')).error?.name, 'NameError', 'the default context is apart')
  const listed = (await ci.listContexts()).map((c) => c.id)
  expectEq(listed, [ctx.id], 'listed without the default')
  await ci.deleteContext(ctx)
  expectEq(await ci.listContexts(), [], 'deleted')
})

// The TS SDK settles on the `control: interrupted` frame, which comes before the 4008 close,
// so a timed-out cell resolves (the Python SDK, waiting for the close, raises its timeout error).
await check('code interpreter: a timeout interrupts the cell and keeps the state', async () => {
  const ci = sandbox.codeInterpreter
  await ci.runCode('y = 7')
  const started = Date.now()
  await ci.runCode('import time\ntime.sleep(30)', { timeout: 1 })
  expect(Date.now() - started < 15000, `the cell ran ${Date.now() - started} ms past a 1 s timeout`)
  expectEq((await ci.runCode('print(y)')).stdout, '7\n', 'state after the timeout')
})

await check('code interpreter: an unknown context is a close with its reason', async () => {
  const ci = sandbox.codeInterpreter
  const e = await rejects(ci.runCode('1', { context: { id: 'no-such-context' } }), Error, 'unknown context')
  expect(e.message.includes('context not found: no-such-context'), e.message)
})

await check('list by labels finds the sandbox', async () => {
  const found = []
  for await (const s of daytona.list({ labels: { run } })) found.push(s.id)
  expectEq(found, [sandbox.id], 'listed')
  const none = []
  for await (const s of daytona.list({ labels: { run: 'no-such-run' } })) none.push(s.id)
  expectEq(none, [], 'other labels')
})

await check('stop and start', async () => {
  await sandbox.stop()
  expectEq(sandbox.state, 'stopped', 'after stop')
  await sandbox.start()
  expectEq(sandbox.state, 'started', 'after start')
  const r = await proc.executeCommand('echo up')
  expectEq(r.result, 'up\n', 'commands run again')
})

await check('archive and restore', async () => {
  await sandbox.stop()
  await sandbox.archive()
  await sandbox.start()
  expectEq(sandbox.state, 'started', 'after restore')
})

const measured = []
await check('executeCommand latency (measured, not asserted)', async () => {
  for (let i = 0; i < 50; i++) {
    const t = process.hrtime.bigint()
    await proc.executeCommand('echo hi')
    measured.push(Number(process.hrtime.bigint() - t) / 1e6)
  }
  measured.sort((a, b) => a - b)
  return `median ${measured[25].toFixed(2)} ms over 50`
})

await check('delete, then get is DaytonaNotFoundError', async () => {
  const id = sandbox.id
  await sandbox.delete(60, true)
  await rejects(daytona.get(id), DaytonaNotFoundError, 'get after delete')
})

await check('an unknown sandbox is DaytonaNotFoundError', async () => {
  await rejects(daytona.get('no-such-sandbox'), DaytonaNotFoundError, 'get unknown')
})

await daytona[Symbol.asyncDispose]?.()
console.log(failures ? `${failures} check(s) failed` : 'all checks passed')
process.exit(failures ? 1 : 0)
