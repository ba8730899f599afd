/**
 * Does a URI belong to a resource template (RFC 6570) an upstream MCP server listed? The gateway
 * routes `resources/read` and `completion/complete` of a templated URI back to the server whose
 * template it fits (issue 37); it never expands templates, it only recognizes their instances.
 *
 * Matching is linear, with no regular expression built from the server's text (a template is
 * upstream input: a hostile one must not backtrack for seconds): the literal parts must appear in
 * order, the first one at the start and the last one at the end, and each variable's text must be
 * what its operator can produce (a simple `{var}` never spans a `/`, `?` or `#`; `{+var}` and
 * `{#var}` may span anything; `{/var}`, `{.var}`, `{;var}`, `{?var}`, `{&var}` start with their
 * operator). Variables are matched leftmost, so a template whose literal repeats inside a value
 * may not recognize every instance; such a URI is reported unknown rather than misrouted.
 */

/** Longer templates (or URIs) are not matched at all. */
export const MAX_TEMPLATE_CHARS = 2_048

interface Expression {
  readonly operator: string
}

export interface UriTemplate {
  readonly template: string
  /** Literal, expression, literal, ..., literal (always one more literal than expressions). */
  readonly literals: ReadonlyArray<string>
  readonly expressions: ReadonlyArray<Expression>
}

const OPERATORS = new Set(["+", "#", ".", "/", ";", "?", "&"])

/** A parsed template, or undefined when it is not one (unclosed brace, nested braces, too long). */
export const parseUriTemplate = (template: string): UriTemplate | undefined => {
  if (template.length === 0 || template.length > MAX_TEMPLATE_CHARS) return undefined
  const literals: Array<string> = []
  const expressions: Array<Expression> = []
  let at = 0
  while (true) {
    const open = template.indexOf("{", at)
    if (open === -1) {
      const rest = template.slice(at)
      if (rest.includes("}")) return undefined
      literals.push(rest)
      break
    }
    const literal = template.slice(at, open)
    if (literal.includes("}")) return undefined
    const close = template.indexOf("}", open + 1)
    if (close === -1) return undefined
    const body = template.slice(open + 1, close)
    if (body.length === 0 || body.includes("{")) return undefined
    literals.push(literal)
    expressions.push({ operator: OPERATORS.has(body[0]!) ? body[0]! : "" })
    at = close + 1
  }
  return { template, literals, expressions }
}

/** Can an expression with this operator have expanded to `text`? */
const fits = (operator: string, text: string): boolean => {
  switch (operator) {
    case "":
      return !/[/?#]/.test(text)
    case "+":
    case "#":
      return true
    case "/":
    case ".":
    case ";":
      return text === "" || (text.startsWith(operator) && !/[?#]/.test(text))
    case "?":
    case "&":
      return text === "" || ((text.startsWith("?") || text.startsWith("&")) && !text.includes("#"))
    default:
      return false
  }
}

export const matchesUriTemplate = (template: UriTemplate, uri: string): boolean => {
  if (uri.length > MAX_TEMPLATE_CHARS) return false
  const { literals, expressions } = template
  if (expressions.length === 0) return uri === literals[0]
  const first = literals[0]!
  const last = literals[literals.length - 1]!
  if (!uri.startsWith(first) || !uri.endsWith(last) || uri.length < first.length + last.length) return false
  let at = first.length
  const end = uri.length - last.length
  // Adjacent expressions (no literal between) share one stretch of text: judged by the most permissive of them.
  let pending: Array<string> = []
  for (let i = 0; i < expressions.length; i++) {
    pending.push(expressions[i]!.operator)
    const literal = literals[i + 1]!
    const isLast = i === expressions.length - 1
    if (literal === "" && !isLast) continue
    const next = isLast ? end : uri.indexOf(literal, at)
    if (next === -1 || next > end) return false
    const text = uri.slice(at, next)
    if (!pending.some((operator) => fits(operator, text))) return false
    pending = []
    at = next + (isLast ? 0 : literal.length)
  }
  return at === end
}
