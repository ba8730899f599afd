/**
 * Which identity-provider users are admins, decided from their token's claims by the rule in
 * `admin.oidc.admin_claim`. Pure, so the rule's corners are tested without an issuer.
 *
 * A claim is named either by its own name (Auth0's namespaced claims are URLs full of dots:
 * `https://example.com/roles`) or, when no claim has that name, by a dotted path into nested
 * objects (Keycloak's `realm_access.roles`).
 */
import type { AdminClaimConfig } from "../config/schema.ts"

const isRecord = (value: unknown): value is Readonly<Record<string, unknown>> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** The claim's value, or `undefined` when the token does not carry it. */
export const claimAt = (claims: Readonly<Record<string, unknown>>, name: string): unknown => {
  if (Object.hasOwn(claims, name)) return claims[name]
  let current: unknown = claims
  for (const part of name.split(".")) {
    if (!isRecord(current) || !Object.hasOwn(current, part)) return undefined
    current = current[part]
  }
  return current
}

/**
 * `value`: the claim equals it (same type: `true` does not match the string "true").
 * `includes`: the claim is a list holding it, or a space-separated string (like `scope`) naming it.
 */
export const namesAdmin = (claims: Readonly<Record<string, unknown>>, rule: AdminClaimConfig): boolean => {
  const found = claimAt(claims, rule.claim)
  if (rule.value !== undefined) return found === rule.value
  if (rule.includes === undefined) return false
  if (Array.isArray(found)) return found.includes(rule.includes)
  if (typeof found === "string") return found.split(" ").includes(rule.includes)
  return false
}

/** The rule in words, for a refusal's message (names the claim, never the token's values). */
export const describeRule = (rule: AdminClaimConfig): string =>
  rule.value !== undefined
    ? `claim ${rule.claim} equal to ${JSON.stringify(rule.value)}`
    : `claim ${rule.claim} including ${JSON.stringify(rule.includes)}`
