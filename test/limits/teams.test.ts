/**
 * A team's models and limits as its keys' clients see them (issue 33): the team's
 * `allowed_models` narrows each key's (403 scope_violation), its `requests_per_minute` and
 * `concurrent_streams` are shared by all its keys (429 rate_limited naming the team), a request
 * must fit the key's limits and the team's, and a change to a team or to a key's team applies to
 * the next request. Twice: in-process limits on SQLite, and Redis limits on Postgres with two
 * gateways sharing both, the team's requests spread over the two.
 */
import { randomBytes } from "node:crypto"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { startFakeOpenAI, type FakeUpstream } from "../support/fake-openai.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import {
  adminCall,
  chat,
  count,
  expectError,
  expectOpen,
  isOpen,
  newKey,
  openStream,
  type OpenStream,
  REDIS_URL,
  type Reply,
  summary,
  uniqueName,
  waitFor
} from "./support.ts"

const UPSTREAM_KEY = `sk-upstream-${randomBytes(12).toString("hex")}`
const patient = { connect_ms: 10_000, first_byte_ms: 10_000, idle_ms: 10_000 }

const config = (fakeUrl: string, backend: Record<string, unknown>) =>
  testConfig({
    ...backend,
    workspace: { credits: 1000 },
    limits: { requests_per_minute: 50, concurrent_streams: 5 },
    providers: [
      { name: "echo", kind: "echo" },
      { name: "fake-patient", kind: "openai", base_url: fakeUrl, api_key: UPSTREAM_KEY, timeouts: patient }
    ],
    models: [
      { alias: "free", id: "echo-free", provider: "echo", credits: 0 },
      { alias: "other", id: "echo-other", provider: "echo", credits: 0 },
      { alias: "held", id: "gpt-4.1-mini", provider: "fake-patient", credits: 0 }
    ]
  })

const backends = [
  { name: "in-process limits, SQLite store", postgres: false },
  { name: "Redis limits, Postgres store, two gateways", postgres: true }
]

let fake: FakeUpstream
beforeAll(async () => {
  fake = await startFakeOpenAI({ apiKey: UPSTREAM_KEY })
})
afterAll(async () => {
  await fake?.close()
})
beforeEach(() => fake.reset())

