/**
 * How deep a JSON text nests, checked before it is parsed. JSON.parse itself copes with any
 * depth, but what is parsed is later walked or serialised again by recursive code (a passthrough
 * answer is JSON.stringify'd whole for the client): 100,000 levels overflow the stack there, and
 * the client got a 500 for what the upstream sent (issue 32, the amplification table).
 *
 * The scan jumps between structural characters with a native regular expression instead of
 * looking at every character, so a 12 MiB answer that is mostly text costs a handful of steps
 * (a per-character loop cost more than the JSON.parse that follows it).
 */

/** Outside a string: what changes the depth, or opens a string. */
const STRUCTURE = /[[\]{}"]/g
/** Inside a string: what ends it, or escapes the next character. */
const IN_STRING = /["\\]/g

/** Whether `text` nests arrays and objects deeper than `maxDepth` (strings skipped, escapes honoured). */
export const nestsDeeperThan = (text: string, maxDepth: number): boolean => {
  // Each level takes a character: a short text (every stream event but a hostile one) cannot.
  if (text.length <= maxDepth) return false
  let depth = 0
  let at = 0
  for (;;) {
    STRUCTURE.lastIndex = at
    const found = STRUCTURE.exec(text)
    if (found === null) return false
    const c = found[0]
    at = found.index + 1
    if (c === "\"") {
      // To the end of the string: a backslash skips the character after it.
      for (;;) {
        IN_STRING.lastIndex = at
        const end = IN_STRING.exec(text)
        if (end === null) return false
        at = end.index + (end[0] === "\\" ? 2 : 1)
        if (end[0] === "\"") break
      }
    } else if (c === "[" || c === "{") {
      if (++depth > maxDepth) return true
    } else depth--
  }
}

/**
 * The deepest a provider's answer, one of its stream events, or a tool call's arguments may
 * nest. A model's answer is nowhere near this; Node's default stack serialises a few thousand
 * levels.
 */
export const MAX_ANSWER_DEPTH = 512

/**
 * JSON.parse, refusing (with the SyntaxError JSON.parse throws, so every caller's existing
 * "not JSON" path handles it) a text nested deeper than `maxDepth`.
 */
export const parseJsonWithin = (text: string, maxDepth: number = MAX_ANSWER_DEPTH): unknown => {
  if (nestsDeeperThan(text, maxDepth)) throw new SyntaxError(`JSON nested deeper than ${maxDepth} levels`)
  return JSON.parse(text)
}
