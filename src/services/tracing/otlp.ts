/**
 * The OTLP/HTTP span exporter, loaded only when `telemetry.otlp_endpoint` is set (Tracing.ts
 * imports this file lazily). Effect's own exporter (`effect/observability` OtlpTracer) builds the
 * spans and batches them; the gateway adds what a production exporter needs on top:
 *
 * - The policy of policy.ts (what a trace may contain).
 * - Its own transport, so that a collector that is down or slow costs requests nothing and
 *   memory a bounded amount: at most MAX_EXPORTS_IN_FLIGHT batches are on the wire, each with a
 *   deadline; a batch that finds no room, or that the collector does not take, is dropped and
 *   counted (`modelgate_trace_spans_total{outcome="dropped"}`, with a warning at most once a
 *   minute). Effect's exporter never sees a failure, so its retries (which would hold batches)
 *   and its 60 s pause after one never start. Spans wait in Effect's buffer until a batch is
 *   full (MAX_BATCH_SPANS) or the export interval passes.
 * - On shutdown the exporter's scope sends what is buffered, for at most SHUTDOWN_FLUSH.
 */
import { Duration, Effect, Layer, Tracer } from "effect"
import * as HttpClient from "effect/http/HttpClient"
import * as HttpClientError from "effect/http/HttpClientError"
import * as HttpClientResponse from "effect/http/HttpClientResponse"
import * as OtlpExporter from "effect/observability/OtlpExporter"
import * as OtlpSerialization from "effect/observability/OtlpSerialization"
import * as OtlpTracer from "effect/observability/OtlpTracer"
import { Agent, request } from "../providers/undici.ts"
import { Metrics } from "../metrics/Metrics.ts"
import { withTracePolicy } from "./policy.ts"

const MAX_BATCH_SPANS = 512
const MAX_EXPORTS_IN_FLIGHT = 2
const EXPORT_TIMEOUT_MS = 10_000
const SHUTDOWN_FLUSH = Duration.seconds(3)
const WARN_EVERY_MS = 60_000

export interface OtlpOptions {
  readonly endpoint: string
  readonly protocol: "http/protobuf" | "http/json"
  readonly headers: Readonly<Record<string, string>>
  readonly serviceName: string
  readonly serviceVersion: string
  readonly sampleRatio: number
  readonly exportIntervalMs: number
}

/** The base URL with `/v1/traces` appended, as OTEL_EXPORTER_OTLP_ENDPOINT is read. */
export const tracesUrl = (endpoint: string): string => {
  const url = endpoint.replace(/\/+$/, "")
  return url.endsWith("/v1/traces") ? url : `${url}/v1/traces`
}

const spansIn = (data: OtlpTracer.TraceData): number => {
  let count = 0
  for (const resource of data.resourceSpans) for (const scope of resource.scopeSpans) count += scope.spans.length
  return count
}

export const otlpTracingLayer = (options: OtlpOptions): Layer.Layer<never, never, Metrics> =>
  Layer.unwrap(Effect.gen(function*() {
    const metrics = yield* Metrics
    // How many spans each serialised batch holds, for the transport's counts.
    const batchSpans = new WeakMap<object, number>()
    const serialization = Layer.effect(
      OtlpSerialization.OtlpSerialization,
      Effect.gen(function*() {
        const encode = yield* OtlpSerialization.OtlpSerialization
        return {
          ...encode,
          traces: (data: OtlpTracer.TraceData) => {
            const body = encode.traces(data)
            batchSpans.set(body, spansIn(data))
            return body
          }
        }
      })
    ).pipe(Layer.provide(options.protocol === "http/json" ? OtlpSerialization.layerJson : OtlpSerialization.layerProtobuf))

    const agent = yield* Effect.acquireRelease(
      Effect.sync(() =>
        new Agent({
          connections: MAX_EXPORTS_IN_FLIGHT,
          connect: { timeout: EXPORT_TIMEOUT_MS },
          headersTimeout: EXPORT_TIMEOUT_MS,
          bodyTimeout: EXPORT_TIMEOUT_MS
        })
      ),
      (agent) => Effect.promise(() => agent.destroy())
    )
    let inFlight = 0
    let lastWarning = -Infinity
    const dropped = (spans: number, reason: string) =>
      Effect.suspend(() => {
        metrics.traceSpans("dropped", spans)
        const now = performance.now()
        if (now - lastWarning < WARN_EVERY_MS) return Effect.void
        lastWarning = now
        return Effect.logWarning(`trace export: ${spans} spans dropped (${reason}); counted in modelgate_trace_spans_total{outcome="dropped"}`)
      })

    // Always answers 204 to the exporter: what happened to the batch is counted here.
    const transport = HttpClient.make((req, url) =>
      Effect.suspend(() => {
        const spans = batchSpans.get(req.body) ?? 0
        const accepted = Effect.succeed(HttpClientResponse.fromWeb(req, new Response(null, { status: 204 })))
        if (req.body._tag !== "Uint8Array") {
          return Effect.fail(new HttpClientError.HttpClientError({
            reason: new HttpClientError.EncodeError({ request: req, description: "unexpected OTLP body" })
          }))
        }
        if (inFlight >= MAX_EXPORTS_IN_FLIGHT) return Effect.andThen(dropped(spans, "the collector is not keeping up"), accepted)
        inFlight++
        const body = req.body
        return Effect.tryPromise({
          try: async (signal) => {
            const response = await request(url, {
              method: "POST",
              dispatcher: agent,
              headers: { ...req.headers, "content-type": body.contentType },
              body: body.body,
              signal
            })
            await response.body.dump()
            return response.statusCode
          },
          catch: (error) => error
        }).pipe(
          Effect.timeoutOption(Duration.millis(EXPORT_TIMEOUT_MS * 2)),
          Effect.matchEffect({
            onFailure: (error) => dropped(spans, `the collector is unreachable: ${(error as { code?: string }).code ?? String(error)}`),
            onSuccess: (status) =>
              status._tag === "None"
                ? dropped(spans, "the collector did not answer in time")
                : status.value >= 200 && status.value < 300
                ? Effect.sync(() => metrics.traceSpans("exported", spans))
                : dropped(spans, `the collector answered ${status.value}`)
          }),
          Effect.ensuring(Effect.sync(() => inFlight--)),
          Effect.andThen(accepted)
        )
      })
    )

    const tracer = Layer.effect(
      Tracer.Tracer,
      Effect.map(
        OtlpTracer.make({
          url: tracesUrl(options.endpoint),
          resource: { serviceName: options.serviceName, serviceVersion: options.serviceVersion },
          headers: options.headers,
          exportInterval: Duration.millis(options.exportIntervalMs),
          maxBatchSize: MAX_BATCH_SPANS,
          shutdownTimeout: SHUTDOWN_FLUSH
        }),
        (inner) => withTracePolicy(inner, { sampleRatio: options.sampleRatio })
      )
    )
    return tracer.pipe(
      Layer.provide(Layer.mergeAll(OtlpExporter.layerFlusher, serialization, Layer.succeed(HttpClient.HttpClient, transport)))
    )
  }))