describe.each(backends)("teams: $name", ({ postgres }) => {
  let db: TempDatabase | undefined
  let a: TestGateway
  let b: TestGateway
  /** The i-th request goes to gateway A when i is even, to B when odd (the same one without Postgres). */
  const spread = (i: number) => (i % 2 === 0 ? a.url : b.url)

  beforeAll(async () => {
    db = postgres ? await createPostgresDatabase("mg_teams") : undefined
    a = await startGateway(config(fake.url, db === undefined ? {} : { store: db.url, redis: REDIS_URL }))
    b = db === undefined ? a : await startGateway(config(fake.url, { store: db.url, redis: REDIS_URL }))
  }, 60_000)
  afterAll(async () => {
    if (b !== a) await b?.close()
    await a?.close()
    await db?.drop()
  })

  const newTeam = async (input: Record<string, unknown>) => {
    const reply = await adminCall(a.url, "POST", "/teams", { name: uniqueName("team"), ...input })
    expect(reply.status, reply.text).toBe(201)
    return reply.body.id as string
  }

  /** Both gateways see a change made through A: the other's key cache notices the store's change counter. */
  const onBoth = async (what: string, check: (base: string) => Promise<boolean>) => {
    for (const base of new Set([a.url, b.url])) await waitFor(`${what} at ${base}`, () => check(base), 10_000)
  }

  const expectTeamRateLimited = (reply: Reply, limit: number, teamId: string) => {
    expectError(reply, 429, "rate_limited")
    expect(reply.body.details).toMatchObject({ limit: "requests_per_minute", requests_per_minute: limit, team_id: teamId })
    expect(reply.body.message).toContain("team")
    expect(Number(reply.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
    expect(reply.headers.get("x-ratelimit-limit")).toBe(String(limit))
  }

  it("the team's allowed_models narrows its keys' (a model must be in both); /v1/models lists what both allow", async () => {
    const team = await newTeam({ allowed_models: ["free", "held"] })
    const { key: open } = await newKey(a.url, { team_id: team })
    const { key: narrow } = await newKey(a.url, { team_id: team, allowed_models: ["free", "other"] })

    for (const base of new Set([a.url, b.url])) {
      expect((await chat(base, open, { model: "free" })).status).toBe(200)
      const refused = await chat(base, open, { model: "other" })
      expectError(refused, 403, "scope_violation")
      expect(refused.body.message).toContain("team")
      expect((await chat(base, narrow, { model: "free" })).status).toBe(200)
      // "other": the key allows it, the team does not; "held": the team allows it, the key does not.
      expectError(await chat(base, narrow, { model: "other" }), 403, "scope_violation")
      expectError(await chat(base, narrow, { model: "held" }), 403, "scope_violation")
      const listed = await fetch(`${base}/v1/models`, { headers: { authorization: `Bearer ${narrow}` } })
      expect(((await listed.json()) as any).data.map((m: any) => m.id)).toEqual(["free", "echo-free"])
    }

    // Widening the team's list applies to the next request, on every gateway.
    expect((await adminCall(a.url, "PATCH", `/teams/${team}`, { allowed_models: null })).status).toBe(200)
    await onBoth("team list widened", async (base) => (await chat(base, open, { model: "other" })).status === 200)
  })

  it("the team's requests_per_minute is shared by its keys, across gateways; a request the team refuses spends nothing of its key's", async () => {
    const team = await newTeam({ limits: { requests_per_minute: 6 } })
    const first = await newKey(a.url, { team_id: team, limits: { requests_per_minute: 4 } })
    const second = await newKey(a.url, { team_id: team })

    // Four of the first key's (its own limit), then the second key gets what is left of the team's 6.
    const replies: Array<Reply> = []
    for (let i = 0; i < 4; i++) replies.push(await chat(spread(i), first.key, { model: "free" }))
    expect(count(replies, 200), summary(replies)).toBe(4)
    const fromSecond: Array<Reply> = []
    for (let i = 0; i < 4; i++) fromSecond.push(await chat(spread(i), second.key, { model: "free" }))
    expect(count(fromSecond, 200), summary(fromSecond)).toBe(2)
    for (const reply of fromSecond.filter((r) => r.status === 429)) expectTeamRateLimited(reply, 6, team)
    // The admitted ones carry the headers of the bucket with the fewest requests left: the team's.
    expect(fromSecond[1]!.headers.get("x-ratelimit-limit")).toBe("6")
    expect(fromSecond[1]!.headers.get("x-ratelimit-remaining")).toBe("0")

    // A third key, limited to 3 of its own, joins the exhausted team: its requests are refused by
    // the team, which must not spend its own three.
    const third = await newKey(a.url, { team_id: team, limits: { requests_per_minute: 3 } })
    for (let i = 0; i < 3; i++) expectTeamRateLimited(await chat(spread(i), third.key, { model: "free" }), 6, team)
    expect((await adminCall(a.url, "PATCH", `/api-keys/${third.id}`, { team_id: null })).status).toBe(200)
    // Out of the team, on every gateway: all three of its own are still there.
    await onBoth("key left the team", async (base) => {
      const probe = await fetch(`${base}/v1/models`, { headers: { authorization: `Bearer ${third.key}` } })
      return probe.status === 200 && probe.headers.get("x-ratelimit-limit") === "3"
    })
    // The probes above spent some; whatever they left is spendable, then exactly the limit holds.
    const after: Array<Reply> = []
    for (let i = 0; i < 4; i++) after.push(await chat(spread(i), third.key, { model: "free" }))
    expect(count(after, 429), summary(after)).toBeGreaterThanOrEqual(1)
    for (const reply of after.filter((r) => r.status === 429)) {
      expect(reply.body.details.team_id).toBeUndefined()
      expect(reply.body.details.requests_per_minute).toBe(3)
    }
  })

  it("the team's requests_per_minute applies to a burst at once: never more admitted than the team's limit", async () => {
    const team = await newTeam({ limits: { requests_per_minute: 10 } })
    const keys = await Promise.all(Array.from({ length: 4 }, () => newKey(a.url, { team_id: team })))
    const started = performance.now()
    const replies = await Promise.all(Array.from({ length: 40 }, (_, i) => chat(spread(i), keys[i % 4]!.key, { model: "free" })))
    const spanMs = performance.now() - started
    // All ten at once; a burst so slowed that it outlasted a refill interval (6 s) may see one
    // more per interval meanwhile, never fewer (as rateBurst in support.ts).
    expect(count(replies, 200), summary(replies)).toBeGreaterThanOrEqual(10)
    expect(count(replies, 200), summary(replies)).toBeLessThanOrEqual(10 + Math.floor(spanMs / 6000))
    for (const reply of replies.filter((r) => r.status === 429)) expectTeamRateLimited(reply, 10, team)
  })

  it("the team's concurrent_streams is shared by its keys, across gateways; a stream that ends gives its slot back", async () => {
    const team = await newTeam({ limits: { concurrent_streams: 2 } })
    const first = await newKey(a.url, { team_id: team })
    const second = await newKey(a.url, { team_id: team })
    fake.setDefault(() => ({ kind: "stall_after", chunks: 1 }))

    const streams: Array<OpenStream> = []
    streams.push(expectOpen(await openStream(a.url, first.key, { model: "held" })))
    streams.push(expectOpen(await openStream(b.url, second.key, { model: "held" })))
    for (const [base, key] of [[a.url, first.key], [b.url, second.key], [a.url, second.key]] as const) {
      const refused = await openStream(base, key, { model: "held" })
      expect(isOpen(refused), "expected a refusal").toBe(false)
      expectError(refused as Reply, 429, "rate_limited")
      expect((refused as Reply).body.details).toMatchObject({ limit: "concurrent_streams", concurrent_streams: 2, team_id: team })
    }

    // The key's own slots given back with the team's refusal: the first key alone still has its 5.
    streams[1]!.abandon()
    let again: OpenStream | undefined
    await waitFor("a team slot freed", async () => {
      const attempt = await openStream(a.url, second.key, { model: "held" })
      if (isOpen(attempt)) again = attempt
      return again !== undefined
    }, 10_000)
    streams.push(again!)
    for (const stream of streams) stream.abandon()
    await waitFor("upstream streams closed", () => fake.openStreams() === 0)

    // Out of the team, the first key has its own five again.
    expect((await adminCall(a.url, "PATCH", `/api-keys/${first.id}`, { team_id: null })).status).toBe(200)
    const own: Array<OpenStream> = []
    await waitFor("the key out of the team", async () => {
      const attempt = await openStream(a.url, first.key, { model: "held" })
      if (isOpen(attempt)) own.push(attempt)
      return own.length === 3
    }, 10_000)
    for (const stream of own) stream.abandon()
  })

  it("a team deleted after its keys left, and a key moved to another team, apply on every gateway", async () => {
    const strict = await newTeam({ allowed_models: ["other"] })
    const loose = await newTeam({})
    const member = await newKey(a.url, { team_id: strict })
    await onBoth("strict team", async (base) => (await chat(base, member.key, { model: "free" })).status === 403)
    expect((await adminCall(a.url, "PATCH", `/api-keys/${member.id}`, { team_id: loose })).status).toBe(200)
    await onBoth("moved to the loose team", async (base) => (await chat(base, member.key, { model: "free" })).status === 200)
    expect((await adminCall(a.url, "DELETE", `/teams/${strict}`)).status).toBe(204)
    expect((await adminCall(a.url, "DELETE", `/teams/${loose}`)).status).toBe(409)
  })
})
