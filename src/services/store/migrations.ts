/**
 * Versioned migrations, one record per dialect, run by migrate.ts. Ids only ever grow; what a
 * released migration does is never changed (its statements may be rewritten to the same result,
 * as migration 7's were when they proved quadratic). Each must run in time linear or n log n in
 * its tables: it runs at start, before a replica serves. Timestamps are ISO-8601 text in both dialects so queries stay portable and
 * sort correctly as strings.
 */
import * as Effect from "effect/Effect"
import { SqlClient } from "effect/sql/SqlClient"
import { COMMIT_BATCH_FUNCTION } from "./credit-admit-pg.ts"

type Dialect = "sqlite" | "postgres"

const exec = (statements: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient
    for (const statement of statements) yield* sql.unsafe(statement)
  })

const initial = (dialect: Dialect) => {
  const serial = dialect === "sqlite" ? "INTEGER PRIMARY KEY AUTOINCREMENT" : "BIGSERIAL PRIMARY KEY"
  const big = dialect === "sqlite" ? "INTEGER" : "BIGINT"
  return exec([
    `CREATE TABLE workspaces (
      id TEXT PRIMARY KEY,
      name TEXT NOT NULL,
      credits ${big} NOT NULL CHECK (credits >= 0),
      created_at TEXT NOT NULL
    )`,
    `CREATE TABLE api_keys (
      id TEXT PRIMARY KEY,
      workspace_id TEXT NOT NULL REFERENCES workspaces(id),
      name TEXT NOT NULL,
      key_hash TEXT NOT NULL UNIQUE,
      key_hint TEXT NOT NULL,
      is_active INTEGER NOT NULL,
      allowed_models TEXT,
      tools_enabled INTEGER NOT NULL,
      budget_max_requests ${big},
      budget_used ${big} NOT NULL DEFAULT 0,
      limits TEXT,
      expires_at TEXT,
      created_at TEXT NOT NULL,
      updated_at TEXT NOT NULL,
      last_used_at TEXT,
      previous_key_hash TEXT UNIQUE,
      previous_key_expires_at TEXT
    )`,
    `CREATE TABLE audit_log (
      seq ${serial},
      request_id TEXT NOT NULL,
      ts TEXT NOT NULL,
      key_id TEXT,
      method TEXT NOT NULL,
      endpoint TEXT NOT NULL,
      status INTEGER NOT NULL,
      error TEXT,
      model TEXT,
      provider TEXT,
      tool TEXT,
      connection_id INTEGER,
      credits ${big} NOT NULL DEFAULT 0,
      prompt_tokens INTEGER,
      completion_tokens INTEGER,
      duration_ms DOUBLE PRECISION NOT NULL,
      stream INTEGER NOT NULL,
      client_addr TEXT,
      details TEXT
    )`,
    `CREATE INDEX audit_log_key ON audit_log (key_id, seq)`,
    `CREATE INDEX audit_log_ts ON audit_log (ts)`,
    `CREATE INDEX audit_log_request ON audit_log (request_id)`,
    // A change counter lets every replica notice key changes made elsewhere with one cheap read.
    `CREATE TABLE key_changes (id INTEGER PRIMARY KEY, version ${big} NOT NULL)`,
    `INSERT INTO key_changes (id, version) VALUES (1, 0)`
  ])
}

/** Credits move only through ledger-backed operations; every row explains one change of the pool. */
const creditLedger = (dialect: Dialect) => {
  const serial = dialect === "sqlite" ? "INTEGER PRIMARY KEY AUTOINCREMENT" : "BIGSERIAL PRIMARY KEY"
  const big = dialect === "sqlite" ? "INTEGER" : "BIGINT"
  return exec([
    `CREATE TABLE credit_ledger (
      seq ${serial},
      ts TEXT NOT NULL,
      workspace_id TEXT NOT NULL,
      kind TEXT NOT NULL,
      amount ${big} NOT NULL,
      balance_after ${big} NOT NULL,
      actor TEXT NOT NULL,
      key_id TEXT,
      request_id TEXT,
      model TEXT,
      note TEXT
    )`,
    `CREATE INDEX credit_ledger_request ON credit_ledger (request_id)`,
    `INSERT INTO credit_ledger (ts, workspace_id, kind, amount, balance_after, actor, note)
       SELECT created_at, id, 'initial', credits, credits, 'config', 'initial pool' FROM workspaces`
  ])
}

