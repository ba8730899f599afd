/**
 * A lexer that follows the MySQL/MariaDB server's own rules for where strings, quoted
 * identifiers and comments begin and end. The grammar-based parser used afterwards has its own,
 * looser idea of those rules (it reads `--1` as a comment, where the server reads minus minus
 * one, and it silently drops `/*! ... *\/`, which the server executes), so classification
 * never trusts the parser's lexing: the text it is given is rebuilt from these tokens with
 * comments removed and every literal emptied.
 *
 * Backslash escapes depend on the session's sql_mode (NO_BACKSLASH_ESCAPES, ANSI_QUOTES), which
 * the guard cannot know, so the text is lexed under each combination the server can apply and
 * refused when they disagree on where any token ends.
 */

export type TokenType = "word" | "qident" | "string" | "punct"

export interface Token {
  readonly type: TokenType
  readonly start: number
  readonly end: number
  /** The source text of the token. */
  readonly text: string
  /** Words and punctuation: the text; quoted tokens: the content without quotes and escapes. */
  readonly value: string
  /** True when whitespace or a comment separates it from the previous token. */
  readonly gapBefore: boolean
}

export type CommentKind = "line" | "block" | "executable" | "hint"

export interface Comment {
  readonly kind: CommentKind
  readonly start: number
  readonly end: number
  readonly body: string
}

export type MysqlLex =
  | { readonly ok: true; readonly tokens: ReadonlyArray<Token>; readonly comments: ReadonlyArray<Comment> }
  | { readonly ok: false; readonly reason: string; readonly tokens: ReadonlyArray<Token> }

interface Quoting {
  /** Backslash escapes inside '...' (off under NO_BACKSLASH_ESCAPES). */
  readonly single: boolean
  /** Backslash escapes inside "..." (off under NO_BACKSLASH_ESCAPES, and under ANSI_QUOTES where "..." is an identifier). */
  readonly double: boolean
}

const MODES: ReadonlyArray<Quoting> = [
  { single: true, double: true },
  { single: false, double: false },
  { single: true, double: false }
]

interface Pass {
  readonly tokens: Array<Token>
  readonly comments: Array<Comment>
  readonly error?: string
}

const isSpace = (code: number): boolean => code === 32 || (code >= 9 && code <= 13)

const isWordChar = (code: number): boolean =>
  (code >= 48 && code <= 57) ||
  (code >= 65 && code <= 90) ||
  (code >= 97 && code <= 122) ||
  code === 95 ||
  code === 36 ||
  code >= 128

/** `--` starts a comment only when followed by whitespace, a control character or the end. */
const isDashComment = (sql: string, i: number): boolean => {
  if (sql.charCodeAt(i) !== 45 || sql.charCodeAt(i + 1) !== 45) return false
  if (i + 2 >= sql.length) return true
  const next = sql.charCodeAt(i + 2)
  return next <= 32 || next === 127
}

const lineEnd = (sql: string, from: number): number => {
  const newline = sql.indexOf("\n", from)
  return newline < 0 ? sql.length : newline
}

const commentKind = (body: string): CommentKind => {
  if (body.startsWith("!") || body.startsWith("M!") || body.startsWith("m!")) return "executable"
  if (body.startsWith("+")) return "hint"
  return "block"
}

const UNESCAPE: Readonly<Record<string, string>> = { n: "\n", t: "\t", r: "\r", "0": "\0", b: "\b", Z: "\x1a" }

