/**
 * A command that fails prints one line naming what went wrong and how to fix it, never a stack
 * (issue 26.4): an address in use, a Postgres database that does not exist, a TLS file that
 * cannot be read. The stack is there for whoever asks (`--log-level debug`).
 */
import * as Cause from "effect/Cause"

interface Found {
  readonly code?: string | undefined
  readonly message: string
  readonly address?: string | undefined
  readonly port?: number | undefined
  readonly path?: string | undefined
}

/** Every error in the chain of `cause`s, outermost first (bounded: chains can be cyclic). */
const chainOf = (error: unknown): ReadonlyArray<Found> => {
  const chain: Array<Found> = []
  let current: unknown = error
  for (let i = 0; i < 10 && current !== undefined && current !== null; i++) {
    if (typeof current !== "object") {
      chain.push({ message: String(current) })
      break
    }
    const e = current as Record<string, unknown>
    chain.push({
      code: typeof e.code === "string" ? e.code : undefined,
      message: typeof e.message === "string" ? e.message : String(current),
      address: typeof e.address === "string" ? e.address : undefined,
      port: typeof e.port === "number" ? e.port : undefined,
      path: typeof e.path === "string" ? e.path : undefined
    })
    current = e.cause
  }
  return chain
}

/** Passwords in a URL quoted by a message (a Postgres DSN, say) are not for the terminal or its logs. */
export const redact = (text: string) => text.replace(/\/\/([^/:@\s]+):[^@\s/]*@/g, "//$1:***@")

/** The one line for a failure; `store` names the configured store, for the messages that concern it. */
export const failureLine = (cause: Cause.Cause<unknown>, context: { readonly store?: string | undefined } = {}): string => {
  const reason = cause.reasons.find((r) => r._tag === "Fail" || r._tag === "Die")
  const error = reason === undefined ? undefined : reason._tag === "Fail" ? reason.error : reason._tag === "Die" ? reason.defect : undefined
  const chain = chainOf(error)
  const inUse = chain.find((e) => e.code === "EADDRINUSE")
  if (inUse) {
    const where = inUse.address === undefined ? "the address" : `${inUse.address}:${inUse.port ?? ""}`
    return `cannot listen on ${where}: it is already in use (another modelgate?); choose another with server.port or --port`
  }
  const denied = chain.find((e) => e.code === "EACCES" && e.port !== undefined)
  if (denied) return `cannot listen on ${denied.address ?? ""}:${denied.port}: permission denied (ports below 1024 need privileges); choose another with server.port or --port`
  const notAvailable = chain.find((e) => e.code === "EADDRNOTAVAIL")
  if (notAvailable) return `cannot listen on ${notAvailable.address ?? "that address"}: no such address on this machine; check server.host or --host`
  const missingFile = chain.find((e) => e.code === "ENOENT" && e.path !== undefined)
  if (missingFile) return `cannot read ${missingFile.path}: no such file or directory`
  // The innermost message says what the driver saw (`database "x" does not exist`).
  const innermost = chain.at(-1)?.message.split("\n")[0]?.trim() ?? ""
  const isStore = chain.some((e) => /SqlError|PgConnection|Failed to connect/.test(e.message))
  if (isStore && context.store !== undefined) {
    const hint = /database "[^"]+" does not exist/.test(innermost)
      ? " (create it first, e.g. createdb, or correct store:)"
      : /ECONNREFUSED|connect/.test(innermost) ? " (is the database running and reachable?)" : ""
    return redact(`store ${context.store}: ${innermost || "cannot connect"}${hint}`)
  }
  const outer = chain[0]?.message.split("\n")[0]?.trim()
  const line = innermost !== "" && outer !== undefined && outer !== "" && !outer.includes(innermost) ? `${outer}: ${innermost}` : (outer || innermost)
  return redact(line || Cause.pretty(cause).split("\n")[0] || "failed")
}
