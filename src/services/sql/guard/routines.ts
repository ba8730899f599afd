/**
 * The second half of the guard's function check: the calls the parser found, classified from
 * the database's own catalogue (pg_proc on Postgres, information_schema.ROUTINES on MySQL)
 * instead of a list of names known to be dangerous, which always misses one.
 *
 * A call is decided by the strictest of the catalogue entries it could resolve to:
 * - nothing in the catalogue by that name (where the name resolves): refused. A function the
 *   guard cannot classify is not run, whatever the role.
 * - Postgres built-ins (pg_catalog, information_schema): immutable and stable ones compute
 *   values; volatile ones only when on the list below of known-harmless ones (random(),
 *   clock_timestamp(), sizes...). Every other volatile built-in (ts_rewrite's SQL form,
 *   query_to_xml, pg_terminate_backend, dblink, lo_*, ...) is refused even if no list names it.
 * - Functions of the database's users: SECURITY DEFINER (runs with its owner's rights),
 *   volatile (may change data), written in a language other than SQL, PL/pgSQL or C, or a
 *   SQL/PL/pgSQL function taking text it could EXECUTE: the statement needs the edit role
 *   (the read role is refused with sql_gate_blocked). The guard cannot see into a function's
 *   body: what such a function does is the database users' privileges to bound (README).
 * - MySQL: built-ins are decided by the parser's allow-list (functions.ts); a stored function
 *   declared MODIFIES SQL DATA or SQL SECURITY DEFINER needs the edit role.
 */
import type { Dialect, FunctionCall } from "./verdict.ts"
import type { Finding } from "./verdict.ts"

/** One catalogue entry, as the drivers report it (drivers/types.ts RoutineInfo). */
export interface Routine {
  readonly schema: string
  readonly name: string
  readonly volatility: "immutable" | "stable" | "volatile"
  readonly securityDefiner: boolean
  readonly language: string
  readonly textArgument: boolean
  readonly modifiesData?: boolean
  /** Arguments the function needs at least and takes at most (-1: variadic); undefined when unknown. */
  readonly minArgs?: number
  readonly maxArgs?: number
}

export interface Catalogue {
  readonly path: ReadonlyArray<string>
  readonly routines: ReadonlyArray<Routine>
}

const BUILTIN_SCHEMAS = new Set(["pg_catalog", "information_schema"])

/** Volatile Postgres built-ins that only read the clock, randomness, sizes or this session's own state. */
const PG_HARMLESS_VOLATILE = new Set([
  "random",
  "random_normal",
  "clock_timestamp",
  "timeofday",
  "gen_random_uuid",
  "uuidv4",
  "uuidv7",
  "currval",
  "lastval",
  "pg_relation_size",
  "pg_table_size",
  "pg_total_relation_size",
  "pg_indexes_size",
  "pg_database_size",
  "pg_tablespace_size",
  "pg_partition_tree",
  "pg_partition_ancestors",
  "pg_sequence_last_value",
  "pg_is_in_recovery",
  "pg_jit_available",
  "pg_xact_status",
  "txid_status",
  "pg_xact_commit_timestamp",
  "pg_current_wal_lsn",
  "pg_current_wal_insert_lsn",
  "pg_current_wal_flush_lsn",
  "pg_last_wal_receive_lsn",
  "pg_last_wal_replay_lsn",
  "pg_last_xact_replay_timestamp",
  "pg_is_wal_replay_paused",
  "pg_get_wal_replay_pause_state",
  "pg_notification_queue_usage",
  "pg_collation_actual_version",
  "pg_database_collation_actual_version"
])

/** Languages whose functions can only do what SQL can; C is how extensions ship plain functions. */
const SEEN_LANGUAGES = new Set(["sql", "plpgsql", "c", "internal"])

const label = (call: FunctionCall) => `${call.schema === undefined ? "" : `${call.schema}.`}${call.name}()`

const acceptsArity = (routine: Routine, call: FunctionCall): boolean => {
  if (call.argCount === undefined || routine.minArgs === undefined || routine.maxArgs === undefined) return true
  return call.argCount >= routine.minArgs && (routine.maxArgs < 0 || call.argCount <= routine.maxArgs)
}

const postgresRoutine = (call: FunctionCall, routine: Routine): Finding | undefined => {
  const name = label(call)
  if (BUILTIN_SCHEMAS.has(routine.schema)) {
    if (routine.volatility !== "volatile" || PG_HARMLESS_VOLATILE.has(routine.name)) return undefined
    return { level: "refused", reason: `${name} is a volatile built-in the guard does not know to be harmless.` }
  }
  if (routine.securityDefiner) {
    return { level: "write", reason: `${name} is SECURITY DEFINER: it runs with its owner's privileges, which the guard cannot see.` }
  }
  if (routine.volatility === "volatile") return { level: "write", reason: `${name} is volatile: it may change data.` }
  if (!SEEN_LANGUAGES.has(routine.language)) {
    return { level: "write", reason: `${name} is written in ${routine.language}, which can do what SQL cannot.` }
  }
  if (routine.textArgument && (routine.language === "sql" || routine.language === "plpgsql")) {
    return { level: "write", reason: `${name} takes text it could run as SQL, unseen by the guard.` }
  }
  return undefined
}

const mysqlRoutine = (call: FunctionCall, routine: Routine): Finding | undefined => {
  const name = label(call)
  if (routine.securityDefiner) {
    return { level: "write", reason: `${name} runs with its definer's privileges (SQL SECURITY DEFINER), which the guard cannot see.` }
  }
  if (routine.modifiesData === true) return { level: "write", reason: `${name} is declared MODIFIES SQL DATA.` }
  return undefined
}

const rank = { write: 1, refused: 2 } as const

/**
 * The findings the catalogue gives for a statement's calls; an empty list means every call is a
 * plain read. `unknown: "defer"` leaves names the catalogue does not have to the database (a
 * write on the edit DSN, which answers "does not exist" itself); "refuse" refuses them.
 */
export const classifyCalls = (
  dialect: Dialect,
  calls: ReadonlyArray<FunctionCall>,
  catalogue: Catalogue,
  unknown: "refuse" | "defer" = "refuse"
): Array<Finding> => {
  const fold = (name: string) => (dialect === "mysql" ? name.toLowerCase() : name)
  const path = catalogue.path.map(fold)
  const findings: Array<Finding> = []
  for (const call of calls) {
    const schema = call.schema === undefined ? undefined : fold(call.schema)
    const candidates = catalogue.routines.filter((routine) =>
      fold(routine.name) === fold(call.name) &&
      (schema === undefined ? path.includes(fold(routine.schema)) : fold(routine.schema) === schema) &&
      acceptsArity(routine, call)
    )
    if (candidates.length === 0) {
      if (unknown === "defer") continue
      findings.push({
        level: "refused",
        reason: dialect === "mysql"
          ? `${label(call)} is neither a built-in the guard knows to be safe nor a stored function of this database.`
          : `${label(call)} is not a function this database has; the guard cannot classify it.`
      })
      continue
    }
    let strictest: Finding | undefined
    for (const routine of candidates) {
      const found = dialect === "mysql" ? mysqlRoutine(call, routine) : postgresRoutine(call, routine)
      if (found !== undefined && (strictest === undefined || rank[found.level] > rank[strictest.level])) strictest = found
    }
    if (strictest !== undefined) findings.push(strictest)
  }
  return findings
}

/** Distinct names to look up, in the form the driver matches them. */
export const callNames = (calls: ReadonlyArray<FunctionCall>): Array<string> => [...new Set(calls.map((c) => c.name))]
