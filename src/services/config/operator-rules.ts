/**
 * Config rules for operators (issue 26): where relative paths in a file point, which endpoints a
 * model entry serves when it does not say, and placeholder secrets that must not reach
 * production. Pure functions over the parsed file or the decoded config, used by load.ts.
 */
import { dirname, isAbsolute, join } from "node:path"
import type { GatewayConfig } from "./schema.ts"

type Json = unknown
type Mapping = Record<string, Json>

const isMapping = (value: Json): value is Mapping => typeof value === "object" && value !== null && !Array.isArray(value)

/** The embedded default store, relative to the working directory; the only store whose directory is created. */
export const DEFAULT_STORE = "sqlite:./data/modelgate.db"

/** The file path of a `sqlite:` store, or undefined for Postgres and in-memory stores. */
export const sqliteFileOf = (store: string): string | undefined => {
  if (!store.startsWith("sqlite:")) return undefined
  const file = store.slice("sqlite:".length)
  return file === "" || file === ":memory:" ? undefined : file
}

/**
 * Paths written in a config file are relative to that file's directory, so the file means the
 * same wherever the process starts (a relative `cert.pem` used to work from one folder only).
 * Only what the file itself says is moved: values from MODELGATE_* variables, flags and the
 * embedded default stay relative to the working directory, like any command-line path.
 */
export const resolveFilePaths = (raw: Mapping, fileName: string): Mapping => {
  const base = dirname(fileName)
  if (base === ".") return raw
  const at = (path: string) => (isAbsolute(path) ? path : join(base, path))
  const out = structuredClone(raw)
  const server = out.server
  if (isMapping(server)) {
    if (typeof server.data_dir === "string" && server.data_dir !== "") server.data_dir = at(server.data_dir)
    const tls = server.tls
    if (isMapping(tls)) {
      if (typeof tls.cert === "string" && tls.cert !== "") tls.cert = at(tls.cert)
      if (typeof tls.key === "string" && tls.key !== "") tls.key = at(tls.key)
    }
  }
  if (typeof out.store === "string") {
    const file = sqliteFileOf(out.store)
    if (file !== undefined) out.store = `sqlite:${at(file)}`
  }
  return out
}

/**
 * Embedding models answer `/v1/embeddings` only, so an entry that names one (`text-embedding-3-small`,
 * `amazon.titan-embed-text-v2:0`, `nomic-embed-text`, ...) without `endpoints` gets
 * `[embeddings]` instead of the general default `[chat]`: it used to serve chat until told
 * otherwise, which its vendor then refused. Decided on the name sent upstream (`id`, else `match`).
 */
export const EMBEDDING_NAME = /embed/i

export const defaultEmbeddingEndpoints = (raw: Mapping): Mapping => {
  if (!Array.isArray(raw.models)) return raw
  const models = raw.models.map((entry) => {
    if (!isMapping(entry) || entry.endpoints !== undefined) return entry
    const upstream = typeof entry.id === "string" ? entry.id : typeof entry.match === "string" ? entry.match : undefined
    return upstream !== undefined && EMBEDDING_NAME.test(upstream) ? { ...entry, endpoints: ["embeddings"] } : entry
  })
  return { ...raw, models }
}

/**
 * Values copied from an example without being replaced (`CHANGE_ME-long-random` from the README,
 * `a-long-random-admin-token`, `<your-token>`, `replace-me`, `placeholder`, `xxxxxxxx`): a
 * gateway started with one would be guarded by a secret anyone who read the docs knows.
 */
const PLACEHOLDER = /change[_-]?me|replace[_-]?me|a[_-]?long[_-]?random|placeholder|^<[^>]*>$|^your[_-]|^x{6,}$/i

export const isPlaceholderSecret = (value: string): boolean => PLACEHOLDER.test(value.trim())

/** The first secret that is still a placeholder, as `field: ...`; undefined when there is none. */
export const placeholderSecret = (config: GatewayConfig): string | undefined => {
  const secrets: Array<readonly [string, string | undefined]> = [
    ["admin.token", config.admin.token],
    ["admin.oidc.client_secret", config.admin.oidc?.client_secret],
    ["admin.oidc.private_key", config.admin.oidc?.private_key],
    ["telemetry.metrics_token", config.telemetry.metrics_token],
    ...config.providers.flatMap((p, i) => [
      [`providers.${i}.api_key`, p.api_key] as const,
      [`providers.${i}.secret_access_key`, p.secret_access_key] as const
    ])
  ]
  for (const [field, value] of secrets) {
    if (value !== undefined && isPlaceholderSecret(value)) {
      return `${field}: "${value}" is a placeholder from an example; set a real secret (e.g. openssl rand -hex 32)`
    }
  }
  return undefined
}
