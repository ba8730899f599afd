/** The admin rule (admin.oidc.admin_claim) on its own: claim names, dotted paths, equality and membership. */
import { describe, expect, it } from "vitest"
import { claimAt, describeRule, namesAdmin } from "../../../src/services/admin-identity/admin-claim.ts"

describe("admin claim rule", () => {
  const claims = {
    groups: ["staff", "gateway-admins"],
    scope: "openid admin:gateway email",
    role: "admin",
    is_admin: true,
    realm_access: { roles: ["offline_access", "gateway-admin"] },
    "https://example.com/roles": ["admin"]
  }

  it("finds a claim by its own name before reading dots as a path", () => {
    expect(claimAt(claims, "https://example.com/roles")).toEqual(["admin"])
    expect(claimAt(claims, "realm_access.roles")).toEqual(["offline_access", "gateway-admin"])
    expect(claimAt(claims, "realm_access.missing")).toBeUndefined()
    expect(claimAt(claims, "groups.length")).toBeUndefined()
    expect(claimAt(claims, "toString")).toBeUndefined()
  })

  it("includes: a list holding the value, or a space-separated string naming it", () => {
    expect(namesAdmin(claims, { claim: "groups", includes: "gateway-admins" })).toBe(true)
    expect(namesAdmin(claims, { claim: "groups", includes: "gateway" })).toBe(false)
    expect(namesAdmin(claims, { claim: "scope", includes: "admin:gateway" })).toBe(true)
    expect(namesAdmin(claims, { claim: "scope", includes: "admin" })).toBe(false)
    expect(namesAdmin(claims, { claim: "realm_access.roles", includes: "gateway-admin" })).toBe(true)
    expect(namesAdmin(claims, { claim: "https://example.com/roles", includes: "admin" })).toBe(true)
    expect(namesAdmin(claims, { claim: "missing", includes: "admin" })).toBe(false)
    expect(namesAdmin(claims, { claim: "is_admin", includes: "true" })).toBe(false)
  })

  it("value: equal, of the same type", () => {
    expect(namesAdmin(claims, { claim: "role", value: "admin" })).toBe(true)
    expect(namesAdmin(claims, { claim: "role", value: "Admin" })).toBe(false)
    expect(namesAdmin(claims, { claim: "is_admin", value: true })).toBe(true)
    expect(namesAdmin(claims, { claim: "is_admin", value: "true" })).toBe(false)
    expect(namesAdmin(claims, { claim: "groups", value: "gateway-admins" })).toBe(false)
  })

  it("says the rule in words for a refusal", () => {
    expect(describeRule({ claim: "groups", includes: "gateway-admins" })).toBe(`claim groups including "gateway-admins"`)
    expect(describeRule({ claim: "is_admin", value: true })).toBe("claim is_admin equal to true")
  })
})
