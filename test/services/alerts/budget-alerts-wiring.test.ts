/**
 * Issue 33: budget alerts from real traffic. The credits' group commit tells Alerts what a key's
 * or team's credit budget holds after each request counted against it, so crossing a threshold
 * through the API sends the webhook its POST, once per threshold.
 */
import { createServer, type Server } from "node:http"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startGateway, testConfig, type TestGateway } from "../../support/gateway.ts"
import { waitFor } from "../../support/wait.ts"

describe("budget alerts from requests through the gateway", () => {
  let gw: TestGateway
  let server: Server
  const received: Array<Record<string, unknown>> = []

  beforeAll(async () => {
    server = createServer((req, res) => {
      let text = ""
      req.on("data", (chunk) => (text += chunk))
      req.on("end", () => {
        received.push(JSON.parse(text))
        res.writeHead(204).end()
      })
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    const port = (server.address() as { port: number }).port
    gw = await startGateway(testConfig({
      workspace: { credits: 100 },
      providers: [{ name: "echo", kind: "echo" }],
      models: [{ alias: "half", id: "echo-half", provider: "echo", credits: 0.5 }],
      alerts: { webhook_url: `http://127.0.0.1:${port}/hook`, thresholds: [0.8, 1] }
    }))
  })

  afterAll(async () => {
    await gw?.close()
    server?.closeAllConnections()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  })

  const post = (key: string) =>
    fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "half", messages: [{ role: "user", content: "hi" }] })
    })

  it("a key's monthly credit budget crossing 80 % and 100 % sends one POST for each, and nothing more", async () => {
    const created = await gw.admin("POST", "/api-keys", { name: "dev", budget: { max_credits: 1, period: "month" } })
    const { key, id } = (await created.json()) as { key: string; id: string }
    // 0.5 of 1: under both thresholds.
    expect((await post(key)).status).toBe(200)
    // 1 of 1: both thresholds at once, one POST each.
    expect((await post(key)).status).toBe(200)
    // Refused by the budget: counts nothing.
    expect((await post(key)).status).toBe(429)
    await waitFor("both alerts", () => received.filter((a) => a.target === id).length >= 2)
    const mine = received.filter((a) => a.target === id)
    expect(mine.map((a) => a.threshold).sort()).toEqual([0.8, 1])
    for (const alert of mine) expect(alert).toMatchObject({ kind: "key_budget", target: id, used: 1, limit: 1, period: "month" })
    expect(String(mine[0]!.period_start)).toMatch(/^\d{4}-\d{2}-01T00:00:00\.000Z$/)
  })
})
