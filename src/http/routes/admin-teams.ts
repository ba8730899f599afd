/**
 * Teams in the admin API (issue 33): `POST /teams`, `GET /teams` (paged like every admin list),
 * `GET/PATCH/DELETE /teams/:id`. A team's budget is written in credits (decimals of at most six
 * fractional digits) and shown the same way; a team still holding keys cannot be deleted (409
 * `conflict`). Every change is audited with `details.target: { kind: "team", id }`.
 */
import { Effect, Schema } from "effect"
import { HttpServerResponse } from "effect/http"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import { ValidationFailed } from "../../domain/errors.ts"
import { decodeStrict } from "../../domain/validation.ts"
import { CurrentRequest, RequestBody } from "../../pipelines/request.ts"
import { json } from "../../pipelines/respond.ts"
import { CreateTeamInput, Teams, UpdateTeamInput } from "../../services/teams/Teams.ts"
import type { TeamRecord } from "../../domain/records.ts"
import { route } from "../router.ts"
import { auditChange, auditTarget } from "./admin-audit.ts"
import type { AdminAuth } from "./admin-auth.ts"
import { decodeCursor, encodeCursor, pageLimit } from "./paging.ts"

/** GET /teams: a page at a time (paging.ts), optionally by a substring of the name. */
export const TeamsQuery = Schema.Struct({
  limit: Schema.optional(Schema.String),
  cursor: Schema.optional(Schema.String),
  name: Schema.optional(Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(200)))
})

export const adminTeamRoutes = (options: { readonly auth: AdminAuth }) => {
  const admin = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.andThen(options.auth.requireAdmin, effect)
  const idParam = Effect.map(CurrentRequest, (state) => state.params.id ?? "")
  const target = (id: string) => ({ kind: "team" as const, id })
  const body = <S extends Schema.Top & { readonly DecodingServices: never }>(schema: S) =>
    Effect.flatMap(Effect.flatMap(RequestBody, (b) => b.jsonObject), decodeStrict(schema))

  /** A team as the admin API shows it, with its key count and its budget's usage in the current period. */
  const view = (team: TeamRecord) => Effect.map(Effect.flatMap(Teams, (teams) => teams.views([team])), (views) => views[0]!)

  return [
    route("POST", "/teams", admin(Effect.gen(function*() {
      const input = yield* body(CreateTeamInput)
      const created = yield* view(yield* (yield* Teams).create(input))
      yield* auditChange({ target: target(created.id), after: created })
      return json(created, 201)
    }))),
    route("GET", "/teams", admin(Effect.gen(function*() {
      const request = yield* HttpServerRequest
      const params = yield* decodeStrict(TeamsQuery)(Object.fromEntries(new URL(request.url, "http://local").searchParams))
      const limit = yield* pageLimit(params.limit)
      const after = yield* decodeCursor(params.cursor, 2)
      const teams = yield* Teams
      const page = yield* teams.page({
        limit,
        after: after === undefined ? undefined : { created_at: after[0]!, id: after[1]! },
        name: params.name
      })
      // One query for the key counts of the whole page, one for its budgets' usage.
      return json({
        data: yield* teams.views(page.items),
        next_cursor: page.next === undefined ? null : encodeCursor([page.next.created_at, page.next.id])
      })
    }))),
    route("GET", "/teams/:id", admin(Effect.gen(function*() {
      return json(yield* view(yield* (yield* Teams).get(yield* idParam)))
    }))),
    route("PATCH", "/teams/:id", admin(Effect.gen(function*() {
      const id = yield* idParam
      yield* auditTarget(target(id))
      const input = yield* body(UpdateTeamInput)
      if (Object.keys(input).length === 0) {
        return yield* new ValidationFailed({ message: "nothing to update: send at least one field" })
      }
      const teams = yield* Teams
      const before = yield* view(yield* teams.get(id))
      const after = yield* view(yield* teams.update(id, input))
      yield* auditChange({ target: target(id), before, after })
      return json(after)
    }))),
    route("DELETE", "/teams/:id", admin(Effect.gen(function*() {
      const id = yield* idParam
      yield* auditTarget(target(id))
      const teams = yield* Teams
      const before = yield* view(yield* teams.get(id))
      yield* teams.remove(id)
      yield* auditChange({ target: target(id), before })
      return HttpServerResponse.empty({ status: 204 })
    })))
  ]
}
