// Drives the official Fly Sprites JS SDK (npm `@fly/sprites`, pinned in package.json) through
// its documented usage against the Sprites simulator. `cargo xtask sim-check` starts the
// simulator and sets SPRITES_TOKEN and SPRITES_API_URL; the SDK reads no environment itself,
// so they go to `new SpritesClient(token, { baseURL })` (sandbox-sprites/PROTOCOL.md §14).
// `SpritesClient.createToken` always calls api.sprites.dev and is never used here.
// Prints one line per check; exits non-zero when any check fails.

import { spawnSync } from 'node:child_process'

// The SDK needs a global WebSocket taking `{ headers }` (Node ≥ 22; Node 20 behind a flag).
if (typeof WebSocket === 'undefined') {
  const again = spawnSync(process.execPath, ['--experimental-websocket', ...process.argv.slice(1)], {
    stdio: 'inherit',
  })
  process.exit(again.status ?? 1)
}

const { SpritesClient, ExecError } = await import('@fly/sprites')

for (const name of ['SPRITES_TOKEN', 'SPRITES_API_URL']) {
  if (!process.env[name]) {
    console.error(`${name} is not set: run this through \`cargo xtask sim-check\``)
    process.exit(2)
  }
}

const client = new SpritesClient(process.env.SPRITES_TOKEN, { baseURL: process.env.SPRITES_API_URL })

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

/** The error `promise` rejects with. */
async function rejects(promise, what) {
  try {
    await promise
  } catch (e) {
    return e
  }
  throw new Error(`${what}: expected an error, but it succeeded`)
}

/** Waits for `cmd`'s `session_info`-free start: its 'spawn' event or its error. */
function started(cmd) {
  return new Promise((resolve, reject) => {
    cmd.once('spawn', resolve)
    cmd.once('error', reject)
  })
}

const run = Date.now().toString(36)
const name = `sim-check-${run}`
let sprite

await check('createSprite answers the new sprite, cold, with labels and environment', async () => {
  sprite = await client.createSprite(name, {
    labels: ['owner=sim-check'],
    environment: { GREETING: 'hello' },
    config: { cpus: 2, ramMB: 1024 },
  })
  equal(sprite.name, name, 'name')
  equal(sprite.status, 'cold', 'status')
  equal(sprite.labels, ['owner=sim-check'], 'labels')
  equal(sprite.environment, { GREETING: 'hello' }, 'environment')
  equal(sprite.config?.cpus, 2, 'config.cpus')
  assert(sprite.url?.startsWith(`https://${name}-`), `url ${sprite.url}`)
  assert(sprite.createdAt instanceof Date && !isNaN(sprite.createdAt), 'createdAt')
})

await check('a duplicate create is an APIError 400 saying it exists', async () => {
  const e = await rejects(client.createSprite(name), 'duplicate')
  equal(e.statusCode, 400, 'status')
  assert(/already exists/.test(e.message), e.message)
})

await check('getSprite and listSprites (prefix, paging) find it', async () => {
  const got = await client.getSprite(name)
  equal(got.id, sprite.id, 'id')
  equal(got.organizationName, 'sim-org', 'organization')
  await client.createSprite(`${name}-b`)
  const page = await client.listSprites({ prefix: name, maxResults: 1 })
  equal(page.sprites.map((s) => s.name), [name], 'first page')
  equal(page.hasMore, true, 'hasMore')
  const rest = await client.listSprites({ prefix: name, maxResults: 1, continuationToken: page.nextContinuationToken })
  equal(rest.sprites.map((s) => s.name), [`${name}-b`], 'second page')
  const all = await client.listAllSprites(name)
  equal(all.map((s) => s.name), [name, `${name}-b`], 'listAllSprites')
})

await check('updateSprite replaces the labels', async () => {
  const updated = await client.updateSprite(name, { labels: ['a', 'b'] })
  equal(updated.labels, ['a', 'b'], 'labels')
})

await check('exec gives stdout, the base environment and the working directory', async () => {
  const result = await sprite.execFile('sh', ['-c', 'echo "$GREETING"; pwd | grep -c home/sprite'])
  equal(result.stdout, 'hello\n1\n', 'stdout')
  equal(result.exitCode, 0, 'exit')
  const status = (await client.getSprite(name)).status
  equal(status, 'running', 'status after exec')
})

