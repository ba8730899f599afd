/**
 * MySQL / MariaDB classification. Three layers, each able only to make a verdict stricter:
 *
 * 1. The server-accurate lexer (mysql-lexer.ts): executable comments, timeout-changing
 *    optimizer hints, stacked statements and sql_mode-dependent quoting are refused here.
 * 2. The statement's leading keywords pick the route: statements refused for every role need no
 *    parse; EXPLAIN/DESCRIBE, SHOW and table maintenance have small grammars of their own
 *    because node-sql-parser does not cover them; everything else goes to node-sql-parser's
 *    MySQL and MariaDB grammars, and the stricter verdict of those that parse stands. A
 *    statement neither grammar accepts is refused.
 * 3. A scan of the significant tokens for what must never slip through a parser gap: calls of
 *    refused functions (qualified, backquoted, or with a space before the parenthesis), INTO
 *    OUTFILE/DUMPFILE, LOAD DATA INFILE, SONAME, `:=` and INTO @var, locking clauses, sequences.
 */
import { mysqlFunction, mysqlSafeBuiltin } from "./functions.ts"
import { lexMysql, renderForParser, type Token } from "./mysql-lexer.ts"
import {
  type Analysis,
  explainVerdict,
  type Finding,
  type FunctionCall,
  read,
  refused,
  settle,
  stricter,
  treeNodes,
  type TreeNode,
  isTreeNode,
  type Verdict,
  write
} from "./verdict.ts"

interface SqlParser {
  astify(sql: string, options: { readonly database: string }): unknown
}

interface Parsers {
  readonly mysql: SqlParser
  readonly mariadb: SqlParser
}

type ParserModule = { readonly default: { readonly Parser: new () => SqlParser } }

let parsers: Parsers | undefined
let loading: Promise<Parsers> | undefined

/** Loads both grammars once (they are large generated parsers; import them only when needed). */
export const loadMysqlParsers = (): Promise<void> => {
  loading ??= Promise.all([
    import("node-sql-parser/build/mysql.js") as Promise<unknown> as Promise<ParserModule>,
    import("node-sql-parser/build/mariadb.js") as Promise<unknown> as Promise<ParserModule>
  ]).then(
    ([mysqlModule, mariadbModule]) => {
      parsers = { mysql: new mysqlModule.default.Parser(), mariadb: new mariadbModule.default.Parser() }
      return parsers
    },
    (error: unknown) => {
      loading = undefined
      throw error
    }
  )
  return loading.then(() => undefined)
}

type Ast = TreeNode

const isAst = isTreeNode

const str = (value: unknown): string | undefined => (typeof value === "string" ? value : undefined)

const upper = (token: Token | undefined): string =>
  token !== undefined && token.type === "word" ? token.value.toUpperCase() : ""

const isPunct = (token: Token | undefined, text: string): boolean =>
  token !== undefined && token.type === "punct" && token.text === text

const isName = (token: Token | undefined): boolean =>
  token !== undefined && (token.type === "word" || token.type === "qident")

const SESSION_STATE = "changes session state that would leak into the next use of the pooled connection."
const TRANSACTION_CONTROL =
  "transaction control belongs to the gateway: a statement may not open, end or split the transaction it runs in."
const PRIVILEGES = "changes accounts or privileges, which are the database's own security boundary."
const SERVER_ADMIN = "administers the server."
const NOT_PARSED = "the statement could not be parsed as MySQL or MariaDB SQL."

