/**
 * The span of one request (kind server), from its arrival to its end: a plain answer's last
 * byte, or a streamed answer's last frame. Its attributes are read off the request's audit record
 * when it ends, so the trace, the metrics and the audit trail tell the same story; like the
 * record, they hold identifiers and counts, never a key, a prompt or a statement.
 */
import { Clock, Effect, Exit, type Tracer } from "effect"
import type { AuditRecord } from "../../domain/records.ts"

/** `POST /v1/chat/completions`: the route pattern, so names stay few; the method alone when none matched. */
export const requestSpanName = (method: string, route: string | undefined): string =>
  route === undefined ? method : `${method} ${route}`

export const startRequestSpan = (options: {
  readonly method: string
  readonly route: string | undefined
  readonly requestId: string
  readonly parent: Tracer.ExternalSpan | undefined
}): Effect.Effect<Tracer.Span> =>
  Effect.makeSpan(requestSpanName(options.method, options.route), {
    kind: "server",
    parent: options.parent,
    root: options.parent === undefined,
    attributes: {
      "http.request.method": options.method,
      ...(options.route === undefined ? {} : { "http.route": options.route }),
      "modelgate.request_id": options.requestId
    }
  })

/** Only the server's failures (5xx) mark the request span failed, as OpenTelemetry's HTTP conventions ask. */
export const endRequestSpan = (span: Tracer.Span, record: AuditRecord): Effect.Effect<void> =>
  Effect.flatMap(Clock.currentTimeNanos, (now) =>
    Effect.sync(() => {
      if (span.sampled) {
        span.attribute("http.response.status_code", record.status)
        if (record.error !== null) {
          span.attribute("modelgate.slug", record.error)
          span.attribute("error.type", record.error)
        }
        if (record.key_id !== null) span.attribute("modelgate.key_id", record.key_id)
        if (record.model !== null) span.attribute("modelgate.model", record.model)
        if (record.provider !== null) span.attribute("modelgate.provider", record.provider)
        if (record.tool !== null) span.attribute("modelgate.tool", record.tool)
        if (record.connection_id !== null) span.attribute("modelgate.connection_id", record.connection_id)
        span.attribute("modelgate.stream", record.stream)
        span.attribute("modelgate.credits", record.credits)
        if (record.prompt_tokens !== null) span.attribute("gen_ai.usage.input_tokens", record.prompt_tokens)
        if (record.completion_tokens !== null) span.attribute("gen_ai.usage.output_tokens", record.completion_tokens)
        if (record.client_addr !== null) span.attribute("client.address", record.client_addr)
      }
      span.end(now, record.status >= 500 ? Exit.fail({ _tag: record.error ?? "internal_error" }) : Exit.void)
    }))
