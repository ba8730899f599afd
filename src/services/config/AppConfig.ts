/** The validated configuration as a service, so pipelines read settings without globals. */
import { Context, Layer } from "effect"
import type { GatewayConfig } from "./schema.ts"

export class AppConfig extends Context.Service<AppConfig, GatewayConfig>()("modelgate/AppConfig") {
  static readonly layer = (config: GatewayConfig) => Layer.succeed(AppConfig, config)
}