await check('exec keeps stderr apart and reports a failing exit code as ExecError', async () => {
  const e = await rejects(sprite.execFile('sh', ['-c', 'echo out; echo err >&2; exit 7']), 'exit 7')
  assert(e instanceof ExecError, `got ${e?.constructor?.name}: ${e?.message}`)
  equal(e.result.exitCode, 7, 'exitCode')
  equal(e.result.stdout, 'out\n', 'stdout')
  equal(e.result.stderr, 'err\n', 'stderr')
})

await check('exec with env and cwd', async () => {
  await sprite.filesystem().mkdir('/home/sprite/work', { recursive: true })
  const result = await sprite.execFile('sh', ['-c', 'echo "$X:$GREETING"; basename "$PWD"'], {
    env: { X: '1', PATH: '/usr/bin:/bin' },
    cwd: '/home/sprite/work',
  })
  equal(result.stdout, '1:\nwork\n', 'env replaces the environment; cwd')
})

await check('spawn streams stdin to the command and stdin EOF ends it', async () => {
  const cmd = sprite.spawn('sh', ['-c', 'tr a-z A-Z; echo done'])
  let out = ''
  cmd.stdout.on('data', (d) => (out += d))
  await started(cmd)
  cmd.stdin.write('hello ')
  cmd.stdin.end('world\n')
  const code = await cmd.wait()
  equal(code, 0, 'exit')
  equal(out, 'HELLO WORLD\ndone\n', 'stdout')
})

await check('a signal message ends a spawned command with 128+N', async () => {
  const cmd = sprite.spawn('sleep', ['30'])
  await started(cmd)
  await new Promise((r) => setTimeout(r, 100))
  cmd.kill('SIGTERM')
  equal(await cmd.wait(), 143, 'exit')
})

await check('listSessions shows a running session and killSession ends it', async () => {
  const cmd = sprite.spawn('sleep', ['30'], { maxRunAfterDisconnect: '0' })
  const exited = cmd.wait()
  await started(cmd)
  const sessions = await sprite.listSessions()
  const mine = sessions.find((s) => s.command === 'sleep 30')
  assert(mine, `sessions: ${JSON.stringify(sessions)}`)
  assert(typeof mine.id === 'number', `id ${mine.id}`)
  equal(mine.isActive, true, 'isActive')
  equal(mine.tty, false, 'tty')
  assert(mine.created instanceof Date && !isNaN(mine.created), 'created')
  const stream = await sprite.killSession(mine.id, 'SIGTERM', '5s')
  const events = []
  await stream.processAll((e) => events.push(e))
  equal(events[0].type, 'signal', 'first event')
  equal(events.at(-1).type, 'complete', 'last event')
  equal(events.at(-1).exitCode, 143, 'complete exit code')
  equal(await exited, 143, 'the socket saw the exit')
  const after = await sprite.listSessions()
  assert(!after.some((s) => s.id === mine.id), 'a finished session leaves the list')
})

await check('createSession runs a TTY session and attachSession replays it', async () => {
  const cmd = sprite.createSession('sh', ['-c', 'echo ready; read x; echo "got $x"'], { cols: 90, rows: 20 })
  let out = ''
  let info
  cmd.stdout.on('data', (d) => (out += d))
  cmd.on('message', (m) => {
    if (m?.type === 'session_info') info = m
  })
  await started(cmd)
  for (let i = 0; i < 100 && !out.includes('ready'); i++) await new Promise((r) => setTimeout(r, 20))
  assert(out.includes('ready'), `tty output ${JSON.stringify(out)}`)
  assert(info?.tty === true, `session_info ${JSON.stringify(info)}`)
  cmd.resize(100, 30)
  const id = info.session_id
  const tty = (await sprite.listSessions()).find((s) => s.id === id)
  equal(tty?.tty, true, 'listed as tty')
  const attached = sprite.attachSession(String(id))
  let seen = ''
  attached.stdout.on('data', (d) => (seen += d))
  await started(attached)
  attached.stdin.write('there\r')
  const code = await attached.wait()
  assert(seen.includes('got there'), `attached output ${JSON.stringify(seen)}`)
  equal(code, 0, 'exit')
  cmd.wait()
})

