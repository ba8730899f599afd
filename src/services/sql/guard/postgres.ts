/**
 * Postgres classification on the tree of the real Postgres parser (libpg-query, the server's
 * own grammar compiled to WebAssembly), so dollar quotes, nested comments, `#` as an operator,
 * E'' strings and every other lexing rule are the server's, not an imitation.
 *
 * The parser assumes `standard_conforming_strings = on` (the default since 9.1); the executor
 * must keep it on for the statements it runs, or a backslash could end a string earlier on the
 * server than it did here.
 */
import { loadModule, parseSync } from "libpg-query"
import { postgresFunction } from "./functions.ts"
import {
  type Analysis,
  explainVerdict,
  type Finding,
  type FunctionCall,
  read,
  refused,
  settle,
  treeNodes,
  isTreeNode,
  type TreeNode,
  type Verdict,
  write
} from "./verdict.ts"

type PgObject = TreeNode

let loading: Promise<void> | undefined

/** Loads the WebAssembly parser once; a failed load is retried by the next call instead of sticking. */
export const loadPostgresParser = (): Promise<void> => {
  loading ??= loadModule().catch((error: unknown) => {
    loading = undefined
    throw error
  })
  return loading
}

const isObject = isTreeNode

/** `{ "SelectStmt": {...} }` -> `["SelectStmt", {...}]`. */
const unwrap = (node: unknown): readonly [string, PgObject] | undefined => {
  if (!isObject(node)) return undefined
  const keys = Object.keys(node)
  const key = keys[0]
  if (keys.length !== 1 || key === undefined) return undefined
  const body = node[key]
  return isObject(body) ? [key, body] : undefined
}

const str = (value: unknown): string | undefined => (typeof value === "string" ? value : undefined)

/** The sval of a `{ String: { sval } }` node. */
const sval = (node: unknown): string | undefined => {
  const entry = unwrap(node)
  return entry !== undefined && entry[0] === "String" ? str(entry[1].sval) : undefined
}

const OBJECT_NAMES: Readonly<Record<string, string>> = {
  OBJECT_MATVIEW: "MATERIALIZED VIEW",
  OBJECT_FDW: "FOREIGN DATA WRAPPER",
  OBJECT_FOREIGN_SERVER: "SERVER",
  OBJECT_TSCONFIGURATION: "TEXT SEARCH CONFIGURATION",
  OBJECT_TSDICTIONARY: "TEXT SEARCH DICTIONARY",
  OBJECT_TSPARSER: "TEXT SEARCH PARSER",
  OBJECT_TSTEMPLATE: "TEXT SEARCH TEMPLATE",
  OBJECT_STATISTIC_EXT: "STATISTICS",
  OBJECT_DOMCONSTRAINT: "CONSTRAINT",
  OBJECT_TABCONSTRAINT: "CONSTRAINT",
  OBJECT_LARGEOBJECT: "LARGE OBJECT",
  OBJECT_DEFACL: "DEFAULT PRIVILEGES",
  OBJECT_AMOP: "OPERATOR FAMILY",
  OBJECT_AMPROC: "OPERATOR FAMILY",
  OBJECT_OPCLASS: "OPERATOR CLASS",
  OBJECT_OPFAMILY: "OPERATOR FAMILY",
  OBJECT_PUBLICATION_NAMESPACE: "PUBLICATION",
  OBJECT_PUBLICATION_REL: "PUBLICATION",
  OBJECT_PARAMETER_ACL: "PARAMETER"
}

const objectName = (objectType: unknown): string => {
  const type = str(objectType) ?? "OBJECT_TABLE"
  return OBJECT_NAMES[type] ?? type.replace(/^OBJECT_/, "").replaceAll("_", " ")
}

/** Objects that carry remote credentials, load server code or reach server files. */
const SERVER_LEVEL_OBJECTS = new Set([
  "OBJECT_FDW",
  "OBJECT_FOREIGN_SERVER",
  "OBJECT_USER_MAPPING",
  "OBJECT_LANGUAGE",
  "OBJECT_EVENT_TRIGGER",
  "OBJECT_ACCESS_METHOD",
  "OBJECT_TABLESPACE",
  "OBJECT_SUBSCRIPTION",
  "OBJECT_ROLE"
])

/** Languages whose functions stay inside what SQL itself can do; `c`, `internal` and untrusted PLs do not. */
const SAFE_LANGUAGES = new Set(["sql", "plpgsql"])

