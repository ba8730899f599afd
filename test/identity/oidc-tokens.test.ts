/**
 * Identity-provider tokens on the real gateway (port 0) against a real OpenID provider
 * (oidc-provider, port 0): what a client sees for a valid token served with its policy, for
 * every kind of bad token, and per-subject limits, budget, connection grants and audit.
 */
import Anthropic from "@anthropic-ai/sdk"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import OpenAI from "openai"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { subjectId } from "../../src/services/identity/policies.ts"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { auditFor, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import {
  hmacWithPublicKey,
  newSigningKey,
  startTestIssuer,
  tamperPayload,
  tamperSignature,
  type TestIssuer,
  unsignedToken
} from "../support/oidc-issuer.ts"
import { movableClock } from "../support/movable-clock.ts"
import { Client as PgClient } from "../support/pg-admin.ts"
import { openaiFor } from "../support/sdk-clients.ts"

let idp: TestIssuer
let db: TempDatabase
let gw: TestGateway

const policies = [
  {
    name: "ml-team",
    when: { claim: "groups", includes: "ml-team" },
    allowed_models: ["echo"],
    tools_enabled: true,
    connections: [{ connection: "analytics", role: "read" }],
    budget: { max_requests: 3 },
    limits: { requests_per_minute: 20, tokens_per_minute: 100_000 }
  },
  {
    name: "dba",
    when: [{ claim: "groups", includes: "dba" }, { claim: "email_verified", equals: true }],
    allowed_models: [],
    tools_enabled: true,
    connections: [{ connection: "analytics", role: "read" }]
  },
  {
    name: "readers",
    when: { claim: "realm_access.roles", includes: "reader" },
    allowed_models: ["other"],
    limits: { requests_per_minute: 2 }
  }
]

beforeAll(async () => {
  idp = await startTestIssuer()
  db = await createPostgresDatabase("mg_oidc_data")
  const admin = new PgClient(db.url)
  await admin.query("CREATE TABLE items (id serial PRIMARY KEY, name text NOT NULL)")
  await admin.query("INSERT INTO items (name) VALUES ('a'), ('b')")
  gw = await startGateway(testConfig({
    models: [
      { alias: "echo", id: "echo-1", provider: "echo", credits: 1 },
      { alias: "other", id: "echo-2", provider: "echo", credits: 1 }
    ],
    connections: [{ id: 1, name: "analytics", dialect: "postgres", url: db.url }],
    auth: { oidc: [{ issuer: idp.issuer, audience: idp.audience, jwks_cooldown_seconds: 0, policies }] }
  }))
})
afterAll(async () => {
  await gw?.close()
  await idp?.close()
  await db?.drop()
})

const chat = (token: string, model = "echo") =>
  fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hello" }] })
  })

