/**
 * Issue 36: SQL connections through SSH tunnels, through the real server and a real SSH server
 * (ssh2's, started here) in front of the machine's Postgres and MariaDB. The databases are
 * named `db.internal` in their URLs, a name only the bastion resolves: a tool call that
 * answers went through the tunnel. Failures are 502 connection_unreachable naming the hop.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer, type Server as NetServer, type Socket } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DatabaseSync } from "node:sqlite"
import { createConnection } from "mysql2/promise"
import { Deferred, Effect, ManagedRuntime, Redacted } from "effect"
import { PgClient } from "@effect/sql-pg"
import { SqlClient } from "effect/sql/SqlClient"
import { createMysqlDatabase, createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { Client as PgAdmin } from "../support/pg-admin.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { type Bastion, generateKey, type KeyPair, startBastion } from "../support/ssh-bastion.ts"
import { openWith, SEALED_PREFIX } from "../../src/services/store/secrets.ts"

const VERSION = "2026-07-28"
const envelope = {
  "io.modelcontextprotocol/protocolVersion": VERSION,
  "io.modelcontextprotocol/clientInfo": { name: "raw", version: "1" },
  "io.modelcontextprotocol/clientCapabilities": {}
}
const callTool = async (url: string, key: string, name: string, args: Record<string, unknown>) => {
  const response = await fetch(`${url}/v1/mcp`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${key}`,
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": VERSION,
      "mcp-method": "tools/call",
      "mcp-name": name
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name, arguments: args, _meta: envelope } })
  })
  expect(response.status).toBe(200)
  const text = await response.text()
  const result = (JSON.parse(text) as { result: { isError?: boolean; structuredContent: any } }).result
  return { isError: result.isError === true, body: result.structuredContent, text }
}

const USER = "tunnel"
const SSH_PASSWORD = "bastion-pass-7f3a9c"
const PASSWORD_ENV = "MG_TEST_SSH_PASSWORD_36"
const KEY_ENV = "MG_TEST_SSH_KEY_36"
const UNSET_ENV = "MG_TEST_SSH_UNSET_36"

describe("SQL connections through an SSH tunnel", () => {
  const dir = mkdtempSync(join(tmpdir(), "mg-ssh-"))
  let pg: TempDatabase
  let maria: TempDatabase
  let bastion: Bastion
  let stopped: Bastion
  let silent: NetServer
  const silentSockets = new Set<Socket>()
  let clientKey: KeyPair
  let gw: TestGateway
  let key: string
  let pgUrl: string
  let mariaUrl: string

  beforeAll(async () => {
    pg = await createPostgresDatabase("mg_ssh_pg")
    maria = await createMysqlDatabase("mg_ssh_my")
    const admin = new PgAdmin(pg.url)
    await admin.query("CREATE TABLE items (id serial PRIMARY KEY, name text NOT NULL)")
    await admin.query("INSERT INTO items (name) VALUES ('a'), ('b')")
    const my = await createConnection(maria.url)
    await my.query("CREATE TABLE items (id int AUTO_INCREMENT PRIMARY KEY, name varchar(20) NOT NULL)")
    await my.query("INSERT INTO items (name) VALUES ('x'), ('y'), ('z')")
    await my.end()
    // Only the bastion knows db.internal.
    pgUrl = pg.url.replace("127.0.0.1", "db.internal")
    mariaUrl = maria.url.replace("127.0.0.1", "db.internal")

    clientKey = generateKey()
    bastion = await startBastion({ user: USER, clientKey, password: SSH_PASSWORD, resolve: { "db.internal": "127.0.0.1" } })
    // A bastion that was there and is no more: its port refuses.
    stopped = await startBastion({ user: USER, clientKey })
    await stopped.close()
    // A server that accepts TCP and never speaks SSH: only a deadline ends the wait.
    silent = createServer((socket) => {
      silentSockets.add(socket)
      socket.on("close", () => silentSockets.delete(socket))
    })
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve))

    const keyFile = join(dir, "id_ed25519")
    writeFileSync(keyFile, clientKey.private, { mode: 0o600 })
    const knownHosts = join(dir, "known_hosts")
    writeFileSync(knownHosts, `# the bastion\n${bastion.knownHostsLine}\n`)
    const wrongKey = generateKey()
    const wrongKeyFile = join(dir, "wrong_key")
    writeFileSync(wrongKeyFile, wrongKey.private, { mode: 0o600 })
    process.env[PASSWORD_ENV] = SSH_PASSWORD
    process.env[KEY_ENV] = clientKey.private
    delete process.env[UNSET_ENV]

    const viaBastion = { host: "127.0.0.1", port: bastion.port, user: USER }
    gw = await startGateway(testConfig({
      limits: { requests_per_minute: 1000 },
      workspace: { credits: 100_000 },
      // The store bounds of a machine at load, not the defaults: this file is about the tunnel,
      // and a tool call's credit commit past the default 2 s answered 503 beside a second suite.
      store_timeouts: { commit_ms: 60_000, call_ms: 60_000, lock_ms: 30_000, statement_ms: 30_000 },
      connections: [
        { id: 1, name: "pg", dialect: "postgres", url: pgUrl, ssh: { ...viaBastion, private_key_file: keyFile, host_key_sha256: bastion.fingerprint } },
        { id: 2, name: "maria", dialect: "mysql", url: mariaUrl, ssh: { ...viaBastion, password_env: PASSWORD_ENV, known_hosts_file: knownHosts } },
        {
          id: 3, name: "wrong-host-key", dialect: "postgres", url: pgUrl,
          ssh: { ...viaBastion, private_key_file: keyFile, host_key_sha256: stopped.fingerprint }
        },
        { id: 4, name: "refused-key", dialect: "postgres", url: pgUrl, ssh: { ...viaBastion, private_key_file: wrongKeyFile, host_key_sha256: bastion.fingerprint } },
        {
          id: 5, name: "bastion-down", dialect: "postgres", url: pgUrl,
          ssh: { host: "127.0.0.1", port: stopped.port, user: USER, private_key_file: keyFile, host_key_sha256: stopped.fingerprint }
        },
        {
          id: 6, name: "database-down", dialect: "postgres", url: "postgres://postgres@db.internal:1/none",
          ssh: { ...viaBastion, private_key_file: keyFile, host_key_sha256: bastion.fingerprint }
        },
        { id: 8, name: "key-from-env", dialect: "postgres", url: pgUrl, ssh: { ...viaBastion, private_key_env: KEY_ENV, known_hosts_file: knownHosts } },
        { id: 9, name: "key-env-unset", dialect: "postgres", url: pgUrl, ssh: { ...viaBastion, private_key_env: UNSET_ENV, host_key_sha256: bastion.fingerprint } },
        {
          id: 7, name: "silent", dialect: "mysql", url: mariaUrl,
          ssh: { host: "127.0.0.1", port: (silent.address() as { port: number }).port, user: USER, private_key_file: keyFile, host_key_sha256: bastion.fingerprint, connect_timeout_ms: 1500 }
        }
      ]
    }))
    const created = await gw.createKey({ name: "agent", tools_enabled: true })
    key = created.key
    for (const id of [1, 2, 3, 4, 5, 6, 7, 8, 9]) {
      expect((await gw.admin("PUT", `/api-keys/${created.id}/connections/${id}`, { role: "edit" })).status).toBe(200)
    }
  })

  afterAll(async () => {
    delete process.env[PASSWORD_ENV]
    delete process.env[KEY_ENV]
    await gw?.close()
    await bastion?.close()
    for (const socket of silentSockets) socket.destroy()
    await new Promise<void>((resolve) => (silent === undefined ? resolve() : silent.close(() => resolve())))
    await pg?.drop()
    await maria?.drop()
    rmSync(dir, { recursive: true, force: true })
  })

  it("runs every SQL tool through the tunnel, on Postgres and MariaDB", async () => {
    for (const [id, names] of [[1, ["a", "b"]], [2, ["x", "y", "z"]]] as const) {
      const read = await callTool(gw.url, key, "sql_run", { connection_id: id, statement: "SELECT name FROM items ORDER BY id" })
      expect(read.isError).toBe(false)
      expect(read.body).toMatchObject({ kind: "rows", rows: names.map((name) => ({ name })) })
      const write = await callTool(gw.url, key, "sql_run", { connection_id: id, statement: "INSERT INTO items (name) VALUES ('new')" })
      expect(write.body).toMatchObject({ kind: "affected", affected_rows: 1 })
      const tables = await callTool(gw.url, key, "sql_list_tables", { connection_id: id })
      expect(tables.body.tables.map((t: { name: string }) => t.name)).toContain("items")
      const described = await callTool(gw.url, key, "sql_describe", { connection_id: id, name: "items" })
      expect(described.body.columns.map((c: { name: string }) => c.name)).toEqual(["id", "name"])
      const plan = await callTool(gw.url, key, "sql_explain", { connection_id: id, statement: "SELECT * FROM items" })
      expect(plan.isError).toBe(false)
      expect(plan.body.plan).toBeDefined()
      const history = await callTool(gw.url, key, "sql_history", { connection_id: id })
      expect(history.body.items.length).toBe(2)
    }
    const listed = await callTool(gw.url, key, "sql_list_connections", {})
    expect(listed.body.connections[0]).toEqual({ id: 1, name: "pg", dialect: "postgres", environment: "development", role: "edit" })
    // The bastion opened the forwards: the gateway could not have resolved db.internal itself.
    expect(bastion.forwards).toContain(`db.internal:${new URL(pg.url).port || 5432}`)
    expect(bastion.forwards).toContain(`db.internal:${new URL(maria.url).port || 3306}`)
  })

  it("refuses a bastion whose host key is not the configured one, before sending any credential", async () => {
    const attemptsBefore = bastion.authAttempts.length
    const answer = await callTool(gw.url, key, "sql_run", { connection_id: 3, statement: "SELECT 1" })
    expect(answer.isError).toBe(true)
    expect(answer.body).toMatchObject({ status: 502, error: "connection_unreachable", details: { hop: "ssh", reason: "host_key_mismatch" } })
    expect(answer.body.message).toContain(bastion.fingerprint)
    expect(bastion.authAttempts.length).toBe(attemptsBefore)
  })

  it("names a refused login, a stopped SSH server and a silent one, within the deadline", async () => {
    const refused = await callTool(gw.url, key, "sql_run", { connection_id: 4, statement: "SELECT 1" })
    expect(refused.body).toMatchObject({ status: 502, error: "connection_unreachable", details: { hop: "ssh", reason: "auth_refused" } })
    const down = await callTool(gw.url, key, "sql_list_tables", { connection_id: 5 })
    expect(down.body).toMatchObject({ status: 502, error: "connection_unreachable", details: { hop: "ssh", reason: "server_unreachable" } })
    const started = Date.now()
    const silentAnswer = await callTool(gw.url, key, "sql_run", { connection_id: 7, statement: "SELECT 1" })
    expect(silentAnswer.body).toMatchObject({ status: 502, error: "connection_unreachable", details: { hop: "ssh", reason: "timeout" } })
    // Ended by its connect_timeout_ms (1.5 s), not by TCP or the store's 60 s deadlines: the 8.5 s
    // above it are slack for a machine at load 10.
    expect(Date.now() - started).toBeLessThan(10_000)
  })

  it("reads a private key from an environment variable, and names one that is not set", async () => {
    const fromEnv = await callTool(gw.url, key, "sql_run", { connection_id: 8, statement: "SELECT count(*)::int AS n FROM items" })
    expect(fromEnv.body).toMatchObject({ kind: "rows", rows: [{ n: expect.any(Number) }] })
    const unset = await callTool(gw.url, key, "sql_run", { connection_id: 9, statement: "SELECT 1" })
    expect(unset.body).toMatchObject({ status: 502, error: "connection_unreachable", details: { hop: "ssh", reason: "credentials_unavailable" } })
    expect(unset.body.message).toContain(UNSET_ENV)
    expect(fromEnv.text).not.toContain(clientKey.private.split("\n")[1]!)
  })

  it("names the database hop when the tunnel works and the database does not", async () => {
    const answer = await callTool(gw.url, key, "sql_run", { connection_id: 6, statement: "SELECT 1" })
    expect(answer.body).toMatchObject({ status: 502, error: "connection_unreachable", details: { hop: "database" } })
    expect(bastion.forwards).toContain("db.internal:1")
  })

  it("reports each DSN's hop from POST /connections/:id/test", async () => {
    const ok = (await (await gw.admin("POST", "/connections/1/test")).json()) as any
    expect(ok.results).toMatchObject([{ role: "edit", ok: true, flavor: "postgres" }])
    const hostKey = (await (await gw.admin("POST", "/connections/3/test")).json()) as any
    expect(hostKey.results[0]).toMatchObject({ ok: false, error: { error: "connection_unreachable", details: { hop: "ssh", reason: "host_key_mismatch" } } })
    const database = (await (await gw.admin("POST", "/connections/6/test")).json()) as any
    expect(database.results[0]).toMatchObject({ ok: false, error: { error: "connection_unreachable", details: { hop: "database" } }, details: { hop: "database" } })
  })

  it("opens the tunnel again after it drops mid-session", async () => {
    for (const id of [1, 2]) {
      const first = await callTool(gw.url, key, "sql_run", { connection_id: id, statement: "SELECT count(*) AS n FROM items" })
      expect(first.isError).toBe(false)
    }
    const loginsBefore = bastion.logins()
    bastion.dropSessions()
    for (const id of [1, 2]) {
      // The pooled sessions died with the tunnel; a call may see that once, and the next one works.
      let answer = await callTool(gw.url, key, "sql_run", { connection_id: id, statement: "SELECT count(*) AS n FROM items" })
      if (answer.isError) {
        expect(answer.body).toMatchObject({ status: 502, details: { hop: "ssh" } })
        answer = await callTool(gw.url, key, "sql_run", { connection_id: id, statement: "SELECT count(*) AS n FROM items" })
      }
      expect(answer.isError).toBe(false)
      expect(answer.body.kind).toBe("rows")
    }
    expect(bastion.logins()).toBeGreaterThan(loginsBefore)
  })

  it("fails a statement whose tunnel drops while it runs with the SSH hop, and the next call works", async () => {
    const marker = `mg_drop_${Date.now()}`
    let settled = false
    // A statement that waits rather than computes: cut off from its client, the server's backend
    // runs it to its end (it notices only when it writes the answer), and a count over two
    // billion rows took a core of this two-core machine for a minute after the test. It waits
    // for a lock this test holds, and is let go after the tunnel dropped.
    const locker = ManagedRuntime.make(PgClient.layer({ url: Redacted.make(pg.url), maxConnections: 1 }))
    const gate = Effect.runSync(Deferred.make<void>())
    const holding = locker.runPromise(Effect.gen(function*() {
      const sql = yield* SqlClient
      yield* sql.withTransaction(Effect.andThen(sql.unsafe("LOCK TABLE items IN ACCESS EXCLUSIVE MODE"), Deferred.await(gate)))
    }))
    const admin = new PgAdmin(pg.url)
    for (let locked = false; !locked;) {
      locked = (await admin.query(`SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'items' AND l.mode = 'AccessExclusiveLock' AND l.granted`)).length > 0
    }
    const running = callTool(gw.url, key, "sql_run", {
      connection_id: 1,
      statement: `SELECT count(*) AS ${marker} FROM items`,
      timeout_ms: 60_000
    }).finally(() => {
      settled = true
    })
    // Wait until the database runs it, then cut the tunnel under it. A call that ends before it
    // ever runs ends the wait, so its own failure is what the test reports (npm run test:stress
    // saw one answered 503 under load, and this loop waited out the test's timeout instead).
    for (let seen = false; !seen && !settled;) {
      const rows = await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE '%${marker}%' AND state = 'active' AND pid <> pg_backend_pid()`)
      seen = rows[0]!.n > 0
    }
    bastion.dropSessions()
    const answer = await running.finally(async () => {
      Effect.runSync(Deferred.succeed(gate, undefined))
      await holding
      await locker.dispose()
    })
    expect(answer.body).toMatchObject({ status: 502, error: "connection_unreachable", details: { hop: "ssh", reason: "connection_lost" } })
    let next = await callTool(gw.url, key, "sql_run", { connection_id: 1, statement: "SELECT 1 AS one" })
    if (next.isError) next = await callTool(gw.url, key, "sql_run", { connection_id: 1, statement: "SELECT 1 AS one" })
    expect(next.body).toMatchObject({ kind: "rows", rows: [{ one: 1 }] })
  })

  it("seals a tunnel's secrets added through the API and never shows them", async () => {
    const file = join(dir, "sealed.db")
    const secretsKey = "ssh-secrets-key-0123456789abcdef"
    const sealedGw = await startGateway(testConfig({ store: `sqlite:${file}`, secrets: { key: secretsKey } }))
    try {
      const created = await sealedGw.admin("POST", "/connections", {
        name: "tunnelled", dialect: "postgres", url: pgUrl,
        ssh: { host: "127.0.0.1", port: bastion.port, user: USER, private_key: clientKey.private, host_key_sha256: bastion.fingerprint }
      })
      expect(created.status).toBe(201)
      const view = (await created.json()) as any
      expect(view.ssh).toMatchObject({ host: "127.0.0.1", user: USER, private_key: "***", host_key_sha256: bastion.fingerprint })
      const id = view.id as number
      const patched = await sealedGw.admin("PATCH", `/connections/${id}`, {
        ssh: { host: "127.0.0.1", port: bastion.port, user: USER, password: SSH_PASSWORD, host_key_sha256: bastion.fingerprint }
      })
      expect(patched.status).toBe(200)
      const listed = await (await sealedGw.admin("GET", "/connections")).text()
      const tested = await (await sealedGw.admin("POST", `/connections/${id}/test`)).text()
      expect(JSON.parse(tested).results[0]).toMatchObject({ ok: true })
      const audit = await (await sealedGw.admin("GET", "/audit?limit=50")).text()
      const secretLine = clientKey.private.split("\n")[1]!
      for (const text of [listed, tested, audit]) {
        expect(text).not.toContain(SSH_PASSWORD)
        expect(text).not.toContain(secretLine)
      }
      expect(JSON.parse(listed).data[0].ssh.password).toBe("***")
    } finally {
      await sealedGw.close()
    }
    const db = new DatabaseSync(file)
    const rows = db.prepare("SELECT ssh, environment FROM connections").all() as Array<{ ssh: string; environment: string }>
    db.close()
    expect(rows[0]!.ssh.startsWith(SEALED_PREFIX)).toBe(true)
    expect(readFileSync(file).includes(SSH_PASSWORD)).toBe(false)
    // A key rotation seals the tunnel again under the new key, as it does the DSNs.
    const rotatedKey = "ssh-rotated-key-0123456789abcdef"
    const rotated = await startGateway(testConfig({ store: `sqlite:${file}`, secrets: { key: rotatedKey, previous_keys: [secretsKey] } }))
    try {
      const listed = (await (await rotated.admin("GET", "/connections")).json()) as any
      expect(listed.data[0].ssh).toMatchObject({ host: "127.0.0.1", password: "***" })
    } finally {
      await rotated.close()
    }
    const after = new DatabaseSync(file)
    const resealed = after.prepare("SELECT ssh FROM connections").get() as { ssh: string }
    after.close()
    expect(openWith(resealed.ssh, secretsKey)).toBeUndefined()
    expect(JSON.parse(openWith(resealed.ssh, rotatedKey)!)).toMatchObject({ password: SSH_PASSWORD })
  })

  it("refuses a tunnel without exactly one credential and one host key (no trust on first use)", async () => {
    const base = { name: "bad", dialect: "postgres", url: pgUrl }
    for (const ssh of [
      { host: "b", user: "u", private_key_file: "/k" },
      { host: "b", user: "u", host_key_sha256: bastion.fingerprint },
      { host: "b", user: "u", private_key_file: "/k", password_env: "X", host_key_sha256: bastion.fingerprint },
      { host: "b", user: "u", private_key_file: "/k", host_key_sha256: "MD5:aa" }
    ]) {
      const response = await gw.admin("POST", "/connections", { ...base, ssh })
      expect(response.status).toBe(400)
      expect(await response.json()).toMatchObject({ error: "validation_failed" })
    }
  })
})
