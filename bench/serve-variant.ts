/**
 * `node bench/serve-variant.ts --config F --port P --without audit,metrics`: the gateway as
 * `modelgate serve` builds it (same config loading, same layers, same logging), with the named
 * stages swapped for layers that do nothing. Only the bench's cost ladder runs it, to price the
 * audit trail and the metrics rung by rung; it is never how the gateway is served.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as NodeServices from "@effect/platform-node/NodeServices"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { parseArgs } from "node:util"
import { loadConfig } from "../src/cli/load-config.ts"
import { gatewayLayer, loggingLayer } from "../src/gateway.ts"
import { Audit } from "../src/services/audit/Audit.ts"
import { Metrics } from "../src/services/metrics/Metrics.ts"

const { values } = parseArgs({ options: { config: { type: "string" }, port: { type: "string" }, without: { type: "string", default: "" } } })
const without = new Set(values.without!.split(",").filter((stage) => stage !== ""))
for (const stage of without) {
  if (stage !== "audit" && stage !== "metrics") throw new Error(`serve-variant: unknown stage ${stage} (audit, metrics)`)
}

const program = Effect.gen(function*() {
  const config = yield* loadConfig({ path: values.config, env: {}, flags: { port: Number(values.port) } })
  return yield* Layer.launch(gatewayLayer(config, {
    env: {},
    ...(without.has("audit") ? { audit: Audit.layerDiscard } : {}),
    ...(without.has("metrics") ? { metrics: Metrics.layerNoop } : {})
  })).pipe(Effect.provide(loggingLayer(config)))
})

NodeRuntime.runMain(program.pipe(Effect.provide(NodeServices.layer)))
