/**
 * Model resolution (alias, id, then the most specific `match:` route) and `allowed_models`
 * (names and patterns, checked against the alias and the id sent upstream), from a config
 * loaded the way the server loads it.
 */
import { Effect, Result } from "effect"
import { stringify } from "yaml"
import { describe, expect, it } from "vitest"
import type { ApiKeyRecord } from "../../../src/domain/records.ts"
import { ModelCatalog, type ModelCatalogShape } from "../../../src/services/catalog/ModelCatalog.ts"
import { resolveConfig } from "../../../src/services/config/load.ts"

const catalogOf = (config: Record<string, unknown>, env: Record<string, string> = {}): ModelCatalogShape => {
  const loaded = resolveConfig({ fileText: stringify(config), env })
  if (Result.isFailure(loaded)) throw new Error(loaded.failure.message)
  return ModelCatalog.make(loaded.success)
}

const key = (allowed_models: ReadonlyArray<string> | null) => ({ id: "key_test", allowed_models }) as unknown as ApiKeyRecord

const providers = [
  { name: "ant", kind: "anthropic", base_url: "http://127.0.0.1:1", api_key: "a" },
  { name: "oai", kind: "openai", base_url: "http://127.0.0.1:1/v1", api_key: "o" },
  { name: "cheap", kind: "openai", base_url: "http://127.0.0.1:1/v1", api_key: "c" }
]

const catalog = catalogOf({
  providers,
  models: [
    { alias: "smart", id: "claude-sonnet-4-5-20250929", provider: "ant", credits: 5, max_tokens: 8192 },
    { match: "claude-*", provider: "ant", credits: 4, max_tokens: 64000 },
    { match: "claude-3-*", provider: "ant", credits: 2, max_tokens: 8192 },
    { match: "*-haiku-*", provider: "cheap", credits: 1, max_tokens: 4096 },
    { match: "gpt-*", provider: "oai", credits: 3, max_tokens: 16384 },
    // A route may also send one fixed model whatever name it matched.
    { match: "legacy-*", id: "gpt-4o-mini", provider: "oai", credits: 1, max_tokens: 1000 }
  ]
})

const resolve = (name: string) => Effect.runSync(Effect.result(catalog.resolve(name)))
const served = (name: string) => {
  const result = resolve(name)
  if (Result.isFailure(result)) return result.failure._tag
  const { model, provider, route } = result.success
  return { id: model.id, provider: provider.name, credits: model.credits, max_tokens: model.max_tokens, route: route?.match }
}

describe("ModelCatalog.resolve", () => {
  it("serves an alias or an exact id before any pattern", () => {
    expect(served("smart")).toEqual({ id: "claude-sonnet-4-5-20250929", provider: "ant", credits: 5, max_tokens: 8192, route: undefined })
    expect(served("claude-sonnet-4-5-20250929")).toEqual(served("smart"))
  })

  it("sends the requested id with the matching route's provider, credits and cap", () => {
    expect(served("claude-opus-4-1-20250805")).toEqual({ id: "claude-opus-4-1-20250805", provider: "ant", credits: 4, max_tokens: 64000, route: "claude-*" })
    expect(served("gpt-5")).toEqual({ id: "gpt-5", provider: "oai", credits: 3, max_tokens: 16384, route: "gpt-*" })
  })

  it("picks the most specific route: most literal characters, then the longer literal prefix", () => {
    // claude-3-* (9 literal characters) beats claude-* (7) and *-haiku-* (7).
    expect(served("claude-3-5-haiku-20241022")).toMatchObject({ provider: "ant", credits: 2, route: "claude-3-*" })
    // *-haiku-* and claude-* tie on 7 literal characters; claude-* has the longer prefix.
    expect(served("claude-haiku-4-5")).toMatchObject({ route: "claude-*", credits: 4 })
    expect(served("mistral-haiku-1")).toMatchObject({ route: "*-haiku-*", provider: "cheap" })
  })

  it("keeps config order between routes that are equally specific", () => {
    const tied = catalogOf({
      providers,
      models: [
        { match: "x-*-a", provider: "oai" },
        { match: "x-a-*", provider: "ant" },
        { match: "x-*-b", provider: "cheap" }
      ]
    })
    // "x-a-*" has the longer prefix, so it wins over "x-*-a" although listed later.
    expect(tied.lookup("x-a-a")?.provider.name).toBe("ant")
    const equal = catalogOf({ providers, models: [{ match: "*-a-*", provider: "cheap" }, { match: "*-b-*", provider: "oai" }] })
    expect(equal.lookup("q-a-b-z")?.provider.name).toBe("cheap")
  })

  it("lets a route name one upstream model for every name it matches", () => {
    expect(served("legacy-whatever")).toEqual({ id: "gpt-4o-mini", provider: "oai", credits: 1, max_tokens: 1000, route: "legacy-*" })
    expect(catalog.lookup("legacy-whatever")?.requested).toBe("legacy-whatever")
  })

  it("answers 404 not_found for a name nothing serves, or one no real model id looks like", () => {
    expect(resolve("mistral-large")).toMatchObject({ failure: { _tag: "NotFound", details: { model: "mistral-large" } } })
    expect(served("claude-*")).toBe("NotFound")
    expect(served("claude-\u0000")).toBe("NotFound")
    expect(served("claude-sonnet 4")).toBe("NotFound")
    expect(served(`claude-${"x".repeat(300)}`)).toBe("NotFound")
  })

  it("lists the concrete models only, not the routes", () => {
    expect(catalog.models.map((m) => m.id)).toEqual(["claude-sonnet-4-5-20250929"])
    expect(catalog.routes.map((r) => r.match)).toEqual(["claude-*", "claude-3-*", "*-haiku-*", "gpt-*", "legacy-*"])
  })
})

