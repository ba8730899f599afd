/**
 * Functions whose mere call is a side effect the read role must not have, or that nobody may
 * run through the tools. Names are matched case-insensitively and whatever schema qualifies
 * them: a user function that shadows one of these names is refused too, which is the safe side.
 */
import type { Finding, FunctionCall } from "./verdict.ts"

export type { FunctionCall } from "./verdict.ts"

interface Rule {
  readonly level: Finding["level"]
  readonly why: string
}

const SLEEP: Rule = { level: "refused", why: "sleeps and holds the connection" }
const BURN: Rule = { level: "refused", why: "burns server CPU on purpose" }
const SIGNAL: Rule = { level: "refused", why: "signals or controls server processes" }
const SERVER_ADMIN: Rule = { level: "refused", why: "changes server-wide state" }
const LOCK: Rule = { level: "refused", why: "takes a session-level lock that outlives the call" }
const FILES: Rule = { level: "refused", why: "reads or writes files on the database server" }
const LARGE_OBJECT: Rule = { level: "refused", why: "manipulates large objects, which can reach server files" }
const REMOTE: Rule = { level: "refused", why: "opens connections to other servers" }
const DYNAMIC_SQL: Rule = { level: "refused", why: "runs SQL given as text, which the guard cannot inspect" }
const SETTING: Rule = { level: "refused", why: "changes a session setting that would leak into the pooled connection" }
const XID: Rule = { level: "refused", why: "assigns a transaction id or exports a snapshot" }
const REPLICATION: Rule = { level: "refused", why: "changes replication state" }
const PROGRAM: Rule = { level: "refused", why: "runs an operating-system command" }
const VARIABLE: Rule = { level: "refused", why: "sets session state that would leak into the pooled connection" }
const INSPECT: Rule = { level: "refused", why: "shows other sessions and their queries" }
const SEQUENCE: Rule = { level: "write", why: "advances or sets a sequence" }
const NOTIFY: Rule = { level: "write", why: "sends a notification to other sessions" }

const pgExact: ReadonlyMap<string, Rule> = new Map([
  ["pg_sleep", SLEEP],
  ["pg_sleep_for", SLEEP],
  ["pg_sleep_until", SLEEP],
  ["pg_terminate_backend", SIGNAL],
  ["pg_cancel_backend", SIGNAL],
  ["pg_signal_backend", SIGNAL],
  ["pg_reload_conf", SIGNAL],
  ["pg_rotate_logfile", SIGNAL],
  ["pg_logfile_rotate", SIGNAL],
  ["pg_log_backend_memory_contexts", SIGNAL],
  ["pg_promote", SIGNAL],
  ["pg_switch_wal", SERVER_ADMIN],
  ["pg_switch_xlog", SERVER_ADMIN],
  ["pg_create_restore_point", SERVER_ADMIN],
  ["pg_start_backup", SERVER_ADMIN],
  ["pg_stop_backup", SERVER_ADMIN],
  ["pg_backup_start", SERVER_ADMIN],
  ["pg_backup_stop", SERVER_ADMIN],
  ["pg_log_standby_snapshot", SERVER_ADMIN],
  ["pg_import_system_collations", SERVER_ADMIN],
  ["pg_stat_statements_reset", SERVER_ADMIN],
  ["pg_stat_file", FILES],
  ["pg_logdir_ls", FILES],
  ["loread", LARGE_OBJECT],
  ["lowrite", LARGE_OBJECT],
  ["query_to_xml", DYNAMIC_SQL],
  ["query_to_xmlschema", DYNAMIC_SQL],
  ["query_to_xml_and_xmlschema", DYNAMIC_SQL],
  ["cursor_to_xml", DYNAMIC_SQL],
  ["cursor_to_xmlschema", DYNAMIC_SQL],
  ["ts_stat", DYNAMIC_SQL],
  ["connectby", DYNAMIC_SQL],
  ["set_config", SETTING],
  ["txid_current", XID],
  ["pg_current_xact_id", XID],
  ["pg_export_snapshot", XID],
  ["pg_logical_emit_message", REPLICATION],
  ["pg_sync_replication_slots", REPLICATION],
  ["nextval", SEQUENCE],
  ["setval", SEQUENCE],
  ["pg_notify", NOTIFY],
  ["pg_stat_get_activity", INSPECT],
  ["pg_stat_get_progress_info", INSPECT],
  ["pg_blocking_pids", INSPECT],
  ["pg_safe_snapshot_blocking_pids", INSPECT],
  ["pg_lock_status", INSPECT],
  ["pg_stat_statements", INSPECT],
  ["pg_get_backend_memory_contexts", INSPECT],
  ["database_to_xml", DYNAMIC_SQL],
  ["database_to_xmlschema", DYNAMIC_SQL],
  ["database_to_xml_and_xmlschema", DYNAMIC_SQL],
  ["schema_to_xml", DYNAMIC_SQL],
  ["schema_to_xmlschema", DYNAMIC_SQL],
  ["schema_to_xml_and_xmlschema", DYNAMIC_SQL]
])

