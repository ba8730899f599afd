/**
 * An OTLP/HTTP trace receiver for tests: a node:http server on port 0 that takes
 * `POST /v1/traces` in OTLP/JSON and keeps every span, flattened (attributes as a plain record).
 * Protobuf batches are kept as raw bytes (`protobufBatches`): the tests only check that they
 * arrive and name their spans.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"

export interface ReceivedSpan {
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId: string | undefined
  readonly name: string
  /** OTLP SpanKind: 1 internal, 2 server, 3 client. */
  readonly kind: number
  readonly startTimeUnixNano: bigint
  readonly endTimeUnixNano: bigint
  readonly attributes: Record<string, unknown>
  readonly status: { readonly code: number; readonly message?: string }
  readonly resource: Record<string, unknown>
  /** The span exactly as it arrived, for checks on everything it carries. */
  readonly raw: unknown
}

export interface OtlpReceiver {
  readonly url: string
  readonly spans: ReadonlyArray<ReceivedSpan>
  readonly protobufBatches: ReadonlyArray<Buffer>
  readonly requests: ReadonlyArray<{ readonly path: string; readonly headers: http.IncomingHttpHeaders }>
  /** Waits until `predicate` holds for the spans received so far (polling), then returns them. */
  waitFor(predicate: (spans: ReadonlyArray<ReceivedSpan>) => boolean, timeoutMs?: number): Promise<ReadonlyArray<ReceivedSpan>>
  close(): Promise<void>
}

type AnyValue = { stringValue?: string; intValue?: string | number; doubleValue?: number; boolValue?: boolean; arrayValue?: { values: Array<AnyValue> } }
type KeyValue = { key: string; value: AnyValue }

const valueOf = (value: AnyValue): unknown => {
  if (value.stringValue !== undefined) return value.stringValue
  if (value.intValue !== undefined) return Number(value.intValue)
  if (value.doubleValue !== undefined) return value.doubleValue
  if (value.boolValue !== undefined) return value.boolValue
  if (value.arrayValue !== undefined) return value.arrayValue.values.map(valueOf)
  return value
}
const record = (attributes: ReadonlyArray<KeyValue> | undefined) =>
  Object.fromEntries((attributes ?? []).map((a) => [a.key, valueOf(a.value)]))

export const startOtlpReceiver = async (): Promise<OtlpReceiver> => {
  const spans: Array<ReceivedSpan> = []
  const protobufBatches: Array<Buffer> = []
  const requests: Array<{ path: string; headers: http.IncomingHttpHeaders }> = []
  const server = http.createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      requests.push({ path: req.url ?? "", headers: req.headers })
      const body = Buffer.concat(chunks)
      if (req.method !== "POST" || req.url !== "/v1/traces") {
        res.writeHead(404).end()
        return
      }
      if (req.headers["content-type"] === "application/x-protobuf") {
        protobufBatches.push(body)
      } else {
        const data = JSON.parse(body.toString("utf8")) as {
          resourceSpans: Array<{ resource: { attributes: Array<KeyValue> }; scopeSpans: Array<{ spans: Array<any> }> }>
        }
        for (const resourceSpan of data.resourceSpans) {
          const resource = record(resourceSpan.resource.attributes)
          for (const scope of resourceSpan.scopeSpans) {
            for (const span of scope.spans) {
              spans.push({
                traceId: span.traceId,
                spanId: span.spanId,
                parentSpanId: span.parentSpanId || undefined,
                name: span.name,
                kind: span.kind,
                startTimeUnixNano: BigInt(span.startTimeUnixNano),
                endTimeUnixNano: BigInt(span.endTimeUnixNano),
                attributes: record(span.attributes),
                status: span.status,
                resource,
                raw: span
              })
            }
          }
        }
      }
      res.writeHead(200, { "content-type": "application/json" }).end("{}")
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    protobufBatches,
    requests,
    async waitFor(predicate, timeoutMs = 10_000) {
      const until = Date.now() + timeoutMs
      while (!predicate(spans)) {
        if (Date.now() > until) throw new Error(`spans did not arrive in time; got: ${spans.map((s) => s.name).join(", ")}`)
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
      return spans
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
  }
}