describe("allowed_models", () => {
  const scope = (allowed: ReadonlyArray<string> | null, name: string) => {
    const resolved = Effect.runSync(catalog.resolve(name))
    const result = Effect.runSync(Effect.result(catalog.checkScope(key(allowed), resolved)))
    return Result.isSuccess(result) ? "allowed" : result.failure._tag
  }

  it("absent means every model", () => {
    expect(scope(null, "claude-opus-4")).toBe("allowed")
  })

  it("a listed alias or id allows the model by either of its names, and nothing else", () => {
    expect(scope(["smart"], "smart")).toBe("allowed")
    expect(scope(["smart"], "claude-sonnet-4-5-20250929")).toBe("allowed")
    expect(scope(["claude-sonnet-4-5-20250929"], "smart")).toBe("allowed")
    expect(scope(["smart"], "claude-opus-4")).toBe("ScopeViolation")
    expect(scope(["smart"], "gpt-5")).toBe("ScopeViolation")
  })

  it("a pattern allows every model whose alias or upstream id it matches", () => {
    expect(scope(["claude-*"], "claude-opus-4")).toBe("allowed")
    expect(scope(["claude-*"], "claude-3-5-haiku-20241022")).toBe("allowed")
    // The alias `smart` is served by a Claude id, so a key allowed Claude models may use it.
    expect(scope(["claude-*"], "smart")).toBe("allowed")
    expect(scope(["claude-*"], "gpt-5")).toBe("ScopeViolation")
    expect(scope(["gpt-5*"], "gpt-5-mini")).toBe("allowed")
    expect(scope(["gpt-5*"], "gpt-4o")).toBe("ScopeViolation")
    expect(scope(["*"], "gpt-4o")).toBe("allowed")
    expect(scope(["sm*"], "smart")).toBe("allowed")
  })

  it("is checked against what is served, not the name the client typed", () => {
    // legacy-* sends gpt-4o-mini upstream: allowing "legacy-*" does not allow it, allowing its id does.
    expect(scope(["legacy-*"], "legacy-x")).toBe("ScopeViolation")
    expect(scope(["gpt-4o-mini"], "legacy-x")).toBe("allowed")
    expect(scope(["gpt-*"], "legacy-x")).toBe("allowed")
  })

  it("names the requested model in the 403", () => {
    const resolved = Effect.runSync(catalog.resolve("claude-opus-4"))
    const result = Effect.runSync(Effect.result(catalog.checkScope(key(["gpt-*"]), resolved)))
    expect(result).toMatchObject({ failure: { _tag: "ScopeViolation", details: { model: "claude-opus-4" } } })
  })
})

describe("automatic providers", () => {
  it("route Claude names to Anthropic and OpenAI names to OpenAI with no model list", () => {
    const auto = catalogOf({}, { ANTHROPIC_API_KEY: "a", OPENAI_API_KEY: "o" })
    const via = (name: string) => {
      const r = auto.lookup(name)
      return r === undefined ? undefined : `${r.provider.name}:${r.model.id}`
    }
    expect(via("claude-sonnet-4-5-20250929")).toBe("anthropic:claude-sonnet-4-5-20250929")
    expect(via("claude-opus-4-6")).toBe("anthropic:claude-opus-4-6")
    expect(via("claude-haiku-4-5-20251001")).toBe("anthropic:claude-haiku-4-5-20251001")
    for (const name of ["gpt-5", "gpt-4.1-mini", "chatgpt-4o-latest", "o1", "o3-mini", "o4-mini"]) expect(via(name)).toBe(`openai:${name}`)
    expect(via("smart")).toBe("anthropic:claude-sonnet-4-5-20250929")
    expect(via("fast")).toBe("openai:gpt-4o-mini-2024-07-18")
    expect(via("gemini-2.5-pro")).toBeUndefined()
    // The file lists no models, so the offline echo model is there too.
    expect(via("echo")).toBe("echo:echo-1")
  })
})