/** Leading keywords refused for every role, whatever follows them. */
const REFUSED_HEADS: ReadonlyMap<string, string> = new Map([
  ["SET", SESSION_STATE],
  ["USE", "switches the connection's default database, which would leak into the pooled connection."],
  ["BEGIN", TRANSACTION_CONTROL],
  ["COMMIT", TRANSACTION_CONTROL],
  ["ROLLBACK", TRANSACTION_CONTROL],
  ["SAVEPOINT", TRANSACTION_CONTROL],
  ["RELEASE", TRANSACTION_CONTROL],
  ["XA", TRANSACTION_CONTROL],
  ["PREPARE", "prepared statements are session state and hide the statement they run."],
  ["EXECUTE", "prepared statements are session state and hide the statement they run."],
  ["DEALLOCATE", SESSION_STATE],
  ["HANDLER", "HANDLER reads tables through a session-level cursor."],
  ["LOCK", "LOCK TABLES holds table locks for the rest of the session."],
  ["UNLOCK", "UNLOCK TABLES releases session-level table locks."],
  ["LOAD", "loads a file into the server (LOAD DATA / LOAD XML read server or client files)."],
  ["INSTALL", "loads code into the server."],
  ["UNINSTALL", "unloads server code."],
  ["DO", "DO evaluates expressions only for their side effects."],
  ["KILL", "terminates connections or statements."],
  ["SHUTDOWN", "stops the server."],
  ["RESTART", "restarts the server."],
  ["FLUSH", SERVER_ADMIN],
  ["RESET", SERVER_ADMIN],
  ["PURGE", SERVER_ADMIN],
  ["CHANGE", SERVER_ADMIN],
  ["STOP", SERVER_ADMIN],
  ["CACHE", SERVER_ADMIN],
  ["BINLOG", SERVER_ADMIN],
  ["CLONE", SERVER_ADMIN],
  ["IMPORT", SERVER_ADMIN],
  ["BACKUP", SERVER_ADMIN],
  ["SIGNAL", "diagnostics statements belong inside stored programs."],
  ["RESIGNAL", "diagnostics statements belong inside stored programs."],
  ["GET", "diagnostics statements belong inside stored programs."],
  ["GRANT", PRIVILEGES],
  ["REVOKE", PRIVILEGES]
])

const DDL_OBJECTS = new Set([
  "TABLE",
  "VIEW",
  "INDEX",
  "DATABASE",
  "SCHEMA",
  "TRIGGER",
  "EVENT",
  "PROCEDURE",
  "FUNCTION",
  "SEQUENCE",
  "PACKAGE",
  "USER",
  "ROLE",
  "SERVER",
  "TABLESPACE",
  "LOGFILE",
  "RESOURCE",
  "INSTANCE",
  "UNDO",
  "PREPARE"
])

const OBJECT_NAMES: Readonly<Record<string, string>> = {
  LOGFILE: "LOGFILE GROUP",
  RESOURCE: "RESOURCE GROUP",
  UNDO: "UNDO TABLESPACE",
  SCHEMA: "DATABASE"
}

const REFUSED_OBJECTS: ReadonlyMap<string, string> = new Map([
  ["USER", PRIVILEGES],
  ["ROLE", PRIVILEGES],
  ["SERVER", "configures connections to other servers."],
  ["TABLESPACE", "places data files on the database server."],
  ["UNDO", "places data files on the database server."],
  ["LOGFILE", "places data files on the database server."],
  ["RESOURCE", SERVER_ADMIN],
  ["INSTANCE", SERVER_ADMIN],
  ["PREPARE", SESSION_STATE]
])

/** The object a CREATE/ALTER/DROP acts on: the first object keyword among the leading words. */
const ddlObject = (tokens: ReadonlyArray<Token>): string | undefined => {
  for (const token of tokens.slice(1, 12)) {
    if (isPunct(token, "(")) return undefined
    const word = upper(token)
    if (DDL_OBJECTS.has(word)) return word
  }
  return undefined
}

const SET_SCOPES = new Set([
  "GLOBAL",
  "SESSION",
  "LOCAL",
  "PERSIST",
  "PERSIST_ONLY",
  "TRANSACTION",
  "ROLE",
  "PASSWORD",
  "NAMES",
  "CHARACTER",
  "STATEMENT",
  "DEFAULT",
  "AUTOCOMMIT"
])

/** How a user would name the statement, from its leading keywords alone. */
const headKind = (tokens: ReadonlyArray<Token>): string => {
  const head = isPunct(tokens[0], "(") ? "SELECT" : upper(tokens[0])
  const second = upper(tokens[1])
  switch (head) {
    case "":
      return "UNKNOWN"
    case "CREATE":
    case "ALTER":
    case "DROP": {
      const object = ddlObject(tokens)
      return object === undefined ? head : `${head} ${OBJECT_NAMES[object] ?? object}`
    }
    case "SET":
      return SET_SCOPES.has(second) ? `SET ${second}` : "SET"
    case "START":
    case "LOAD":
    case "LOCK":
    case "UNLOCK":
    case "INSTALL":
    case "UNINSTALL":
    case "RENAME":
    case "XA":
      return second === "" ? head : `${head} ${second}`
    case "RELEASE":
      return "RELEASE SAVEPOINT"
    case "DEALLOCATE":
      return "DEALLOCATE PREPARE"
    case "ROLLBACK":
      return second === "TO" ? "ROLLBACK TO SAVEPOINT" : "ROLLBACK"
    case "DESC":
      return "DESCRIBE"
    default:
      return head
  }
}

