/**
 * Model-name patterns: globs where `*` stands for any run of characters (empty included) and
 * every other character stands for itself, case-sensitively, because provider model ids are.
 * Used for `match:` routes in the config and for entries of a key's `allowed_models`.
 *
 * Matching splits the pattern on `*` and looks for the literal pieces in order, leftmost first:
 * linear in the name for each piece, with no regular expression and so no backtracking a
 * crafted model name could make slow.
 */

export interface CompiledPattern {
  readonly source: string
  /** The literal runs between the stars: `claude-*-4*` -> ["claude-", "-4", ""]. */
  readonly pieces: ReadonlyArray<string>
  /** Characters that are not `*`: the more of them, the fewer names the pattern admits. */
  readonly literalChars: number
  /** Length of the literal run before the first `*`. */
  readonly prefixLength: number
}

export const isPattern = (text: string): boolean => text.includes("*")

export const compilePattern = (source: string): CompiledPattern => {
  const pieces = source.split("*")
  return {
    source,
    pieces,
    literalChars: source.length - (pieces.length - 1),
    prefixLength: pieces[0]!.length
  }
}

export const matchesPattern = (pattern: CompiledPattern, name: string): boolean => {
  const { pieces } = pattern
  if (pieces.length === 1) return name === pieces[0]
  const first = pieces[0]!
  const last = pieces[pieces.length - 1]!
  // The fixed ends must fit without overlapping, then the middle pieces go leftmost-first:
  // taking each as early as possible leaves the most room for the rest, so it never misses a match.
  if (name.length < first.length + last.length) return false
  if (!name.startsWith(first) || !name.endsWith(last)) return false
  let at = first.length
  const end = name.length - last.length
  for (let i = 1; i < pieces.length - 1; i++) {
    const piece = pieces[i]!
    if (piece.length === 0) continue
    const found = name.indexOf(piece, at)
    if (found === -1 || found + piece.length > end) return false
    at = found + piece.length
  }
  return true
}

/**
 * Orders patterns most specific first: more literal characters, then a longer literal prefix.
 * Returns 0 on a tie; callers keep config order for those (a stable sort).
 */
export const bySpecificity = (a: CompiledPattern, b: CompiledPattern): number =>
  b.literalChars - a.literalChars || b.prefixLength - a.prefixLength

/**
 * Names a pattern route may pass upstream: the characters real model ids use (OpenAI, Anthropic,
 * OpenRouter's `vendor/model`, Vertex's `model@version`, Ollama's `model:tag`). Anything else is
 * an unknown model, so control characters, spaces or a literal `*` never reach a provider.
 */
export const ROUTABLE_NAME = /^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,255}$/
