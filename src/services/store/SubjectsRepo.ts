/**
 * Identity-provider subjects seen by the gateway (decisions section 11). A row is written the
 * first time a subject authenticates (or is counted against a budget, whichever comes first);
 * its request budget is counted in CreditsRepo.admitPaid, in the same transaction as the charge.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql/SqlClient"
import type { SubjectRecord } from "../../domain/records.ts"
import { decodeRows, keysetPage, Num } from "./rows.ts"
import { storeOp, type StoreError } from "./StoreError.ts"

const SubjectRow = Schema.Struct({
  id: Schema.String,
  issuer: Schema.String,
  subject: Schema.String,
  budget_used: Num,
  first_seen_at: Schema.String,
  last_seen_at: Schema.String
})

const decodeSubjects = decodeRows(SubjectRow)

export interface SubjectSighting {
  readonly id: string
  readonly issuer: string
  readonly subject: string
  /** ISO timestamp of the latest request. */
  readonly seen_at: string
}

/** Where a page of subjects starts: after this one in the list's order (newest first). */
export interface SubjectPosition {
  readonly first_seen_at: string
  readonly id: string
}

export class SubjectsRepo extends Context.Service<SubjectsRepo, {
  /** Records each subject as seen (creating its row on the first sighting), in one transaction. */
  readonly touchSubjects: (sightings: ReadonlyArray<SubjectSighting>) => Effect.Effect<void, StoreError>
  readonly getSubject: (id: string) => Effect.Effect<SubjectRecord | undefined, StoreError>
  /**
   * A page of subjects, the first seen most recently first (issue 31): by (first_seen_at, id),
   * which never change, so following the pages visits every subject once; ordered by last_seen_at,
   * a subject seen again during the walk would jump past the cursor and be missed.
   */
  readonly pageSubjects: (query: { readonly limit: number; readonly after?: SubjectPosition | undefined }) => Effect.Effect<
    { readonly items: ReadonlyArray<SubjectRecord>; readonly next: SubjectPosition | undefined },
    StoreError
  >
  /** Forgets the subject's budget usage (every period); undefined when no such subject was ever seen. */
  readonly resetBudget: (id: string) => Effect.Effect<SubjectRecord | undefined, StoreError>
}>()("modelgate/SubjectsRepo") {
  static readonly layer = Layer.effect(
    SubjectsRepo,
    Effect.gen(function*() {
      const sql = yield* SqlClient
      // The requests counted in the subject's latest budget period (issue 33: budget_usage; its
      // policy says which period, so the latest row is the current one, or the last one used).
      const columns = sql.literal(`s.id, s.issuer, s.subject, s.first_seen_at, s.last_seen_at,
        COALESCE((SELECT u.requests FROM budget_usage u WHERE u.holder = s.id ORDER BY u.period_start DESC LIMIT 1), 0) AS budget_used`)
      const getSubject = (id: string) =>
        sql`SELECT ${columns} FROM identity_subjects s WHERE s.id = ${id}`.pipe(
          decodeSubjects,
          Effect.map((rows) => rows[0]),
          storeOp("SubjectsRepo.getSubject")
        )
      return SubjectsRepo.of({
        touchSubjects: (sightings) =>
          sightings.length === 0
            ? Effect.void
            : sql.withTransaction(
              // Insert, then update: an upsert on id alone fails with a unique violation on
              // (issuer, subject) when another replica's first sighting or count of the same subject
              // races it; without a conflict target every unique index is an arbiter.
              Effect.forEach(sightings, (s) =>
                Effect.andThen(
                  sql`INSERT INTO identity_subjects (id, issuer, subject, budget_used, first_seen_at, last_seen_at)
                      VALUES (${s.id}, ${s.issuer}, ${s.subject}, 0, ${s.seen_at}, ${s.seen_at})
                      ON CONFLICT DO NOTHING`,
                  sql`UPDATE identity_subjects SET last_seen_at = ${s.seen_at} WHERE id = ${s.id}`
                ), { discard: true })
            ).pipe(storeOp("SubjectsRepo.touchSubjects")),
        getSubject,
        pageSubjects: (query) =>
          sql`SELECT ${columns} FROM identity_subjects s WHERE ${
            sql.and(query.after === undefined ? [] : [sql`(s.first_seen_at, s.id) < (${query.after.first_seen_at}, ${query.after.id})`])
          } ORDER BY s.first_seen_at DESC, s.id DESC LIMIT ${query.limit + 1}`.pipe(
            decodeSubjects,
            Effect.map((rows) => {
              const { items, last } = keysetPage(rows, query.limit)
              return { items, next: last === undefined ? undefined : { first_seen_at: last.first_seen_at, id: last.id } }
            }),
            storeOp("SubjectsRepo.pageSubjects")
          ),
        // Every period's usage goes: the budget starts over from nothing.
        resetBudget: (id) =>
          sql`DELETE FROM budget_usage WHERE holder = ${id}`.pipe(
            storeOp("SubjectsRepo.resetBudget"),
            Effect.andThen(getSubject(id))
          )
      })
    })
  )
}