await check('files: write, read, stat, readdir, rename, rm', async () => {
  const fs = sprite.filesystem('/home/sprite')
  await fs.writeFile('dir/a.txt', 'alpha', { mode: 0o640 })
  equal(await fs.readFile('dir/a.txt', 'utf8'), 'alpha', 'read')
  const bytes = Buffer.from([0, 255, 1, 254])
  await fs.writeFile('/tmp/bin', bytes)
  assert(Buffer.compare(await sprite.filesystem().readFile('/tmp/bin'), bytes) === 0, 'binary round trip')
  const stat = await fs.stat('dir/a.txt')
  equal([stat.size, stat.mode & 0o777, stat.isFile(), stat.isDirectory()], [5, 0o640, true, false], 'stat')
  // No stat of a directory: the SDK's stat takes the first entry of `fs/list`, which for a
  // directory is its first child (PROTOCOL.md §7), the same call readdir lists children with.
  equal(await fs.readdir('dir'), ['a.txt'], 'readdir')
  const typed = await fs.readdir('dir', { withFileTypes: true })
  equal(typed[0].isFile(), true, 'Dirent')
  await fs.rename('dir/a.txt', 'dir/b.txt')
  equal(await fs.exists('dir/a.txt'), false, 'renamed away')
  equal(await fs.readFile('/home/sprite/dir/b.txt', 'utf8'), 'alpha', 'renamed to')
  const notEmpty = await rejects(fs.rm('dir'), 'rm non-empty dir')
  equal(notEmpty.code, 'ENOTEMPTY', 'code')
  await fs.rm('dir', { recursive: true })
  equal(await fs.exists('dir'), false, 'removed')
  const missing = await rejects(fs.readFile('nope.txt'), 'missing file')
  equal([missing.code, missing.path], ['ENOENT', '/home/sprite/nope.txt'], 'ENOENT')
  await fs.rm('nope.txt', { force: true })
})

await check('files stay inside the sprite', async () => {
  const fs = sprite.filesystem('/home/sprite')
  const e = await rejects(fs.readFile('../../../../../../etc/hostname'), '/etc through ..')
  equal(e.code, 'ENOENT', 'code')
})

await check('checkpoints: create, list, get, restore', async () => {
  const fs = sprite.filesystem()
  await fs.writeFile('/home/sprite/state.txt', 'one')
  const stream = await sprite.createCheckpoint('first')
  const events = []
  await stream.processAll((e) => events.push(e))
  equal(events.at(-1).type, 'complete', 'last event')
  const id = /Checkpoint (\S+) created/.exec(events.at(-1).data)?.[1]
  assert(id, `complete ${JSON.stringify(events.at(-1))}`)
  const list = await sprite.listCheckpoints()
  equal(list.at(-1).id, id, 'newest in the list')
  equal(list.at(-1).comment, 'first', 'comment')
  assert(list.at(-1).createTime instanceof Date && !isNaN(list.at(-1).createTime), 'createTime')
  equal((await sprite.getCheckpoint(id)).id, id, 'get')
  await fs.writeFile('/home/sprite/state.txt', 'two')
  const restore = await sprite.restoreCheckpoint(id)
  const restored = []
  await restore.processAll((e) => restored.push(e))
  equal(restored.at(-1).type, 'complete', 'restore complete')
  equal(await fs.readFile('/home/sprite/state.txt', 'utf8'), 'one', 'restored')
  await rejects(sprite.getCheckpoint('v999'), 'missing checkpoint')
})

await check('deleteSprite removes it; a missing sprite is an APIError 404', async () => {
  await client.deleteSprite(name)
  await client.deleteSprite(`${name}-b`)
  const e = await rejects(client.getSprite(name), 'get deleted')
  equal(e.statusCode, 404, 'status')
  equal(e.errorCode, 'not_found', 'code')
  const del = await rejects(client.deleteSprite(name), 'delete deleted')
  equal(del.statusCode, 404, 'delete status')
})

await check('a wrong token is an APIError 401', async () => {
  const stranger = new SpritesClient('not-the-token', { baseURL: process.env.SPRITES_API_URL })
  const e = await rejects(stranger.listSprites(), 'wrong token')
  equal(e.statusCode, 401, 'status')
})

console.log(`${passed} passed, ${failures} failed`)
process.exit(failures ? 1 : 0)
