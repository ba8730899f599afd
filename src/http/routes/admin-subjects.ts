/**
 * Identity-provider subjects in the admin API (decisions section 11): who has used the gateway
 * with a token, and the request budget each has used, which an operator can reset as for a key.
 * What a subject may do comes from the config's policies, so there is nothing else to edit here.
 */
import { Effect, Schema } from "effect"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import { NotFound } from "../../domain/errors.ts"
import { decodeStrict } from "../../domain/validation.ts"
import { CurrentRequest } from "../../pipelines/request.ts"
import { json } from "../../pipelines/respond.ts"
import { SubjectsRepo } from "../../services/store/SubjectsRepo.ts"
import type { AdminAuth } from "./admin-auth.ts"
import { route } from "../router.ts"
import { auditChange, auditTarget } from "./admin-audit.ts"
import { decodeCursor, encodeCursor, pageLimit } from "./paging.ts"

/** GET /subjects: a page at a time, as every admin list (paging.ts). */
export const SubjectsQuery = Schema.Struct({ limit: Schema.optional(Schema.String), cursor: Schema.optional(Schema.String) })

export const adminSubjectRoutes = (options: { readonly auth: AdminAuth }) => {
  const admin = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.andThen(options.auth.requireAdmin, effect)
  const idParam = Effect.map(CurrentRequest, (state) => state.params.id ?? "")
  const found = (id: string) => <A>(record: A | undefined) =>
    record === undefined ? Effect.fail(new NotFound({ message: `no identity-provider subject with id ${id}` })) : Effect.succeed(record)

  return [
    route("GET", "/subjects", admin(Effect.gen(function*() {
      const request = yield* HttpServerRequest
      const params = yield* decodeStrict(SubjectsQuery)(Object.fromEntries(new URL(request.url, "http://local").searchParams))
      const limit = yield* pageLimit(params.limit)
      const after = yield* decodeCursor(params.cursor, 2)
      const page = yield* Effect.orDie((yield* SubjectsRepo).pageSubjects({
        limit,
        after: after === undefined ? undefined : { first_seen_at: after[0]!, id: after[1]! }
      }))
      return json({
        data: page.items,
        next_cursor: page.next === undefined ? null : encodeCursor([page.next.first_seen_at, page.next.id])
      })
    }))),
    route("GET", "/subjects/:id", admin(Effect.gen(function*() {
      const id = yield* idParam
      return json(yield* Effect.flatMap(Effect.orDie((yield* SubjectsRepo).getSubject(id)), found(id)))
    }))),
    route("POST", "/subjects/:id/budget/reset", admin(Effect.gen(function*() {
      const id = yield* idParam
      const target = { kind: "subject" as const, id }
      yield* auditTarget(target)
      const repo = yield* SubjectsRepo
      const before = yield* Effect.flatMap(Effect.orDie(repo.getSubject(id)), found(id))
      const after = yield* Effect.flatMap(Effect.orDie(repo.resetBudget(id)), found(id))
      yield* auditChange({ target, before: { budget_used: before.budget_used }, after: { budget_used: after.budget_used } })
      return json(after)
    })))
  ]
}