/** Functions that run SQL text only in some of their forms, by argument count. */
const pgByArity: ReadonlyMap<string, readonly [number, Rule]> = new Map([
  // ts_rewrite(query, select_text) runs the SELECT it is given; the three-argument form does not.
  ["ts_rewrite", [2, DYNAMIC_SQL]]
])

const pgPrefixes: ReadonlyArray<readonly [string, Rule]> = [
  ["pg_advisory_", LOCK],
  ["pg_try_advisory_", LOCK],
  ["pg_read_", FILES],
  ["pg_ls_", FILES],
  ["pg_file_", FILES],
  ["lo_", LARGE_OBJECT],
  ["dblink", REMOTE],
  ["postgres_fdw_", REMOTE],
  ["pg_background_", DYNAMIC_SQL],
  ["crosstab", DYNAMIC_SQL],
  ["pg_stat_reset", SERVER_ADMIN],
  ["pg_stat_get_backend_", INSPECT],
  ["pg_wal_replay_", SERVER_ADMIN],
  ["pg_xlog_replay_", SERVER_ADMIN],
  ["pg_replication_origin_", REPLICATION],
  ["pg_logical_slot_", REPLICATION],
  ["pg_create_physical_replication_slot", REPLICATION],
  ["pg_create_logical_replication_slot", REPLICATION],
  ["pg_copy_physical_replication_slot", REPLICATION],
  ["pg_copy_logical_replication_slot", REPLICATION],
  ["pg_drop_replication_slot", REPLICATION],
  ["pg_replication_slot_advance", REPLICATION],
  ["binary_upgrade_", SERVER_ADMIN]
]

/** pg_cron schedules arbitrary SQL to run later as the scheduling user. */
const pgQualified: ReadonlyMap<string, Rule> = new Map([
  ["cron.schedule", DYNAMIC_SQL],
  ["cron.schedule_in_database", DYNAMIC_SQL],
  ["cron.alter_job", DYNAMIC_SQL],
  ["cron.unschedule", DYNAMIC_SQL]
])

const mysqlExact: ReadonlyMap<string, Rule> = new Map([
  ["sleep", SLEEP],
  ["benchmark", BURN],
  ["get_lock", LOCK],
  ["release_lock", LOCK],
  ["release_all_locks", LOCK],
  ["load_file", FILES],
  ["sys_exec", PROGRAM],
  ["sys_eval", PROGRAM],
  ["sys_get", PROGRAM],
  ["sys_set", PROGRAM],
  ["master_pos_wait", SLEEP],
  ["source_pos_wait", SLEEP],
  ["master_gtid_wait", SLEEP],
  ["wait_for_executed_gtid_set", SLEEP],
  ["wait_until_sql_thread_after_gtids", SLEEP],
  ["wsrep_sync_wait_upto_gtid", SLEEP],
  ["nextval", SEQUENCE],
  ["setval", SEQUENCE]
])


const finding = (call: FunctionCall, rule: Rule): Finding => ({
  level: rule.level,
  reason: `${call.schema === undefined ? "" : `${call.schema}.`}${call.name}() ${rule.why}.`
})

export const postgresFunction = (call: FunctionCall): Finding | undefined => {
  const name = call.name.toLowerCase()
  const qualified = call.schema === undefined ? undefined : pgQualified.get(`${call.schema.toLowerCase()}.${name}`)
  const byArity = pgByArity.get(name)
  const arityRule = byArity !== undefined && call.argCount === byArity[0] ? byArity[1] : undefined
  const rule = qualified ?? pgExact.get(name) ?? arityRule ?? pgPrefixes.find(([prefix]) => name.startsWith(prefix))?.[1]
  return rule === undefined ? undefined : finding(call, rule)
}

