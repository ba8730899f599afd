/**
 * Turns a YAML file, MODELGATE_* variables and CLI flags into a validated GatewayConfig.
 * Pure apart from reading the file, so every rule here is testable without a process.
 */
import { Result, Schema, SchemaIssue } from "effect"
import * as YAML from "yaml"
import { GatewayConfig, type KeyNode, keyTree, type KeyTree, ProviderConfig, type ModelConfig } from "./schema.ts"

export class ConfigInvalid extends Schema.TaggedError<ConfigInvalid>()("ConfigInvalid", {
  message: Schema.String
}) {}

type Env = Readonly<Record<string, string | undefined>>
type Json = unknown

const formatter = SchemaIssue.makeFormatterStandardSchemaV1()

/** Path like `providers.0.timeouts.idle_ms`, as operators see the field. */
export const formatPath = (path: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }>): string =>
  path.map((segment) => String(typeof segment === "object" ? segment.key : segment)).join(".")

const setPath = (root: Record<string, Json>, path: ReadonlyArray<string | number>, value: Json) => {
  let node: Record<string | number, Json> = root
  for (let i = 0; i < path.length - 1; i++) {
    const key = path[i]!
    const nextIsIndex = typeof path[i + 1] === "number"
    if (typeof node[key] !== "object" || node[key] === null) node[key] = nextIsIndex ? [] : {}
    node = node[key] as Record<string | number, Json>
  }
  node[path[path.length - 1]!] = value
}

/** Greedy match of lower-cased `_`-separated tokens against the key tree; undefined when unknown. */
const resolveEnvPath = (tokens: ReadonlyArray<string>, tree: KeyTree): Array<string | number> | undefined => {
  if (tokens.length === 0) return undefined
  for (let take = tokens.length; take >= 1; take--) {
    const key = tokens.slice(0, take).join("_")
    const node = tree[key]
    if (node === undefined) continue
    const rest = tokens.slice(take)
    if (node === "scalar") {
      if (rest.length === 0) return [key]
      continue
    }
    if ("items" in node && (node.items === "scalar" || typeof node.items === "object")) {
      const [index, ...itemRest] = rest
      if (index === undefined || !/^\d+$/.test(index)) continue
      const items = node.items as KeyNode
      if (items === "scalar") {
        if (itemRest.length === 0) return [key, Number(index)]
        continue
      }
      const inner = resolveEnvPath(itemRest, items as KeyTree)
      if (inner) return [key, Number(index), ...inner]
      continue
    }
    const inner = resolveEnvPath(rest, node as KeyTree)
    if (inner) return [key, ...inner]
  }
  return undefined
}

/** Env values are YAML scalars, so `8081` is a number and `true` a boolean, like in the file. */
const parseScalar = (text: string): Json => {
  try {
    const value = YAML.parse(text)
    return value !== null && typeof value === "object" ? text : value
  } catch {
    return text
  }
}

export const applyEnvOverrides = (raw: Record<string, Json>, env: Env): Result.Result<Record<string, Json>, ConfigInvalid> => {
  const out = structuredClone(raw)
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith("MODELGATE_") || value === undefined || name === "MODELGATE_CONFIG") continue
    const tokens = name.slice("MODELGATE_".length).toLowerCase().split("_")
    const path = resolveEnvPath(tokens, keyTree)
    if (!path) {
      return Result.fail(new ConfigInvalid({ message: `${name}: not a configuration key (see the configuration reference in README.md)` }))
    }
    setPath(out, path, parseScalar(value))
  }
  return Result.succeed(out)
}

/** A provider entry with the schema's defaults filled in, as if an operator had written it. */
const providerWithDefaults = (entry: typeof ProviderConfig.Encoded): ProviderConfig => Schema.decodeUnknownSync(ProviderConfig)(entry)

const builtinEcho = providerWithDefaults({ name: "echo", kind: "echo", max_connections: 1 })

const envProviders = (env: Env): Array<{ provider: ProviderConfig; model: ModelConfig }> => {
  const found: Array<{ provider: ProviderConfig; model: ModelConfig }> = []
  const timeouts = { connect_ms: 5_000, first_byte_ms: 60_000, idle_ms: 60_000 }
  if (env.OPENAI_API_KEY) {
    found.push({
      provider: { name: "openai", kind: "openai", base_url: "https://api.openai.com/v1", api_key_env: "OPENAI_API_KEY", anthropic_version: "2023-06-01", responses_api: true, max_connections: 64, timeouts },
      model: { alias: "fast", id: "gpt-4o-mini-2024-07-18", provider: "openai", credits: 1, max_tokens: 16384 }
    })
  }
  if (env.ANTHROPIC_API_KEY) {
    found.push({
      provider: { name: "anthropic", kind: "anthropic", base_url: "https://api.anthropic.com", api_key_env: "ANTHROPIC_API_KEY", anthropic_version: "2023-06-01", responses_api: false, max_connections: 64, timeouts },
      model: { alias: "smart", id: "claude-sonnet-4-5-20250929", provider: "anthropic", credits: 5, max_tokens: 8192 }
    })
  }
  return found
}

