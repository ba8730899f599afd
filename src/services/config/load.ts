/**
 * Turns a YAML file, MODELGATE_* variables and CLI flags into a validated GatewayConfig.
 * Pure apart from reading the file, so every rule here is testable without a process.
 */
import { createPrivateKey } from "node:crypto"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"
import * as YAML from "yaml"
import { parseTrustedProxy } from "../../domain/trusted-proxies.ts"
import { ASYMMETRIC_ALGORITHMS, isAcceptableIssuerUrl } from "../identity/issuer-rules.ts"
import { bedrockFromEnv, checkBedrockFields } from "./bedrock.ts"
import { azureFromEnv, checkCloudFields, geminiFromEnv, vertexFromEnv } from "./cloud-kinds.ts"
import { defaultEmbeddingEndpoints, placeholderSecret, resolveFilePaths } from "./operator-rules.ts"
import { GatewayConfig, type KeyNode, keyTree, type KeyTree, ModelConfig, ProviderConfig } from "./schema.ts"

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

/**
 * Lists that one variable can set whole, comma-separated (`10.0.0.0/8,fd00::/8`): a container's
 * proxy addresses are one setting, not a count of indexed variables. Named one by one, never every
 * list, since an item of some lists (a secret) may itself hold a comma; `_0`, `_1`... still work.
 */
const COMMA_LISTS: Readonly<Record<string, ReadonlyArray<string>>> = {
  MODELGATE_SERVER_TRUSTED_PROXIES: ["server", "trusted_proxies"]
}

/**
 * Variables for the launcher, not the config: MODELGATE_CONFIG names the file, MODELGATE_FROM_SOURCE
 * runs the sources rather than the server bundle (bin/server-bundle.ts).
 */
const LAUNCHER_VARIABLES = new Set(["MODELGATE_CONFIG", "MODELGATE_FROM_SOURCE"])

export const applyEnvOverrides = (raw: Record<string, Json>, env: Env): Result.Result<Record<string, Json>, ConfigInvalid> => {
  const out = structuredClone(raw)
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith("MODELGATE_") || value === undefined || LAUNCHER_VARIABLES.has(name)) continue
    const list = COMMA_LISTS[name]
    if (list !== undefined) {
      setPath(out, list, value.split(",").map((item) => item.trim()).filter((item) => item !== ""))
      continue
    }
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

/** A model entry with the schema's defaults filled in. */
const modelWithDefaults = (entry: typeof ModelConfig.Encoded): ModelConfig => Schema.decodeUnknownSync(ModelConfig)(entry)

/**
 * Providers that come from OPENAI_API_KEY / ANTHROPIC_API_KEY alone. Each brings one named model
 * and routes for its vendor's model names, so a client's own default (Claude Code asks for its
 * Claude model by full id) works with no model list. Routes cost what the named model of the
 * stronger tier costs, since any model of the vendor may come through them; an operator who
 * wants finer prices writes more specific entries, which win.
 */
const envProviders = (env: Env): Array<{ provider: ProviderConfig; models: ReadonlyArray<ModelConfig> }> => {
  const found: Array<{ provider: ProviderConfig; models: ReadonlyArray<ModelConfig> }> = []
  if (env.OPENAI_API_KEY) {
    const route = (match: string, max_tokens: number): ModelConfig => modelWithDefaults({ match, provider: "openai", credits: 5, max_tokens })
    found.push({
      provider: providerWithDefaults({ name: "openai", kind: "openai", base_url: "https://api.openai.com/v1", api_key_env: "OPENAI_API_KEY", responses_api: true }),
      models: [
        modelWithDefaults({ alias: "fast", id: "gpt-4o-mini-2024-07-18", provider: "openai", credits: 1, max_tokens: 16384 }),
        modelWithDefaults({ match: "text-embedding-*", provider: "openai", credits: 1, endpoints: ["embeddings"] }),
        // Caps are ceilings, not per-model facts: above a model's own limit the vendor answers 400.
        route("gpt-*", 128_000),
        route("chatgpt-*", 16_384),
        route("o1*", 100_000),
        route("o3*", 100_000),
        route("o4*", 100_000)
      ]
    })
  }
  if (env.ANTHROPIC_API_KEY) {
    found.push({
      provider: providerWithDefaults({ name: "anthropic", kind: "anthropic", base_url: "https://api.anthropic.com", api_key_env: "ANTHROPIC_API_KEY" }),
      models: [
        modelWithDefaults({ alias: "smart", id: "claude-sonnet-4-5-20250929", provider: "anthropic", credits: 5, max_tokens: 8192 }),
        modelWithDefaults({ match: "claude-*", provider: "anthropic", credits: 5, max_tokens: 64_000 })
      ]
    })
  }
  const bedrock = bedrockFromEnv(env)
  if (bedrock !== undefined) found.push({ provider: providerWithDefaults(bedrock.provider), models: bedrock.models.map(modelWithDefaults) })
  for (const cloud of [azureFromEnv(env), geminiFromEnv(env), vertexFromEnv(env)]) {
    if (cloud !== undefined) found.push({ provider: providerWithDefaults(cloud.provider), models: cloud.models.map(modelWithDefaults) })
  }
  return found
}

