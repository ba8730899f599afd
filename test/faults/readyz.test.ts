/**
 * GET /readyz is readiness: 503 `dependency_unavailable` naming what is missing while the store
 * or Redis does not answer, or while the server drains for a stop; 200 otherwise. /healthz stays
 * liveness and answers 200 throughout. The store and Redis here are the test's own, killed and
 * restarted for real.
 */
import { connect } from "node:net"
import { afterAll, describe, expect, it } from "vitest"
import { scriptedProviders } from "../../src/services/providers/scripted.ts"
import type { ChatChunk } from "../../src/wire/openai-chat.ts"
import { expectOpen, openStream, sleep } from "../limits/support.ts"
import { waitFor } from "../support/wait.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { canRunPostgres, canRunRedis, startPostgres, startRedis, type Throwaway } from "../support/throwaway.ts"
import { VERSION } from "../../src/domain/version.ts"

interface Envelope {
  readonly status: number
  readonly error: string
  readonly details?: { readonly dependency?: string; readonly unavailable?: ReadonlyArray<string>; readonly reason?: string }
}

const get = async (url: string) => {
  const response = await fetch(url)
  return { status: response.status, body: (await response.json()) as Envelope & { status: unknown } }
}

/** Polls until /readyz gives `status` (a restarted dependency takes a moment to be reconnected). */
const readyzBecomes = async (gatewayUrl: string, status: number, timeoutMs = 15_000) => {
  const deadline = Date.now() + timeoutMs
  let last = await get(`${gatewayUrl}/readyz`)
  while (last.status !== status && Date.now() < deadline) {
    await sleep(100)
    last = await get(`${gatewayUrl}/readyz`)
  }
  return last
}

const metricValue = async (gatewayUrl: string, line: string) => {
  const text = await (await fetch(`${gatewayUrl}/metrics`)).text()
  const found = text.split("\n").find((l) => l.startsWith(line + " "))
  return found === undefined ? undefined : Number(found.slice(line.length + 1))
}

describe.skipIf(!canRunPostgres || !canRunRedis)("/readyz while a dependency is down", () => {
  let pg: Throwaway | undefined
  let redis: Throwaway | undefined
  let gw: TestGateway | undefined

  afterAll(async () => {
    await gw?.close().catch(() => {})
    await Promise.all([pg?.destroy(), redis?.destroy()])
  })

  it("answers 503 naming the store or Redis while it is unreachable, 200 again once it is back; /healthz stays 200", async () => {
    ;[pg, redis] = await Promise.all([startPostgres(), startRedis()])
    // Probed every 50 ms rather than once a second: each of the four changes below is seen at once.
    gw = await startGateway(testConfig({ store: pg.url, redis: redis.url, server: { host: "127.0.0.1", port: 0, readiness_probe_ms: 50 } }))

    const ready = await get(`${gw.url}/readyz`)
    expect(ready).toEqual({ status: 200, body: { status: "ready", version: VERSION } })

    await pg.kill()
    const storeDown = await readyzBecomes(gw.url, 503)
    expect(storeDown.status).toBe(503)
    expect(storeDown.body.error).toBe("dependency_unavailable")
    expect(storeDown.body.details).toEqual({ dependency: "store", unavailable: ["store"] })
    expect((await get(`${gw.url}/healthz`)).status).toBe(200)
    expect(await metricValue(gw.url, `modelgate_dependency_errors_total{dependency="store"}`)).toBeGreaterThan(0)

    await pg.start()
    expect((await readyzBecomes(gw.url, 200)).status).toBe(200)

    await redis.kill()
    const redisDown = await readyzBecomes(gw.url, 503)
    expect(redisDown.body.error).toBe("dependency_unavailable")
    expect(redisDown.body.details).toEqual({ dependency: "redis", unavailable: ["redis"] })
    expect((await get(`${gw.url}/healthz`)).status).toBe(200)
    expect(await metricValue(gw.url, `modelgate_dependency_errors_total{dependency="redis"}`)).toBeGreaterThan(0)

    await redis.start()
    expect((await readyzBecomes(gw.url, 200)).status).toBe(200)
  }, 60_000)
})

