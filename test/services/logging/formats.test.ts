/**
 * The server's log lines (src/services/logging): one line per log call in either format, the
 * annotations flat, and the lines of one event-loop turn written to the console at once.
 */
import { Console, Effect, Logger } from "effect"
import { describe, expect, it } from "vitest"
import { flatJsonLineLogger, prettyLineLogger } from "../../../src/services/logging/formats.ts"
import { makeLineSink } from "../../../src/services/logging/line-sink.ts"

const capture = () => {
  const writes: Array<string> = []
  const console = { ...globalThis.console, log: (text: string) => void writes.push(text) } as unknown as Console.Console
  return { writes, console }
}

const turn = () => new Promise((resolve) => setImmediate(resolve))

const logWith = (logger: Logger.Logger<unknown, void>, console: Console.Console) =>
  Effect.gen(function*() {
    yield* Effect.logInfo("request").pipe(Effect.annotateLogs({ request_id: "req_1", route: "/v1/chat/completions", slug: null, status: 200, note: "two words" }))
    yield* Effect.logWarning("could not record key last use")
  }).pipe(Effect.provide(Logger.layer([logger])), Effect.provideService(Console.Console, console), Effect.runSync)

describe("log lines", () => {
  it("pretty: time, level, message and the annotations as key=value, quoted when they need it", async () => {
    const { writes, console } = capture()
    logWith(prettyLineLogger, console)
    expect(writes).toEqual([])
    await turn()
    // Both lines of the turn in one write, in order.
    expect(writes).toHaveLength(1)
    const lines = writes[0]!.split("\n")
    expect(lines).toHaveLength(2)
    expect(lines[0]).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO request request_id=req_1 route=\/v1\/chat\/completions slug=null status=200 note="two words"$/)
    expect(lines[1]).toMatch(/^\S+ WARN could not record key last use$/)
  })

  it("json: one flat object a line, and values JSON.stringify refuses still come out", async () => {
    const { writes, console } = capture()
    logWith(flatJsonLineLogger, console)
    Effect.logInfo("big").pipe(Effect.annotateLogs({ n: 10n }), Effect.provide(Logger.layer([flatJsonLineLogger])), Effect.provideService(Console.Console, console), Effect.runSync)
    await turn()
    const lines = writes.join("\n").split("\n").map((line) => JSON.parse(line) as Record<string, unknown>)
    expect(lines[0]).toMatchObject({ level: "INFO", message: "request", request_id: "req_1", status: 200, slug: null, note: "two words" })
    expect(lines[1]).toMatchObject({ level: "WARN", message: "could not record key last use" })
    expect(lines[2]).toMatchObject({ level: "INFO", message: "big" })
  })

  it("the sink writes a turn's lines once, at once past its bound, and on flush", async () => {
    const writes: Array<string> = []
    const sink = makeLineSink((text) => void writes.push(text))
    for (let i = 0; i < 300; i++) sink.line(`line ${i}`)
    // 256 lines are written without waiting for the turn to end.
    expect(writes).toHaveLength(1)
    expect(writes[0]!.split("\n")).toHaveLength(256)
    sink.flush()
    expect(writes).toHaveLength(2)
    expect(writes.join("\n").split("\n")).toEqual(Array.from({ length: 300 }, (_, i) => `line ${i}`))
    await turn()
    expect(writes).toHaveLength(2)
  })
})
