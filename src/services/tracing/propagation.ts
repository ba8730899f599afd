/**
 * W3C Trace Context at the gateway's two edges. A client's `traceparent` (with its `tracestate`)
 * becomes the parent of the request span; an upstream call sends the `traceparent` of its own
 * span, and the client's `tracestate` as it came. Without a tracer the client's trace context is
 * still passed on to the upstream unchanged, so a trace stays whole across an untraced gateway.
 * A header that does not parse is ignored: trace context never fails a request.
 */
import { Context, Effect, Option, Tracer } from "effect"
import type * as Headers from "effect/http/Headers"
import * as HttpTraceContext from "effect/http/HttpTraceContext"

/** The client's `tracestate`, kept on its span so that the upstream call can forward it. */
const TraceState = Context.Reference<string | undefined>("modelgate/TraceState", { defaultValue: () => undefined })

/** Printable ASCII, and no longer than the 512 characters W3C asks every participant to pass on. */
const TRACESTATE = /^[\x20-\x7e]{1,512}$/

/** The span a client's valid `traceparent` names, or undefined (absent or malformed: ignored). */
export const clientParent = (headers: Headers.Headers): Tracer.ExternalSpan | undefined => {
  if (headers.traceparent === undefined) return undefined
  const parent = HttpTraceContext.w3c(headers)
  if (Option.isNone(parent)) return undefined
  const state = headers.tracestate
  if (state === undefined || !TRACESTATE.test(state)) return parent.value
  return Tracer.externalSpan({ ...parent.value, annotations: Context.make(TraceState, state) })
}

/** Spans made while tracing is off carry DisablePropagation: what propagates is the nearest one without. */
const propagated = (span: Tracer.AnySpan | undefined): Tracer.AnySpan | undefined => {
  let current = span
  while (current !== undefined && Context.get(current.annotations, Tracer.DisablePropagation)) {
    current = current._tag === "Span" ? Option.getOrUndefined(current.parent) : undefined
  }
  return current
}

const rootOf = (span: Tracer.AnySpan): Tracer.AnySpan => {
  let current = span
  while (current._tag === "Span" && Option.isSome(current.parent)) current = current.parent.value
  return current
}

/**
 * `traceparent` (and `tracestate`) for an outgoing call made under the current span; empty when
 * there is no trace to continue.
 */
export const outgoingTraceHeaders: Effect.Effect<Record<string, string>> = Effect.map(
  Effect.serviceOption(Tracer.ParentSpan),
  (current): Record<string, string> => {
    const span = propagated(Option.getOrUndefined(current))
    if (span === undefined) return {}
    const traceparent = `00-${span.traceId.padStart(32, "0")}-${span.spanId}-${span.sampled ? "01" : "00"}`
    const root = rootOf(span)
    const state = root._tag === "ExternalSpan" ? Context.get(root.annotations, TraceState) : undefined
    return state === undefined ? { traceparent } : { traceparent, tracestate: state }
  }
)