const RISKY_EXTENSIONS = new Set(["adminpack", "dblink", "file_fdw", "postgres_fdw", "pg_background", "pg_cron"])
const isRiskyExtension = (name: string): boolean => RISKY_EXTENSIONS.has(name) || /^pl[a-z0-9]*u$/.test(name)

const SESSION_STATE = "changes session state that would leak into the next use of the pooled connection."
const TRANSACTION_CONTROL =
  "transaction control belongs to the gateway: a statement may not open, end or split the transaction it runs in."
const PRIVILEGES = "changes roles or privileges, which are the database's own security boundary."
const SERVER_LEVEL = "configures remote connections, server code or server files."

const DML_VERBS: Readonly<Record<string, string>> = {
  InsertStmt: "INSERT",
  UpdateStmt: "UPDATE",
  DeleteStmt: "DELETE",
  MergeStmt: "MERGE"
}

const LOCK_KINDS: Readonly<Record<string, string>> = {
  LCS_FORUPDATE: "SELECT FOR UPDATE",
  LCS_FORNOKEYUPDATE: "SELECT FOR NO KEY UPDATE",
  LCS_FORSHARE: "SELECT FOR SHARE",
  LCS_FORKEYSHARE: "SELECT FOR KEY SHARE"
}

const functionCall = (names: ReadonlyArray<unknown>, args: unknown): FunctionCall | undefined => {
  const parts = names.map(sval)
  const name = parts[parts.length - 1]
  if (name === undefined) return undefined
  const schema = parts.length > 1 ? parts[parts.length - 2] : undefined
  return { schema, name, argCount: Array.isArray(args) ? args.length : 0 }
}

/**
 * Visits every node under `root` and reports function calls, DML nested in CTEs, SELECT INTO and locking clauses. Any object with a
 * `funcname` list counts as a call: besides FuncCall that also catches CALL and the function a
 * trigger or cast names, which only ever errs on the refusing side.
 */
const collectFindings = (root: unknown, calls: Array<FunctionCall>): Array<Finding> => {
  const findings: Array<Finding> = []
  for (const value of treeNodes(root)) {
    if (Array.isArray(value.funcname)) {
      const call = functionCall(value.funcname, value.args)
      const found = call === undefined
        ? { level: "refused" as const, reason: "a function is named in a way the guard cannot read." }
        : postgresFunction(call)
      if (found !== undefined) findings.push(found)
    }
    for (const [key, child] of Object.entries(value)) {
      if (typeof child !== "object" || child === null) continue
      // Calls (not the name a CREATE FUNCTION or a trigger declares) go to the catalogue check.
      if ((key === "FuncCall" || key === "funccall") && isObject(child) && Array.isArray(child.funcname)) {
        const call = functionCall(child.funcname, child.args)
        // A call the curated rules already decide (nextval is a write, pg_sleep refused) is settled.
        if (call !== undefined && postgresFunction(call) === undefined) calls.push(call)
      }
      if (key === "RangeVar" && isObject(child)) {
        const relation = (str(child.relname) ?? "").toLowerCase()
        if (isSessionView(relation)) {
          findings.push({ level: "refused", reason: `${relation} shows other sessions, their queries included.` })
        }
      }
      const verb = DML_VERBS[key]
      if (verb !== undefined) {
        findings.push({ level: "write", kind: verb, reason: `the statement contains a ${verb}, which modifies data.` })
        // pg_settings is a view whose update rule calls set_config().
        if (isObject(child) && isObject(child.relation) && str(child.relation.relname)?.toLowerCase() === "pg_settings") {
          findings.push({ level: "refused", reason: `writing to pg_settings ${SESSION_STATE}` })
        }
      } else if (key === "ExecuteStmt") {
        findings.push({ level: "refused", reason: "runs a prepared statement the guard cannot see." })
      } else if (key === "SelectStmt" && isObject(child) && child.intoClause !== undefined) {
        findings.push({ level: "write", kind: "SELECT INTO", reason: "SELECT INTO creates a table." })
      } else if (key === "LockingClause" && isObject(child)) {
        const kind = LOCK_KINDS[str(child.strength) ?? ""] ?? "SELECT FOR UPDATE"
        findings.push({ level: "write", kind, reason: `${kind.replace("SELECT ", "")} takes row locks.` })
      }
    }
  }
  return findings
}