/** Database connections for the SQL tools, per-key grants on them, MCP sessions, statement history. */
const sqlTools = (dialect: Dialect) => {
  const serial = dialect === "sqlite" ? "INTEGER PRIMARY KEY AUTOINCREMENT" : "BIGSERIAL PRIMARY KEY"
  return exec([
    `CREATE TABLE connections (
      id INTEGER PRIMARY KEY,
      name TEXT NOT NULL,
      dialect TEXT NOT NULL,
      url TEXT NOT NULL,
      read_url TEXT,
      default_schema TEXT,
      created_at TEXT NOT NULL
    )`,
    `CREATE TABLE key_grants (
      key_id TEXT NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
      connection_id INTEGER NOT NULL,
      role TEXT NOT NULL,
      granted_at TEXT NOT NULL,
      PRIMARY KEY (key_id, connection_id)
    )`,
    `CREATE TABLE mcp_sessions (
      id TEXT PRIMARY KEY,
      key_id TEXT NOT NULL,
      protocol_version TEXT NOT NULL,
      created_at TEXT NOT NULL,
      expires_at TEXT NOT NULL
    )`,
    `CREATE INDEX mcp_sessions_expiry ON mcp_sessions (expires_at)`,
    `CREATE TABLE sql_history (
      seq ${serial},
      ts TEXT NOT NULL,
      key_id TEXT NOT NULL,
      connection_id INTEGER NOT NULL,
      statement TEXT NOT NULL,
      duration_ms DOUBLE PRECISION NOT NULL,
      kind TEXT NOT NULL,
      row_count INTEGER NOT NULL
    )`,
    `CREATE INDEX sql_history_key ON sql_history (key_id, connection_id, seq)`
  ])
}

/**
 * Open credit reservations (decisions section 10): a charge stays here, owned by the replica that
 * took it, until its request ends (settled: the row goes; refunded: the row goes with a refund
 * ledger row). `replicas` holds each live replica's lease; a reservation whose owner's lease has
 * lapsed belongs to a dead replica and is refunded by a live one.
 */
const reservations = (dialect: Dialect) => {
  const big = dialect === "sqlite" ? "INTEGER" : "BIGINT"
  return exec([
    `CREATE TABLE credit_reservations (
      request_id TEXT PRIMARY KEY,
      owner TEXT NOT NULL,
      amount ${big} NOT NULL,
      key_id TEXT,
      model TEXT,
      method TEXT,
      endpoint TEXT,
      created_at TEXT NOT NULL
    )`,
    `CREATE INDEX credit_reservations_owner ON credit_reservations (owner)`,
    `CREATE TABLE replicas (
      id TEXT PRIMARY KEY,
      lease_until ${big} NOT NULL,
      started_at TEXT NOT NULL
    )`
  ])
}

/**
 * Identity-provider subjects (decisions section 11): one row per issuer + subject seen, keyed by
 * its subject id, holding what must outlive a token: the request budget it has used (its maximum
 * comes from the policy in the config) and when it was first and last seen.
 */
const identitySubjects = (dialect: Dialect) => {
  const big = dialect === "sqlite" ? "INTEGER" : "BIGINT"
  return exec([
    `CREATE TABLE identity_subjects (
      id TEXT PRIMARY KEY,
      issuer TEXT NOT NULL,
      subject TEXT NOT NULL,
      budget_used ${big} NOT NULL DEFAULT 0,
      first_seen_at TEXT NOT NULL,
      last_seen_at TEXT NOT NULL,
      UNIQUE (issuer, subject)
    )`
  ])
}

