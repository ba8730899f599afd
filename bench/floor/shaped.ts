/**
 * Rung 4: Effect's HTTP server with a gateway-shaped pipeline, all in memory: a `Scope` per
 * request with an exit finalizer (an audit record and a prom-client histogram), four services
 * provided per request, the key's SHA-256 looked up, a GCRA step, a `Schema` decode of the chat
 * body with excess properties refused, a credit reservation by `acquireRelease` (refunded on
 * failure), the upstream call, a JSON answer with rate-limit headers. What a lean pipeline of the
 * gateway's shape costs above the floor.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Context, Effect, Exit, Layer, Schema, Scope } from "effect"
import * as HttpServer from "effect/http/HttpServer"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import { createHash } from "node:crypto"
import { createServer } from "node:http"
import { Histogram } from "prom-client"
import { announce, FLOOR_KEY, forward } from "./common.ts"

const histogram = new Histogram({ name: "req_seconds", help: "request time", labelNames: ["route", "status"], buckets: [0.001, 0.01, 0.1, 1, 10] })
const keys = new Map([[createHash("sha256").update(FLOOR_KEY).digest("hex"), { id: "key_1", rpm: 1e9 }]])
const buckets = new Map<string, number>()
let pool = 1e12
const audit: Array<unknown> = []

interface State { readonly id: string; readonly start: number; credits: number }
class CurrentRequest extends Context.Service<CurrentRequest, State>()("CurrentRequest") {}
class RequestBody extends Context.Service<RequestBody, { readonly json: Effect.Effect<unknown, unknown> }>()("RequestBody") {}
class Key extends Context.Service<Key, { readonly id: string; readonly rpm: number }>()("Key") {}
class Rate extends Context.Service<Rate, { readonly remaining: number; readonly reset: number }>()("Rate") {}

const Message = Schema.Struct({
  role: Schema.Literals(["system", "user", "assistant", "tool"]),
  content: Schema.Union([Schema.String, Schema.Null]),
  name: Schema.optional(Schema.String),
  tool_call_id: Schema.optional(Schema.String)
})
const Chat = Schema.Struct({
  model: Schema.String,
  messages: Schema.Array(Message),
  stream: Schema.optional(Schema.Boolean),
  temperature: Schema.optional(Schema.Number),
  max_tokens: Schema.optional(Schema.Number)
})
const decode = Schema.decodeUnknownEffect(Chat, { onExcessProperty: "error" })

const gcra = (id: string, rpm: number) => {
  const now = Date.now()
  const t = Math.max(buckets.get(id) ?? now, now) + 60_000 / rpm
  buckets.set(id, t)
  return { remaining: 49, reset: Math.ceil(t / 1000) }
}

const authenticate = Effect.gen(function*() {
  const request = yield* HttpServerRequest
  const raw = (request.headers.authorization ?? "").slice(7)
  const key = keys.get(createHash("sha256").update(raw).digest("hex"))
  if (key === undefined) return yield* Effect.fail({ status: 401 })
  return { key, rate: gcra(key.id, key.rpm) }
})

const pipeline = Effect.gen(function*() {
  const state = yield* CurrentRequest
  const key = yield* Key
  const rate = yield* Rate
  const body = yield* (yield* RequestBody).json
  const chat = yield* decode(body)
  yield* Effect.acquireRelease(
    Effect.sync(() => {
      pool -= 1
      state.credits = 1
      return 1
    }),
    (credits, exit) => Exit.isSuccess(exit) ? Effect.void : Effect.sync(() => void (pool += credits))
  )
  const text = yield* Effect.tryPromise(() => forward({ ...chat, model: "gpt-4o-mini" }))
  return HttpServerResponse.text(text, {
    contentType: "application/json",
    headers: {
      "x-request-id": state.id,
      "x-ratelimit-limit": "50",
      "x-ratelimit-remaining": String(rate.remaining),
      "x-ratelimit-reset": String(rate.reset),
      "x-key": key.id
    }
  })
})

let seq = 0
const app = Effect.gen(function*() {
  const request = yield* HttpServerRequest
  const state: State = { id: `req_${(++seq).toString(16)}`, start: performance.now(), credits: 0 }
  const scope = yield* Scope.make()
  yield* Scope.addFinalizerExit(scope, (exit) =>
    Effect.sync(() => {
      const status = Exit.isSuccess(exit) ? 200 : 500
      audit.push({ request_id: state.id, status, credits: state.credits })
      if (audit.length > 1000) audit.length = 0
      histogram.observe({ route: "/v1/chat/completions", status: String(status) }, (performance.now() - state.start) / 1000)
    }))
  const { key, rate } = yield* authenticate
  const exit = yield* pipeline.pipe(
    Effect.provideService(CurrentRequest, state),
    Effect.provideService(RequestBody, { json: request.json }),
    Effect.provideService(Key, key),
    Effect.provideService(Rate, rate),
    Scope.provide(scope),
    Effect.exit
  )
  yield* Scope.close(scope, exit)
  return Exit.isSuccess(exit) ? exit.value : HttpServerResponse.text("{}", { status: 500 })
}).pipe(Effect.catch(() => Effect.succeed(HttpServerResponse.text("{}", { status: 401 }))))

const server = createServer({ keepAliveTimeout: 120_000, requestTimeout: 0 })
server.once("listening", () => announce(server))
NodeRuntime.runMain(Layer.launch(HttpServer.serve(app).pipe(Layer.provide(NodeHttpServer.layer(() => server, { port: 0, host: "127.0.0.1" })))))