/**
 * Views over other sessions: every key of a connection shares its database role, so these
 * would show one tenant the statements (and literals) of another.
 */
const SESSION_VIEWS = new Set([
  "pg_stat_activity",
  "pg_stat_statements",
  "pg_stat_statements_info",
  "pg_locks",
  "pg_stat_ssl",
  "pg_stat_gssapi",
  "pg_stat_replication",
  "pg_stat_wal_receiver",
  "pg_stat_subscription",
  "pg_backend_memory_contexts",
  "pg_prepared_xacts"
])
const isSessionView = (relation: string): boolean => SESSION_VIEWS.has(relation) || relation.startsWith("pg_stat_progress_")

interface Base {
  readonly verdict: Verdict
  readonly explainable?: boolean
}

const variableSetKind = (body: PgObject): string => {
  const kind = str(body.kind)
  const name = (str(body.name) ?? "").toLowerCase()
  const verb = kind === "VAR_RESET" || kind === "VAR_RESET_ALL" ? "RESET" : "SET"
  if (name === "role") return `${verb} ROLE`
  if (name === "session_authorization") return `${verb} SESSION AUTHORIZATION`
  if (name.startsWith("transaction")) return "SET TRANSACTION"
  if (name === "session characteristics") return "SET SESSION CHARACTERISTICS"
  return verb
}

const transactionKind = (body: PgObject, lead: string): string => {
  switch (str(body.kind)) {
    case "TRANS_STMT_BEGIN":
      return "BEGIN"
    case "TRANS_STMT_START":
      return "START TRANSACTION"
    case "TRANS_STMT_COMMIT":
      return lead === "END" ? "END" : "COMMIT"
    case "TRANS_STMT_ROLLBACK":
      return lead === "ABORT" ? "ABORT" : "ROLLBACK"
    case "TRANS_STMT_SAVEPOINT":
      return "SAVEPOINT"
    case "TRANS_STMT_RELEASE":
      return "RELEASE SAVEPOINT"
    case "TRANS_STMT_ROLLBACK_TO":
      return "ROLLBACK TO SAVEPOINT"
    case "TRANS_STMT_PREPARE":
      return "PREPARE TRANSACTION"
    case "TRANS_STMT_COMMIT_PREPARED":
      return "COMMIT PREPARED"
    case "TRANS_STMT_ROLLBACK_PREPARED":
      return "ROLLBACK PREPARED"
    default:
      return lead
  }
}

const copyVerdict = (body: PgObject): Verdict => {
  if (body.is_program === true) return refused("COPY", "COPY ... PROGRAM runs a shell command on the database server.")
  if (body.filename !== undefined) return refused("COPY", "COPY with a file name reads or writes files on the database server.")
  return refused("COPY", "COPY moves data over STDIN/STDOUT, which the SQL tools do not carry; use SELECT or INSERT.")
}

const functionLanguage = (body: PgObject): string => {
  const options = Array.isArray(body.options) ? body.options : []
  for (const option of options) {
    const entry = unwrap(option)
    if (entry === undefined || entry[0] !== "DefElem" || entry[1].defname !== "language") continue
    return (sval(entry[1].arg) ?? "").toLowerCase()
  }
  // Without LANGUAGE only a SQL-standard body (BEGIN ATOMIC / RETURN) parses.
  return "sql"
}