const isPattern = (name: string) => name.includes("*")

/** The rules of one `models:` entry that its schema cannot say; names the offending field. */
const checkModelEntry = (m: ModelConfig, at: string): string | undefined => {
  if (m.match !== undefined) {
    if (!isPattern(m.match)) return `${at}.match: "${m.match}" has no "*"; name a single model with id`
    if (m.alias !== undefined) return `${at}.alias: not allowed with match (a route serves every name it matches)`
    if (m.display_name !== undefined) return `${at}.display_name: not allowed with match (a route is not listed as a model)`
  } else if (m.id === undefined) {
    return `${at}.id: required (or match, for a pattern such as "claude-*")`
  }
  if (m.id !== undefined && isPattern(m.id)) return `${at}.id: "*" is only allowed in match`
  if (m.alias !== undefined && isPattern(m.alias)) return `${at}.alias: "*" is only allowed in match`
  return undefined
}

/** `provider` or `deployments` (issue 20), exactly one; every deployment on a known provider, none twice. */
const checkDeployments = (m: ModelConfig, at: string, providerNames: ReadonlySet<string>): string | undefined => {
  if (m.provider !== undefined && m.deployments !== undefined) return `${at}.deployments: give provider or deployments, not both`
  if (m.provider !== undefined) return providerNames.has(m.provider) ? undefined : `${at}.provider: no provider named "${m.provider}"`
  if (m.deployments === undefined) return `${at}.provider: required (or deployments)`
  if (m.deployments.length === 0) return `${at}.deployments: list at least one`
  const seen = new Set<string>()
  for (const [j, d] of m.deployments.entries()) {
    if (!providerNames.has(d.provider)) return `${at}.deployments.${j}.provider: no provider named "${d.provider}"`
    if (d.id !== undefined && isPattern(d.id)) return `${at}.deployments.${j}.id: "*" is only allowed in match`
    const key = `${d.provider}\u0000${d.id ?? ""}`
    if (seen.has(key)) return `${at}.deployments.${j}: the same provider and id are listed twice`
    seen.add(key)
  }
  return undefined
}

/** Fallbacks name models (alias or id, not patterns), never the model itself. */
const checkFallbacks = (config: GatewayConfig, names: ReadonlySet<string>): string | undefined => {
  for (const [i, m] of config.models.entries()) {
    for (const [j, name] of (m.fallbacks ?? []).entries()) {
      if (!names.has(name)) return `models.${i}.fallbacks.${j}: no model named "${name}"`
      if (name === m.id || name === m.alias) return `models.${i}.fallbacks.${j}: a model cannot be its own fallback`
    }
  }
  for (const [j, name] of config.routing.default_fallbacks.entries()) {
    if (!names.has(name)) return `routing.default_fallbacks.${j}: no model named "${name}"`
  }
  return undefined
}

const isLoopbackHost = (host: string) => ["localhost", "::1", "[::1]"].includes(host) || /^127\.\d+\.\d+\.\d+$/.test(host)

/** An http(s) URL; plain http only toward this machine (tokens and codes travel over it). */
const checkUrl = (value: string, at: string, originOnly: boolean): string | undefined => {
  let url: URL
  try {
    url = new URL(value)
  } catch {
    return `${at}: expected an absolute URL`
  }
  if (url.protocol !== "https:" && !(url.protocol === "http:" && isLoopbackHost(url.hostname))) {
    return `${at}: expected an https:// URL (http:// only on a loopback host)`
  }
  if (url.username !== "" || url.password !== "") return `${at}: no credentials in the URL`
  if (originOnly && (url.pathname !== "/" || url.search !== "" || url.hash !== "")) {
    return `${at}: expected an origin only (scheme, host and port; the gateway serves at the root)`
  }
  return undefined
}