const models = (token: string) => fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${token}` } })

const envelope = async (response: Response) => (await response.json()) as { status: number; error: string; message: string; request_id: string; details?: Record<string, unknown> }

const mlToken = (subject: string, extra: Parameters<TestIssuer["mint"]>[0] = {}) =>
  idp.mint({ subject, ...extra, claims: { groups: ["ml-team", "staff"], ...extra.claims } })

describe("identity-provider tokens", () => {
  it("serves a chat completion for a valid token with its policy, and audits it under the subject id (never the token)", async () => {
    const token = await mlToken("alice")
    const response = await chat(token)
    const body = await response.json() as { choices: Array<{ message: { content: string } }> }
    expect(response.status, JSON.stringify(body)).toBe(200)
    expect(body.choices[0]!.message.content).toContain("hello")
    expect(response.headers.get("x-ratelimit-limit")).toBe("20")
    // The policy's tokens per minute (issue 33) applies to the subject.
    expect(response.headers.get("x-ratelimit-limit-tokens")).toBe("100000")
    const requestId = response.headers.get("x-request-id")!
    const [record] = await auditFor(gw, requestId)
    const id = subjectId(idp.issuer, "alice")
    expect(id).toMatch(/^sub_[0-9a-f]{32}$/)
    expect(record).toMatchObject({
      key_id: id,
      status: 200,
      model: "echo-1",
      credits: 1_000_000, // the store holds micro-credits (issue 33)
      details: { identity: { issuer: idp.issuer, subject: "alice", policy: "ml-team" } }
    })
    expect(JSON.stringify(record)).not.toContain(token.split(".")[2]!)
    // Counting its budget recorded the subject in the store.
    const row = await Effect.runPromise(gw.store.subjects.getSubject(id))
    expect(row).toMatchObject({ id, issuer: idp.issuer, subject: "alice", budget_used: 1 })
  })

  it("serves the messages format (an Anthropic client's auth token) and the model list with a token too", async () => {
    const token = await mlToken("mia")
    const response = await fetch(`${gw.url}/v1/messages`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json", "anthropic-version": "2023-06-01" },
      body: JSON.stringify({ model: "echo", max_tokens: 50, messages: [{ role: "user", content: "hello" }] })
    })
    const body = await response.json() as { type: string; content: Array<{ text: string }> }
    expect(response.status, JSON.stringify(body)).toBe(200)
    expect(body.type).toBe("message")
    expect((await models(token)).status).toBe(200)
  })

  it("works with the official SDKs as their key or auth token, streaming included", async () => {
    const token = await mlToken("olga")
    const openai = openaiFor(gw.url, token)
    const completion = await openai.chat.completions.create({ model: "echo", messages: [{ role: "user", content: "hi" }] })
    expect(completion.choices[0]!.message.content).toContain("hi")
    const chunks: Array<string> = []
    for await (const chunk of await openai.chat.completions.create({ model: "echo", messages: [{ role: "user", content: "streamed" }], stream: true })) {
      chunks.push(chunk.choices[0]?.delta?.content ?? "")
    }
    expect(chunks.join("")).toContain("streamed")
    // ANTHROPIC_AUTH_TOKEN (Claude Code's way to send a bearer token) is the SDK's authToken.
    const anthropic = new Anthropic({ authToken: token, apiKey: null, baseURL: gw.url, maxRetries: 0 })
    const message = await anthropic.messages.create({ model: "echo", max_tokens: 50, messages: [{ role: "user", content: "hello" }] })
    expect(message.content[0]).toMatchObject({ type: "text" })
    // Three of the policy's budget of 3: the next is refused, and the SDK raises it as a 429.
    const refused = await openai.chat.completions.create({ model: "echo", messages: [{ role: "user", content: "x" }] }).catch((e: unknown) => e)
    expect(refused).toBeInstanceOf(OpenAI.APIError)
    expect((refused as InstanceType<typeof OpenAI.APIError>).status).toBe(429)
  })

  it("refuses every kind of bad token with 401 unauthorized and an invalid_token challenge", async () => {
    const valid = await mlToken("alice")
    const forged = { iss: idp.issuer, sub: "alice", aud: idp.audience, exp: Math.floor(Date.now() / 1000) + 300, groups: ["ml-team"] }
    const cases: Array<[string, string, string]> = [
      ["expired", await mlToken("alice", { expiresIn: -120 }), "expired"],
      ["not yet valid", await mlToken("alice", { notBefore: 600, expiresIn: 900 }), "not_yet_valid"],
      ["wrong audience", await mlToken("alice", { audience: "another-api" }), "audience"],
      ["unknown issuer", await mlToken("alice", { issuer: "https://login.example.com" }), "issuer"],
      ["tampered signature", tamperSignature(valid), "signature"],
      ["tampered claims", tamperPayload(valid, { groups: ["admins"] }), "signature"],
      ["key the issuer never published", await mlToken("alice", { key: await newSigningKey() }), "signature"],
      ["HS256 keyed with the public key", hmacWithPublicKey(forged, idp.currentKey().publicJwk), "signature"],
      ["alg none", unsignedToken(forged), "signature"],
      ["not a JWT", "not-a-key-nor-a-token", "malformed"]
    ]
    for (const [name, token, reason] of cases) {
      for (const response of [await chat(token), await models(token)]) {
        expect(response.status, name).toBe(401)
        const challenge = response.headers.get("www-authenticate") ?? ""
        expect(challenge, name).toMatch(/^Bearer error="invalid_token", error_description="[^"]+"$/)
        const body = await envelope(response)
        expect({ name, error: body.error, reason: body.details?.["reason"] }).toEqual({ name, error: "unauthorized", reason })
        expect(body.message).not.toContain(token.slice(0, 30))
      }
    }
    // No credential at all: a bare challenge (RFC 6750 section 3.1).
    const missing = await fetch(`${gw.url}/v1/models`)
    expect(missing.status).toBe(401)
    expect(missing.headers.get("www-authenticate")).toBe("Bearer")
  })

  it("enforces allowed_models with scope_violation and lists only the policy's models", async () => {
    const token = await mlToken("bob")
    const refused = await chat(token, "other")
    expect(refused.status).toBe(403)
    expect((await envelope(refused)).error).toBe("scope_violation")
    const listed = await (await models(token)).json() as { data: Array<{ id: string }> }
    expect(listed.data.map((m) => m.id).sort()).toEqual(["echo", "echo-1"])
  })

  it("counts the budget per subject across requests and tokens, in the store", async () => {
    for (let i = 0; i < 3; i++) expect((await chat(await mlToken("carol"))).status).toBe(200)
    const exhausted = await chat(await mlToken("carol"))
    expect(exhausted.status).toBe(429)
    expect((await envelope(exhausted)).error).toBe("budget_exhausted")
    // Another subject of the same policy has a budget of its own.
    expect((await chat(await mlToken("dave"))).status).toBe(200)
    const carol = subjectId(idp.issuer, "carol")
    const row = await Effect.runPromise(gw.store.subjects.getSubject(carol))
    expect(row?.budget_used).toBe(3)
    // The operator sees it in the admin API and resets it, as for a key.
    expect(await (await gw.admin("GET", `/subjects/${carol}`)).json()).toMatchObject({ id: carol, issuer: idp.issuer, subject: "carol", budget_used: 3 })
    const listed = await (await gw.admin("GET", "/subjects?limit=1000")).json() as { data: Array<{ id: string }> }
    expect(listed.data.map((s) => s.id)).toContain(carol)
    expect((await fetch(`${gw.url}/subjects/${carol}`)).status).toBe(401)
    expect((await gw.admin("GET", "/subjects/sub_00000000000000000000000000000000")).status).toBe(404)
    const reset = await gw.admin("POST", `/subjects/${carol}/budget/reset`)
    expect(await reset.json()).toMatchObject({ id: carol, budget_used: 0 })
    expect((await chat(await mlToken("carol"))).status).toBe(200)
  })

  it("rate-limits per subject with the policy's limit, a nested claim choosing the policy", async () => {
    const token = (subject: string) => idp.mint({ subject, claims: { realm_access: { roles: ["reader"] } } })
    const erin = await token("erin")
    expect((await models(erin)).status).toBe(200)
    expect((await chat(erin, "other")).status).toBe(200)
    const limited = await models(await token("erin"))
    expect(limited.status).toBe(429)
    expect((await envelope(limited)).error).toBe("rate_limited")
    expect(Number(limited.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
    expect((await models(await token("frank"))).status).toBe(200)
    // A subject without a budget is recorded too, as seen, in a batch off the request path.
    const id = subjectId(idp.issuer, "frank")
    let row = await Effect.runPromise(gw.store.subjects.getSubject(id))
    for (let i = 0; i < 30 && row === undefined; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100))
      row = await Effect.runPromise(gw.store.subjects.getSubject(id))
    }
    expect(row).toMatchObject({ id, issuer: idp.issuer, subject: "frank", budget_used: 0 })
  })

  it("refuses a valid token that no policy admits with 403 scope_violation", async () => {
    const response = await chat(await idp.mint({ subject: "gina", claims: { groups: ["sales"] } }))
    expect(response.status).toBe(403)
    const body = await envelope(response)
    expect(body.error).toBe("scope_violation")
    expect(body.message).toContain("no policy")
  })

  it("picks up a rotated signing key (new kid) without a restart", async () => {
    expect((await chat(await mlToken("hank"))).status).toBe(200)
    await idp.rotateKey()
    const rotated = await mlToken("hank")
    expect((await chat(rotated)).status).toBe(200)
  })

  it("runs MCP tools with the policy's connection grants, and refuses tools to a policy without them", async () => {
    const token = await idp.mint({ subject: "ivy", claims: { groups: ["dba"], email_verified: true } })
    const transport = new StreamableHTTPClientTransport(new URL(`${gw.url}/v1/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } }
    })
    const client = new Client({ name: "modelgate-test", version: "1.0.0" })
    await client.connect(transport)
    try {
      const connections = await client.callTool({ name: "sql_list_connections", arguments: {} })
      expect(connections.structuredContent).toEqual({ connections: [{ id: 1, name: "analytics", dialect: "postgres", environment: "development", role: "read" }] })
      const run = await client.callTool({ name: "sql_run", arguments: { connection_id: 1, statement: "SELECT name FROM items ORDER BY id" } })
      expect(run.isError).toBeFalsy()
      expect((run.structuredContent as { rows: unknown }).rows).toEqual([{ name: "a" }, { name: "b" }])
      const write = await client.callTool({ name: "sql_run", arguments: { connection_id: 1, statement: "DELETE FROM items" } })
      expect(write.isError).toBe(true)
      expect(["query_too_dangerous", "sql_gate_blocked"]).toContain((write.structuredContent as { error: string }).error)
    } finally {
      await transport.terminateSession().catch(() => undefined)
      await client.close()
    }
    const rows = await new PgClient(db.url).query<{ n: string }>("SELECT count(*)::text AS n FROM items")
    expect(rows[0]!.n).toBe("2")
    const [call] = (await Effect.runPromise(Effect.andThen(gw.audit.flush, gw.store.audit.queryAudit({ limit: 1000 })))).items
      .filter((r) => r.key_id === subjectId(idp.issuer, "ivy") && r.tool === "sql_run")
    expect(call).toMatchObject({ connection_id: 1, details: { identity: { subject: "ivy", policy: "dba" } } })

    const reader = await idp.mint({ subject: "jack", claims: { realm_access: { roles: ["reader"] } } })
    const refused = await fetch(`${gw.url}/v1/mcp`, {
      method: "POST",
      headers: { authorization: `Bearer ${reader}`, "content-type": "application/json", accept: "application/json, text/event-stream" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "1" } } })
    })
    expect(refused.status).toBe(403)
    expect((await envelope(refused)).error).toBe("tools_disabled")
  })
})

