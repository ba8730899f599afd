/**
 * The client address behind trusted proxies (issue 22, finding 3). Each proxy appends the
 * address it received the connection from to `X-Forwarded-For`, so only the entries your own
 * proxies wrote (the rightmost `hops`) can be believed; the leftmost is whatever the client
 * sent, and taking it made the admin-token throttle void (rotate the header), let anyone lock an
 * address out by failing in its name, and put free text into the audit's `client_addr`.
 *
 * The entry `hops` places from the right, if it is an IP address (IPv4, or IPv6 bare or in
 * brackets, with an optional port, the forms proxies write); otherwise `undefined`, and the
 * caller keeps the socket's address (the proxy's): never text the client wrote.
 */
import { isIP } from "node:net"

/** A header longer than this is not from a proxy chain of at most 16 hops: only its tail is read. */
const MAX_TAIL = 4_096

const normalized = (entry: string): string | undefined => {
  let value = entry.trim()
  if (value.startsWith("[")) {
    const end = value.indexOf("]")
    if (end === -1) return undefined
    value = value.slice(1, end)
  } else if (value.indexOf(":") !== -1 && value.indexOf(":") === value.lastIndexOf(":")) {
    // IPv4 with a port (`203.0.113.7:41234`); an IPv6 address has several colons.
    value = value.slice(0, value.indexOf(":"))
  }
  return isIP(value) === 0 ? undefined : value.toLowerCase()
}

export const forwardedClient = (header: string | undefined, hops: number): string | undefined => {
  if (header === undefined || header === "") return undefined
  const tail = header.length > MAX_TAIL ? header.slice(header.length - MAX_TAIL) : header
  const entries = tail.split(",")
  // A cut tail's first entry may be a fragment: only count it when the header was whole.
  const usable = header.length > MAX_TAIL ? entries.slice(1) : entries
  const entry = usable[usable.length - hops]
  return entry === undefined ? undefined : normalized(entry)
}