/** Whether a PEM parses as a private key (checked here so a bad one fails at start, not at sign-in). */
const isPrivateKeyPem = (pem: string): boolean => {
  try {
    createPrivateKey(pem)
    return true
  } catch {
    return false
  }
}

/** `admin.oidc.token_endpoint_auth_method` and the credentials each method needs. */
const checkAdminOidcClientAuth = (oidc: NonNullable<GatewayConfig["admin"]["oidc"]>): string | undefined => {
  const method = oidc.token_endpoint_auth_method
  if ((method === "client_secret_basic" || method === "client_secret_post") && oidc.client_secret === undefined) {
    return `admin.oidc.client_secret: required with token_endpoint_auth_method ${method}`
  }
  if (method === "private_key_jwt" && oidc.private_key === undefined) {
    return "admin.oidc.private_key: required with token_endpoint_auth_method private_key_jwt (a PKCS#8 PEM)"
  }
  if (oidc.private_key !== undefined && !isPrivateKeyPem(oidc.private_key)) {
    return "admin.oidc.private_key: not a PKCS#8 PEM private key (-----BEGIN PRIVATE KEY-----)"
  }
  if (oidc.private_key !== undefined && method !== "private_key_jwt") {
    return "admin.oidc.private_key: only used with token_endpoint_auth_method private_key_jwt"
  }
  if (method === "none" && oidc.client_secret !== undefined) {
    return "admin.oidc.client_secret: a client with token_endpoint_auth_method none has no secret"
  }
  return undefined
}

/** `admin.oidc`: the rules between its fields, and what it needs from the rest of the file. */
const checkAdminOidc = (config: GatewayConfig): string | undefined => {
  const oidc = config.admin.oidc
  if (oidc === undefined) return undefined
  const rule = oidc.admin_claim
  if ((rule.equals === undefined) === (rule.includes === undefined)) {
    return "admin.oidc.admin_claim: give exactly one of equals or includes"
  }
  const urlProblem = checkUrl(oidc.issuer, "admin.oidc.issuer", false) ??
    (oidc.jwks_url === undefined ? undefined : checkUrl(oidc.jwks_url, "admin.oidc.jwks_url", false)) ??
    (oidc.public_url === undefined ? undefined : checkUrl(oidc.public_url, "admin.oidc.public_url", true))
  if (urlProblem) return urlProblem
  if (!oidc.scopes.includes("openid")) return "admin.oidc.scopes: must include openid"
  const authProblem = checkAdminOidcClientAuth(oidc)
  if (authProblem !== undefined) return authProblem
  if (oidc.public_url === undefined && !isLoopbackHost(config.server.host)) {
    return "admin.oidc.public_url: required when server.host is not loopback (the redirect URI is built from it, never from a request's Host header)"
  }
  // The session cookies and the sign-in flow's cookie are signed with a key derived from the
  // admin token; on loopback an unset token is replaced by a one-time one at start (main.ts).
  if (config.admin.token === undefined && !isLoopbackHost(config.server.host)) {
    return "admin.token: required with admin.oidc (it signs the app's session cookies; keep it as a break-glass credential)"
  }
  return undefined
}

