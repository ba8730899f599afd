/**
 * The SQL guard as a service: every classification runs on the guard's worker pool
 * (guard/pool.ts), never on the event loop, within a time budget per statement
 * (`mcp.guard_timeout_ms`) and after a size check (`mcp.max_statement_bytes`). A statement that
 * is too large, too slow to analyze, or kills its worker is refused like any other dangerous
 * statement (`query_too_dangerous`): the guard fails closed, and a hostile statement costs the
 * gateway one worker's time slice, not every tenant's requests.
 */
import { availableParallelism } from "node:os"
import { Context, Effect, Layer } from "effect"
import { AppConfig } from "../config/AppConfig.ts"
import type { Classified, Dialect, ExplainVerdict, Verdict } from "./guard/index.ts"
import { GuardPool, type GuardJob, type PoolOutcome } from "./guard/pool.ts"
import { refused } from "./guard/verdict.ts"

/** `statement_kind` of a statement refused for its size or for the time its analysis took. */
export const TOO_LARGE = "too_large"
export const TOO_COMPLEX = "too_complex"

export class SqlGuard extends Context.Service<SqlGuard, {
  readonly statement: (dialect: Dialect, sql: string) => Effect.Effect<Classified>
  readonly explain: (dialect: Dialect, sql: string, options: { readonly analyze: boolean }) => Effect.Effect<Classified<ExplainVerdict>>
}>()("modelgate/SqlGuard") {
  static readonly layer = Layer.effect(
    SqlGuard,
    Effect.gen(function*() {
      const config = yield* AppConfig
      const pool = new GuardPool({ size: Math.max(1, availableParallelism()), timeoutMs: config.mcp.guard_timeout_ms })
      yield* Effect.addFinalizer(() => Effect.promise(() => pool.close()))
      // The parsers take a moment to load: start a worker now when there are databases to guard.
      if (config.connections.length > 0) pool.warm()

      const refusal = (sql: string): Verdict | undefined => {
        // Read at each statement: a config reload's limit applies to the next one.
        const maxBytes = config.mcp.max_statement_bytes
        const bytes = Buffer.byteLength(sql, "utf8")
        return bytes > maxBytes
          ? refused(TOO_LARGE, `the statement is ${bytes} bytes; statements are limited to ${maxBytes} bytes.`)
          : undefined
      }

      /** `wrap` turns a refusal the pool decided (time, crash) into the result the caller expects. */
      const onPool = <V extends Verdict>(job: GuardJob, wrap: (refusal: Verdict) => Classified<V>) =>
        Effect.flatMap(Effect.promise(() => pool.run(job)), (outcome: PoolOutcome): Effect.Effect<Classified<V>> => {
          switch (outcome._tag) {
            case "Done":
              // The worker ran the same classifier the job names, so the shape is the one asked for.
              return Effect.succeed(outcome.result as Classified<V>)
            case "TimedOut":
              return Effect.as(
                Effect.logWarning(
                  `SQL guard: a ${job.dialect} statement of ${job.sql.length} characters ran out of its ` +
                    `${outcome.budgetMs} ms budget; its worker was replaced`
                ),
                wrap(refused(TOO_COMPLEX, `the statement is too complex to analyze within ${outcome.budgetMs} ms; simplify it.`))
              )
            case "Crashed":
              return Effect.as(
                Effect.logWarning(`SQL guard: the analysis of a ${job.dialect} statement failed: ${outcome.error}`),
                wrap(refused(TOO_COMPLEX, "the statement could not be analyzed; nothing was run."))
              )
          }
        })

      const plain = (verdict: Verdict): Classified => ({ verdict, calls: [] })

      const statement = Effect.fn("SqlGuard.statement")(function*(dialect: Dialect, sql: string) {
        const early = refusal(sql)
        if (early !== undefined) return plain(early)
        return yield* onPool({ op: "statement", dialect, sql }, plain)
      })

      const explain = Effect.fn("SqlGuard.explain")(function*(dialect: Dialect, sql: string, options: { readonly analyze: boolean }) {
        const asExplain = (inner: Verdict): Classified<ExplainVerdict> => ({
          // Refused before its own analysis finished: the refusal's kind (too_large, too_complex) names it.
          verdict: { ...refused(inner.kind, inner.verdict === "refused" ? inner.reason : "the statement was refused."), inner },
          calls: []
        })
        const early = refusal(sql)
        if (early !== undefined) return asExplain(early)
        return yield* onPool({ op: "explain", dialect, sql, analyze: options.analyze }, asExplain)
      })

      return SqlGuard.of({ statement, explain })
    })
  )
}