/** The verdict a statement's verb gives, before anything nested inside it is looked at. */
const baseVerdict = (type: string, body: PgObject, words: ReadonlyArray<string>): Base => {
  const lead = words[0] ?? ""
  switch (type) {
    case "SelectStmt": {
      const kind =
        Array.isArray(body.valuesLists) && body.targetList === undefined ? "VALUES" : lead === "TABLE" ? "TABLE" : "SELECT"
      return { verdict: read(kind), explainable: true }
    }
    case "VariableShowStmt":
      return { verdict: read("SHOW") }

    case "InsertStmt":
    case "UpdateStmt":
    case "DeleteStmt":
    case "MergeStmt":
      return { verdict: write(DML_VERBS[type] ?? type), explainable: true }
    case "CreateTableAsStmt":
      return {
        verdict: write(body.objtype === "OBJECT_MATVIEW" ? "CREATE MATERIALIZED VIEW" : "CREATE TABLE AS"),
        explainable: true
      }
    case "CreateStmt":
      return { verdict: write("CREATE TABLE") }
    case "CreateForeignTableStmt":
      return { verdict: write("CREATE FOREIGN TABLE") }
    case "ViewStmt":
      return { verdict: write("CREATE VIEW") }
    case "IndexStmt":
      return { verdict: write("CREATE INDEX") }
    case "CreateSchemaStmt":
      return { verdict: write("CREATE SCHEMA") }
    case "CreateSeqStmt":
      return { verdict: write("CREATE SEQUENCE") }
    case "AlterSeqStmt":
      return { verdict: write("ALTER SEQUENCE") }
    case "CreateDomainStmt":
      return { verdict: write("CREATE DOMAIN") }
    case "AlterDomainStmt":
      return { verdict: write("ALTER DOMAIN") }
    case "CreateEnumStmt":
    case "CompositeTypeStmt":
    case "CreateRangeStmt":
      return { verdict: write("CREATE TYPE") }
    case "AlterEnumStmt":
    case "AlterTypeStmt":
      return { verdict: write("ALTER TYPE") }
    case "DefineStmt":
      return { verdict: write(`CREATE ${objectName(body.kind)}`) }
    case "CreateFunctionStmt": {
      const kind = body.is_procedure === true ? "CREATE PROCEDURE" : "CREATE FUNCTION"
      const language = functionLanguage(body)
      return SAFE_LANGUAGES.has(language)
        ? { verdict: write(kind) }
        : { verdict: refused(kind, `functions in language ${language} run code outside SQL, on the database server.`) }
    }
    case "AlterFunctionStmt":
      return { verdict: write(`ALTER ${objectName(body.objtype ?? "OBJECT_FUNCTION")}`) }
    case "CreateTrigStmt":
      return { verdict: write("CREATE TRIGGER") }
    case "CreatePolicyStmt":
      return { verdict: write("CREATE POLICY") }
    case "AlterPolicyStmt":
      return { verdict: write("ALTER POLICY") }
    case "RuleStmt":
      return { verdict: write("CREATE RULE") }
    case "CreateStatsStmt":
      return { verdict: write("CREATE STATISTICS") }
    case "AlterStatsStmt":
      return { verdict: write("ALTER STATISTICS") }
    case "CreateExtensionStmt": {
      // CREATE LANGUAGE without a handler is parsed as CREATE EXTENSION of the language.
      const name = (str(body.extname) ?? "").toLowerCase()
      const kind = words.slice(0, 6).includes("LANGUAGE") ? "CREATE LANGUAGE" : "CREATE EXTENSION"
      return isRiskyExtension(name)
        ? { verdict: refused(kind, `extension ${name} ${SERVER_LEVEL}`) }
        : { verdict: write(kind) }
    }
    case "AlterExtensionStmt":
    case "AlterExtensionContentsStmt":
      return { verdict: write("ALTER EXTENSION") }
    case "AlterObjectSchemaStmt":
    case "AlterOwnerStmt":
    case "AlterObjectDependsStmt":
      return { verdict: write(`ALTER ${objectName(body.objectType)}`) }
    case "RenameStmt": {
      const target = str(body.renameType)
      const onRelation = target === "OBJECT_COLUMN" || target === "OBJECT_TABCONSTRAINT" || target === "OBJECT_ATTRIBUTE"
      return { verdict: write(`ALTER ${objectName(onRelation ? body.relationType : target)}`) }
    }
    case "AlterTableStmt":
      return { verdict: write(`ALTER ${objectName(body.objtype)}`) }
    case "AlterTableMoveAllStmt":
      return { verdict: write(`ALTER ${objectName(body.objtype)}`) }
    case "AlterCollationStmt":
      return { verdict: write("ALTER COLLATION") }
    case "CreateCastStmt":
      return { verdict: write("CREATE CAST") }
    case "CreateConversionStmt":
      return { verdict: write("CREATE CONVERSION") }
    case "CreateOpClassStmt":
      return { verdict: write("CREATE OPERATOR CLASS") }
    case "CreateOpFamilyStmt":
      return { verdict: write("CREATE OPERATOR FAMILY") }
    case "AlterOpFamilyStmt":
      return { verdict: write("ALTER OPERATOR FAMILY") }
    case "AlterOperatorStmt":
      return { verdict: write("ALTER OPERATOR") }
    case "AlterTSConfigurationStmt":
      return { verdict: write("ALTER TEXT SEARCH CONFIGURATION") }
    case "AlterTSDictionaryStmt":
      return { verdict: write("ALTER TEXT SEARCH DICTIONARY") }
    case "CreateTransformStmt":
      return { verdict: write("CREATE TRANSFORM") }
    case "CreatePublicationStmt":
      return { verdict: write("CREATE PUBLICATION") }
    case "AlterPublicationStmt":
      return { verdict: write("ALTER PUBLICATION") }
    case "ImportForeignSchemaStmt":
      return { verdict: write("IMPORT FOREIGN SCHEMA") }
    case "DropStmt": {
      const kind = `DROP ${objectName(body.removeType)}`
      return SERVER_LEVEL_OBJECTS.has(str(body.removeType) ?? "")
        ? { verdict: refused(kind, `the statement ${SERVER_LEVEL}`) }
        : { verdict: write(kind) }
    }
    case "TruncateStmt":
      return { verdict: write("TRUNCATE") }
    case "CommentStmt":
      return { verdict: write("COMMENT") }
    case "CallStmt":
      return { verdict: write("CALL") }
    case "LockStmt":
      return { verdict: write("LOCK TABLE") }
    case "NotifyStmt":
      return { verdict: write("NOTIFY") }
    case "VacuumStmt":
      return { verdict: write(body.is_vacuumcmd === true ? "VACUUM" : "ANALYZE") }
    case "ClusterStmt":
      return { verdict: write("CLUSTER") }
    case "ReindexStmt":
      return { verdict: write("REINDEX") }
    case "RefreshMatViewStmt":
      return { verdict: write("REFRESH MATERIALIZED VIEW") }
    case "CreatedbStmt":
      return { verdict: write("CREATE DATABASE") }
    case "DropdbStmt":
      return { verdict: write("DROP DATABASE") }
    case "AlterDatabaseStmt":
    case "AlterDatabaseRefreshCollStmt":
      return { verdict: write("ALTER DATABASE") }

    case "TransactionStmt":
      return { verdict: refused(transactionKind(body, lead), TRANSACTION_CONTROL) }
    case "VariableSetStmt": {
      const kind = variableSetKind(body)
      return { verdict: refused(kind, kind === "SET TRANSACTION" ? TRANSACTION_CONTROL : SESSION_STATE) }
    }
    case "ConstraintsSetStmt":
      return { verdict: refused("SET CONSTRAINTS", TRANSACTION_CONTROL) }
    case "DiscardStmt":
      return { verdict: refused("DISCARD", SESSION_STATE) }
    case "AlterSystemStmt":
      return { verdict: refused("ALTER SYSTEM", "changes the server configuration.") }
    case "AlterDatabaseSetStmt":
      return { verdict: refused("ALTER DATABASE", "changes the settings every future session of the database starts with.") }
    case "AlterRoleSetStmt":
      return { verdict: refused("ALTER ROLE", "changes the settings every future session of the role starts with.") }
    case "LoadStmt":
      return { verdict: refused("LOAD", "loads a shared library into the server.") }
    case "DoStmt":
      return { verdict: refused("DO", "runs an anonymous code block the guard cannot inspect.") }
    case "PrepareStmt":
      return { verdict: refused("PREPARE", "prepared statements are session state and hide the statement they run.") }
    case "ExecuteStmt":
      return {
        verdict: refused("EXECUTE", "prepared statements are session state and hide the statement they run."),
        explainable: true
      }
    case "DeallocateStmt":
      return { verdict: refused("DEALLOCATE", SESSION_STATE) }
    case "DeclareCursorStmt":
      return { verdict: refused("DECLARE", `cursors are session state; ${SESSION_STATE}`), explainable: true }
    case "FetchStmt":
      return { verdict: refused(body.ismove === true ? "MOVE" : "FETCH", `cursors are session state; ${SESSION_STATE}`) }
    case "ClosePortalStmt":
      return { verdict: refused("CLOSE", `cursors are session state; ${SESSION_STATE}`) }
    case "ListenStmt":
      return { verdict: refused("LISTEN", "subscribes the pooled connection to notifications.") }
    case "UnlistenStmt":
      return { verdict: refused("UNLISTEN", SESSION_STATE) }
    case "CheckPointStmt":
      return { verdict: refused("CHECKPOINT", "forces a server-wide checkpoint.") }
    case "CopyStmt":
      return { verdict: copyVerdict(body) }
    case "GrantStmt":
      return { verdict: refused(body.is_grant === true ? "GRANT" : "REVOKE", PRIVILEGES) }
    case "GrantRoleStmt":
      return { verdict: refused(body.is_grant === true ? "GRANT" : "REVOKE", PRIVILEGES) }
    case "AlterDefaultPrivilegesStmt":
      return { verdict: refused("ALTER DEFAULT PRIVILEGES", PRIVILEGES) }
    case "CreateRoleStmt": {
      const noun = body.stmt_type === "ROLESTMT_USER" ? "USER" : body.stmt_type === "ROLESTMT_GROUP" ? "GROUP" : "ROLE"
      return { verdict: refused(`CREATE ${noun}`, PRIVILEGES) }
    }
    case "AlterRoleStmt":
      return { verdict: refused("ALTER ROLE", PRIVILEGES) }
    case "DropRoleStmt":
      return { verdict: refused("DROP ROLE", PRIVILEGES) }
    case "ReassignOwnedStmt":
      return { verdict: refused("REASSIGN OWNED", PRIVILEGES) }
    case "DropOwnedStmt":
      return { verdict: refused("DROP OWNED", PRIVILEGES) }
    case "SecLabelStmt":
      return { verdict: refused("SECURITY LABEL", PRIVILEGES) }
    case "CreateTableSpaceStmt":
      return { verdict: refused("CREATE TABLESPACE", `the statement ${SERVER_LEVEL}`) }
    case "DropTableSpaceStmt":
      return { verdict: refused("DROP TABLESPACE", `the statement ${SERVER_LEVEL}`) }
    case "AlterTableSpaceOptionsStmt":
      return { verdict: refused("ALTER TABLESPACE", `the statement ${SERVER_LEVEL}`) }
    case "CreatePLangStmt":
      return { verdict: refused("CREATE LANGUAGE", `the statement ${SERVER_LEVEL}`) }
    case "CreateFdwStmt":
      return { verdict: refused("CREATE FOREIGN DATA WRAPPER", `the statement ${SERVER_LEVEL}`) }
    case "AlterFdwStmt":
      return { verdict: refused("ALTER FOREIGN DATA WRAPPER", `the statement ${SERVER_LEVEL}`) }
    case "CreateForeignServerStmt":
      return { verdict: refused("CREATE SERVER", `the statement ${SERVER_LEVEL}`) }
    case "AlterForeignServerStmt":
      return { verdict: refused("ALTER SERVER", `the statement ${SERVER_LEVEL}`) }
    case "CreateUserMappingStmt":
      return { verdict: refused("CREATE USER MAPPING", `the statement ${SERVER_LEVEL}`) }
    case "AlterUserMappingStmt":
      return { verdict: refused("ALTER USER MAPPING", `the statement ${SERVER_LEVEL}`) }
    case "DropUserMappingStmt":
      return { verdict: refused("DROP USER MAPPING", `the statement ${SERVER_LEVEL}`) }
    case "CreateSubscriptionStmt":
      return { verdict: refused("CREATE SUBSCRIPTION", `the statement ${SERVER_LEVEL}`) }
    case "AlterSubscriptionStmt":
      return { verdict: refused("ALTER SUBSCRIPTION", `the statement ${SERVER_LEVEL}`) }
    case "DropSubscriptionStmt":
      return { verdict: refused("DROP SUBSCRIPTION", `the statement ${SERVER_LEVEL}`) }
    case "CreateEventTrigStmt":
      return { verdict: refused("CREATE EVENT TRIGGER", "event triggers run code on every session's DDL.") }
    case "AlterEventTrigStmt":
      return { verdict: refused("ALTER EVENT TRIGGER", "event triggers run code on every session's DDL.") }
    case "CreateAmStmt":
      return { verdict: refused("CREATE ACCESS METHOD", `the statement ${SERVER_LEVEL}`) }
    default:
      return { verdict: refused(lead === "" ? type : lead, `${type} statements are not recognised by the guard.`) }
  }
}

