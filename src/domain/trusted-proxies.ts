/**
 * `server.trusted_proxies` (issue 31, item 4): the peers whose `X-Forwarded-*` headers are
 * believed. Before, `trust_proxy: true` believed every peer, so in the container (listening on
 * 0.0.0.0 with nothing in front) anyone could pick the address the admin-token throttle counted
 * and claim HTTPS over plain HTTP. Checked here, at load, so a typo stops the start naming the
 * entry; turned into one `net.BlockList` (Node's subnet matching, IPv4-mapped IPv6 included) that
 * each request asks once.
 */
import { BlockList, isIP } from "node:net"

/** What `trust_proxy: true` trusts when `trusted_proxies` is empty: a proxy on this machine (or in this container). */
export const LOOPBACK_PROXIES: ReadonlyArray<string> = ["127.0.0.0/8", "::1"]

/** The longest list and entry accepted: a proxy tier is a handful of addresses or ranges. */
export const MAX_TRUSTED_PROXIES = 64
export const MAX_TRUSTED_PROXY_CHARS = 64

export interface TrustedProxy {
  readonly address: string
  readonly prefix: number
  readonly family: "ipv4" | "ipv6"
}

/** One entry (`10.0.0.0/8`, `fd00::/8`, `10.1.2.3`, `::1`), or why it is not one. */
export const parseTrustedProxy = (entry: string): TrustedProxy | string => {
  const text = entry.trim()
  const slash = text.indexOf("/")
  const address = slash === -1 ? text : text.slice(0, slash)
  const version = isIP(address)
  // A zone (`fe80::1%eth0`) names an interface, not a range a proxy's address falls in.
  if (version === 0 || address.includes("%")) return "is not an IP address or CIDR range (such as 10.0.0.0/8, fd00::/8 or 192.0.2.7)"
  const family = version === 4 ? "ipv4" : "ipv6"
  const bits = version === 4 ? 32 : 128
  if (slash === -1) return { address, prefix: bits, family }
  const prefixText = text.slice(slash + 1)
  if (!/^\d{1,3}$/.test(prefixText) || Number(prefixText) > bits) return `has a prefix length outside 0-${bits}`
  const prefix = Number(prefixText)
  // /0 is "every address": the very setting this list replaces.
  if (prefix === 0) return "trusts every address; list your proxies' addresses or ranges"
  return { address, prefix, family }
}

/** The entries as one list to check peers against; every entry must have passed parseTrustedProxy. */
export const trustedProxyList = (entries: ReadonlyArray<string>): BlockList => {
  const list = new BlockList()
  for (const entry of entries) {
    const parsed = parseTrustedProxy(entry)
    if (typeof parsed === "string") throw new Error(`trusted proxy ${entry} ${parsed}`)
    if (parsed.prefix === (parsed.family === "ipv4" ? 32 : 128)) list.addAddress(parsed.address, parsed.family)
    else list.addSubnet(parsed.address, parsed.prefix, parsed.family)
  }
  return list
}

/** Whether a peer or X-Forwarded-For address is in the list; anything that is not an IP address is not. */
export const isListed = (list: BlockList, address: string): boolean => {
  const version = isIP(address)
  return version !== 0 && list.check(address, version === 4 ? "ipv4" : "ipv6")
}
