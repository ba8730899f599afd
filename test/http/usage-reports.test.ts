/**
 * Issue 33, end users and spend reports, as a client sees them: the end user recorded from each
 * of its three sources (passthrough and translated), and GET /usage grouped by team, end user,
 * key, model, provider and day, with exact decimal credits, tokens by kind, money from
 * `credits.currency`, CSV, and its bounds.
 */
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { AuditRecord } from "../../src/domain/records.ts"
import { AUDIT_CREDIT_MICROS } from "../../src/services/store/AuditRepo.ts"
import { costMicros, csvCell } from "../../src/http/routes/usage-report.ts"
import { startFakeAnthropic } from "../support/fake-anthropic.ts"
import type { FakeUpstream } from "../support/fake-common.ts"
import { startFakeOpenAI } from "../support/fake-openai.ts"
import { auditFor, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const OPENAI_KEY = "sk-fake-openai-0123456789abcdef"
const ANTHROPIC_KEY = "sk-ant-fake-0123456789abcdef"

const post = (gw: TestGateway, key: string, path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${gw.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
    body: JSON.stringify(body)
  })

const endUserOf = async (gw: TestGateway, response: Response) => {
  const [record] = await auditFor(gw, response.headers.get("x-request-id")!)
  return record?.end_user
}

describe("end users (issue 33)", () => {
  let openai: FakeUpstream
  let anthropic: FakeUpstream
  let gw: TestGateway
  let key: string

  beforeAll(async () => {
    ;[openai, anthropic] = await Promise.all([startFakeOpenAI({ apiKey: OPENAI_KEY }), startFakeAnthropic({ apiKey: ANTHROPIC_KEY })])
    gw = await startGateway(testConfig({
      providers: [
        { name: "openai", kind: "openai", base_url: openai.url, api_key: OPENAI_KEY },
        { name: "anthropic", kind: "anthropic", base_url: anthropic.url, api_key: ANTHROPIC_KEY }
      ],
      models: [
        { alias: "gpt", id: "gpt-4o-mini", provider: "openai" },
        { alias: "claude", id: "claude-sonnet-4-5-20250929", provider: "anthropic" },
        { id: "echo-1", alias: "echo", provider: "echo" }
      ]
    }))
    key = (await gw.createKey()).key
  }, 60_000)

  afterAll(async () => {
    await gw?.close()
    await Promise.all([openai?.close(), anthropic?.close()])
  })

  const chat = (model: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}) =>
    post(gw, key, "/v1/chat/completions", { model, messages: [{ role: "user", content: "one two" }], ...extra }, headers)
  const messages = (model: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}) =>
    post(gw, key, "/v1/messages", { model, max_tokens: 50, messages: [{ role: "user", content: "one two" }], ...extra }, headers)

  it("takes the chat `user` field, passed through and translated", async () => {
    const passthrough = await chat("gpt", { user: "user-chat-1" })
    expect(passthrough.status).toBe(200)
    expect(await endUserOf(gw, passthrough)).toBe("user-chat-1")
    const translated = await chat("claude", { user: "user-chat-2" })
    expect(translated.status).toBe(200)
    expect(await endUserOf(gw, translated)).toBe("user-chat-2")
    // The admin API's audit list and its JSON Lines export show it.
    const listed = await (await gw.admin("GET", "/audit?include=api&limit=1")).json() as { data: Array<Record<string, unknown>> }
    // The fake Anthropic answer reports no cache use: counted as 0, not unknown.
    expect(listed.data[0]).toMatchObject({ end_user: "user-chat-2", team_id: null, cache_read_tokens: 0, cache_write_tokens: 0 })
    const exported = await (await gw.admin("GET", "/audit?include=api&limit=1&format=jsonl")).text()
    expect(JSON.parse(exported.trim())).toMatchObject({ end_user: "user-chat-2" })
  })

  it("takes the messages `metadata.user_id`, passed through and translated", async () => {
    const passthrough = await messages("claude", { metadata: { user_id: "user-msg-1" } })
    expect(passthrough.status).toBe(200)
    expect(await endUserOf(gw, passthrough)).toBe("user-msg-1")
    const translated = await messages("gpt", { metadata: { user_id: "user-msg-2" } })
    expect(translated.status).toBe(200)
    expect(await endUserOf(gw, translated)).toBe("user-msg-2")
  })

  it("takes the Responses `user` field", async () => {
    const response = await post(gw, key, "/v1/responses", { model: "echo", input: "one two", user: "user-resp", store: false })
    expect(response.status).toBe(200)
    expect(await endUserOf(gw, response)).toBe("user-resp")
  })

  it("takes the x-modelgate-end-user header, which wins over the body, on any format", async () => {
    const chatWithBoth = await chat("gpt", { user: "from-body" }, { "x-modelgate-end-user": "from-header" })
    expect(chatWithBoth.status).toBe(200)
    expect(await endUserOf(gw, chatWithBoth)).toBe("from-header")
    const messagesWithHeader = await messages("claude", {}, { "x-modelgate-end-user": "dev@example.com" })
    expect(messagesWithHeader.status).toBe(200)
    expect(await endUserOf(gw, messagesWithHeader)).toBe("dev@example.com")
    // The gateway's own header is not sent on to the provider.
    const seen = anthropic.requests.at(-1)!
    expect(seen.headers["x-modelgate-end-user"]).toBeUndefined()
    expect(JSON.stringify(seen.headers)).not.toContain("dev@example.com")
  })

  it("refuses a malformed header with a 400 naming it, before anything is charged or sent", async () => {
    const before = openai.requests.length
    for (const value of ["x".repeat(257), "   "]) {
      const response = await chat("gpt", {}, { "x-modelgate-end-user": value })
      expect(response.status).toBe(400)
      const body = await response.json() as { error: string; details: { field: string } }
      expect(body).toMatchObject({ error: "validation_failed", details: { field: "x-modelgate-end-user" } })
    }
    expect(openai.requests.length).toBe(before)
  })

  it("records a long or unprintable body value bounded, never refusing what the provider accepts", async () => {
    const long = `sha512:${"ab".repeat(150)}`
    const other = `sha512:${"ab".repeat(149)}cd`
    const first = await chat("gpt", { user: long })
    const second = await chat("gpt", { user: other })
    expect(first.status).toBe(200)
    const a = (await endUserOf(gw, first))!
    const b = (await endUserOf(gw, second))!
    expect(a).toHaveLength(256)
    expect(a.startsWith(long.slice(0, 239))).toBe(true)
    expect(a).toMatch(/…[0-9a-f]{16}$/)
    // Two long values with the same beginning stay two end users.
    expect(b).not.toBe(a)
    // The provider got the value as sent.
    expect(openai.requests.at(-2)!.body).toMatchObject({ user: long })
    const control = await chat("gpt", { user: "tab\there" })
    expect(await endUserOf(gw, control)).toBe("tab\uFFFDhere")
  })

  it("records no end user when none is named", async () => {
    expect(await endUserOf(gw, await chat("gpt"))).toBeNull()
  })
})

