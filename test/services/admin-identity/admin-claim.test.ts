/** The admin rule (admin.oidc.admin_claim) on its own: claim names, dotted paths, equality and membership. */
import { describe, expect, it } from "vitest"
import { describeRule, namesAdmin } from "../../../src/services/admin-identity/admin-claim.ts"

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
    expect(namesAdmin(claims, { claim: "https://example.com/roles", includes: "admin" })).toBe(true)
    expect(namesAdmin(claims, { claim: "realm_access.roles", includes: "gateway-admin" })).toBe(true)
    expect(namesAdmin(claims, { claim: "realm_access.missing", includes: "gateway-admin" })).toBe(false)
    expect(namesAdmin(claims, { claim: "groups.length", equals: 2 })).toBe(false)
    expect(namesAdmin(claims, { claim: "toString", includes: "function" })).toBe(false)
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

  it("equals: the same value of the same type, or a list holding it (as auth.oidc's when reads it)", () => {
    expect(namesAdmin(claims, { claim: "role", equals: "admin" })).toBe(true)
    expect(namesAdmin(claims, { claim: "role", equals: "Admin" })).toBe(false)
    expect(namesAdmin(claims, { claim: "is_admin", equals: true })).toBe(true)
    expect(namesAdmin(claims, { claim: "is_admin", equals: "true" })).toBe(false)
    expect(namesAdmin(claims, { claim: "groups", equals: "gateway-admins" })).toBe(true)
    expect(namesAdmin(claims, { claim: "scope", equals: "admin:gateway" })).toBe(false)
  })

  it("says the rule in words for a refusal", () => {
    expect(describeRule({ claim: "groups", includes: "gateway-admins" })).toBe(`claim groups including "gateway-admins"`)
    expect(describeRule({ claim: "is_admin", equals: true })).toBe("claim is_admin equal to true")
  })
})
