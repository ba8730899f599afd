/**
 * What the gateway lets into an exported trace, as a wrapper around the exporting tracer, so it
 * holds for every span whoever made it (the gateway's own, effect/sql's, Effect's):
 *
 * - Traces start at requests. A span without a parent that is not a request (server) span
 *   (background work: audit flushes, credit sweeps, key-cache refreshes) is not sampled, so an
 *   idle gateway exports nothing. A request without a client trace context is sampled with
 *   `telemetry.sample_ratio`; one with a context follows the client's sampled flag.
 * - No statement text: effect/sql records every statement as `db.query.text`, which for the SQL
 *   tools is the client's own SQL. Such attributes are dropped.
 * - No messages: a failed span's error is replaced by its kind (the spec's error slug, or the
 *   error's tag), because error messages may quote what they refused (an upstream's message
 *   about a prompt, a database's about a statement). The kind is also `error.type`.
 * - No events: Effect records log lines as span events, and a log line may carry a cause.
 */
import { Cause, Exit, Option, Tracer } from "effect"
import { isApiError, slugOf } from "../../domain/errors.ts"

const DENIED_ATTRIBUTES = new Set(["db.query.text", "db.statement"])

/** The kind of a failure, never its message. */
const failureKind = (cause: Cause.Cause<unknown>): string => {
  for (const reason of cause.reasons) {
    if (reason._tag === "Fail") {
      const error = reason.error
      if (isApiError(error)) return slugOf(error)
      if (typeof error === "object" && error !== null && "_tag" in error && typeof error._tag === "string") return error._tag
      return "error"
    }
    if (reason._tag === "Die") return "defect"
  }
  return "interrupted"
}

/** The error an exported failed span shows: its kind as name and message, and no stack. */
class SpanFailure extends Error {
  constructor(kind: string) {
    super(kind)
    this.name = kind
    this.stack = kind
  }
}
const failures = new Map<string, Exit.Exit<never, SpanFailure>>()
const failureExit = (kind: string) => {
  let exit = failures.get(kind)
  if (exit === undefined) {
    exit = Exit.fail(new SpanFailure(kind))
    // Kinds come from fixed tables (slugs, tags); the cap only guards against a surprise.
    if (failures.size < 256) failures.set(kind, exit)
  }
  return exit
}

class PolicySpan implements Tracer.Span {
  readonly _tag = "Span"
  private readonly inner: Tracer.Span
  constructor(inner: Tracer.Span) {
    this.inner = inner
  }
  get name() {
    return this.inner.name
  }
  get spanId() {
    return this.inner.spanId
  }
  get traceId() {
    return this.inner.traceId
  }
  get parent() {
    return this.inner.parent
  }
  get annotations() {
    return this.inner.annotations
  }
  get status() {
    return this.inner.status
  }
  get attributes() {
    return this.inner.attributes
  }
  get links() {
    return this.inner.links
  }
  get sampled() {
    return this.inner.sampled
  }
  get kind() {
    return this.inner.kind
  }
  end(endTime: bigint, exit: Exit.Exit<unknown, unknown>): void {
    if (Exit.isSuccess(exit) || Cause.hasInterruptsOnly(exit.cause)) return this.inner.end(endTime, exit)
    const kind = failureKind(exit.cause)
    this.inner.attribute("error.type", kind)
    this.inner.end(endTime, failureExit(kind))
  }
  attribute(key: string, value: unknown): void {
    if (!DENIED_ATTRIBUTES.has(key)) this.inner.attribute(key, value)
  }
  event(): void {}
  addLinks(links: ReadonlyArray<Tracer.SpanLink>): void {
    this.inner.addLinks(links)
  }
}

export const withTracePolicy = (inner: Tracer.Tracer, options: { readonly sampleRatio: number }): Tracer.Tracer =>
  Tracer.make({
    span(span) {
      const sampled = Option.isSome(span.parent)
        ? span.sampled
        : span.kind === "server" && span.sampled && (options.sampleRatio >= 1 || Math.random() < options.sampleRatio)
      return new PolicySpan(inner.span({ ...span, sampled }))
    },
    context: inner.context
  })