/** `n` credits in the audit trail's unit (whole credits before issue 33's micro-credit accounting, micros after). */
const stored = (n: number) => n * 1_000_000 / AUDIT_CREDIT_MICROS

/** Records as the money path writes them. */
const spend = (i: number, fields: Partial<AuditRecord>): AuditRecord => ({
  request_id: `req_spend_${i}`,
  ts: "2026-03-01T12:00:00.000Z",
  key_id: "key_a",
  method: "POST",
  endpoint: "/v1/messages",
  status: 200,
  error: null,
  model: "claude-sonnet-4-5",
  provider: "anthropic",
  tool: null,
  connection_id: null,
  credits: stored(3),
  prompt_tokens: 1000,
  completion_tokens: 200,
  cache_read_tokens: 700,
  cache_write_tokens: 100,
  end_user: null,
  team_id: null,
  duration_ms: 10,
  stream: false,
  client_addr: null,
  details: null,
  ...fields
})

const SEEDED: ReadonlyArray<AuditRecord> = [
  spend(1, { team_id: "team_eng", end_user: "alice" }),
  spend(2, { team_id: "team_eng", end_user: "alice", ts: "2026-03-02T09:00:00.000Z" }),
  spend(3, { team_id: "team_eng", end_user: "bob", key_id: "key_b", model: "gpt-4o", provider: "openai" }),
  spend(4, { team_id: "team_ops", end_user: "=HYPERLINK(\"http://evil\",\"x\")", ts: "2026-03-02T10:00:00.000Z" }),
  spend(5, { team_id: "team_ops", end_user: "carol, \"the\" admin", status: 502, error: "provider_error", credits: stored(0) })
]

const seed = async (gw: TestGateway) => {
  await Effect.runPromise(gw.store.audit.appendAudit(SEEDED))
}

const WINDOW = "since=2026-03-01T00:00:00Z&until=2026-03-03T00:00:00Z"

