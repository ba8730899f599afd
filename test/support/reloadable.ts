/**
 * A gateway whose reload reads `file.current` (a test's stand-in for the configuration file):
 * `reload(next)` rewrites it and asks `POST /admin/reload` to read it again, as a SIGHUP would.
 */
import { Effect } from "effect"
import { startGateway, testConfig } from "./gateway.ts"

export type ConfigFile = Record<string, unknown>

export const reloadableGateway = async (initial: ConfigFile, overrides: Parameters<typeof startGateway>[1] = {}) => {
  const file = { current: initial }
  const gateway = await startGateway(testConfig(initial), { ...overrides, reload: Effect.sync(() => testConfig(file.current)) })
  const reload = async (next: ConfigFile) => {
    file.current = next
    const response = await gateway.admin("POST", "/admin/reload")
    return { status: response.status, body: await response.json() as Record<string, any> }
  }
  return { gateway, reload }
}

export type Reload = Awaited<ReturnType<typeof reloadableGateway>>["reload"]