/**
 * Credit blocks (issue 14): a replica leases a block of the pool in one transaction and spends it
 * in memory, writing the per-request charges in batches. `workspaces.credits` stays the balance
 * (the ledger's sum); `leased` is what blocks still hold of it, so `credits - leased` is what a
 * new block or a direct charge may take. `reclaim` is bumped by a replica that found the pool
 * short while others held blocks: every replica that sees it change returns its block.
 * The unique charge per request id makes a batch that was abandoned mid-commit and retried
 * (a frozen store) unable to charge twice.
 */
const creditBlocks = (dialect: Dialect) => {
  const big = dialect === "sqlite" ? "INTEGER" : "BIGINT"
  return exec([
    `ALTER TABLE workspaces ADD COLUMN leased ${big} NOT NULL DEFAULT 0`,
    `ALTER TABLE workspaces ADD COLUMN reclaim ${big} NOT NULL DEFAULT 0`,
    `CREATE TABLE credit_blocks (
      id TEXT PRIMARY KEY,
      owner TEXT NOT NULL,
      remaining ${big} NOT NULL CHECK (remaining >= 0),
      created_at TEXT NOT NULL
    )`,
    `CREATE INDEX credit_blocks_owner ON credit_blocks (owner)`,
    `CREATE UNIQUE INDEX credit_ledger_charge_once ON credit_ledger (request_id) WHERE kind = 'charge'`
  ])
}

/**
 * One audit record per request (issue 21): a request refunded as `replica_lost` had two, the
 * serving replica's and the sweeper's. Existing pairs are merged the way new ones are
 * (AuditRepo): the serving record stays, amended with the refund's outcome; any other duplicate
 * (a record written twice) keeps its first row. Then the request id is unique, which also makes
 * every audit write idempotent by request id.
 *
 * Every step is linear (or n log n) in the table (issue 31): each row's check is a semi-join on
 * request_id (a hash join in Postgres, a lookup in the request_id index in SQLite). Its first
 * release removed duplicates with `seq NOT IN (SELECT MIN(seq) ... GROUP BY request_id)`, which
 * Postgres cannot turn into a join (NOT IN's NULL semantics) and, once it has statistics, plans
 * as a subquery rescanned per row: quadratic, hours at 300,000 records. The result is the same.
 */
const auditOnePerRequest = (_dialect: Dialect) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient
    const [count] = yield* sql.unsafe<{ n: number | string }>(`SELECT COUNT(*) AS n FROM audit_log`)
    const records = Number(count?.n ?? 0)
    const step = (label: string, statement: string) =>
      Effect.gen(function*() {
        const started = performance.now()
        yield* sql.unsafe(statement)
        // Progress on a large table: which step, and how long it took.
        if (records >= 10_000) yield* Effect.logInfo(`store: audit_log (${records} records): ${label} in ${Math.round(performance.now() - started)} ms`)
      })
    yield* step(
      "found refunded requests",
      `CREATE TEMPORARY TABLE audit_lost_requests AS SELECT DISTINCT request_id FROM audit_log WHERE error = 'replica_lost'`
    )
    yield* step(
      "merged refunds into their serving records",
      `DELETE FROM audit_log WHERE error = 'replica_lost' AND EXISTS (
         SELECT 1 FROM audit_log o WHERE o.request_id = audit_log.request_id AND (o.error IS NULL OR o.error <> 'replica_lost'))`
    )
    yield* step(
      "marked them refunded",
      `UPDATE audit_log SET error = 'replica_lost', credits = 0 WHERE request_id IN (SELECT request_id FROM audit_lost_requests)`
    )
    yield* step(
      "removed records written twice",
      `DELETE FROM audit_log WHERE EXISTS (
         SELECT 1 FROM audit_log o WHERE o.request_id = audit_log.request_id AND o.seq < audit_log.seq)`
    )
    yield* sql.unsafe(`DROP TABLE audit_lost_requests`)
    yield* sql.unsafe(`DROP INDEX audit_log_request`)
    yield* step("made request_id unique", `CREATE UNIQUE INDEX audit_log_request_once ON audit_log (request_id)`)
  })

