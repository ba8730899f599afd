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
  /** Sets the subject's request count back to 0; undefined when no such subject was ever seen. */
  readonly resetBudget: (id: string) => Effect.Effect<SubjectRecord | undefined, StoreError>
}>()("modelgate/SubjectsRepo") {
  static readonly layer = Layer.effect(
    SubjectsRepo,
    Effect.gen(function*() {
      const sql = yield* SqlClient
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
        getSubject: (id) =>
          sql`SELECT * FROM identity_subjects WHERE id = ${id}`.pipe(
            decodeSubjects,
            Effect.map((rows) => rows[0]),
            storeOp("SubjectsRepo.getSubject")
          ),
        pageSubjects: (query) =>
          sql`SELECT * FROM identity_subjects WHERE ${
            sql.and(query.after === undefined ? [] : [sql`(first_seen_at, id) < (${query.after.first_seen_at}, ${query.after.id})`])
          } ORDER BY first_seen_at DESC, id DESC LIMIT ${query.limit + 1}`.pipe(
            decodeSubjects,
            Effect.map((rows) => {
              const { items, last } = keysetPage(rows, query.limit)
              return { items, next: last === undefined ? undefined : { first_seen_at: last.first_seen_at, id: last.id } }
            }),
            storeOp("SubjectsRepo.pageSubjects")
          ),
        resetBudget: (id) =>
          sql`UPDATE identity_subjects SET budget_used = 0 WHERE id = ${id} RETURNING *`.pipe(
            decodeSubjects,
            Effect.map((rows) => rows[0]),
            storeOp("SubjectsRepo.resetBudget")
          )
      })
    })
  )
}