export const mysqlFunction = (call: FunctionCall): Finding | undefined => {
  const name = call.name.toLowerCase()
  // LAST_INSERT_ID(expr) sets the value later LAST_INSERT_ID() calls return on the connection.
  if (name === "last_insert_id" && call.argCount !== undefined && call.argCount > 0) return finding(call, VARIABLE)
  const rule = mysqlExact.get(name)
  return rule === undefined ? undefined : finding(call, rule)
}

/**
 * MySQL and MariaDB built-ins known to do nothing but compute a value from their arguments and
 * the statement's rows (and, for a few, read the session's own identity or clock). A call of
 * anything else is looked up among the database's stored functions (routines.ts) and refused
 * when it is not there: loadable UDFs and future built-ins are unknown until someone vouches
 * for them. The functions refused above (sleep, benchmark, locks, load_file, ...) are absent on
 * purpose.
 */
const MYSQL_SAFE_BUILTINS: ReadonlySet<string> = new Set(
  (
    // Control flow and comparison.
    "if ifnull nullif coalesce isnull greatest least interval strcmp field find_in_set elt " +
    // Strings.
    "ascii bin bit_length char char_length character_length concat concat_ws export_set format from_base64 hex " +
    "insert instr lcase left length locate lower lpad ltrim make_set mid oct octet_length ord position quote " +
    "repeat replace reverse right rpad rtrim soundex space substr substring substring_index to_base64 trim " +
    "ucase unhex upper weight_string regexp_instr regexp_like regexp_replace regexp_substr match against " +
    "sformat natural_sort_key chr to_char " +
    // Numbers.
    "abs acos asin atan atan2 ceil ceiling conv cos cot crc32 crc32c degrees div exp floor ln log log10 log2 mod " +
    "pi pow power radians rand round sign sin sqrt tan truncate " +
    // Dates and times.
    "adddate addtime convert_tz curdate current_date current_time current_timestamp curtime date date_add " +
    "date_format date_sub datediff day dayname dayofmonth dayofweek dayofyear extract from_days from_unixtime " +
    "get_format hour last_day localtime localtimestamp makedate maketime microsecond minute month monthname now " +
    "period_add period_diff quarter sec_to_time second str_to_date subdate subtime sysdate time time_format " +
    "time_to_sec timediff timestamp timestampadd timestampdiff to_days to_seconds unix_timestamp utc_date " +
    "utc_time utc_timestamp week weekday weekofyear year yearweek add_months months_between trunc " +
    // Casts and character sets.
    "cast convert binary charset coercibility collation " +
    // Hashes, encodings, compression.
    "md5 sha sha1 sha2 aes_encrypt aes_decrypt compress uncompress uncompressed_length random_bytes " +
    "statement_digest statement_digest_text encode decode des_encrypt des_decrypt password old_password " +
    // Identity of this session (never of another one).
    "connection_id current_user current_role database schema session_user system_user user version " +
    "found_rows row_count last_insert_id icu_version is_free_lock " +
    // Identifiers and network addresses.
    "uuid uuid_short uuid_to_bin bin_to_uuid is_uuid sys_guid inet_aton inet_ntoa inet6_aton inet6_ntoa " +
    "is_ipv4 is_ipv4_compat is_ipv4_mapped is_ipv6 " +
    // XML (pure string functions despite the name of updatexml).
    "extractvalue updatexml " +
    // MariaDB dynamic columns.
    "column_add column_check column_create column_delete column_exists column_get column_json column_list " +
    // Bits.
    "bit_count " +
    // Aggregates and window functions.
    "avg bit_and bit_or bit_xor count group_concat json_arrayagg json_objectagg max min std stddev stddev_pop " +
    "stddev_samp sum var_pop var_samp variance any_value cume_dist dense_rank first_value lag last_value lead " +
    "nth_value ntile percent_rank rank row_number median percentile_cont percentile_disc grouping " +
    // Row values of INSERT ... ON DUPLICATE KEY UPDATE, and DEFAULT(col).
    "values value default"
  ).split(" ")
)

/** Families whose every member only computes a value: JSON and spatial functions. */
const MYSQL_SAFE_PREFIXES: ReadonlyArray<string> = ["json_", "st_", "mbr"]

/** Whether a MySQL call needs no catalogue lookup: an unqualified, known-safe built-in. */
export const mysqlSafeBuiltin = (call: FunctionCall): boolean => {
  if (call.schema !== undefined) return false
  const name = call.name.toLowerCase()
  return MYSQL_SAFE_BUILTINS.has(name) || MYSQL_SAFE_PREFIXES.some((prefix) => name.startsWith(prefix))
}