/**
 * Stored Responses (issue 24): each response the gateway answered with `store` not false, owned
 * by the key or identity subject that made it. `response` is the response object as answered
 * (output and usage included), `input_items` the request's own input items with references
 * resolved; a conversation continued by `previous_response_id` is the chain of these rows.
 * `provider` is set when the id is an upstream vendor's (a passthrough), null for the gateway's
 * own ids. `response_items` finds an item by id for `item_reference` (newest first); both tables
 * are swept by `expires_at`.
 */
const storedResponses = (dialect: Dialect) => {
  const big = dialect === "sqlite" ? "INTEGER" : "BIGINT"
  return exec([
    `CREATE TABLE stored_responses (
      id TEXT PRIMARY KEY,
      owner TEXT NOT NULL,
      provider TEXT,
      model TEXT NOT NULL,
      previous_response_id TEXT,
      response TEXT NOT NULL,
      input_items TEXT NOT NULL,
      bytes ${big} NOT NULL,
      created_at TEXT NOT NULL,
      expires_at TEXT NOT NULL
    )`,
    `CREATE INDEX stored_responses_expiry ON stored_responses (expires_at)`,
    `CREATE TABLE stored_response_items (
      owner TEXT NOT NULL,
      item_id TEXT NOT NULL,
      response_id TEXT NOT NULL,
      item TEXT NOT NULL,
      created_at TEXT NOT NULL,
      expires_at TEXT NOT NULL,
      PRIMARY KEY (owner, item_id, response_id)
    )`,
    `CREATE INDEX stored_response_items_response ON stored_response_items (response_id)`,
    `CREATE INDEX stored_response_items_expiry ON stored_response_items (expires_at)`
  ])
}

/**
 * The admin lists of keys and of identity-provider subjects page newest first, by (created_at, id)
 * and (first_seen_at, id) (issue 31): with these indexes each page is a short range scan from the
 * cursor instead of a sort of every row. The key filters (name, status, model, last use) are
 * checked on the rows walked in that order, so none needs its own index.
 */
const listOrder = (_dialect: Dialect) =>
  exec([
    `CREATE INDEX api_keys_list_order ON api_keys (created_at, id)`,
    `CREATE INDEX identity_subjects_list_order ON identity_subjects (first_seen_at, id)`
  ])

/**
 * Connections through SSH tunnels and production connections (issue 36). `ssh` is the tunnel as
 * JSON, sealed like the DSNs when `secrets.key` is set (it may hold a private key or password).
 * Adding columns with constant defaults rewrites nothing on either engine.
 */
const connectionSsh = (_dialect: Dialect) =>
  exec([
    `ALTER TABLE connections ADD COLUMN environment TEXT NOT NULL DEFAULT 'development'`,
    `ALTER TABLE connections ADD COLUMN ssh TEXT`
  ])

/**
 * Upstream MCP servers behind /v1/mcp (issue 37). `api_keys.mcp_servers` is the JSON array of
 * the server names a key may reach (NULL, as every existing key gets, is none). `mcp_tool_pins`
 * holds each upstream tool's definition (name, description, input schema) as the gateway first
 * saw it or an admin last approved it, shared by every replica: a definition that differs is
 * withheld until approved. Adding a nullable column and a new table is constant time.
 */
