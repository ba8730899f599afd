/**
 * Issue 36: a tunnel's bastion is trusted only when OpenSSH's known_hosts text lists its key
 * for the name the tunnel uses (`host` on port 22, `[host]:port` otherwise): plain, hashed
 * (`|1|salt|hash`), wildcard and negated patterns, `@revoked` lines refusing.
 */
import { createHmac, randomBytes } from "node:crypto"
import { describe, expect, it } from "vitest"
import { fingerprintOf, knownHostsAccepts } from "../../../../src/services/sql/drivers/ssh-tunnel.ts"
import { generateKey, fingerprint } from "../../../support/ssh-bastion.ts"
import { utils } from "ssh2"

const blobOf = (publicKey: string): Buffer => {
  const parsed = utils.parseKey(publicKey)
  if (parsed instanceof Error) throw parsed
  return (Array.isArray(parsed) ? parsed[0] : parsed).getPublicSSH()
}

const hashed = (name: string) => {
  const salt = randomBytes(20)
  return `|1|${salt.toString("base64")}|${createHmac("sha1", salt).update(name).digest("base64")}`
}

describe("known_hosts", () => {
  const key = generateKey()
  const other = generateKey()
  const blob = blobOf(key.public)
  const typeAndKey = key.public.trim().split(/\s+/).slice(0, 2).join(" ")
  const otherTypeAndKey = other.public.trim().split(/\s+/).slice(0, 2).join(" ")

  it("accepts the listed key for the name, in each of OpenSSH's forms", () => {
    expect(knownHostsAccepts(`bastion.example.com ${typeAndKey}`, "bastion.example.com", 22, blob)).toBe(true)
    expect(knownHostsAccepts(`[bastion.example.com]:2222 ${typeAndKey}`, "bastion.example.com", 2222, blob)).toBe(true)
    expect(knownHostsAccepts(`other,BASTION.example.com ${typeAndKey} comment`, "bastion.example.com", 22, blob)).toBe(true)
    expect(knownHostsAccepts(`${hashed("[10.0.0.5]:2222")} ${typeAndKey}`, "10.0.0.5", 2222, blob)).toBe(true)
    expect(knownHostsAccepts(`*.example.com ${typeAndKey}`, "bastion.example.com", 22, blob)).toBe(true)
  })

  it("refuses another key, another name, another port, a negated name and a revoked key", () => {
    expect(knownHostsAccepts(`bastion.example.com ${otherTypeAndKey}`, "bastion.example.com", 22, blob)).toBe(false)
    expect(knownHostsAccepts(`other.example.com ${typeAndKey}`, "bastion.example.com", 22, blob)).toBe(false)
    // A port other than 22 is only ever listed as [host]:port.
    expect(knownHostsAccepts(`bastion.example.com ${typeAndKey}`, "bastion.example.com", 2222, blob)).toBe(false)
    expect(knownHostsAccepts(`${hashed("bastion.example.com")} ${typeAndKey}`, "bastion.example.org", 22, blob)).toBe(false)
    expect(knownHostsAccepts(`*.example.com,!bastion.example.com ${typeAndKey}`, "bastion.example.com", 22, blob)).toBe(false)
    expect(knownHostsAccepts(
      `bastion.example.com ${typeAndKey}\n@revoked bastion.example.com ${typeAndKey}`,
      "bastion.example.com",
      22,
      blob
    )).toBe(false)
    expect(knownHostsAccepts(`@cert-authority bastion.example.com ${typeAndKey}`, "bastion.example.com", 22, blob)).toBe(false)
    expect(knownHostsAccepts("# nothing here\n\n", "bastion.example.com", 22, blob)).toBe(false)
  })

  it("computes OpenSSH's SHA256 fingerprint", () => {
    expect(fingerprintOf(blob)).toBe(fingerprint(key.public))
    expect(fingerprintOf(blob)).toMatch(/^SHA256:[A-Za-z0-9+/]{43}$/)
  })
})
