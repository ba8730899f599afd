/**
 * The trace policy and W3C propagation on their own: which spans are sampled, what an exported
 * span may carry, and which client trace contexts are taken (and passed on) or ignored.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Exit, Option, References, Tracer } from "effect"
import * as Headers from "effect/http/Headers"
import { Unauthorized } from "../../../src/domain/errors.ts"
import { withTracePolicy } from "../../../src/services/tracing/policy.ts"
import { clientParent, outgoingTraceHeaders } from "../../../src/services/tracing/propagation.ts"

interface Ended {
  readonly name: string
  readonly sampled: boolean
  readonly attributes: Map<string, unknown>
  readonly events: Array<string>
  exit?: Exit.Exit<unknown, unknown>
}

/** A tracer that keeps what the policy hands it. */
const recording = () => {
  const spans: Array<Ended> = []
  const inner = Tracer.make({
    span(options) {
      const native = new Tracer.NativeSpan(options)
      const ended: Ended = { name: options.name, sampled: options.sampled, attributes: new Map(), events: [] }
      spans.push(ended)
      return Object.assign(native, {
        attribute: (key: string, value: unknown) => void ended.attributes.set(key, value),
        event: (name: string) => void ended.events.push(name),
        end: (_time: bigint, exit: Exit.Exit<unknown, unknown>) => void (ended.exit = exit)
      })
    }
  })
  return { spans, tracer: (ratio = 1) => withTracePolicy(inner, { sampleRatio: ratio }) }
}

const under = <A, E>(tracer: Tracer.Tracer, effect: Effect.Effect<A, E>) =>
  Effect.exit(effect.pipe(Effect.provideService(Tracer.Tracer, tracer)))

describe("trace policy", () => {
  it.effect("samples request spans, and nothing that starts without one", () =>
    Effect.gen(function*() {
      const { spans, tracer } = recording()
      yield* under(tracer(), Effect.void.pipe(Effect.withSpan("Audit.flush")))
      yield* under(tracer(), Effect.void.pipe(Effect.withSpan("child"), Effect.withSpan("GET /x", { kind: "server", root: true })))
      expect(spans.map((s) => [s.name, s.sampled])).toEqual([["Audit.flush", false], ["GET /x", true], ["child", true]])
      yield* under(tracer(0), Effect.void.pipe(Effect.withSpan("GET /y", { kind: "server", root: true })))
      expect(spans.at(-1)).toMatchObject({ name: "GET /y", sampled: false })
    }))

  it.effect("drops statement text and log events, and exports a failure as its kind only", () =>
    Effect.gen(function*() {
      const { spans, tracer } = recording()
      const failing = Effect.gen(function*() {
        yield* Effect.annotateCurrentSpan({ "db.query.text": "SELECT secret", "db.system.name": "postgresql" })
        yield* Effect.logWarning("with a cause that quotes SELECT secret")
        return yield* new Unauthorized({ message: "the key sk-mg-1234 is not known" })
      })
      yield* under(tracer(), failing.pipe(Effect.withSpan("GET /x", { kind: "server", root: true })))
      const [span] = spans
      expect(span!.attributes.get("db.query.text")).toBeUndefined()
      expect(span!.attributes.get("db.system.name")).toBe("postgresql")
      expect(span!.attributes.get("error.type")).toBe("unauthorized")
      expect(span!.events).toEqual([])
      expect(Exit.isFailure(span!.exit!)).toBe(true)
      expect(JSON.stringify(Exit.isFailure(span!.exit!) ? span!.exit.cause.reasons.map((r) => r._tag === "Fail" ? String(r.error) : "") : "")).not.toContain("sk-mg-1234")
    }))
})

describe("W3C trace context", () => {
  const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

  it("takes a valid traceparent, and ignores malformed ones", () => {
    expect(clientParent(Headers.fromInput({ traceparent: valid }))).toMatchObject({ traceId: "4bf92f3577b34da6a3ce929d0e0e4736", spanId: "00f067aa0ba902b7", sampled: true })
    expect(clientParent(Headers.fromInput({ traceparent: valid.replace(/-01$/, "-00") }))?.sampled).toBe(false)
    for (const bad of [
      "",
      "garbage",
      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
      "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
      `00-${"a".repeat(5000)}-00f067aa0ba902b7-01`
    ]) expect(clientParent(Headers.fromInput({ traceparent: bad }))).toBeUndefined()
  })

  it.effect("sends the current span's traceparent and the client's tracestate; a bad tracestate is not passed on", () =>
    Effect.gen(function*() {
      const parent = clientParent(Headers.fromInput({ traceparent: valid, tracestate: "vendor=abc" }))!
      const span = new Tracer.NativeSpan({
        name: "Provider.request",
        parent: Option.some(parent),
        annotations: Context.empty(),
        links: [],
        startTime: 0n,
        kind: "client",
        sampled: true
      })
      const headers = yield* outgoingTraceHeaders.pipe(Effect.provideService(Tracer.ParentSpan, span))
      expect(headers).toEqual({ traceparent: `00-4bf92f3577b34da6a3ce929d0e0e4736-${span.spanId}-01`, tracestate: "vendor=abc" })

      // Tracing off: spans are no-ops, and the client's own context goes on unchanged.
      const passedOn = yield* outgoingTraceHeaders.pipe(
        Effect.withSpan("Provider.request"),
        Effect.withParentSpan(parent),
        Effect.provideService(References.TracerEnabled, false)
      )
      expect(passedOn).toEqual({ traceparent: valid, tracestate: "vendor=abc" })

      const badState = clientParent(Headers.fromInput({ traceparent: valid, tracestate: "a=1\u0000" }))!
      expect(yield* outgoingTraceHeaders.pipe(Effect.withParentSpan(badState))).toEqual({ traceparent: valid })
      expect(yield* outgoingTraceHeaders).toEqual({})
    }))
})