const LOCKING_KINDS: ReadonlyArray<readonly [RegExp, string]> = [
  [/lock\s+in\s+share\s+mode/i, "SELECT LOCK IN SHARE MODE"],
  [/share/i, "SELECT FOR SHARE"],
  [/.*/, "SELECT FOR UPDATE"]
]

const lockingKind = (clause: string): string =>
  LOCKING_KINDS.find(([pattern]) => pattern.test(clause))?.[1] ?? "SELECT FOR UPDATE"

const lockingFinding = (kind: string): Finding => ({
  level: "write",
  kind,
  reason: `${kind.replace("SELECT ", "")} takes row locks.`
})

const VARIABLE_ASSIGNMENT: Finding = {
  level: "refused",
  reason: "assigning a user variable changes session state that would leak into the pooled connection."
}
const INTO_VARIABLE: Finding = {
  level: "refused",
  reason: "SELECT ... INTO @variable changes session state that would leak into the pooled connection."
}
const INTO_FILE: Finding = { level: "refused", reason: "INTO OUTFILE / DUMPFILE writes a file on the database server." }

const functionName = (name: unknown): { schema: string | undefined; name: string } | undefined => {
  if (typeof name === "string") return { schema: undefined, name }
  if (!isAst(name)) return undefined
  const parts = Array.isArray(name.name) ? name.name : []
  const last: unknown = parts[parts.length - 1]
  const value = isAst(last) ? str(last.value) : undefined
  if (value === undefined) return undefined
  const schema = isAst(name.schema) ? str(name.schema.value) : undefined
  return { schema, name: value }
}

const argumentCount = (args: unknown): number | undefined => {
  if (!isAst(args)) return undefined
  if (Array.isArray(args.value)) return args.value.length
  return args.expr === undefined ? 0 : 1
}

const NESTED_WRITES: Readonly<Record<string, string>> = {
  insert: "INSERT",
  replace: "REPLACE",
  update: "UPDATE",
  delete: "DELETE"
}

/** Walks a node-sql-parser tree for calls, SELECT INTO, locking reads, assignments and nested DML. */
const astFindings = (root: Ast, calls: Array<FunctionCall>): Array<Finding> => {
  const findings: Array<Finding> = []
  for (const node of treeNodes(root)) {
    const type = str(node.type)
    if (type === "function" || type === "aggr_func") {
      const name = functionName(node.name)
      const argCount = argumentCount(node.args)
      const call = name === undefined ? undefined : argCount === undefined ? name : { ...name, argCount }
      if (call === undefined) {
        findings.push({ level: "refused", reason: "a function is named in a way the guard cannot read." })
        continue
      }
      const found = mysqlFunction(call)
      if (found !== undefined) findings.push(found)
      else if (!mysqlSafeBuiltin(call)) calls.push(call)
    } else if (type === "assign") {
      findings.push(VARIABLE_ASSIGNMENT)
    } else if (type === "select") {
      const into = isAst(node.into) ? node.into : undefined
      if (into !== undefined && (into.position != null || into.keyword != null)) {
        const keyword = (str(into.keyword) ?? "").toLowerCase()
        findings.push(keyword === "var" ? INTO_VARIABLE : INTO_FILE)
      }
      const locking = node.locking_read
      if (locking != null) {
        findings.push(lockingFinding(lockingKind(typeof locking === "string" ? locking : JSON.stringify(locking))))
      }
    } else if (type !== undefined && node !== root && NESTED_WRITES[type] !== undefined) {
      const verb = NESTED_WRITES[type] ?? "INSERT"
      findings.push({ level: "write", kind: verb, reason: `the statement contains a ${verb}, which modifies data.` })
    }
  }
  return findings
}

