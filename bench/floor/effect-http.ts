/** Rung 3: Effect's own HTTP server (platform-node); body read with `request.json`, the same upstream call. */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Effect, Layer } from "effect"
import * as HttpServer from "effect/http/HttpServer"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import { createServer } from "node:http"
import { announce, forward } from "./common.ts"

const app = Effect.gen(function*() {
  const request = yield* HttpServerRequest
  const body = yield* request.json
  const text = yield* Effect.tryPromise(() => forward(body))
  return HttpServerResponse.text(text, { contentType: "application/json" })
}).pipe(Effect.orDie)

const server = createServer({ keepAliveTimeout: 120_000, requestTimeout: 0 })
server.once("listening", () => announce(server))
NodeRuntime.runMain(Layer.launch(HttpServer.serve(app).pipe(Layer.provide(NodeHttpServer.layer(() => server, { port: 0, host: "127.0.0.1" })))))