const chunk = (content: string): ChatChunk =>
  ({ id: "chatcmpl-r", object: "chat.completion.chunk", created: 1, model: "up", choices: [{ index: 0, delta: { content }, logprobs: null, finish_reason: null }] }) as ChatChunk

/**
 * A draining server closes idle connections and accepts no new ones, so a probe reaches it only
 * on a connection that was already sending a request: here, headers begun before the drain and
 * finished during it. Resolves with the raw response text.
 */
const slowHeaders = async (port: number, path: string) => {
  const socket = connect(port, "127.0.0.1")
  await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject))
  socket.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n`)
  let text = ""
  socket.setEncoding("utf8")
  socket.on("data", (piece: string) => (text += piece))
  const ended = new Promise<string>((resolve) => socket.once("close", () => resolve(text)))
  return { finish: () => socket.write("\r\n"), ended }
}

/** One whole request on a connection of its own (Connection: close); resolves with the raw response. */
const answeredOnNewConnection = (port: number) =>
  new Promise<string>((resolve, reject) => {
    const socket = connect(port, "127.0.0.1")
    let text = ""
    socket.setEncoding("utf8")
    socket.on("data", (piece: string) => (text += piece))
    socket.once("error", reject)
    socket.once("close", () => resolve(text))
    socket.once("connect", () => socket.write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"))
  })

/** True when a new connection to the port is refused (nothing listens there any more). */
const refused = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, "127.0.0.1")
    socket.once("connect", () => {
      socket.destroy()
      resolve(false)
    })
    socket.once("error", () => resolve(true))
  })

describe("/readyz during a drain", () => {
  it("answers 503 dependency_unavailable naming the draining gateway while open requests finish", async () => {
    const scripted = scriptedProviders([{ name: "up", kind: "openai" }], {
      // A stream that stays open far longer than the grace: the drain waits for it.
      openai: () => ({ events: [{ event: chunk("hello") }, { delay: "60 seconds" }] })
    })
    const gw = await startGateway(
      testConfig({
        server: { host: "127.0.0.1", port: 0, shutdown_grace_seconds: 2 },
        providers: [{ name: "up", kind: "openai", base_url: "http://scripted.invalid/v1" }],
        models: [{ alias: "held", id: "up-model", provider: "up", credits: 0, max_tokens: 100 }]
      }),
      { providers: scripted.layer }
    )
    try {
      const { key } = await gw.createKey()
      expect((await get(`${gw.url}/readyz`)).status).toBe(200)
      const stream = await openStream(gw.url, key, { model: "held" })
      expectOpen(stream)
      const port = Number(new URL(gw.url).port)
      const probe = await slowHeaders(port, "/readyz")
      // The server accepts connections in order: one answered on a later connection proves the
      // probe's was accepted (a state, where a 100 ms pause was a guess).
      expect(await answeredOnNewConnection(port)).toMatch(/^HTTP\/1\.1 200 /)

      const closing = gw.close()
      // The drain has begun once the listener refuses new connections (a state, not a 200 ms pause).
      await waitFor("the drain begun: new connections refused", () => refused(port))
      probe.finish()
      const raw = await probe.ended
      const [head, body] = raw.split("\r\n\r\n", 2) as [string, string]
      expect(head).toMatch(/^HTTP\/1\.1 503 /)
      expect(head.toLowerCase()).toContain("connection: close")
      const envelope = JSON.parse(body) as Envelope
      expect(envelope.error).toBe("dependency_unavailable")
      expect(envelope.details).toEqual({ dependency: "gateway", reason: "draining" })
      await closing
    } finally {
      await gw.close().catch(() => {})
    }
  }, 30_000)
})