const astBase = (ast: Ast): Analysis => {
  const type = str(ast.type) ?? ""
  const keyword = (str(ast.keyword) ?? "").toUpperCase()
  switch (type) {
    case "select":
      return { verdict: read("SELECT"), explainable: true, calls: [] }
    case "insert":
    case "replace":
    case "update":
    case "delete":
      return { verdict: write(NESTED_WRITES[type] ?? type.toUpperCase()), explainable: true, calls: [] }
    case "create":
    case "drop":
      return { verdict: write(keyword === "" ? type.toUpperCase() : `${type.toUpperCase()} ${keyword}`), explainable: false, calls: [] }
    case "alter":
      return { verdict: write(`ALTER ${keyword === "" ? "TABLE" : keyword}`), explainable: false, calls: [] }
    case "truncate":
      return { verdict: write("TRUNCATE"), explainable: false, calls: [] }
    case "rename":
      return { verdict: write("RENAME TABLE"), explainable: false, calls: [] }
    case "call":
      return { verdict: write("CALL"), explainable: false, calls: [] }
    case "show":
      return { verdict: read("SHOW"), explainable: false, calls: [] }
    case "desc":
      return { verdict: read("DESCRIBE"), explainable: false, calls: [] }
    default:
      return { verdict: refused(type.toUpperCase() || "UNKNOWN", `${type} statements are not allowed.`), explainable: false, calls: [] }
  }
}

const analyzeAst = (ast: Ast): Analysis => {
  const base = astBase(ast)
  if (base.verdict.verdict === "refused") return base
  const calls: Array<FunctionCall> = []
  const findings = astFindings(ast, calls)
  return { verdict: settle(base.verdict, findings), explainable: base.explainable, calls }
}

/** Parses with both grammars; the stricter verdict of those that accept the text stands. */
const parseAndAnalyze = (text: string, kind: string): Analysis => {
  const loaded = parsers
  if (loaded === undefined) throw new Error("the MySQL grammars are not loaded; call loadMysqlParsers() first")
  const analyses: Array<Analysis> = []
  for (const [database, parser] of [
    ["mysql", loaded.mysql],
    ["mariadb", loaded.mariadb]
  ] as const) {
    let ast: unknown
    try {
      ast = parser.astify(text, { database })
    } catch {
      continue
    }
    const statements = Array.isArray(ast) ? ast : [ast]
    const only: unknown = statements[0]
    if (statements.length !== 1 || !isAst(only)) {
      return { verdict: refused("MULTIPLE STATEMENTS", "only one statement may be sent at a time."), explainable: false, calls: [] }
    }
    analyses.push(analyzeAst(only))
  }
  const [first, ...rest] = analyses
  if (first === undefined) return { verdict: refused(kind, NOT_PARSED), explainable: false, calls: [] }
  return {
    verdict: rest.reduce((acc: Verdict, a) => stricter(acc, a.verdict), first.verdict),
    explainable: first.explainable,
    // Both grammars' calls: a name one of them reads as a call is checked either way.
    calls: analyses.flatMap((a) => a.calls)
  }
}

const EXPLAINABLE_HEADS = new Set(["SELECT", "WITH", "TABLE", "VALUES", "INSERT", "REPLACE", "UPDATE", "DELETE"])

const startsExplainable = (token: Token | undefined): boolean =>
  isPunct(token, "(") || EXPLAINABLE_HEADS.has(upper(token))

/** EXPLAIN / DESCRIBE / DESC, and MariaDB's `ANALYZE <statement>` (which executes it). */
const analyzeExplain = (tokens: ReadonlyArray<Token>): Analysis => {
  const head = upper(tokens[0])
  let analyze = head === "ANALYZE"
  let i = 1
  for (;;) {
    const word = upper(tokens[i])
    if (word === "EXTENDED" || word === "PARTITIONS") i++
    else if (word === "ANALYZE") {
      analyze = true
      i++
    } else if (word === "FORMAT" && isPunct(tokens[i + 1], "=") && tokens[i + 2] !== undefined) i += 3
    else break
  }
  const kind = analyze ? "EXPLAIN ANALYZE" : "EXPLAIN"
  const next = tokens[i]
  if (upper(next) === "INTO") {
    return { verdict: refused(kind, INTO_VARIABLE.reason), explainable: false, calls: [] }
  }
  if (upper(next) === "FOR" && upper(tokens[i + 1]) === "CONNECTION" && tokens.length === i + 3) {
    return { verdict: read(kind), explainable: false, calls: [] }
  }
  if (startsExplainable(next)) {
    const inner = analyzeTokens(tokens.slice(i))
    return { verdict: explainVerdict(inner, analyze), explainable: false, calls: inner.calls }
  }
  // DESCRIBE tbl [column | 'wild'], with the table optionally qualified by its database.
  if (i === 1 && head !== "ANALYZE" && isName(tokens[1])) {
    let j = 2
    if (isPunct(tokens[j], ".") && isName(tokens[j + 1])) j += 2
    if (isName(tokens[j]) || tokens[j]?.type === "string") j++
    if (j === tokens.length) return { verdict: read("DESCRIBE"), explainable: false, calls: [] }
  }
  return { verdict: refused(headKind(tokens), NOT_PARSED), explainable: false, calls: [] }
}