const isAnalyzeOption = (option: unknown): boolean => {
  const entry = unwrap(option)
  if (entry === undefined || entry[0] !== "DefElem") return false
  const name = (str(entry[1].defname) ?? "").toLowerCase()
  if (name !== "analyze" && name !== "analyse") return false
  const arg = unwrap(entry[1].arg)
  if (arg === undefined) return true
  const [argType, argBody] = arg
  // Integer 0 and Boolean false leave out their default-valued field in the JSON tree.
  if (argType === "Integer") return argBody.ival !== undefined && argBody.ival !== 0
  if (argType === "Boolean") return argBody.boolval === true
  const text = (str(argBody.sval) ?? "").toLowerCase()
  // Anything the server would not read as false is treated as true: it either analyzes or errors.
  return text !== "false" && text !== "off" && text !== "0"
}

const analyzeStatement = (stmt: unknown, words: ReadonlyArray<string>): Analysis => {
  const lead = words[0] ?? ""
  const entry = unwrap(stmt)
  if (entry === undefined) {
    return { verdict: refused(lead === "" ? "UNKNOWN" : lead, "the statement could not be parsed."), explainable: false, calls: [] }
  }
  const [type, body] = entry
  if (type === "ExplainStmt") {
    const options = Array.isArray(body.options) ? body.options : []
    const analyze = options.some(isAnalyzeOption)
    const inner = analyzeStatement(body.query, [])
    return { verdict: explainVerdict(inner, analyze), explainable: false, calls: inner.calls }
  }
  const base = baseVerdict(type, body, words)
  if (base.verdict.verdict === "refused") return { verdict: base.verdict, explainable: base.explainable ?? false, calls: [] }
  const calls: Array<FunctionCall> = []
  const findings = collectFindings(stmt, calls)
  return { verdict: settle(base.verdict, findings), explainable: base.explainable ?? false, calls }
}

