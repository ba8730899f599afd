/**
 * The span of one call to a provider (kind client): provider, upstream model, streamed or not,
 * and the upstream's HTTP status (set by postJson when the answer's status arrives). The call
 * sends this span's `traceparent` (postJson), so the provider's own trace, if it keeps one, hangs
 * under it. A streamed call's span lasts until its stream ends, however it ends. With tracing
 * off no span is made (see services/tracing/stage-span.ts).
 */
import { Clock, Effect, Exit, References, Stream, type Tracer } from "effect"
import { NO_STACK } from "../tracing/stage-span.ts"

export interface UpstreamCall {
  readonly provider: string
  /** Host (and port) of the provider's base URL. */
  readonly server: string
  readonly body: Record<string, unknown>
  readonly stream: boolean
}

const SPAN = "Provider.request"

/**
 * OpenTelemetry's `server.address` is the host alone, the port goes in `server.port`: `host:port`
 * (or `[v6]:port`) split in two.
 */
export const serverAttributes = (server: string): Record<string, string | number> => {
  const match = /^(\[[^\]]+\]|[^:]+):(\d+)$/.exec(server)
  if (match === null) return { "server.address": server }
  return { "server.address": match[1]!.replace(/^\[|\]$/g, ""), "server.port": Number(match[2]) }
}

const spanOptions = (call: UpstreamCall) => ({
  kind: "client" as const,
  attributes: {
    "modelgate.provider": call.provider,
    ...(typeof call.body.model === "string" ? { "gen_ai.request.model": call.body.model.slice(0, 200) } : {}),
    "modelgate.stream": call.stream,
    "http.request.method": "POST",
    ...serverAttributes(call.server)
  }
})

/** A call whose answer is read whole. */
export const tracedCall = <A, E>(call: UpstreamCall, effect: Effect.Effect<A, E>): Effect.Effect<A, E> =>
  Effect.withFiber((fiber) => fiber.getRef(References.TracerEnabled) ? Effect.withSpan(effect, SPAN, { ...spanOptions(call), ...NO_STACK }) : effect)

const endSpan = (span: Tracer.Span, exit: Exit.Exit<unknown, unknown>) =>
  Effect.flatMap(Clock.currentTimeNanos, (now) => Effect.sync(() => span.end(now, exit)))

/** A streamed call: the span covers opening it and the whole stream after. */
export const tracedStream = <A, E, E2>(
  call: UpstreamCall,
  open: Effect.Effect<Stream.Stream<A, E2>, E>
): Effect.Effect<Stream.Stream<A, E2>, E> =>
  Effect.withFiber((fiber) =>
    fiber.getRef(References.TracerEnabled)
      ? Effect.flatMap(Effect.makeSpan(SPAN, spanOptions(call)), (span) =>
        open.pipe(
          Effect.withParentSpan(span, NO_STACK),
          Effect.onExit((exit) => Exit.isFailure(exit) ? endSpan(span, exit) : Effect.void),
          Effect.map((stream) => stream.pipe(Stream.onExit((exit) => endSpan(span, exit))))
        ))
      : open
  )