/** `{ANALYZE|OPTIMIZE|REPAIR|CHECK|CHECKSUM} [NO_WRITE_TO_BINLOG|LOCAL] TABLE t [, t]... [options]`. */
const analyzeMaintenance = (tokens: ReadonlyArray<Token>): Analysis => {
  const head = upper(tokens[0])
  const kind = `${head} TABLE`
  let i = 1
  if (upper(tokens[i]) === "NO_WRITE_TO_BINLOG" || upper(tokens[i]) === "LOCAL") i++
  const noun = upper(tokens[i])
  const rest = tokens.slice(i + 1)
  const wellFormed =
    (noun === "TABLE" || noun === "TABLES") &&
    isName(rest[0]) &&
    rest.every((t) => t.type === "word" || t.type === "qident" || (t.type === "punct" && ",.()".includes(t.text)))
  if (!wellFormed) return { verdict: refused(kind, NOT_PARSED), explainable: false, calls: [] }
  // CHECKSUM TABLE only reads rows; the others rewrite tables, statistics or metadata.
  return { verdict: head === "CHECKSUM" ? read(kind) : write(kind), explainable: false, calls: [] }
}

const isExplainRoute = (tokens: ReadonlyArray<Token>): boolean => {
  const head = upper(tokens[0])
  if (head === "EXPLAIN" || head === "DESCRIBE" || head === "DESC") return true
  const second = upper(tokens[1])
  return head === "ANALYZE" && !["TABLE", "TABLES", "NO_WRITE_TO_BINLOG", "LOCAL"].includes(second)
}

/**
 * One statement (no trailing semicolon): routed by its leading keywords, then made stricter by
 * the token scan. An EXPLAIN applies the scan to the statement it explains instead, since a
 * plain EXPLAIN of a locking read or a sequence call only plans it.
 */
const analyzeTokens = (tokens: ReadonlyArray<Token>): Analysis => {
  const routed = route(tokens)
  if (isExplainRoute(tokens)) return routed
  return { verdict: settle(routed.verdict, tokenFindings(tokens)), explainable: routed.explainable, calls: routed.calls }
}

