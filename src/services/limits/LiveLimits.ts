/**
 * The config's `limits` section as a value a config reload can replace (issue 26). A request
 * reads it once, when it starts (http/app.ts keeps that copy on the request's state), so one
 * under way finishes on the limits it started with and the next one sees the new ones.
 *
 * What a changed limit means for what is already counted (nothing is reset; every count is
 * kept under the same key, the principal's id, which a limit change does not touch):
 * - `requests_per_minute`: the key's rate state (GCRA, in memory or in Redis) stays; the next
 *   request is measured at the new rate, with the requests already spent in the current window
 *   kept (gcra.ts rescales the stored debt: 2 of 2 spent, raised to 5, leaves 3; 3 of 5 spent,
 *   lowered to 2, leaves none, refilling at the new rate).
 * - `concurrent_streams`: the next stream is admitted against the new cap; streams already open
 *   are not cut when the cap is lowered, they count against it until they end.
 * - `max_body_bytes`, `max_json_depth`: from the next request's body on.
 * - `stream_lease_seconds` (Redis): slots taken from then on get the new lease; a held slot keeps
 *   the lease (and heartbeat) it was taken with.
 */
import { Context, Layer } from "effect"
import type { GatewayConfig } from "../config/schema.ts"

export type LimitsSettings = GatewayConfig["limits"]

export interface LiveLimitsShape {
  /** The limits in force now; read once per request. */
  readonly current: () => LimitsSettings
  /** Makes `next` the limits in force when the returned function runs (ConfigReload). */
  readonly prepare: (next: LimitsSettings) => () => void
}

export class LiveLimits extends Context.Service<LiveLimits, LiveLimitsShape>()("modelgate/limits/LiveLimits") {
  static readonly make = (initial: LimitsSettings): LiveLimitsShape => {
    let current = initial
    return {
      current: () => current,
      prepare: (next) => () => {
        current = next
      }
    }
  }

  static readonly layer = (initial: LimitsSettings) => Layer.sync(LiveLimits, () => LiveLimits.make(initial))
}
