// Which policy a token's claims choose, and the subject id of an issuer + subject.
import { describe, expect, it } from "vitest"
import type { OidcPolicyConfig } from "../../../src/services/config/schema.ts"
import { choosePolicy, claimValue, subjectId, subjectPrincipal } from "../../../src/services/identity/policies.ts"

const policy = (name: string, when?: OidcPolicyConfig["when"]): OidcPolicyConfig =>
  ({ name, ...(when === undefined ? {} : { when }), tools_enabled: false, mcp_servers: [], connections: [] })

describe("identity policies", () => {
  it("reads exact claim names first (namespaced claims), then dotted paths into nested objects", () => {
    const claims = { "https://example.com/groups": ["a"], realm_access: { roles: ["reader"] }, "a.b": 1, a: { b: 2 } }
    expect(claimValue(claims, "https://example.com/groups")).toEqual(["a"])
    expect(claimValue(claims, "realm_access.roles")).toEqual(["reader"])
    expect(claimValue(claims, "a.b")).toBe(1)
    expect(claimValue(claims, "realm_access.missing")).toBeUndefined()
    expect(claimValue({ x: ["y"] }, "x.length")).toBeUndefined()
    expect(claimValue({}, "__proto__.polluted")).toBeUndefined()
  })

  it("picks the first policy whose conditions all hold", () => {
    const policies = [
      policy("admins", [{ claim: "groups", includes: "admins" }, { claim: "email_verified", equals: true }]),
      policy("scoped", { claim: "scope", includes: "gateway:use" }),
      policy("tenant", { claim: "tenant", equals: "acme" }),
      policy("tagged", { claim: "tags", equals: "blue" })
    ]
    expect(choosePolicy(policies, { groups: ["admins"], email_verified: true })?.name).toBe("admins")
    expect(choosePolicy(policies, { groups: ["admins"], email_verified: "true" })).toBeUndefined()
    expect(choosePolicy(policies, { scope: "openid gateway:use profile" })?.name).toBe("scoped")
    expect(choosePolicy(policies, { scope: "openid gateway:user" })).toBeUndefined()
    expect(choosePolicy(policies, { tenant: "acme" })?.name).toBe("tenant")
    expect(choosePolicy(policies, { tenant: ["acme"] })?.name).toBe("tenant")
    expect(choosePolicy(policies, { tenant: "acme-2" })).toBeUndefined()
    expect(choosePolicy(policies, { tags: ["red", "blue"] })?.name).toBe("tagged")
    expect(choosePolicy(policies, { groups: "admins" })).toBeUndefined()
    expect(choosePolicy([...policies, policy("everyone")], {})?.name).toBe("everyone")
  })

  it("derives a stable subject id from issuer and subject together", () => {
    const id = subjectId("https://a.example", "alice")
    expect(id).toMatch(/^sub_[0-9a-f]{32}$/)
    expect(subjectId("https://a.example", "alice")).toBe(id)
    expect(subjectId("https://b.example", "alice")).not.toBe(id)
    expect(subjectId("https://a.example", "bc")).not.toBe(subjectId("https://a.exampleb", "c"))
  })

  it("gives a subject no policy nothing at all", () => {
    expect(subjectPrincipal("https://a.example", "x", undefined)).toMatchObject({
      policy: null, allowed_models: [], tools_enabled: false, budget: null, connection_grants: []
    })
  })
})