/** Picks the classifier for a statement by its leading keywords. */
const route = (tokens: ReadonlyArray<Token>): Analysis => {
  const kind = headKind(tokens)
  const head = isPunct(tokens[0], "(") ? "(" : upper(tokens[0])
  const second = upper(tokens[1])
  const refusal = REFUSED_HEADS.get(head)
  if (refusal !== undefined) return { verdict: refused(kind, refusal), explainable: false, calls: [] }
  if (head === "START") {
    return { verdict: refused(kind, second === "TRANSACTION" ? TRANSACTION_CONTROL : SERVER_ADMIN), explainable: false, calls: [] }
  }
  if (head === "RENAME" && second === "USER") return { verdict: refused(kind, PRIVILEGES), explainable: false, calls: [] }
  if (head === "CREATE" || head === "ALTER" || head === "DROP") {
    const objectRefusal = REFUSED_OBJECTS.get(ddlObject(tokens) ?? "")
    if (objectRefusal !== undefined) return { verdict: refused(kind, objectRefusal), explainable: false, calls: [] }
  }
  switch (head) {
    case "EXPLAIN":
    case "DESCRIBE":
    case "DESC":
      return analyzeExplain(tokens)
    case "ANALYZE":
      return isExplainRoute(tokens) ? analyzeExplain(tokens) : analyzeMaintenance(tokens)
    case "OPTIMIZE":
    case "REPAIR":
    case "CHECK":
    case "CHECKSUM":
      return analyzeMaintenance(tokens)
    case "SHOW":
      // Every SHOW reads; its only expressions (LIKE / WHERE) are covered by the token scan.
      return {
        verdict: tokens.length > 1 ? read("SHOW") : refused("SHOW", NOT_PARSED),
        explainable: false,
        calls: tokenCalls(tokens).filter((call) => !mysqlSafeBuiltin(call))
      }
    case "TABLE": {
      const analysis = parseAndAnalyze(`SELECT * FROM ${renderForParser(tokens.slice(1))}`, kind)
      const verdict = analysis.verdict.kind === "SELECT" ? { ...analysis.verdict, kind: "TABLE" } : analysis.verdict
      return { verdict, explainable: analysis.explainable, calls: analysis.calls }
    }
    case "VALUES": {
      // node-sql-parser only knows VALUES as a derived table.
      const analysis = parseAndAnalyze(`SELECT * FROM (${renderForParser(tokens)}) AS v`, kind)
      const verdict = analysis.verdict.kind === "SELECT" ? { ...analysis.verdict, kind: "VALUES" } : analysis.verdict
      return { verdict, explainable: analysis.explainable, calls: analysis.calls }
    }
    case "SELECT":
    case "WITH":
    case "(":
    case "INSERT":
    case "REPLACE":
    case "UPDATE":
    case "DELETE":
    case "CREATE":
    case "ALTER":
    case "DROP":
    case "TRUNCATE":
    case "RENAME":
    case "CALL":
      return parseAndAnalyze(renderForParser(tokens), kind)
    default:
      return { verdict: refused(kind, `${kind} statements are not recognised by the guard.`), explainable: false, calls: [] }
  }
}

const DANGEROUS_HINTS = /\b(MAX_EXECUTION_TIME|SET_VAR|RESOURCE_GROUP)\b/i

const FILE_WORDS: ReadonlyMap<string, string> = new Map([
  ["OUTFILE", INTO_FILE.reason],
  ["DUMPFILE", INTO_FILE.reason],
  ["INFILE", "LOAD DATA INFILE reads a file from the database server or the client."],
  ["SONAME", "loads a shared library into the server."]
])

/** Keywords that may stand before a parenthesis in an expression without naming a function. */
const NOT_CALLS = new Set(
  "IN EXISTS NOT AND OR XOR LIKE REGEXP RLIKE IS BETWEEN WHERE SELECT FROM ANY ALL SOME ON USING AS".split(" ")
)

/** Every name followed by an opening parenthesis: what could be a call, seen without a grammar. */
const tokenCalls = (tokens: ReadonlyArray<Token>): Array<FunctionCall> =>
  tokens.flatMap((token, i) => {
    if (token.type === "punct" || !isPunct(tokens[i + 1], "(") || NOT_CALLS.has(upper(token))) return []
    const qualified = isPunct(tokens[i - 1], ".") && isName(tokens[i - 2])
    return [{ schema: qualified ? tokens[i - 2]?.value : undefined, name: token.value }]
  })

/**
 * Names of what shows other sessions and their statements (SHOW PROCESSLIST, the PROCESSLIST and
 * INNODB_TRX tables, performance_schema): every key of a connection shares its database user,
 * so these would show one tenant another's queries. Matched as words or quoted names anywhere.
 */
const SESSION_WORDS: ReadonlyMap<string, string> = new Map([
  ["PROCESSLIST", "the process list shows other sessions and their queries."],
  ["INNODB_TRX", "INNODB_TRX shows other sessions' transactions and their queries."],
  ["INNODB_LOCKS", "INNODB_LOCKS shows other sessions' locks."],
  ["INNODB_LOCK_WAITS", "INNODB_LOCK_WAITS shows other sessions' lock waits."],
  ["PERFORMANCE_SCHEMA", "performance_schema shows other sessions and their statements."]
])

