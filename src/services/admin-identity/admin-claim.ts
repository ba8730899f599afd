/**
 * Which identity-provider users are admins, decided from their token's claims by the condition
 * in `admin.oidc.admin_claim`: the same kind of condition an `auth.oidc` policy's `when` holds,
 * read the same way (claimValue: the claim's own name first, since Auth0's namespaced claims are
 * URLs full of dots, then a dotted path such as Keycloak's `realm_access.roles`). Pure, so the
 * rule's corners are tested without an issuer.
 */
import type { OidcClaimCondition } from "../config/schema.ts"
import { claimValue } from "../identity/policies.ts"

/**
 * `equals`: the claim is that value (same type: `true` does not match the string "true"), or a
 * list holding it. `includes`: the claim is a list holding it, or a space-separated string (like
 * `scope`) naming it.
 */
export const namesAdmin = (claims: Readonly<Record<string, unknown>>, rule: OidcClaimCondition): boolean => {
  const found = claimValue(claims, rule.claim)
  if (rule.equals !== undefined) return Array.isArray(found) ? found.includes(rule.equals) : found === rule.equals
  if (rule.includes === undefined) return false
  if (Array.isArray(found)) return found.includes(rule.includes)
  if (typeof found === "string") return found.split(/\s+/).includes(rule.includes)
  return false
}

/** The rule in words, for a refusal's message (names the claim, never the token's values). */
export const describeRule = (rule: OidcClaimCondition): string =>
  rule.equals !== undefined
    ? `claim ${rule.claim} equal to ${JSON.stringify(rule.equals)}`
    : `claim ${rule.claim} including ${JSON.stringify(rule.includes)}`