/**
 * The first keywords of the text, only to name statements the tree names ambiguously (END vs
 * COMMIT, TABLE vs SELECT, CREATE LANGUAGE vs CREATE EXTENSION) or not at all (a parse
 * failure). Skips blanks, comments and semicolons; Postgres block comments nest. Stops at the
 * first character that is not part of a keyword.
 */
const leadingWords = (sql: string): Array<string> => {
  const words: Array<string> = []
  let i = 0
  while (i < sql.length && words.length < 6) {
    const c = sql[i] ?? ""
    if (c === ";" || c === "(" || /\s/.test(c)) {
      i++
    } else if (c === "-" && sql[i + 1] === "-") {
      const end = sql.indexOf("\n", i)
      i = end < 0 ? sql.length : end + 1
    } else if (c === "/" && sql[i + 1] === "*") {
      let depth = 1
      i += 2
      while (i < sql.length && depth > 0) {
        if (sql[i] === "/" && sql[i + 1] === "*") {
          depth++
          i += 2
        } else if (sql[i] === "*" && sql[i + 1] === "/") {
          depth--
          i += 2
        } else i++
      }
    } else {
      const match = /^[A-Za-z_]+/.exec(sql.slice(i, i + 64))
      if (match === null) break
      words.push(match[0].toUpperCase())
      i += match[0].length
    }
  }
  return words
}