const lexOnce = (sql: string, quoting: Quoting): Pass => {
  const tokens: Array<Token> = []
  const comments: Array<Comment> = []
  let gap = false
  let i = 0
  const push = (type: TokenType, start: number, end: number, value: string) => {
    tokens.push({ type, start, end, text: sql.slice(start, end), value, gapBefore: gap })
    gap = false
  }
  while (i < sql.length) {
    const code = sql.charCodeAt(i)
    if (isSpace(code)) {
      gap = true
      i++
      continue
    }
    if (code === 35 || isDashComment(sql, i)) {
      const end = lineEnd(sql, i)
      comments.push({ kind: "line", start: i, end, body: sql.slice(i, end) })
      gap = true
      i = end
      continue
    }
    if (code === 47 && sql.charCodeAt(i + 1) === 42) {
      // Block comments do not nest: the first */ closes, whatever opened in between.
      const close = sql.indexOf("*/", i + 2)
      if (close < 0) return { tokens, comments, error: "an unterminated /* comment" }
      const body = sql.slice(i + 2, close)
      comments.push({ kind: commentKind(body), start: i, end: close + 2, body })
      gap = true
      i = close + 2
      continue
    }
    if (code === 39 || code === 34 || code === 96) {
      const quote = sql[i] ?? ""
      const escapes = code === 39 ? quoting.single : code === 34 ? quoting.double : false
      let value = ""
      let j = i + 1
      let closed = false
      while (j < sql.length) {
        const ch = sql[j] ?? ""
        if (escapes && ch === "\\" && j + 1 < sql.length) {
          const escaped = sql[j + 1] ?? ""
          value += UNESCAPE[escaped] ?? escaped
          j += 2
        } else if (ch === quote) {
          if (sql[j + 1] === quote) {
            value += quote
            j += 2
          } else {
            closed = true
            j++
            break
          }
        } else {
          value += ch
          j++
        }
      }
      if (!closed) {
        return { tokens, comments, error: code === 96 ? "an unterminated `quoted identifier`" : "an unterminated string" }
      }
      push(code === 96 ? "qident" : "string", i, j, value)
      i = j
      continue
    }
    if (isWordChar(code)) {
      let j = i + 1
      while (j < sql.length && isWordChar(sql.charCodeAt(j))) j++
      push("word", i, j, sql.slice(i, j))
      i = j
      continue
    }
    push("punct", i, i + 1, sql[i] ?? "")
    i++
  }
  return { tokens, comments }
}

const shape = (pass: Pass): string =>
  pass.tokens.map((t) => `${t.type}:${t.start}:${t.end}`).join(",") +
  "|" +
  pass.comments.map((c) => `${c.kind}:${c.start}:${c.end}`).join(",") +
  "|" +
  (pass.error ?? "")

/** Lexes `sql` under every quoting the server may apply; any disagreement is a refusal. */
export const lexMysql = (sql: string): MysqlLex => {
  const passes = MODES.map((mode) => lexOnce(sql, mode))
  const first = passes[0] ?? lexOnce(sql, { single: true, double: true })
  const agreed = passes.every((pass) => shape(pass) === shape(first))
  if (!agreed) {
    return {
      ok: false,
      tokens: first.tokens,
      reason:
        "where a quoted literal ends depends on the session's sql_mode (a backslash before a quote); write a quote inside a literal by doubling it."
    }
  }
  if (first.error !== undefined) return { ok: false, tokens: first.tokens, reason: `the statement has ${first.error}.` }
  return { ok: true, tokens: first.tokens, comments: first.comments }
}

/**
 * Text for the grammar-based parser: the tokens in order, separated by one space wherever the
 * source had whitespace or a comment, and between two minus signs so no lexer can read them as
 * a comment. Literals become '' and quoted identifiers lose anything a looser lexer could
 * misread; no verdict depends on their content.
 */
export const renderForParser = (tokens: ReadonlyArray<Token>): string => {
  let out = ""
  let previous: Token | undefined
  for (const token of tokens) {
    if (previous !== undefined && (token.gapBefore || (previous.text === "-" && token.text === "-"))) out += " "
    if (token.type === "string") out += "''"
    else if (token.type === "qident") out += /^[A-Za-z0-9_$\u0080-\uffff]+$/.test(token.value) ? `\`${token.value}\`` : "`q`"
    else out += token.text
    previous = token
  }
  return out
}