describe("GET /usage spend reports (issue 33)", () => {
  let gw: TestGateway
  let priced: TestGateway

  beforeAll(async () => {
    gw = await startGateway(testConfig())
    priced = await startGateway(testConfig({ credits: { currency: { code: "EUR", per_credit: "0.013" } } }))
    await Promise.all([seed(gw), seed(priced)])
  }, 60_000)

  afterAll(async () => {
    await gw?.close()
    await priced?.close()
  })

  const report = async (target: TestGateway, query: string) => {
    const response = await target.admin("GET", `/usage?${query}`)
    expect(response.status).toBe(200)
    return await response.json() as { group_by: Array<string>; currency: unknown; data: Array<Record<string, unknown>> }
  }

  it("groups by team and end user, with exact decimal credits and input tokens by kind", async () => {
    const body = await report(gw, `${WINDOW}&group_by=team,end_user`)
    expect(body.group_by).toEqual(["team", "end_user"])
    expect(body.currency).toBeNull()
    const alice = body.data.find((r) => r.end_user === "alice")
    expect(alice).toEqual({
      team_id: "team_eng",
      end_user: "alice",
      requests: 2,
      errors: 0,
      credits: 6,
      input_tokens: 400,
      output_tokens: 400,
      cache_read_tokens: 1400,
      cache_write_tokens: 200,
      prompt_tokens: 2000,
      completion_tokens: 400
    })
    expect(body.data.find((r) => r.end_user === "carol, \"the\" admin")).toMatchObject({ team_id: "team_ops", requests: 1, errors: 1, credits: 0 })
    expect(body.data).toHaveLength(4)
  })

  it("takes several groups, comma-separated or repeated, and filters by team and end user", async () => {
    const repeated = await report(gw, `${WINDOW}&group_by=team&group_by=day`)
    expect(repeated.group_by).toEqual(["team", "day"])
    expect(repeated.data.map((r) => [r.day, r.team_id, r.requests])).toEqual([
      ["2026-03-01", "team_eng", 2],
      ["2026-03-01", "team_ops", 1],
      ["2026-03-02", "team_eng", 1],
      ["2026-03-02", "team_ops", 1]
    ])
    const byKeyModel = await report(gw, `${WINDOW}&group_by=key,model,provider&team_id=team_eng`)
    expect(byKeyModel.data.map((r) => [r.key_id, r.model, r.provider, r.requests])).toEqual([
      ["key_a", "claude-sonnet-4-5", "anthropic", 2],
      ["key_b", "gpt-4o", "openai", 1]
    ])
    const alice = await report(gw, `${WINDOW}&group_by=day&end_user=alice`)
    expect(alice.data.map((r) => [r.day, r.credits])).toEqual([["2026-03-01", 3], ["2026-03-02", 3]])
    // Today's parameters keep working: no group_by is key and model.
    expect((await report(gw, WINDOW)).group_by).toEqual(["key", "model"])
  })

  it("adds the cost in the configured currency, exactly", async () => {
    const body = await report(priced, `${WINDOW}&group_by=team`)
    expect(body.currency).toEqual({ code: "EUR", per_credit: "0.013" })
    expect(body.data).toEqual([
      expect.objectContaining({ team_id: "team_eng", credits: 9, cost: { amount: 0.117, currency: "EUR" } }),
      expect.objectContaining({ team_id: "team_ops", credits: 3, cost: { amount: 0.039, currency: "EUR" } })
    ])
  })

  it("answers CSV for Accept: text/csv, quoted and safe from formula injection", async () => {
    const response = await priced.admin("GET", `/usage?${WINDOW}&group_by=team,end_user`, undefined, { accept: "text/csv" })
    expect(response.status).toBe(200)
    expect(response.headers.get("content-type")).toBe("text/csv; charset=utf-8")
    expect(response.headers.get("content-disposition")).toContain("usage.csv")
    const lines = (await response.text()).split("\r\n")
    expect(lines[0]).toBe("team_id,end_user,requests,errors,credits,input_tokens,output_tokens,cache_read_tokens,cache_write_tokens,cost,currency")
    expect(lines).toContain("team_eng,alice,2,0,6.000000,400,400,1400,200,0.078000,EUR")
    // A cell a spreadsheet would run as a formula stays text; quotes and commas are quoted.
    expect(lines).toContain(`team_ops,"'=HYPERLINK(""http://evil"",""x"")",1,0,3.000000,200,200,700,100,0.039000,EUR`)
    expect(lines).toContain(`team_ops,"carol, ""the"" admin",1,1,0.000000,200,200,700,100,0.000000,EUR`)
    expect(lines.at(-1)).toBe("")
    // format=csv does the same for a plain link; format=json wins over the header.
    expect((await priced.admin("GET", `/usage?${WINDOW}&format=csv`)).headers.get("content-type")).toContain("text/csv")
    expect((await priced.admin("GET", `/usage?${WINDOW}&format=json`, undefined, { accept: "text/csv" })).headers.get("content-type")).toContain("application/json")
  })

  it("refuses unbounded or malformed reports with a 400 naming the field", async () => {
    const refused = async (query: string, field: string) => {
      const response = await gw.admin("GET", `/usage?${query}`)
      expect(response.status, query).toBe(400)
      const body = await response.json() as { error: string; message: string; details: { field: string } }
      expect(body.error).toBe("validation_failed")
      expect(body.details.field, query).toBe(field)
      return body.message
    }
    expect(await refused(`${WINDOW}&group_by=end_user&limit=2`, "limit")).toContain("more than 2 rows")
    await refused(`${WINDOW}&limit=0`, "limit")
    await refused(`${WINDOW}&limit=100001`, "limit")
    await refused("since=2026-03-02T00:00:00Z&until=2026-03-01T00:00:00Z", "until")
    expect(await refused("since=2025-01-01T00:00:00Z&until=2026-03-01T00:00:00Z&group_by=day", "since")).toContain("366 days")
    await refused("group_by=team,user", "group_by")
    await refused(`end_user=${"x".repeat(257)}`, "end_user")
    await refused("since=soon", "since")
    // The same window grouped by something else than day is fine.
    expect((await gw.admin("GET", "/usage?since=2025-01-01T00:00:00Z&until=2026-03-01T00:00:00Z&group_by=team")).status).toBe(200)
  })
})

