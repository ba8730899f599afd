/** Config: file, MODELGATE_* overrides, flags, embedded default, and errors that name the field. */
import { describe, expect, it } from "@effect/vitest"
import { Result } from "effect"
import { resolveConfig } from "../../../src/services/config/load.ts"

const load = (fileText: string | undefined, env: Record<string, string> = {}, flags = {}) =>
  resolveConfig({ fileText, fileName: "modelgate.yaml", env, flags })

const errorOf = (result: ReturnType<typeof load>) => (Result.isFailure(result) ? result.failure.message : "no error")

describe("config", () => {
  it("with no file is the embedded default: loopback 8080, SQLite under ./data, the echo model", () => {
    const result = load(undefined)
    expect(Result.isSuccess(result)).toBe(true)
    const config = Result.getOrThrow(result)
    expect(config.server).toMatchObject({ host: "127.0.0.1", port: 8080 })
    expect(config.store).toBe("sqlite:./data/modelgate.db")
    expect(config.limits).toMatchObject({ requests_per_minute: 50, concurrent_streams: 5, max_body_bytes: 1_048_576 })
    expect(config.models.map((m) => m.alias)).toEqual(["echo"])
    expect(config.providers.map((p) => p.kind)).toEqual(["echo"])
  })

  it("adds providers whose API key is in the environment", () => {
    const config = Result.getOrThrow(load(undefined, { OPENAI_API_KEY: "x", ANTHROPIC_API_KEY: "y" }))
    expect(config.providers.map((p) => p.name)).toEqual(["openai", "anthropic", "echo"])
    expect(config.models.filter((m) => m.id !== undefined).map((m) => m.alias)).toEqual(["fast", "smart", "echo"])
  })

  it("gives the automatic providers routes for their vendors' model names", () => {
    const config = Result.getOrThrow(load(undefined, { OPENAI_API_KEY: "x", ANTHROPIC_API_KEY: "y" }))
    expect(config.models.filter((m) => m.match !== undefined).map((m) => `${m.match}->${m.provider}`)).toEqual([
      "text-embedding-*->openai", "gpt-*->openai", "chatgpt-*->openai", "o1*->openai", "o3*->openai", "o4*->openai", "claude-*->anthropic"
    ])
  })

  it("keeps the file's own entries over the automatic ones with the same name or pattern", () => {
    const file = `
providers:
  - { name: mine, kind: anthropic, base_url: "http://127.0.0.1:1", api_key: k }
models:
  - { match: "claude-*", provider: mine, credits: 9 }
  - { alias: smart, id: claude-opus-4-1, provider: mine }
`
    const config = Result.getOrThrow(load(file, { ANTHROPIC_API_KEY: "y" }))
    expect(config.models.filter((m) => m.match === "claude-*")).toEqual([expect.objectContaining({ provider: "mine", credits: 9 })])
    expect(config.models.filter((m) => m.alias === "smart")).toEqual([expect.objectContaining({ id: "claude-opus-4-1" })])
  })

  it("reads match entries and MODELGATE_MODELS_<n>_MATCH", () => {
    const file = `
providers: [{ name: up, kind: anthropic, base_url: "http://127.0.0.1:1", api_key: k }]
models: [{ match: "claude-*", provider: up, credits: 5, max_tokens: 64000 }]
`
    const config = Result.getOrThrow(load(file, { MODELGATE_MODELS_0_MATCH: "claude-3-*" }))
    expect(config.models[0]).toEqual({ match: "claude-3-*", provider: "up", credits: 5, max_tokens: 64000, endpoints: ["chat"] })
  })

  it("reads mcp.servers and refuses bad names, duplicates, a server with both or neither of url and command, and policies naming unknown servers (issue 37)", () => {
    const ok = load(`mcp: { servers: [{ name: github, url: "https://mcp.example.com/mcp", headers: { Authorization: "Bearer \${T}" }, tools: ["search_*"] }] }`)
    expect(Result.isSuccess(ok) && ok.success.mcp.servers[0]).toMatchObject({ name: "github", timeout_ms: 30000, headers: { Authorization: "Bearer ${T}" } })
    const server = (name: string) => `{ name: "${name}", url: "http://127.0.0.1:9/mcp" }`
    expect(errorOf(load(`mcp: { servers: [${server("Git Hub")}] }`))).toContain("mcp.servers.0.name: expected [a-z0-9_-]{1,32}")
    expect(errorOf(load(`mcp: { servers: [${server("a__b")}] }`))).toContain(`mcp.servers.0.name: "a__b" holds "__"`)
    expect(errorOf(load(`mcp: { servers: [${server("a")}, ${server("a")}] }`))).toContain(`mcp.servers.1.name: duplicate server name "a"`)
    expect(errorOf(load(`mcp: { servers: [{ name: files, url: "http://127.0.0.1:9/mcp", command: node }] }`))).toContain("mcp.servers.0: give url (Streamable HTTP) or command (stdio), one of the two")
    expect(errorOf(load(`mcp: { servers: [{ name: files }] }`))).toContain("mcp.servers.0: give url (Streamable HTTP) or command (stdio)")
    expect(errorOf(load(`mcp: { servers: [{ name: files, command: node, headers: { A: b } }] }`))).toContain("mcp.servers.0.headers: only for a url server")
    expect(errorOf(load(`mcp: { servers: [{ name: files, url: "http://127.0.0.1:9/mcp", env: { A: b } }] }`))).toContain("mcp.servers.0.env: only for a command")
    const issuer = `auth: { oidc: [{ issuer: "https://id.example.com", audience: mg, policies: [{ name: p, mcp_servers: [nope] }] }] }\n`
    expect(errorOf(load(issuer + `mcp: { servers: [${server("a")}] }`))).toContain(`auth.oidc.0.policies.0.mcp_servers: no MCP server named "nope"`)
  })

  it("refuses model entries that mix or miss id and match, naming the field", () => {
    const up = `providers: [{ name: up, kind: openai, base_url: "http://127.0.0.1:1/v1", api_key: k }]\n`
    expect(errorOf(load(up + "models: [{ match: 'gpt-*' }]"))).toBe("modelgate.yaml: models.0.provider: required (or deployments)")
    expect(errorOf(load(up + "models: [{ match: 'gpt-*', provider: nobody }]"))).toContain("models.0.provider: no provider named")
    expect(errorOf(load(up + "models: [{ provider: up }]"))).toContain("models.0.id: required (or match")
    expect(errorOf(load(up + "models: [{ match: gpt-4o, provider: up }]"))).toContain(`models.0.match: "gpt-4o" has no "*"`)
    expect(errorOf(load(up + "models: [{ match: 'gpt-*', alias: g, provider: up }]"))).toContain("models.0.alias: not allowed with match")
    expect(errorOf(load(up + "models: [{ match: 'gpt-*', display_name: G, provider: up }]"))).toContain("models.0.display_name: not allowed with match")
    expect(errorOf(load(up + "models: [{ id: 'gpt-*', provider: up }]"))).toContain(`models.0.id: "*" is only allowed in match`)
    expect(errorOf(load(up + "models: [{ id: gpt-4o, alias: 'g*', provider: up }]"))).toContain(`models.0.alias: "*" is only allowed in match`)
    expect(errorOf(load(up + "models: [{ match: 'gpt-*', provider: up }, { match: 'gpt-*', provider: up }]"))).toContain(
      `models.1.match: the pattern "gpt-*" is used by another entry`
    )
    expect(errorOf(load(up + "models: [{ match: 'gpt-*', provider: up, tokens: 1 }]"))).toContain("models.0.tokens: unknown key")
  })

  it("overrides every scalar from MODELGATE_<SECTION>_<KEY>, typed like YAML", () => {
    const file = `
providers:
  - { name: up, kind: openai, base_url: "http://127.0.0.1:1/v1", api_key: k }
models:
  - { alias: m, id: model-1, provider: up }
`
    const config = Result.getOrThrow(load(file, {
      MODELGATE_SERVER_PORT: "9090",
      MODELGATE_SERVER_TRUST_PROXY: "true",
      MODELGATE_LIMITS_REQUESTS_PER_MINUTE: "7",
      MODELGATE_ADMIN_TOKEN: "from-the-environment",
      MODELGATE_STORE: "postgres://u@h/db",
      MODELGATE_PROVIDERS_0_TIMEOUTS_IDLE_MS: "1234",
      MODELGATE_MODELS_0_CREDITS: "3",
      MODELGATE_MCP_SESSION_TTL_SECONDS: "60"
    }))
    expect(config.server.port).toBe(9090)
    expect(config.server.trust_proxy).toBe(true)
    expect(config.limits.requests_per_minute).toBe(7)
    expect(config.admin.token).toBe("from-the-environment")
    expect(config.store).toBe("postgres://u@h/db")
    expect(config.providers[0]!.timeouts.idle_ms).toBe(1234)
    expect(config.models[0]!.credits).toBe(3)
    expect(config.mcp.session_ttl_seconds).toBe(60)
  })

  it("overrides list items and every key the schema has, including lists of scalars", () => {
    const config = Result.getOrThrow(load(undefined, {
      MODELGATE_MCP_ALLOWED_ORIGINS_0: "https://a.example",
      MODELGATE_MCP_ALLOWED_ORIGINS_1: "https://b.example",
      MODELGATE_AUDIT_BATCH_SIZE: "9"
    }))
    expect(config.mcp.allowed_origins).toEqual(["https://a.example", "https://b.example"])
    expect(config.audit.batch_size).toBe(9)
    expect(errorOf(load(undefined, { MODELGATE_MCP_ALLOWED_ORIGINS_X: "a" }))).toContain("not a configuration key")
  })

  it("leaves the launcher's variables alone: the config file's name and running from the sources", () => {
    const config = Result.getOrThrow(load(undefined, { MODELGATE_CONFIG: "/elsewhere.yaml", MODELGATE_FROM_SOURCE: "1", MODELGATE_SERVER_PORT: "2000" }))
    expect(config.server.port).toBe(2000)
    expect(errorOf(load(undefined, { MODELGATE_FROM_SOURCES: "1" }))).toContain("not a configuration key")
  })

  it("lets CLI flags win over file and environment", () => {
    const config = Result.getOrThrow(load("server: { port: 1000 }", { MODELGATE_SERVER_PORT: "2000" }, { port: 3000, host: "127.0.0.2" }))
    expect(config.server).toMatchObject({ port: 3000, host: "127.0.0.2" })
  })

  it("stops with a message naming the field", () => {
    expect(errorOf(load("server: { port: 99999 }"))).toContain("server.port")
    expect(errorOf(load("server: { port: eighty }"))).toContain("server.port")
    expect(errorOf(load("limits: { requests_per_minute: 0 }"))).toContain("limits.requests_per_minute")
    expect(errorOf(load("limitz: {}"))).toContain("limitz: unknown key")
    expect(errorOf(load("store: mysql://x"))).toContain("store")
    expect(errorOf(load(undefined, { MODELGATE_SERVER_PORT: "abc" }))).toContain("server.port")
    expect(errorOf(load(undefined, { MODELGATE_NOT_A_KEY: "1" }))).toContain("MODELGATE_NOT_A_KEY")
    expect(errorOf(load("models: [{ id: x, provider: nobody }]"))).toContain("models.0.provider")
    expect(errorOf(load("providers: [{ name: p, kind: openai }]"))).toContain("providers.0.base_url")
    expect(errorOf(load("providers: [{ name: p, kind: cohere, base_url: 'http://x' }]"))).toContain("providers.0.kind")
    expect(errorOf(load("server: { host: 0.0.0.0 }"))).toContain("server.tls")
    expect(errorOf(load("{ not: [valid"))).toContain("not valid YAML")
    expect(errorOf(load("- a list"))).toContain("mapping")
  })

  it("reads the tracing settings: off by default, the endpoint from MODELGATE_TELEMETRY_OTLP_ENDPOINT, bad values named", () => {
    const off = Result.getOrThrow(load(undefined)).telemetry
    expect(off).toMatchObject({ otlp_protocol: "http/json", otlp_headers: {}, service_name: "modelgate", sample_ratio: 1 })
    expect(off.otlp_endpoint).toBeUndefined()
    const on = Result.getOrThrow(load("telemetry: { otlp_headers: { x-api-key: abc } }", {
      MODELGATE_TELEMETRY_OTLP_ENDPOINT: "http://collector:4318",
      MODELGATE_TELEMETRY_SAMPLE_RATIO: "0.25"
    })).telemetry
    expect(on).toMatchObject({ otlp_endpoint: "http://collector:4318", sample_ratio: 0.25, otlp_headers: { "x-api-key": "abc" } })
    expect(errorOf(load("telemetry: { otlp_endpoint: collector:4318 }"))).toContain("telemetry.otlp_endpoint")
    expect(errorOf(load("telemetry: { sample_ratio: 1.5 }"))).toContain("telemetry.sample_ratio")
    expect(errorOf(load("telemetry: { otlp_protocol: grpc }"))).toContain("telemetry.otlp_protocol")
    expect(errorOf(load("telemetry: { otlp_headers: { 'bad header': x } }"))).toContain("telemetry.otlp_headers")
  })
})