const mcpServers = (_dialect: Dialect) =>
  exec([
    `ALTER TABLE api_keys ADD COLUMN mcp_servers TEXT`,
    `CREATE TABLE mcp_tool_pins (
      server TEXT NOT NULL,
      tool TEXT NOT NULL,
      definition TEXT NOT NULL,
      pinned_at TEXT NOT NULL,
      PRIMARY KEY (server, tool)
    )`
  ])

/**
 * Budget and pool alerts (issue 33): one row per alert (kind, target, period start, threshold),
 * the claim that makes it sent once across replicas, with its delivery state. A replica owns a
 * pending row while its `lease_until` (the store's clock) is ahead; one that dies mid-delivery
 * leaves the row to whichever replica finds the lease lapsed. A new table: constant time.
 */
const alerts = (dialect: Dialect) => {
  const big = dialect === "sqlite" ? "INTEGER" : "BIGINT"
  return exec([
    `CREATE TABLE alerts (
      kind TEXT NOT NULL,
      target TEXT NOT NULL,
      period_start TEXT NOT NULL,
      threshold TEXT NOT NULL,
      period TEXT NOT NULL,
      used_micros ${big} NOT NULL,
      limit_micros ${big} NOT NULL,
      crossed_at TEXT NOT NULL,
      state TEXT NOT NULL,
      owner TEXT,
      lease_until TEXT,
      attempts INTEGER NOT NULL DEFAULT 0,
      last_error TEXT,
      delivered_at TEXT,
      PRIMARY KEY (kind, target, period_start, threshold)
    )`,
    `CREATE INDEX alerts_pending ON alerts (state, lease_until)`
  ])
}

/**
 * Spend reports (issue 33): each audit record keeps the cache tokens of its input (both part of
 * `prompt_tokens`), the end user the client named and the team of its key. Nullable columns
 * without a default: constant time on both engines, every existing record reads NULL (no end
 * user, no team, cache unknown). The reports filter by team and by end user within a time
 * window; the indexes are partial, over the records that have one, so building them on a large
 * existing table reads it once and writes nothing for its rows (all NULL).
 */
const spendReports = (_dialect: Dialect) =>
  exec([
    `ALTER TABLE audit_log ADD COLUMN cache_read_tokens INTEGER`,
    `ALTER TABLE audit_log ADD COLUMN cache_write_tokens INTEGER`,
    `ALTER TABLE audit_log ADD COLUMN end_user TEXT`,
    `ALTER TABLE audit_log ADD COLUMN team_id TEXT`,
    `CREATE INDEX audit_log_team ON audit_log (team_id, ts) WHERE team_id IS NOT NULL`,
    `CREATE INDEX audit_log_end_user ON audit_log (end_user, ts) WHERE end_user IS NOT NULL`
  ])

/**
 * Teams (issue 33): a team groups keys under one list of models, one budget and shared limits.
 * Budget amounts are micro-credits (src/domain/money.ts); the team's budget usage is kept where
 * every budget's is. `api_keys.team_id` names a key's team (NULL: none), indexed for a team's
 * member count and the refusal to delete a team that still has keys; the foreign key makes a key
 * never point at a deleted team, even when a key change and a team deletion race on two
 * replicas. A new table and a nullable column with no default rewrite nothing: constant time,
 * plus one index build (n log n) on api_keys.
 */
const teams = (dialect: Dialect) => {
  const big = dialect === "sqlite" ? "INTEGER" : "BIGINT"
  return exec([
    `CREATE TABLE teams (
      id TEXT PRIMARY KEY,
      name TEXT NOT NULL UNIQUE,
      allowed_models TEXT,
      max_requests ${big},
      max_credits_micros ${big},
      period TEXT,
      requests_per_minute ${big},
      concurrent_streams ${big},
      tokens_per_minute ${big},
      created_at TEXT NOT NULL,
      updated_at TEXT NOT NULL
    )`,
    `CREATE INDEX teams_list_order ON teams (created_at, id)`,
    `ALTER TABLE api_keys ADD COLUMN team_id TEXT REFERENCES teams(id)`,
    `CREATE INDEX api_keys_team ON api_keys (team_id)`
  ])
}