/** Token-level checks that hold whatever the parser made of the text. */
const tokenFindings = (tokens: ReadonlyArray<Token>): Array<Finding> => {
  const findings: Array<Finding> = []
  tokens.forEach((token, i) => {
    const word = upper(token)
    const next = tokens[i + 1]
    const fileWord = FILE_WORDS.get(word)
    if (fileWord !== undefined) findings.push({ level: "refused", reason: fileWord })
    const sessionWord = isName(token) ? SESSION_WORDS.get(token.value.toUpperCase()) : undefined
    if (sessionWord !== undefined) findings.push({ level: "refused", reason: sessionWord })
    if (isPunct(token, ":") && isPunct(next, "=") && next?.gapBefore === false) findings.push(VARIABLE_ASSIGNMENT)
    if (word === "INTO" && isPunct(next, "@")) findings.push(INTO_VARIABLE)
    // Table options: CONNECTION='...' (FEDERATED, CONNECT engines) and DATA/INDEX DIRECTORY='/path'.
    if (word === "CONNECTION" && (isPunct(next, "=") || next?.type === "string")) {
      findings.push({ level: "refused", reason: "a CONNECTION table option connects to another server." })
    }
    if (word === "DIRECTORY" && (upper(tokens[i - 1]) === "DATA" || upper(tokens[i - 1]) === "INDEX")) {
      findings.push({ level: "refused", reason: "DATA / INDEX DIRECTORY places table files at a server path." })
    }
    if (word === "FOR" && (upper(next) === "UPDATE" || upper(next) === "SHARE")) {
      findings.push(lockingFinding(upper(next) === "SHARE" ? "SELECT FOR SHARE" : "SELECT FOR UPDATE"))
    }
    if (word === "LOCK" && upper(next) === "IN" && upper(tokens[i + 2]) === "SHARE") {
      findings.push(lockingFinding("SELECT LOCK IN SHARE MODE"))
    }
    if ((word === "NEXT" || word === "SETVAL") && upper(next) === "VALUE" && upper(tokens[i + 2]) === "FOR") {
      findings.push({ level: "write", reason: "NEXT VALUE FOR advances a sequence." })
    }
    // Under ANSI_QUOTES a "double-quoted" name is an identifier too, so it counts as a call name.
    if (token.type !== "punct" && isPunct(next, "(")) {
      const qualified = isPunct(tokens[i - 1], ".") && isName(tokens[i - 2])
      const found = mysqlFunction({
        schema: qualified ? tokens[i - 2]?.value : undefined,
        name: token.value,
        argCount: isPunct(tokens[i + 2], ")") ? 0 : 1
      })
      if (found !== undefined) findings.push(found)
    }
  })
  return findings
}

/** Classifies one MySQL/MariaDB statement. The grammars must be loaded (`loadMysqlParsers`). */
export const analyzeMysql = (sql: string): Analysis => {
  if (sql.trim() === "") return { verdict: refused("EMPTY", "the statement is empty."), explainable: false, calls: [] }
  const lex = lexMysql(sql)
  if (!lex.ok) return { verdict: refused(headKind(lex.tokens), lex.reason), explainable: false, calls: [] }
  const separator = lex.tokens.findIndex((t) => isPunct(t, ";"))
  const tokens = separator < 0 ? lex.tokens : lex.tokens.slice(0, separator)
  const kind = headKind(tokens)
  // Empty statements after the first semicolon are nothing; anything else is a second statement.
  if (separator >= 0 && lex.tokens.slice(separator).some((t) => !isPunct(t, ";"))) {
    return {
      verdict: refused("MULTIPLE STATEMENTS", "only one statement may be sent at a time."),
      explainable: false,
      calls: []
    }
  }
  const executable = lex.comments.find((c) => c.kind === "executable")
  if (executable !== undefined) {
    return {
      verdict: refused(kind, "executable comments (/*! ... */, /*M! ... */) run the SQL inside them, unseen by the guard."),
      explainable: false,
      calls: []
    }
  }
  const hint = lex.comments.map((c) => (c.kind === "hint" ? DANGEROUS_HINTS.exec(c.body) : null)).find((m) => m != null)
  if (hint != null) {
    return {
      verdict: refused(kind, `the optimizer hint ${(hint[1] ?? "").toUpperCase()} overrides the limits the gateway sets.`),
      explainable: false,
      calls: []
    }
  }
  if (tokens.length === 0) return { verdict: refused("EMPTY", "the statement is empty."), explainable: false, calls: [] }
  return analyzeTokens(tokens)
}
