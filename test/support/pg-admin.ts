/** Minimal promise-style Postgres access for test setup, over the same @effect/sql-pg driver. */
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql/SqlClient"

export class Client {
  readonly url: string
  constructor(url: string) {
    this.url = url
  }
  query<A = Record<string, unknown>>(text: string, params: ReadonlyArray<unknown> = []): Promise<ReadonlyArray<A>> {
    return Effect.gen(function*() {
      const sql = yield* SqlClient
      return (yield* sql.unsafe(text, params)) as unknown as ReadonlyArray<A>
    }).pipe(
      Effect.provide(PgClient.layer({ url: Redacted.make(this.url), maxConnections: 1 }).pipe(Layer.fresh)),
      Effect.runPromise
    )
  }
}