/**
 * Micro-credits (issue 33): every credit amount the store holds becomes an integer number of
 * micro-credits (1 credit = 1,000,000; src/domain/money.ts), so fractional prices add up
 * exactly: the pool (balance and leased), the ledger (amounts and balances), open reservations,
 * leased blocks and the audit trail's `credits`. Plain UPDATEs, one pass over each table.
 *
 * Budgets move to `budget_usage`, one row per holder (a key, an identity subject, a team) and
 * period (`period_start`: '' for a budget that never resets, else `day:`/`week:`/`month:` and the
 * period's first UTC day), with the requests and the micro-credits counted in it; each key's and
 * subject's requests counted so far are carried over as their never-resetting usage. A key gets
 * its maximum in credits and its period; a reservation names the budget rows it counted its
 * credits against (`budgets`), so the part a request did not spend goes back to them.
 *
 * An amount past MAX_CREDITS (about 9 billion credits, the most a JavaScript number holds
 * exactly as micros) cannot be converted: the migration refuses, naming it, and changes nothing
 * (its transaction rolls back); the operator lowers it with the previous release first.
 */
const MICROS = 1_000_000
const MAX_CREDITS_AT_13 = Math.floor(Number.MAX_SAFE_INTEGER / MICROS)
const microCredits = (dialect: Dialect) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient
    const big = dialect === "sqlite" ? "INTEGER" : "BIGINT"
    const checks = [
      ["workspaces.credits", `SELECT MAX(credits) AS n FROM workspaces`],
      ["credit_ledger.amount", `SELECT MAX(ABS(amount)) AS n FROM credit_ledger`],
      ["credit_ledger.balance_after", `SELECT MAX(ABS(balance_after)) AS n FROM credit_ledger`],
      ["audit_log.credits", `SELECT MAX(ABS(credits)) AS n FROM audit_log`]
    ] as const
    for (const [column, query] of checks) {
      const [row] = yield* sql.unsafe<{ n: number | string | null }>(query)
      const value = row?.n === null || row?.n === undefined ? 0 : Number(row.n)
      if (value > MAX_CREDITS_AT_13) {
        return yield* Effect.fail(
          new Error(
            `store: cannot convert credits to micro-credits: ${column} holds ${value} credits, more than the ${MAX_CREDITS_AT_13} this release can hold exactly; lower it with the previous release first`
          )
        )
      }
    }
    yield* exec([
      `UPDATE workspaces SET credits = credits * ${MICROS}, leased = leased * ${MICROS}`,
      `UPDATE credit_ledger SET amount = amount * ${MICROS}, balance_after = balance_after * ${MICROS}`,
      `UPDATE credit_reservations SET amount = amount * ${MICROS}`,
      `UPDATE credit_blocks SET remaining = remaining * ${MICROS}`,
      `UPDATE audit_log SET credits = credits * ${MICROS} WHERE credits <> 0`,
      `ALTER TABLE credit_reservations ADD COLUMN budgets TEXT`,
      `ALTER TABLE api_keys ADD COLUMN budget_max_credits ${big}`,
      `ALTER TABLE api_keys ADD COLUMN budget_period TEXT`,
      `CREATE TABLE budget_usage (
        holder TEXT NOT NULL,
        period_start TEXT NOT NULL,
        requests ${big} NOT NULL DEFAULT 0,
        credits ${big} NOT NULL DEFAULT 0,
        PRIMARY KEY (holder, period_start)
      )`,
      `INSERT INTO budget_usage (holder, period_start, requests, credits)
         SELECT id, '', budget_used, 0 FROM api_keys WHERE budget_used > 0`,
      `INSERT INTO budget_usage (holder, period_start, requests, credits)
         SELECT id, '', budget_used, 0 FROM identity_subjects WHERE budget_used > 0`
    ])
  })