describe("config: auth.oidc", () => {
  const issuer = (fields: string) => `auth:\n  oidc:\n    - { ${fields} }\n`
  const base = `issuer: "https://sso.example.com/realms/ml", audience: modelgate`

  it("reads issuers with their policies and defaults, and MODELGATE_AUTH_OIDC_<n>_* overrides", () => {
    const file = issuer(`${base}, policies: [{ name: team, when: { claim: groups, includes: ml }, allowed_models: [echo], budget: { max_requests: 5 } }, { name: everyone }]`)
    const config = Result.getOrThrow(load(file, { MODELGATE_AUTH_OIDC_0_AUDIENCE_0: "gateway", MODELGATE_AUTH_OIDC_0_CLOCK_SKEW_SECONDS: "10" }))
    expect(config.auth.oidc[0]).toMatchObject({
      issuer: "https://sso.example.com/realms/ml",
      // A string or a list in the file; the environment sets list items.
      audience: ["gateway"],
      clock_skew_seconds: 10,
      jwks_cooldown_seconds: 30,
      policies: [
        { name: "team", when: { claim: "groups", includes: "ml" }, allowed_models: ["echo"], tools_enabled: false, connections: [], budget: { max_requests: 5 } },
        { name: "everyone", tools_enabled: false, connections: [] }
      ]
    })
    expect(Result.getOrThrow(load(undefined)).auth.oidc).toEqual([])
    // Plain http is for a loopback issuer only (development and tests).
    expect(Result.isSuccess(load(issuer(`issuer: "http://127.0.0.1:9000", audience: x, policies: [{ name: p }]`)))).toBe(true)
  })

  it("refuses what would make tokens unsafe or policies ambiguous, naming the field", () => {
    const cases: Array<[string, string]> = [
      [issuer(`issuer: "http://sso.example.com", audience: x, policies: [{ name: p }]`), "auth.oidc.0.issuer: expected an https URL"],
      [issuer(`issuer: "not a url", audience: x, policies: [{ name: p }]`), "auth.oidc.0.issuer: expected an https URL"],
      [issuer(`${base}, jwks_url: "http://keys.example.com/jwks", policies: [{ name: p }]`), "auth.oidc.0.jwks_url: expected an https URL"],
      [issuer(`issuer: "https://a.example", audience: [], policies: [{ name: p }]`), "auth.oidc.0.audience: at least one audience"],
      [issuer(`${base}, algorithms: [HS256], policies: [{ name: p }]`), "auth.oidc.0.algorithms: HS256 is not accepted"],
      [issuer(`${base}, algorithms: [none], policies: [{ name: p }]`), "auth.oidc.0.algorithms: none is not accepted"],
      [issuer(`${base}, policies: []`), "auth.oidc.0.policies: at least one policy"],
      [issuer(`${base}`), "auth.oidc.0.policies: Missing key"],
      [issuer(`${base}, policies: [{ name: p }, { name: p }]`), "auth.oidc.0.policies.1.name: duplicate policy name"],
      [issuer(`${base}, policies: [{ name: p, when: { claim: groups } }]`), "auth.oidc.0.policies.0.when: give exactly one of equals or includes"],
      [issuer(`${base}, policies: [{ name: p, when: [{ claim: a, equals: 1 }, { claim: b, equals: x, includes: y }] }]`), "auth.oidc.0.policies.0.when.1: give exactly one"],
      [issuer(`${base}, policies: [{ name: p, connections: [{ connection: db, role: admin }] }]`), "auth.oidc.0.policies.0.connections.0.role"],
      [issuer(`${base}, policies: [{ name: p, budget: { max_requests: 0 } }]`), "auth.oidc.0.policies.0.budget.max_requests"],
      [issuer(`${base}, clock_skew_seconds: 3600, policies: [{ name: p }]`), "auth.oidc.0.clock_skew_seconds"],
      [issuer(`${base}, policies: [{ name: p, scopes: [x] }]`), "auth.oidc.0.policies.0.scopes: unknown key"],
      [`auth:\n  oidc:\n    - { ${base}, policies: [{ name: p }] }\n    - { ${base}, policies: [{ name: q }] }\n`, "auth.oidc.1.issuer: https://sso.example.com/realms/ml is configured twice"]
    ]
    for (const [file, message] of cases) expect(errorOf(load(file))).toContain(`modelgate.yaml: ${message}`)
  })
})

