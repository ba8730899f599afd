/**
 * What a result row will weigh once it is JSON in a tool answer, estimated cheaply as rows
 * arrive, so that a driver can stop fetching at a byte budget the way it stops at `max_rows`.
 * It errs high (binary counts as its base64, every value as if it needed quotes and a key),
 * and never recurses without bound: parsed arrays and JSON values can nest deeply.
 */
const PER_VALUE = 8

export const valueBytes = (root: unknown): number => {
  let total = 0
  const stack: Array<unknown> = [root]
  let visited = 0
  while (stack.length > 0) {
    const value = stack.pop()
    visited++
    total += PER_VALUE
    if (typeof value === "string") total += value.length
    else if (typeof value === "number" || typeof value === "bigint") total += 24
    else if (value instanceof Uint8Array) total += Math.ceil(value.byteLength / 3) * 4
    else if (value instanceof Date) total += 30
    else if (Array.isArray(value)) {
      for (const item of value) stack.push(item)
    } else if (typeof value === "object" && value !== null) {
      for (const [key, item] of Object.entries(value)) {
        total += key.length
        stack.push(item)
      }
    }
    // A pathological value of millions of tiny parts is heavy enough to stop on already.
    if (visited > 1_000_000) return Number.MAX_SAFE_INTEGER
  }
  return total
}