/**
 * Pool alerts (issue 33) measure the pool against its last top-up: a partial index over the
 * top-ups (and the initial credits) finds it without reading the charges after it. Built by one
 * pass over the ledger, holding only the few top-up rows.
 */
const ledgerTopups = (_dialect: Dialect) =>
  exec([`CREATE INDEX credit_ledger_topups ON credit_ledger (seq) WHERE kind IN ('initial', 'topup')`])

/**
 * A cheaper paid commit on SQLite (issue 38): a paid request's group commit wrote ~10 WAL pages
 * against a free one's 1-2; three of them were bookkeeping nothing reads. Each change below takes
 * one b-tree out of every paid commit:
 *
 * - The ledger loses `AUTOINCREMENT`, which updates `sqlite_sequence` on every insert. It only
 *   guarantees that the id of a deleted last row is never used again, and ledger rows are never
 *   deleted (nothing in the gateway, the CLI or a backup does): `seq` is then max + 1, unique and
 *   increasing as before, so its readers (the ledger's order and `cursor` paging, `lastTopup`,
 *   backups' sums) see the same. Rows keep their `seq`.
 * - Its two `request_id` indexes become one. The plain one served the ledger read by request id,
 *   the partial unique one (charges only) made a retried batch unable to charge twice. One unique
 *   index on (request_id, 0 for a charge / else seq) does both: a second charge of a request
 *   collides on (request_id, 0), any other row is unique by its seq, and request_id leads, so
 *   both queries still search it (a request's handful of rows are sorted by seq after).
 * - Reservations become `WITHOUT ROWID`: looked up, inserted and deleted only by their request id,
 *   so the primary key's b-tree is the table (a rowid table kept the row and a separate
 *   `request_id` index). The `owner` index goes: no query searches by owner (the orphan sweep
 *   reads every reservation not of this replica, a handful of requests in flight).
 *
 * Both tables are rebuilt the linear way (new table, one INSERT ... SELECT in key order, drop,
 * rename, indexes built once): about 1.1 s for 1,000,000 ledger rows on a two-core machine
 * (README "Upgrading"). A reservation with a NULL request id (never written by the gateway) would
 * fail the copy, and with it the upgrade, rather than lose credits to refund.
 * Postgres has no sqlite_sequence or rowid; its two ledger indexes stay (one write each, in a
 * commit that is a network round trip anyway): unchanged.
 */
const cheaperPaidCommit = (dialect: Dialect) =>
  dialect === "postgres" ? Effect.void : Effect.gen(function*() {
    const sql = yield* SqlClient
    const [ledger] = yield* sql.unsafe<{ n: number }>(`SELECT COUNT(*) AS n FROM credit_ledger`)
    const rows = Number(ledger?.n ?? 0)
    // As migration 7's steps: a large table's rebuild is worth a line, a small one's is not.
    const step = (what: string, statements: ReadonlyArray<string>) =>
      Effect.gen(function*() {
        const started = performance.now()
        yield* exec(statements)
        if (rows >= 10_000) yield* Effect.logInfo(`store: ${what} in ${Math.round(performance.now() - started)} ms`)
      })
    yield* step(`credit_ledger (${rows} rows): rebuilt without AUTOINCREMENT, one request_id index`, [
      `CREATE TABLE credit_ledger_18 (
        seq INTEGER PRIMARY KEY,
        ts TEXT NOT NULL,
        workspace_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        amount INTEGER NOT NULL,
        balance_after INTEGER NOT NULL,
        actor TEXT NOT NULL,
        key_id TEXT,
        request_id TEXT,
        model TEXT,
        note TEXT
      )`,
      `INSERT INTO credit_ledger_18 (seq, ts, workspace_id, kind, amount, balance_after, actor, key_id, request_id, model, note)
         SELECT seq, ts, workspace_id, kind, amount, balance_after, actor, key_id, request_id, model, note FROM credit_ledger ORDER BY seq`,
      `DROP TABLE credit_ledger`,
      `ALTER TABLE credit_ledger_18 RENAME TO credit_ledger`,
      `CREATE UNIQUE INDEX credit_ledger_request ON credit_ledger (request_id, (CASE WHEN kind = 'charge' THEN 0 ELSE seq END))`,
      `CREATE INDEX credit_ledger_topups ON credit_ledger (seq) WHERE kind IN ('initial', 'topup')`
    ])
    yield* step(`credit_reservations: rebuilt WITHOUT ROWID`, [
      `CREATE TABLE credit_reservations_18 (
        request_id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        amount INTEGER NOT NULL,
        key_id TEXT,
        model TEXT,
        method TEXT,
        endpoint TEXT,
        created_at TEXT NOT NULL,
        budgets TEXT
      ) WITHOUT ROWID`,
      `INSERT INTO credit_reservations_18 (request_id, owner, amount, key_id, model, method, endpoint, created_at, budgets)
         SELECT request_id, owner, amount, key_id, model, method, endpoint, created_at, budgets FROM credit_reservations ORDER BY request_id`,
      `DROP TABLE credit_reservations`,
      `ALTER TABLE credit_reservations_18 RENAME TO credit_reservations`
    ])
  })

