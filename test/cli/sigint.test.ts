/**
 * A stop by SIGINT (Ctrl-C in a terminal) is a stop like SIGTERM (issue 39 item 3; README "CLI":
 * "SIGTERM or SIGINT drains"): the gateway writes what it buffered, the audit record of the last
 * request included, and exits 0.
 */
import { DatabaseSync } from "node:sqlite"
import { join } from "node:path"
import { describe, expect, it } from "vitest"
import { runCli, spawnGateway, tempDir, writeConfig } from "../support/process.ts"

describe("modelgate serve stopped by SIGINT", () => {
  it("drains, writes the audit records it buffered and exits 0", { timeout: 90_000 }, async () => {
    const dir = tempDir()
    const store = join(dir, "store.db")
    // A long flush interval: the record is still buffered when the signal arrives.
    const config = writeConfig(dir, { store: `sqlite:${store}`, audit: { flush_interval_ms: 60_000 } })
    const created = await runCli(["--config", config, "keys", "create", "--name", "ctrl-c"])
    const { key } = JSON.parse(created.stdout) as { key: string }
    const gateway = await spawnGateway(config)
    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "echo", messages: [{ role: "user", content: "hi" }] })
    })
    expect(response.status).toBe(200)
    const requestId = response.headers.get("x-request-id")!

    expect(await gateway.stop("SIGINT")).toBe(0)
    const db = new DatabaseSync(store)
    try {
      const rows = db.prepare("SELECT status, endpoint FROM audit_log WHERE request_id = ?").all(requestId)
      expect(rows).toEqual([{ status: 200, endpoint: "/v1/chat/completions" }])
    } finally {
      db.close()
    }
  })
})
