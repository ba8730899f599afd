/**
 * Issue 33: the team of the principal a request is authenticated as is copied into its audit
 * record (`team_id`), so the spend reports can group by team; a principal without a team leaves
 * it out. Authentication itself is the real stage (`authenticated`), with the key lookup replaced.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as ServerRequest from "effect/http/HttpServerRequest"
import type { KeyPrincipal } from "../../src/domain/records.ts"
import { authenticated } from "../../src/pipelines/authenticate.ts"
import { CurrentRequest, makeRequestState, toAuditRecord } from "../../src/pipelines/request.ts"
import { Auth } from "../../src/services/auth/Auth.ts"
import { AppConfig } from "../../src/services/config/AppConfig.ts"
import { RateLimiter } from "../../src/services/limits/RateLimiter.ts"
import { testConfig } from "../support/gateway.ts"

const principal = (team: KeyPrincipal["team"]): KeyPrincipal => ({
  kind: "key",
  id: "key_t",
  allowed_models: null,
  tools_enabled: false,
  mcp_servers: [],
  budget: null,
  limits: null,
  team
})

const recordFor = (key: KeyPrincipal) =>
  Effect.gen(function*() {
    const state = makeRequestState({ method: "POST", path: "/v1/chat/completions", clientAddr: null })
    yield* authenticated(Effect.void).pipe(
      Effect.provideService(CurrentRequest, state),
      Effect.provideService(ServerRequest.HttpServerRequest, ServerRequest.fromWeb(new Request("http://gateway/v1/chat/completions", { headers: { authorization: "Bearer x" } })))
    )
    return toAuditRecord(state, 200, null)
  }).pipe(
    Effect.provide(Layer.mergeAll(
      Layer.succeed(Auth, Auth.of({ authenticate: () => Effect.succeed(key) })),
      RateLimiter.layerMemory,
      AppConfig.layer(testConfig())
    ))
  )

describe("the audit record's team", () => {
  it.effect("is the team of the authenticated principal", () =>
    Effect.gen(function*() {
      const record = yield* recordFor(principal({ id: "team_9", name: "platform", allowed_models: null, budget: null, limits: null }))
      expect(record).toMatchObject({ key_id: "key_t", team_id: "team_9" })
    }))

  it.effect("is absent for a principal without a team", () =>
    Effect.gen(function*() {
      expect((yield* recordFor(principal(null))).team_id ?? null).toBeNull()
      expect((yield* recordFor(principal(undefined))).team_id ?? null).toBeNull()
    }))
})
