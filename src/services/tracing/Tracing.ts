/**
 * Tracing for the whole gateway, from `telemetry.*`. Without `otlp_endpoint` Effect's tracer is
 * switched off (every span the code names is a no-op and nothing is exported or loaded); with it,
 * the OTLP exporter of otlp.ts is imported and installed. Either way Effect's HTTP server makes no
 * request span of its own: the gateway makes one per request (src/http/app.ts) that lasts until
 * the request ends, streamed answers included.
 */
import { Effect, Layer, References } from "effect"
import * as HttpMiddleware from "effect/http/HttpMiddleware"
import type { GatewayConfig } from "../config/schema.ts"
import type { Metrics } from "../metrics/Metrics.ts"

export const tracingLayer = (telemetry: GatewayConfig["telemetry"], serviceVersion: string): Layer.Layer<never, never, Metrics> => {
  const noServerSpan = Layer.succeed(HttpMiddleware.TracerDisabledWhen, () => true)
  const endpoint = telemetry.otlp_endpoint
  if (endpoint === undefined) return Layer.merge(Layer.succeed(References.TracerEnabled, false), noServerSpan)
  const exporter = Layer.unwrap(Effect.map(
    Effect.promise(() => import("./otlp.ts")),
    (otlp) =>
      otlp.otlpTracingLayer({
        endpoint,
        protocol: telemetry.otlp_protocol,
        headers: telemetry.otlp_headers,
        serviceName: telemetry.service_name,
        serviceVersion,
        sampleRatio: telemetry.sample_ratio,
        exportIntervalMs: telemetry.export_interval_ms
      })
  ))
  return Layer.merge(exporter, noServerSpan)
}