describe("credits.currency in the configuration (issue 33)", () => {
  const load = (currency: unknown, env: Record<string, string> = {}) => {
    try {
      return { config: testConfig({ credits: { currency } }, env) }
    } catch (e) {
      return { error: (e as Error).message }
    }
  }

  it("takes an ISO 4217 code and a positive decimal, written as a number or a string", () => {
    expect(load({ code: "USD", per_credit: 0.01 }).config?.credits.currency).toEqual({ code: "USD", per_credit: 0.01 })
    expect(load({ code: "JPY", per_credit: "1.5" }).config?.credits.currency).toEqual({ code: "JPY", per_credit: "1.5" })
    // From the environment, as operators override it in a container.
    const fromEnv = load({ code: "EUR", per_credit: 1 }, { MODELGATE_CREDITS_CURRENCY_PER_CREDIT: "0.000003" })
    expect(String(fromEnv.config?.credits.currency?.per_credit)).toBe("0.000003")
  })

  it("refuses a code or an amount it cannot use, naming the setting", () => {
    for (const bad of [{ code: "usd", per_credit: 1 }, { code: "DOLLAR", per_credit: 1 }]) {
      expect(load(bad).error).toContain("credits.currency.code")
    }
    for (const bad of [{ code: "USD", per_credit: 0 }, { code: "USD", per_credit: -1 }, { code: "USD", per_credit: "1e-3" }, { code: "USD", per_credit: "0.0000000000001" }]) {
      expect(load(bad).error).toContain("credits.currency.per_credit")
    }
  })
})

describe("report arithmetic and CSV cells", () => {
  it("computes cost in integers, exactly, rounding half away from zero at the sixth digit", () => {
    // 0.1 credit at 0.3 per credit: 0.03, not 0.030000000000000002.
    expect(costMicros(100_000, "0.3")).toBe(30_000n)
    // One micro-credit at 0.5: half a millionth, rounded up.
    expect(costMicros(1, 0.5)).toBe(1n)
    expect(costMicros(1, "0.49")).toBe(0n)
    // The largest amount at a price with twelve fractional digits stays exact.
    expect(costMicros(Number.MAX_SAFE_INTEGER, "1.000000000001")).toBe(9_007_199_254_749_998n)
  })

  it("quotes what RFC 4180 needs quoted and keeps formulas text", () => {
    expect(csvCell("plain")).toBe("plain")
    expect(csvCell(null)).toBe("")
    expect(csvCell(-3)).toBe("-3")
    expect(csvCell("a,b")).toBe(`"a,b"`)
    expect(csvCell(`say "hi"`)).toBe(`"say ""hi"""`)
    expect(csvCell("line\nbreak")).toBe(`"line\nbreak"`)
    expect(csvCell(" padded")).toBe(`" padded"`)
    for (const formula of ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx"]) expect(csvCell(formula).replace(/^"/, "").startsWith("'")).toBe(true)
  })
})
