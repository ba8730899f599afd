/**
 * What a verified identity-provider token may do: the first policy of its issuer whose `when`
 * matches the token's claims (config `auth.oidc[].policies`), and the stable id of its subject.
 */
import { budgetLimits } from "../../domain/budget-input.ts"
import { createHash } from "node:crypto"
import type { SubjectPrincipal } from "../../domain/records.ts"
import type { OidcClaimCondition, OidcPolicyConfig } from "../config/schema.ts"

/**
 * `sub_` + the first 32 hex characters (128 bits) of SHA-256(issuer, NUL, subject). A `sub` is
 * unique only within its issuer, so both go in; the NUL keeps ("a", "bc") apart from ("ab", "c").
 * Stable across restarts and replicas, and it does not spell out the subject in rate-limit keys.
 */
export const subjectId = (issuer: string, subject: string): string =>
  `sub_${createHash("sha256").update(issuer).update("\0").update(subject).digest("hex").slice(0, 32)}`

const MAX_PATH_DEPTH = 8

/** The claim named exactly `name` (namespaced claims contain dots), else the dotted path into nested objects. */
export const claimValue = (claims: Readonly<Record<string, unknown>>, name: string): unknown => {
  if (Object.hasOwn(claims, name)) return claims[name]
  const path = name.split(".")
  if (path.length < 2 || path.length > MAX_PATH_DEPTH) return undefined
  let node: unknown = claims
  for (const segment of path) {
    if (typeof node !== "object" || node === null || Array.isArray(node) || !Object.hasOwn(node, segment)) return undefined
    node = (node as Record<string, unknown>)[segment]
  }
  return node
}

/**
 * One claim condition: `equals` (the claim is that value, same type, or a list holding it) or
 * `includes` (a list holding it, or a space-separated string such as `scope` naming it). Shared
 * with the admin sign-in's `admin_claim` (admin-identity/admin-claim.ts).
 */
export const holds = (condition: OidcClaimCondition, claims: Readonly<Record<string, unknown>>): boolean => {
  const value = claimValue(claims, condition.claim)
  if (value === undefined || value === null) return false
  if (condition.equals !== undefined) {
    return Array.isArray(value) ? value.includes(condition.equals) : value === condition.equals
  }
  if (condition.includes !== undefined) {
    if (Array.isArray(value)) return value.includes(condition.includes)
    // OAuth's `scope` claim is one space-separated string.
    if (typeof value === "string") return value.split(/\s+/).includes(condition.includes)
  }
  return false
}

/** The first policy whose conditions all hold; a policy without `when` matches every token. */
export const choosePolicy = (
  policies: ReadonlyArray<OidcPolicyConfig>,
  claims: Readonly<Record<string, unknown>>
): OidcPolicyConfig | undefined =>
  policies.find((policy) => {
    if (policy.when === undefined) return true
    const conditions = Array.isArray(policy.when) ? policy.when : [policy.when as OidcClaimCondition]
    return conditions.every((condition) => holds(condition, claims))
  })

/** The principal a verified token acts as; with no matching policy it may do nothing. */
export const subjectPrincipal = (
  issuer: string,
  subject: string,
  policy: OidcPolicyConfig | undefined
): SubjectPrincipal => ({
  kind: "subject",
  id: subjectId(issuer, subject),
  issuer,
  subject,
  policy: policy?.name ?? null,
  allowed_models: policy === undefined ? [] : policy.allowed_models ?? null,
  tools_enabled: policy?.tools_enabled ?? false,
  mcp_servers: policy?.mcp_servers ?? [],
  budget: policy?.budget === undefined ? null : budgetLimits(policy.budget),
  limits: policy?.limits ?? null,
  connection_grants: policy?.connections ?? []
})
