/**
 * Which identity-provider users are admins, decided from their token's claims by the condition
 * in `admin.oidc.admin_claim`: the same kind of condition an `auth.oidc` policy's `when` holds,
 * read the same way (claimValue: the claim's own name first, since Auth0's namespaced claims are
 * URLs full of dots, then a dotted path such as Keycloak's `realm_access.roles`). Pure, so the
 * rule's corners are tested without an issuer.
 */
import type { OidcClaimCondition } from "../config/schema.ts"
import { holds } from "../identity/policies.ts"

/** Whether the token's claims name an admin: the condition as an `auth.oidc` policy reads it. */
export const namesAdmin = (claims: Readonly<Record<string, unknown>>, rule: OidcClaimCondition): boolean => holds(rule, claims)

/** The rule in words, for a refusal's message (names the claim, never the token's values). */
export const describeRule = (rule: OidcClaimCondition): string =>
  rule.equals !== undefined
    ? `claim ${rule.claim} equal to ${JSON.stringify(rule.equals)}`
    : `claim ${rule.claim} including ${JSON.stringify(rule.includes)}`
