/**
 * Who the client is and how it connected, behind the proxies of `server.trusted_proxies`.
 *
 * Only a peer in that list is a proxy (issue 31, item 4): its `X-Forwarded-For` and
 * `X-Forwarded-Proto` are believed; any other peer is the client itself, whatever headers it
 * sends, and its scheme is the socket's. Before, `trust_proxy` believed every peer, which voided
 * the admin-token throttle (rotate the header) and let plain HTTP claim to be HTTPS.
 *
 * Each proxy appends the address it received the connection from to `X-Forwarded-For`, so only
 * the entries your own proxies wrote can be believed; the leftmost is whatever the client sent
 * (issue 22, finding 3: taking it let anyone lock an address out by failing in its name, and put
 * free text into the audit's `client_addr`). The client is the entry `hops` places from the right,
 * and from there further left past every entry that is itself a trusted proxy (a chain of your
 * proxies, each listed, needs no hop count). Entries must be IP addresses (IPv4, or IPv6 bare or
 * in brackets, with an optional port, the forms proxies write); text that is not one ends the
 * walk and is never used.
 */
import type { BlockList } from "node:net"
import { isIP } from "node:net"
import { isListed, trustedProxyList } from "../domain/trusted-proxies.ts"

/** A header longer than this is not from a proxy chain of at most 16 hops: only its tail is read. */
const MAX_TAIL = 4_096
/** Trusted entries walked past at most, so a long header costs a bounded number of list checks. */
const MAX_WALK = 32

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

/**
 * The client address in an `X-Forwarded-For` a trusted proxy passed on, or `undefined` (the
 * caller keeps the peer's address: never text the client wrote).
 */
export const forwardedClient = (
  header: string | undefined,
  hops: number,
  isProxy: (address: string) => boolean = () => false
): string | undefined => {
  if (header === undefined || header === "") return undefined
  const tail = header.length > MAX_TAIL ? header.slice(header.length - MAX_TAIL) : header
  const entries = tail.split(",")
  // A cut tail's first entry may be a fragment: only count it when the header was whole.
  const usable = header.length > MAX_TAIL ? entries.slice(1) : entries
  let index = usable.length - hops
  if (index < 0) return undefined
  let client = normalized(usable[index]!)
  for (let walked = 0; client !== undefined && index > 0 && walked < MAX_WALK && isProxy(client); walked++) {
    const next = normalized(usable[--index]!)
    // Not an address left of a proxy of yours: that proxy's own peer is as far as is known.
    if (next === undefined) break
    client = next
  }
  return client
}

/** `server.trust_proxy` with its list, decided once at start; each request asks `trusts` once. */
export interface Forwarding {
  /** Whether the TCP peer is one of your proxies (its X-Forwarded-* headers are then believed). */
  readonly trusts: (peer: string) => boolean
  /** The client behind a trusted peer, from its X-Forwarded-For; `undefined`: keep the peer's address. */
  readonly client: (forwardedFor: string | undefined) => string | undefined
}

/** Addresses whose answer is remembered; the memo starts over when full (a flood of distinct peers costs checks, never memory). */
const MEMO_SIZE = 1_024

export const makeForwarding = (trustedProxies: ReadonlyArray<string>, hops: number): Forwarding => {
  const list: BlockList = trustedProxyList(trustedProxies)
  // A BlockList check builds a native SocketAddress each time (0.3-1.2 us on Node 24); the peers
  // are a few proxies' addresses over and over, so a lookup by text answers almost every request.
  const memo = new Map<string, boolean>()
  const trusts = (address: string) => {
    let listed = memo.get(address)
    if (listed === undefined) {
      listed = isListed(list, address)
      if (memo.size >= MEMO_SIZE) memo.clear()
      memo.set(address, listed)
    }
    return listed
  }
  return { trusts, client: (forwardedFor) => forwardedClient(forwardedFor, hops, trusts) }
}