describe("identity-provider tokens over time", () => {
  it("refuses a token once it expires, although it was served (and remembered) before", async () => {
    const time = movableClock()
    const gateway = await startGateway(testConfig({
      auth: { oidc: [{ issuer: idp.issuer, audience: idp.audience, clock_skew_seconds: 5, policies: [{ name: "everyone" }] }] }
    }), { clock: time.clock })
    try {
      const token = await idp.mint({ subject: "lee", expiresIn: 30 })
      const call = () => fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${token}` } })
      expect((await call()).status).toBe(200)
      expect((await call()).status).toBe(200)
      time.advance(20_000)
      expect((await call()).status).toBe(200)
      time.advance(16_000) // past exp + clock skew
      const expired = await call()
      expect(expired.status).toBe(401)
      expect(await envelope(expired)).toMatchObject({ error: "unauthorized", details: { reason: "expired" } })
      expect(expired.headers.get("www-authenticate")).toContain('error="invalid_token"')
    } finally {
      await gateway.close()
    }
  })
})

describe("identity-provider tokens when the issuer cannot be reached", () => {
  it("answers 503 dependency_unavailable (never lets the token in), and serves it once the issuer is back", async () => {
    const flaky = await startTestIssuer()
    const gateway = await startGateway(testConfig({
      auth: { oidc: [{ issuer: flaky.issuer, audience: flaky.audience, policies: [{ name: "everyone" }] }] }
    }))
    try {
      const token = await flaky.mint({ subject: "kim" })
      flaky.setDown(true)
      const down = await fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${token}` } })
      expect(down.status).toBe(503)
      expect(await envelope(down)).toMatchObject({ error: "dependency_unavailable", details: { dependency: "identity_provider" } })
      const metrics = await (await fetch(`${gateway.url}/metrics`)).text()
      expect(metrics).toMatch(/^modelgate_dependency_errors_total\{dependency="identity_provider"\} 1$/m)
      flaky.setDown(false)
      // Discovery is not retried within a second: poll for the recovery (a state), never a fixed sleep.
      let up = 503
      for (const deadline = Date.now() + 10_000; up !== 200 && Date.now() < deadline;) {
        await new Promise((resolve) => setTimeout(resolve, 100))
        up = (await fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${token}` } })).status
      }
      expect(up).toBe(200)
    } finally {
      await gateway.close()
      await flaky.close()
    }
  })

  it("without auth.oidc, a JWT is just a malformed API key", async () => {
    const plain = await startGateway()
    try {
      const response = await fetch(`${plain.url}/v1/models`, { headers: { authorization: `Bearer ${await idp.mint()}` } })
      expect(response.status).toBe(401)
      expect((await envelope(response)).message).toContain("malformed API key")
    } finally {
      await plain.close()
    }
  })
})