const parse = (sql: string): { readonly stmts: ReadonlyArray<unknown> } | undefined => {
  try {
    const result: unknown = parseSync(sql)
    return isObject(result) && Array.isArray(result.stmts) ? { stmts: result.stmts } : undefined
  } catch {
    return undefined
  }
}

/** Classifies one Postgres statement. The parser must be loaded (`loadPostgresParser`). */
export const analyzePostgres = (sql: string): Analysis => {
  const words = leadingWords(sql)
  const lead = words[0] ?? "UNKNOWN"
  if (sql.trim() === "") return { verdict: refused("EMPTY", "the statement is empty."), explainable: false, calls: [] }
  const parsed = parse(sql)
  if (parsed === undefined) {
    return { verdict: refused(lead, "the statement could not be parsed as Postgres SQL."), explainable: false, calls: [] }
  }
  if (parsed.stmts.length === 0) {
    return { verdict: refused("EMPTY", "the statement is empty."), explainable: false, calls: [] }
  }
  if (parsed.stmts.length > 1) {
    return {
      verdict: refused("MULTIPLE STATEMENTS", `only one statement may be sent at a time; found ${parsed.stmts.length}.`),
      explainable: false,
      calls: []
    }
  }
  const raw = parsed.stmts[0]
  return analyzeStatement(isObject(raw) ? raw.stmt : undefined, words)
}