/**
 * A Postgres group commit in one round trip instead of five (issue 38): the function
 * credit-admit-pg.ts describes. Creating it reads no table, so it takes no time on any store;
 * SQLite runs its commits in this process and needs none.
 */
const commitBatchFunction = (dialect: Dialect) => dialect === "postgres" ? exec([COMMIT_BATCH_FUNCTION]) : Effect.void

/**
 * A cheaper stored-response save on SQLite (issue 38): each save wrote an entry into the items'
 * `response_id` index, a random key (a response id) and so a page of its own in every commit,
 * for a lookup only the replacement or deletion of a response makes. Those now find a response's
 * items through the expiry index instead: the items of a response are written with its
 * `expires_at` (the same text, in every release since migration 9), so `expires_at = ? AND
 * response_id = ? AND owner = ?` reads the few items stored in that millisecond; the sweep reads
 * that index by range as before. Dropping an index frees its pages and reads no row: well under
 * a second for 1,000,000 items. Postgres keeps its index (a write there is the server's, not the
 * gateway's; and during a rolling upgrade the previous release's replicas still delete by
 * `response_id`): unchanged.
 */
const storedItemsByExpiry = (dialect: Dialect) =>
  dialect === "postgres" ? Effect.void : exec([`DROP INDEX stored_response_items_response`])

/** Every migration this release knows, by `<id>_<name>`; run by migrate.ts. */
export const migrationsFor = (dialect: Dialect) => ({
  "1_initial": initial(dialect),
  "2_credit_ledger": creditLedger(dialect),
  "3_sql_tools": sqlTools(dialect),
  "4_credit_reservations": reservations(dialect),
  "5_identity_subjects": identitySubjects(dialect),
  "6_credit_blocks": creditBlocks(dialect),
  "7_audit_one_per_request": auditOnePerRequest(dialect),
  "9_stored_responses": storedResponses(dialect),
  "10_list_order": listOrder(dialect),
  "11_connection_ssh": connectionSsh(dialect),
  "12_mcp_servers": mcpServers(dialect),
  "13_micro_credits": microCredits(dialect),
  "14_teams": teams(dialect),
  "15_spend_reports": spendReports(dialect),
  "16_alerts": alerts(dialect),
  "17_ledger_topups": ledgerTopups(dialect),
  "18_cheaper_paid_commit": cheaperPaidCommit(dialect),
  "19_commit_batch_function": commitBatchFunction(dialect),
  "20_stored_items_by_expiry": storedItemsByExpiry(dialect)
})
