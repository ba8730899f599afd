/**
 * A span around one stage of a request, made only while tracing is on. With tracing off the
 * stage runs as it is: no span, no parent-span context, no attributes, so a deployment without
 * a collector pays one reference lookup per stage (measured: README, Performance).
 */
import { Effect, References, type Tracer } from "effect"

/**
 * For Effect.withSpan / withParentSpan: Effect captures a stack trace (an Error) per call by
 * default, which was the largest cost of a traced request (profiled); the span names say where.
 */
export const NO_STACK = { captureStackTrace: false } as const

export interface StageSpanOptions<A> {
  readonly kind?: Tracer.SpanKind
  readonly attributes?: Record<string, unknown>
  /** Attributes learnt from the stage's result. */
  readonly annotate?: (value: A) => Record<string, unknown>
  /** Attributes read when the stage ends, however it ends. */
  readonly atEnd?: () => Record<string, unknown>
}

export const stageSpan = <A>(name: string, options: StageSpanOptions<A> = {}) =>
<E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withFiber((fiber) => {
    if (!fiber.getRef(References.TracerEnabled)) return self
    const { annotate, atEnd } = options
    const annotated = annotate === undefined ? self : Effect.tap(self, (value) => Effect.annotateCurrentSpan(annotate(value)))
    const body = atEnd === undefined ? annotated : Effect.onExit(annotated, () => Effect.annotateCurrentSpan(atEnd()))
    return Effect.withSpan(body, name, { kind: options.kind, attributes: options.attributes, ...NO_STACK })
  })
