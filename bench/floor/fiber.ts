/**
 * Rung 2: the same `node:http` front; each request runs as one Effect fiber on a context built
 * once: four services read from it, a `Scope` with a finalizer, parse and upstream call wrapped.
 */
import { createServer, type IncomingHttpHeaders } from "node:http"
import { Context, Effect, Exit, Layer, Scope } from "effect"
import { announce, forward } from "./common.ts"

class Auth extends Context.Service<Auth, { check: (key: string | undefined) => Effect.Effect<{ id: string }> }>()("Auth") {}
class Limits extends Context.Service<Limits, { take: (id: string) => Effect.Effect<{ remaining: number }> }>()("Limits") {}
class Credits extends Context.Service<Credits, { reserve: (id: string) => Effect.Effect<number> }>()("Credits") {}
class Audit extends Context.Service<Audit, { append: (record: unknown) => Effect.Effect<void> }>()("Audit") {}

const layer = Layer.mergeAll(
  Layer.succeed(Auth, { check: () => Effect.succeed({ id: "key_1" }) }),
  Layer.succeed(Limits, { take: () => Effect.succeed({ remaining: 49 }) }),
  Layer.succeed(Credits, { reserve: () => Effect.succeed(1) }),
  Layer.succeed(Audit, { append: () => Effect.void })
)
const context = await Effect.runPromise(Effect.scoped(Layer.build(layer)))

const pipeline = (raw: string, headers: IncomingHttpHeaders) =>
  Effect.gen(function*() {
    const auth = yield* Auth
    const limits = yield* Limits
    const credits = yield* Credits
    const audit = yield* Audit
    const key = yield* auth.check(headers.authorization)
    const rate = yield* limits.take(key.id)
    const body = yield* Effect.try(() => JSON.parse(raw) as unknown)
    const scope = yield* Scope.make()
    yield* credits.reserve(key.id)
    yield* Scope.addFinalizer(scope, audit.append({ key: key.id }))
    const text = yield* Effect.tryPromise(() => forward(body))
    yield* Scope.close(scope, Exit.void)
    return { text, rate }
  })

const server = createServer({ keepAliveTimeout: 120_000, requestTimeout: 0 }, (req, res) => {
  const chunks: Array<Buffer> = []
  req.on("data", (chunk: Buffer) => chunks.push(chunk))
  req.on("end", () => {
    const fiber = Effect.runForkWith(context)(pipeline(Buffer.concat(chunks).toString(), req.headers))
    fiber.addObserver((exit) => {
      if (Exit.isSuccess(exit)) {
        const { rate, text } = exit.value
        res.writeHead(200, {
          "content-type": "application/json",
          "content-length": Buffer.byteLength(text),
          "x-ratelimit-remaining": String(rate.remaining)
        })
        res.end(text)
      } else {
        res.writeHead(500)
        res.end()
      }
    })
  })
})
server.listen(0, "127.0.0.1", () => announce(server))
