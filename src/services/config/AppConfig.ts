/** The validated configuration as a service, so pipelines read settings without globals. */
import * as Context from "effect/Context"
import * as Layer from "effect/Layer"
import type { GatewayConfig } from "./schema.ts"

export class AppConfig extends Context.Service<AppConfig, GatewayConfig>()("modelgate/AppConfig") {
  static readonly layer = (config: GatewayConfig) => Layer.succeed(AppConfig, config)
}