/** Cross-field rules the per-field schema cannot express; each names the offending field. */
const checkReferences = (config: GatewayConfig, env: Env): string | undefined => {
  const providerNames = new Set<string>()
  for (const [i, p] of config.providers.entries()) {
    if (providerNames.has(p.name)) return `providers.${i}.name: duplicate provider name "${p.name}"`
    providerNames.add(p.name)
    const bedrockProblem = checkBedrockFields(p, `providers.${i}`, env)
    if (bedrockProblem) return bedrockProblem
    const cloudProblem = checkCloudFields(p, `providers.${i}`, env)
    if (cloudProblem) return cloudProblem
    // Bedrock's, Gemini's and Vertex's base URLs default to the vendor's (regional) endpoint.
    if (p.kind !== "echo" && p.kind !== "bedrock" && p.kind !== "gemini" && p.kind !== "vertex" && !p.base_url) return `providers.${i}.base_url: required for kind ${p.kind}`
    if (p.base_url && !/^https?:\/\//.test(p.base_url)) return `providers.${i}.base_url: expected an http(s) URL`
  }
  const names = new Set<string>()
  const patterns = new Set<string>()
  for (const [i, m] of config.models.entries()) {
    const entryProblem = checkModelEntry(m, `models.${i}`)
    if (entryProblem) return entryProblem
    const deploymentProblem = checkDeployments(m, `models.${i}`, providerNames)
    if (deploymentProblem) return deploymentProblem
    if (m.match !== undefined) {
      if (patterns.has(m.match)) return `models.${i}.match: the pattern "${m.match}" is used by another entry`
      patterns.add(m.match)
      continue
    }
    for (const name of [m.alias, m.id]) {
      if (name === undefined) continue
      if (names.has(name)) return `models.${i}: the name "${name}" is used by another model`
      names.add(name)
    }
  }
  const fallbackProblem = checkFallbacks(config, names)
  if (fallbackProblem) return fallbackProblem
  const adminOidcProblem = checkAdminOidc(config)
  if (adminOidcProblem) return adminOidcProblem
  if (config.alerts.webhook_url !== undefined) {
    const alertsProblem = checkUrl(config.alerts.webhook_url, "alerts.webhook_url", false)
    if (alertsProblem) return alertsProblem
  }
  // Moderations are OpenAI's endpoint: only an OpenAI-kind provider can answer them.
  const moderations = config.moderations.provider
  if (moderations !== undefined) {
    const provider = config.providers.find((p) => p.name === moderations)
    if (provider === undefined) return `moderations.provider: no provider named "${moderations}"`
    if (provider.kind !== "openai") return `moderations.provider: "${moderations}" is of kind ${provider.kind}; moderations need an openai-kind provider`
  }
  const ids = new Set<number>()
  for (const [i, c] of config.connections.entries()) {
    if (ids.has(c.id)) return `connections.${i}.id: duplicate connection id ${c.id}`
    ids.add(c.id)
  }
  const proxyProblem = checkTrustedProxies(config)
  if (proxyProblem) return proxyProblem
  const mcpNames = new Set<string>()
  for (const [i, server] of config.mcp.servers.entries()) {
    if (mcpNames.has(server.name)) return `mcp.servers.${i}.name: duplicate server name "${server.name}"`
    // A client's `<server>__<tool>` is split at the first "__": a name holding one would be ambiguous.
    if (server.name.includes("__")) return `mcp.servers.${i}.name: "${server.name}" holds "__", which separates server and tool names`
    if ((server.url === undefined) === (server.command === undefined)) return `mcp.servers.${i}: give url (Streamable HTTP) or command (stdio), one of the two`
    if (server.command !== undefined && Object.keys(server.headers).length > 0) return `mcp.servers.${i}.headers: only for a url server`
    if (server.url !== undefined && (server.args.length > 0 || Object.keys(server.env).length > 0)) {
      return `mcp.servers.${i}.${server.args.length > 0 ? "args" : "env"}: only for a command (stdio) server`
    }
    mcpNames.add(server.name)
  }
  for (const [i, policyIssuer] of config.auth.oidc.entries()) {
    for (const [j, policy] of policyIssuer.policies.entries()) {
      const unknown = policy.mcp_servers.find((name) => !mcpNames.has(name))
      if (unknown !== undefined) return `auth.oidc.${i}.policies.${j}.mcp_servers: no MCP server named "${unknown}" in mcp.servers`
    }
  }
  if (config.server.tls === undefined && config.server.trust_proxy === false) {
    // Plain HTTP is only for loopback (docs/decisions.md section 9); other hosts need TLS or a
    // proxy (trust_proxy: then only HTTPS as a trusted proxy reports it is served, app.ts).
    const loopback = ["127.0.0.1", "localhost", "::1"].includes(config.server.host) || config.server.host.startsWith("127.")
    if (!loopback) return `server.tls: required when server.host (${config.server.host}) is not loopback, unless server.trust_proxy is true`
  }
  return undefined
}

/** `server.trusted_proxies`: addresses or CIDR ranges, and only with trust_proxy (without it no peer's headers are read). */
const checkTrustedProxies = (config: GatewayConfig): string | undefined => {
  const entries = config.server.trusted_proxies
  if (entries.length > 0 && !config.server.trust_proxy) {
    return "server.trusted_proxies: only used with server.trust_proxy: true (set it, or remove the list)"
  }
  for (const [i, entry] of entries.entries()) {
    const parsed = parseTrustedProxy(entry)
    if (typeof parsed === "string") return `server.trusted_proxies.${i}: "${entry}" ${parsed}`
  }
  return undefined
}

/** The rules of `auth.oidc` its schema cannot say; each names the offending field. */
const checkIdentityIssuers = (config: GatewayConfig): string | undefined => {
  const issuers = new Set<string>()
  for (const [i, entry] of config.auth.oidc.entries()) {
    const at = `auth.oidc.${i}`
    if (!isAcceptableIssuerUrl(entry.issuer)) {
      return `${at}.issuer: expected an https URL (plain http only on a loopback host, for development)`
    }
    if (issuers.has(entry.issuer)) return `${at}.issuer: ${entry.issuer} is configured twice`
    issuers.add(entry.issuer)
    if (typeof entry.audience !== "string" && entry.audience.length === 0) return `${at}.audience: at least one audience is needed`
    if (entry.jwks_url !== undefined && !isAcceptableIssuerUrl(entry.jwks_url)) {
      return `${at}.jwks_url: expected an https URL (plain http only on a loopback host, for development)`
    }
    if (entry.algorithms !== undefined) {
      if (entry.algorithms.length === 0) return `${at}.algorithms: at least one algorithm is needed (or leave it out)`
      const refused = entry.algorithms.find((alg) => !ASYMMETRIC_ALGORITHMS.includes(alg))
      if (refused !== undefined) {
        return `${at}.algorithms: ${refused} is not accepted; only asymmetric algorithms (${ASYMMETRIC_ALGORITHMS.join(", ")})`
      }
    }
    if (entry.policies.length === 0) return `${at}.policies: at least one policy is needed (a token without one is refused)`
    const names = new Set<string>()
    for (const [j, policy] of entry.policies.entries()) {
      const pat = `${at}.policies.${j}`
      if (names.has(policy.name)) return `${pat}.name: duplicate policy name "${policy.name}"`
      names.add(policy.name)
      const conditions = policy.when === undefined ? [] : Array.isArray(policy.when) ? policy.when : [policy.when]
      if (Array.isArray(policy.when) && policy.when.length === 0) return `${pat}.when: an empty list; leave it out to match every token`
      for (const [k, condition] of conditions.entries()) {
        const cat = Array.isArray(policy.when) ? `${pat}.when.${k}` : `${pat}.when`
        if ((condition.equals === undefined) === (condition.includes === undefined)) {
          return `${cat}: give exactly one of equals or includes`
        }
      }
      const granted = new Set<string>()
      for (const [k, grant] of policy.connections.entries()) {
        if (granted.has(grant.connection)) return `${pat}.connections.${k}.connection: "${grant.connection}" is granted twice`
        granted.add(grant.connection)
      }
    }
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
  // Paths the file writes are relative to the file (operator-rules.ts); env values are not.
  const fromFile = input.fileName === undefined ? raw as Record<string, Json> : resolveFilePaths(raw as Record<string, Json>, input.fileName)
  const withEnv = applyEnvOverrides(fromFile, input.env)
  if (Result.isFailure(withEnv)) return Result.fail(withEnv.failure)
  const merged = defaultEmbeddingEndpoints(withEnv.success)
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
  for (const found of envProviders(input.env)) {
    if (providers.some((p) => p.name === found.provider.name)) continue
    providers.push(found.provider)
    for (const model of found.models) {
      // What the file already names or routes stays the operator's.
      const taken = model.match !== undefined
        ? models.some((m) => m.match === model.match)
        : models.some((m) => m.match === undefined && [m.alias, m.id].some((n) => n === model.alias || n === model.id))
      if (!taken) models.push(model)
    }
  }
  if (!providers.some((p) => p.name === "echo")) providers.push(builtinEcho)
  // The embedded default serves one offline model (chat and embeddings) so the first curl works without any account.
  if (config.models.length === 0) {
    models.push(modelWithDefaults({ alias: "echo", id: "echo-1", provider: "echo", credits: 0, max_tokens: 4096, endpoints: ["chat", "embeddings"] }))
  }
  const final: GatewayConfig = { ...config, providers, models }
  const problem = checkReferences(final, input.env) ?? checkIdentityIssuers(final) ?? placeholderSecret(final)
  if (problem) return Result.fail(new ConfigInvalid({ message: `${where}: ${problem}` }))
  return Result.succeed(final)
}