/** Cross-field rules the per-field schema cannot express; each names the offending field. */
const checkReferences = (config: GatewayConfig): string | undefined => {
  const providerNames = new Set<string>()
  for (const [i, p] of config.providers.entries()) {
    if (providerNames.has(p.name)) return `providers.${i}.name: duplicate provider name "${p.name}"`
    providerNames.add(p.name)
    if (p.kind !== "echo" && !p.base_url) return `providers.${i}.base_url: required for kind ${p.kind}`
    if (p.base_url && !/^https?:\/\//.test(p.base_url)) return `providers.${i}.base_url: expected an http(s) URL`
  }
  const names = new Set<string>()
  for (const [i, m] of config.models.entries()) {
    if (!providerNames.has(m.provider)) return `models.${i}.provider: no provider named "${m.provider}"`
    for (const name of [m.alias, m.id]) {
      if (name === undefined) continue
      if (names.has(name)) return `models.${i}: the name "${name}" is used by another model`
      names.add(name)
    }
  }
  const ids = new Set<number>()
  for (const [i, c] of config.connections.entries()) {
    if (ids.has(c.id)) return `connections.${i}.id: duplicate connection id ${c.id}`
    ids.add(c.id)
  }
  if (config.server.tls === undefined && config.server.trust_proxy === false) {
    // Plain HTTP is only for loopback (docs/decisions.md section 9); other hosts need TLS or a trusted proxy.
    const loopback = ["127.0.0.1", "localhost", "::1"].includes(config.server.host) || config.server.host.startsWith("127.")
    if (!loopback) return `server.tls: required when server.host (${config.server.host}) is not loopback, unless server.trust_proxy is true`
  }
  return undefined
}

export interface LoadInput {
  /** YAML text of the config file, when one was given. */
  readonly fileText?: string | undefined
  readonly fileName?: string | undefined
  readonly env: Env
  /** CLI flags win over file and environment. */
  readonly flags?: { readonly host?: string | undefined; readonly port?: number | undefined } | undefined
}

export const resolveConfig = (input: LoadInput): Result.Result<GatewayConfig, ConfigInvalid> => {
  const where = input.fileName ?? "configuration"
  let raw: Json = {}
  if (input.fileText !== undefined) {
    try {
      raw = YAML.parse(input.fileText) ?? {}
    } catch (error) {
      return Result.fail(new ConfigInvalid({ message: `${where}: not valid YAML: ${(error as Error).message}` }))
    }
    if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
      return Result.fail(new ConfigInvalid({ message: `${where}: expected a mapping at the top level` }))
    }
  }
  const withEnv = applyEnvOverrides(raw as Record<string, Json>, input.env)
  if (Result.isFailure(withEnv)) return Result.fail(withEnv.failure)
  const merged = withEnv.success
  if (input.flags?.host !== undefined) setPath(merged, ["server", "host"], input.flags.host)
  if (input.flags?.port !== undefined) setPath(merged, ["server", "port"], input.flags.port)

  const decoded = Schema.decodeUnknownResult(GatewayConfig)(merged, { onExcessProperty: "error" })
  if (Result.isFailure(decoded)) {
    const issue = formatter(decoded.failure.issue).issues[0]
    const field = issue ? formatPath(issue.path ?? []) : ""
    const raw = issue?.message ?? "invalid"
    const message = raw === "Expected no excess property" ? "unknown key" : raw.replace(/^Expected /, "expected ").replace(/ \| undefined$/, "")
    return Result.fail(new ConfigInvalid({ message: `${where}: ${field || "(root)"}: ${message}` }))
  }
  const config = decoded.success
  const providers = [...config.providers]
  const models = [...config.models]
  for (const { provider, model } of envProviders(input.env)) {
    if (providers.some((p) => p.name === provider.name)) continue
    providers.push(provider)
    if (!models.some((m) => m.alias === model.alias || m.id === model.id)) models.push(model)
  }
  if (!providers.some((p) => p.name === "echo")) providers.push(builtinEcho)
  // The embedded default serves one offline model so the first curl works without any account.
  if (config.models.length === 0) models.push({ alias: "echo", id: "echo-1", provider: "echo", credits: 0, max_tokens: 4096 })
  const final: GatewayConfig = { ...config, providers, models }
  const problem = checkReferences(final)
  if (problem) return Result.fail(new ConfigInvalid({ message: `${where}: ${problem}` }))
  return Result.succeed(final)
}
