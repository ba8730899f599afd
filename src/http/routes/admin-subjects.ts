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

const ListQuery = Schema.Struct({ limit: Schema.optional(Schema.FiniteFromString) })

export const adminSubjectRoutes = (options: { readonly auth: AdminAuth }) => {
  const admin = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.andThen(options.auth.requireAdmin, effect)
  const idParam = Effect.map(CurrentRequest, (state) => state.params.id ?? "")
  const found = (id: string) => <A>(record: A | undefined) =>
    record === undefined ? Effect.fail(new NotFound({ message: `no identity-provider subject with id ${id}` })) : Effect.succeed(record)

  return [
    route("GET", "/subjects", admin(Effect.gen(function*() {
      const request = yield* HttpServerRequest
      const params = yield* decodeStrict(ListQuery)(Object.fromEntries(new URL(request.url, "http://local").searchParams))
      const limit = Math.min(Math.max(Math.trunc(params.limit ?? 100), 1), 1000)
      return json({ data: yield* Effect.orDie((yield* SubjectsRepo).listSubjects(limit)) })
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
