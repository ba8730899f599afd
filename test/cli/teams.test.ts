/**
 * `modelgate teams ...` and `keys create/update --team` (issue 33) against a real store file,
 * and what a running server on the same store makes of the changes.
 */
import { describe, expect, it } from "@effect/vitest"
import { join } from "node:path"
import { startGateway, testConfig } from "../support/gateway.ts"
import { runCli, tempDir, writeConfig } from "../support/process.ts"

const models = {
  providers: [{ name: "echo", kind: "echo" }],
  models: [
    { alias: "free", id: "echo-free", provider: "echo", credits: 0 },
    { alias: "other", id: "echo-other", provider: "echo", credits: 0 }
  ]
}

const chat = (url: string, key: string, model: string) =>
  fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] })
  })

const waitForStatus = async (check: () => Promise<Response>, status: number) => {
  for (let attempt = 0; attempt < 400; attempt++) {
    const response = await check()
    if (response.status === status) return
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
  expect.fail(`never answered ${status}`)
}

describe("modelgate teams", () => {
  it("creates, lists, shows, updates and deletes teams; keys join by id or name and leave", { timeout: 90_000 }, async () => {
    const dir = tempDir()
    const store = `sqlite:${join(dir, "store.db")}`
    const config = writeConfig(dir, { store, ...models })
    const cli = (...args: Array<string>) => runCli(["--config", config, ...args])

    const created = await cli("teams", "create", "--name", "platform", "--budget-credits", "250.5", "--period", "month", "--rpm", "30", "--models", "free")
    expect(created.code, created.stderr).toBe(0)
    const team = JSON.parse(created.stdout)
    expect(team).toMatchObject({
      name: "platform",
      budget: { max_credits: 250.5, max_requests: null, period: "month" },
      limits: { requests_per_minute: 30 },
      allowed_models: ["free"],
      key_count: 0
    })
    expect(team.id).toMatch(/^team_[0-9a-f]{16}$/)

    // The admin API's validation, naming the flag.
    const badCredits = await cli("teams", "create", "--name", "x", "--budget-credits", "0.0000001")
    expect(badCredits.code).toBe(1)
    expect(badCredits.stderr).toContain("--budget-credits")
    const badPeriod = await cli("teams", "create", "--name", "x", "--budget-requests", "3", "--period", "year")
    expect(badPeriod.code).toBe(1)
    expect(badPeriod.stderr).toContain("--period")
    const taken = await cli("teams", "create", "--name", "platform")
    expect(taken.code).toBe(1)
    expect(taken.stderr).toContain('a team named "platform" already exists')

    const key = JSON.parse((await cli("keys", "create", "--name", "dev", "--team", "platform")).stdout)
    expect(key.team_id).toBe(team.id)
    const unknownTeam = await cli("keys", "create", "--name", "dev", "--team", "nobody")
    expect(unknownTeam.code).toBe(1)
    expect(unknownTeam.stderr).toContain('--team: no team with id or name "nobody"')

    const gateway = await startGateway(testConfig({ store, ...models }))
    try {
      expect((await chat(gateway.url, key.key, "free")).status).toBe(200)
      expect((await chat(gateway.url, key.key, "other")).status).toBe(403)

      const listed = JSON.parse((await cli("teams", "list")).stdout)
      // The team's budget counted the member's one request (a free model: no credits).
      expect(listed).toEqual([{ ...team, key_count: 1, budget: { ...team.budget, used_requests: 1, used: 1 } }])
      expect(JSON.parse((await cli("teams", "show", team.id)).stdout).key_count).toBe(1)

      const updated = await cli("teams", "update", team.id, "--models", "", "--clear-budget", "--streams", "2")
      expect(updated.code, updated.stderr).toBe(0)
      expect(JSON.parse(updated.stdout)).toMatchObject({ allowed_models: null, budget: null, limits: { concurrent_streams: 2 } })
      // The running server notices the CLI's change through the store's change counter.
      await waitForStatus(() => chat(gateway.url, key.key, "other"), 200)

      const refused = await cli("teams", "delete", team.id)
      expect(refused.code).toBe(1)
      expect(refused.stderr).toContain("still has 1 key")

      const left = await cli("keys", "update", key.id, "--team", "")
      expect(left.code, left.stderr).toBe(0)
      expect(JSON.parse(left.stdout).team_id).toBeNull()
      const rejoined = JSON.parse((await cli("keys", "update", key.id, "--team", team.id)).stdout)
      expect(rejoined.team_id).toBe(team.id)
      expect((await cli("keys", "update", key.id, "--team", "")).code).toBe(0)

      const deleted = await cli("teams", "delete", team.id)
      expect(deleted.code, deleted.stderr).toBe(0)
      const missing = await cli("teams", "show", team.id)
      expect(missing.code).toBe(1)
      expect(missing.stderr).toContain(`no team with id ${team.id}`)
      expect((await chat(gateway.url, key.key, "other")).status).toBe(200)
    } finally {
      await gateway.close()
    }
  })
})