describe("config: operator rules (issue 26)", () => {
  it("resolves the paths a file writes against the file's directory, and leaves env values to the working directory", () => {
    const file = `
server: { tls: { cert: cert.pem, key: /etc/tls/key.pem }, data_dir: spool }
store: sqlite:db/modelgate.db
`
    const config = Result.getOrThrow(resolveConfig({ fileText: file, fileName: "/srv/gw/modelgate.yaml", env: {} }))
    expect(config.server.tls).toEqual({ cert: "/srv/gw/cert.pem", key: "/etc/tls/key.pem" })
    expect(config.server.data_dir).toBe("/srv/gw/spool")
    expect(config.store).toBe("sqlite:/srv/gw/db/modelgate.db")
    const fromEnv = Result.getOrThrow(resolveConfig({ fileText: file, fileName: "/srv/gw/modelgate.yaml", env: { MODELGATE_STORE: "sqlite:./here.db" } }))
    expect(fromEnv.store).toBe("sqlite:./here.db")
    const memory = Result.getOrThrow(resolveConfig({ fileText: `store: "sqlite::memory:"`, fileName: "/srv/gw/modelgate.yaml", env: {} }))
    expect(memory.store).toBe("sqlite::memory:")
  })

  it("gives an embedding model without endpoints [embeddings], and every other entry [chat]", () => {
    const file = `
providers: [{ name: oa, kind: openai, base_url: "https://api.openai.com/v1", api_key_env: OA }]
models:
  - { id: text-embedding-3-small, provider: oa }
  - { match: "text-embedding-*", provider: oa }
  - { alias: both, id: text-embedding-3-large, provider: oa, endpoints: [chat, embeddings] }
  - { id: gpt-5.5, provider: oa }
`
    const config = Result.getOrThrow(load(file))
    expect(config.models.map((m) => m.endpoints)).toEqual([["embeddings"], ["embeddings"], ["chat", "embeddings"], ["chat"]])
  })

  it("refuses placeholder secrets copied from the examples, naming the field", () => {
    const cases: Array<[string, string]> = [
      ["admin: { token: CHANGE_ME-long-random }", "admin.token: \"CHANGE_ME-long-random\" is a placeholder"],
      ["telemetry: { metrics_token: changeme-please }", "telemetry.metrics_token:"],
      ["providers: [{ name: oa, kind: openai, base_url: \"https://x.example\", api_key: \"<your-key>\" }]", "providers.0.api_key:"]
    ]
    for (const [file, message] of cases) expect(errorOf(load(file))).toContain(`modelgate.yaml: ${message}`)
    expect(errorOf(load(undefined, { MODELGATE_ADMIN_TOKEN: "CHANGE_ME" }))).toContain("admin.token:")
    expect(Result.isSuccess(load("admin: { token: 3f9c1d2e8a7b6c5d4e3f2a1b }"))).toBe(true)
  })

  it("refuses the README's example admin token and short ones, saying how to make one (issue 31.5)", () => {
    for (const token of ["a-long-random-admin-token", "A_LONG_RANDOM_TOKEN_0123", "placeholder-admin-token", "xxxxxxxxxxxxxxxxxxxx"]) {
      expect(errorOf(load(`admin: { token: ${token} }`))).toBe(
        `modelgate.yaml: admin.token: "${token}" is a placeholder from an example; set a real secret (e.g. openssl rand -hex 32)`
      )
    }
    for (const short of ["hunter22", "0123456789abcde"]) {
      const message = errorOf(load(`admin: { token: ${short} }`))
      expect(message).toContain("admin.token: expected at least 16 characters of random text (make one with: openssl rand -hex 32)")
      expect(errorOf(load(undefined, { MODELGATE_ADMIN_TOKEN: short }))).toContain("admin.token: expected at least 16 characters")
    }
    expect(Result.isSuccess(load("admin: { token: 0123456789abcdef }"))).toBe(true)
  })
})
