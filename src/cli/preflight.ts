/**
 * What a command checks about the machine before it opens anything, so a mistake is one line
 * naming the field rather than a stack or, worse, a new empty store (issue 26.4). Also what
 * `modelgate config check` runs: existence checks only, nothing is opened or created.
 *
 * The rule for a SQLite store: modelgate creates the store file when it is missing (the first
 * `serve` or `keys create` of a deployment, announced on stderr) but never its directory, except
 * the embedded default's `./data`; a mistyped directory is therefore an error naming `store`.
 */
import { existsSync, statSync } from "node:fs"
import { dirname, resolve } from "node:path"
import type { GatewayConfig } from "../services/config/schema.ts"
import { DEFAULT_STORE, sqliteFileOf } from "../services/config/operator-rules.ts"

export interface Preflight {
  /** The first problem, as `field: ...`; undefined when there is none. */
  readonly problem: string | undefined
  /** A SQLite store file that the command will create (it does not exist yet). */
  readonly createsStore: string | undefined
}

const isDirectory = (path: string) => existsSync(path) && statSync(path).isDirectory()
const isFile = (path: string) => existsSync(path) && statSync(path).isFile()

export const preflight = (config: GatewayConfig, options: { readonly serving: boolean }): Preflight => {
  let createsStore: string | undefined
  const file = sqliteFileOf(config.store)
  if (file !== undefined) {
    const directory = dirname(resolve(file))
    if (existsSync(file) && !isFile(file)) {
      return { problem: `store: ${resolve(file)} is not a file`, createsStore }
    }
    if (!existsSync(file)) {
      if (!isDirectory(directory) && config.store !== DEFAULT_STORE) {
        return {
          problem: `store: the directory ${directory} does not exist; create it first (modelgate creates a missing store file, never its directory, so a mistyped path is not a new empty store)`,
          createsStore
        }
      }
      createsStore = resolve(file)
    }
  }
  if (options.serving && config.server.tls !== undefined) {
    for (const field of ["cert", "key"] as const) {
      const path = config.server.tls[field]
      if (!isFile(path)) return { problem: `server.tls.${field}: cannot read ${resolve(path)}: no such file`, createsStore }
    }
  }
  if (options.serving && config.server.data_dir !== undefined && existsSync(config.server.data_dir) && !isDirectory(config.server.data_dir)) {
    return { problem: `server.data_dir: ${resolve(config.server.data_dir)} is not a directory`, createsStore }
  }
  return { problem: undefined, createsStore }
}
