/**
 * The config rules of the `bedrock` provider kind (AWS Bedrock through the Converse API): its
 * region and credentials, its default base URL, and the provider that AWS's own conventional
 * variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION` or
 * `AWS_DEFAULT_REGION`) bring without a config file.
 */
import type { ModelConfig, ProviderConfig } from "./schema.ts"

type Env = Readonly<Record<string, string | undefined>>

/** `us-east-1`, `eu-central-2`, `us-gov-west-1`, `ap-southeast-5`...: what AWS names a region. */
const REGION = /^[a-z]{2}(?:-[a-z]+)+-\d{1,2}$/

/** Where the Converse API of a region is served, unless `base_url` says otherwise (a VPC endpoint, a proxy). */
export const bedrockBaseUrl = (provider: Pick<ProviderConfig, "base_url" | "region">): string =>
  (provider.base_url ?? `https://bedrock-runtime.${provider.region}.amazonaws.com`).replace(/\/+$/, "")

/** A credential field and its `_env` twin: one of them, never both; a named variable must be set. */
const credentialProblem = (
  provider: ProviderConfig,
  field: "access_key_id" | "secret_access_key" | "session_token",
  at: string,
  env: Env,
  required: boolean
): string | undefined => {
  const literal = provider[field]
  const variable = provider[`${field}_env`]
  if (literal !== undefined && variable !== undefined) return `${at}.${field}_env: give ${field} or ${field}_env, not both`
  if (variable !== undefined) {
    const value = env[variable]
    if (value === undefined || value === "") return `${at}.${field}_env: the variable ${variable} is not set`
    return undefined
  }
  if (literal === "") return `${at}.${field}: empty`
  if (literal === undefined && required) return `${at}.${field}: required for kind bedrock (or ${field}_env, the name of a variable holding it)`
  return undefined
}

const OTHER_KINDS_ONLY = ["access_key_id", "access_key_id_env", "secret_access_key", "secret_access_key_env", "session_token", "session_token_env", "region"] as const

/** The rules of one provider entry about Bedrock's fields; names the offending field. */
export const checkBedrockFields = (provider: ProviderConfig, at: string, env: Env): string | undefined => {
  if (provider.kind !== "bedrock") {
    const misplaced = OTHER_KINDS_ONLY.find((field) => provider[field] !== undefined)
    return misplaced === undefined ? undefined : `${at}.${misplaced}: only for kind bedrock`
  }
  if (provider.region === undefined) return `${at}.region: required for kind bedrock (e.g. us-east-1)`
  if (!REGION.test(provider.region)) return `${at}.region: "${provider.region}" is not an AWS region name (e.g. us-east-1)`
  if (provider.api_key !== undefined || provider.api_key_env !== undefined) {
    return `${at}.${provider.api_key !== undefined ? "api_key" : "api_key_env"}: kind bedrock signs with AWS credentials (access_key_id, secret_access_key), not an API key`
  }
  return credentialProblem(provider, "access_key_id", at, env, true) ??
    credentialProblem(provider, "secret_access_key", at, env, true) ??
    credentialProblem(provider, "session_token", at, env, false)
}

/**
 * The provider AWS's conventional variables bring: named `bedrock`, with routes for Bedrock's
 * model ids (foundation models such as `anthropic.claude-...` and the cross-region inference
 * profiles such as `us.anthropic.claude-...`), each sending the requested id as it is. Caps
 * are ceilings, as for the other automatic providers: above a model's own limit Bedrock refuses.
 */
export const bedrockFromEnv = (
  env: Env
): { readonly provider: typeof ProviderConfig.Encoded; readonly models: ReadonlyArray<typeof ModelConfig.Encoded> } | undefined => {
  const region = env.AWS_REGION || env.AWS_DEFAULT_REGION
  if (!env.AWS_ACCESS_KEY_ID || !env.AWS_SECRET_ACCESS_KEY || !region || !REGION.test(region)) return undefined
  const route = (match: string, credits: number, max_tokens: number): typeof ModelConfig.Encoded => ({ match, provider: "bedrock", credits, max_tokens })
  const embeddings = (match: string): typeof ModelConfig.Encoded => ({ match, provider: "bedrock", credits: 1, endpoints: ["embeddings"] })
  return {
    provider: {
      name: "bedrock",
      kind: "bedrock",
      region,
      access_key_id_env: "AWS_ACCESS_KEY_ID",
      secret_access_key_env: "AWS_SECRET_ACCESS_KEY",
      ...(env.AWS_SESSION_TOKEN ? { session_token_env: "AWS_SESSION_TOKEN" } : {})
    },
    models: [
      route("anthropic.claude-*", 5, 64_000),
      route("*.anthropic.claude-*", 5, 64_000),
      route("amazon.nova-*", 1, 10_000),
      route("*.amazon.nova-*", 1, 10_000),
      route("meta.llama*", 1, 8_192),
      route("*.meta.llama*", 1, 8_192),
      route("mistral.*", 1, 8_192),
      route("*.mistral.*", 1, 8_192),
      embeddings("amazon.titan-embed-text-*"),
      embeddings("cohere.embed-*")
    ]
  }
}
