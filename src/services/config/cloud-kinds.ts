/**
 * The config rules of the `azure`, `gemini` and `vertex` provider kinds: which fields each
 * needs, their default base URLs, and the providers the vendors' conventional variables bring
 * without a config file (`AZURE_OPENAI_API_KEY` + `AZURE_OPENAI_ENDPOINT`, `GEMINI_API_KEY`,
 * `GOOGLE_APPLICATION_CREDENTIALS` + a project), as `OPENAI_API_KEY` does.
 */
import type { ModelConfig, ProviderConfig } from "./schema.ts"

type Env = Readonly<Record<string, string | undefined>>
type Found = { readonly provider: typeof ProviderConfig.Encoded; readonly models: ReadonlyArray<typeof ModelConfig.Encoded> }

/** `us-east5`, `europe-west1`, `asia-northeast1`, or `global`: what Google names a location. */
const LOCATION = /^(?:global|[a-z]+-[a-z]+\d{1,2})$/
/** A Google Cloud project id: 6 to 30 lowercase letters, digits and hyphens, starting with a letter. */
const PROJECT = /^[a-z][a-z0-9-]{4,28}[a-z0-9]$/

export const GEMINI_DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"

export const geminiBaseUrl = (provider: Pick<ProviderConfig, "base_url">): string =>
  (provider.base_url ?? GEMINI_DEFAULT_BASE_URL).replace(/\/+$/, "")

/** Vertex AI's regional endpoint, or the global one for location `global`. */
export const vertexBaseUrl = (provider: Pick<ProviderConfig, "base_url" | "location">): string =>
  (provider.base_url ?? (provider.location === "global" ? "https://aiplatform.googleapis.com" : `https://${provider.location}-aiplatform.googleapis.com`))
    .replace(/\/+$/, "")

const ONLY_FOR: ReadonlyArray<readonly [keyof ProviderConfig, ProviderConfig["kind"]]> = [
  ["api_version", "azure"],
  ["project", "vertex"],
  ["location", "vertex"],
  ["credentials_file", "vertex"]
]

const apiKeyProblem = (provider: ProviderConfig, at: string, env: Env): string | undefined => {
  if (provider.api_key !== undefined && provider.api_key_env !== undefined) return `${at}.api_key_env: give api_key or api_key_env, not both`
  if (provider.api_key_env !== undefined) {
    const value = env[provider.api_key_env]
    return value === undefined || value === "" ? `${at}.api_key_env: the variable ${provider.api_key_env} is not set` : undefined
  }
  if (provider.api_key === undefined || provider.api_key === "") {
    return `${at}.api_key: required for kind ${provider.kind} (or api_key_env, the name of a variable holding it)`
  }
  return undefined
}

/** The rules of one provider entry about the Azure, Gemini and Vertex fields; names the offending field. */
export const checkCloudFields = (provider: ProviderConfig, at: string, env: Env): string | undefined => {
  const misplaced = ONLY_FOR.find(([field, kind]) => provider.kind !== kind && provider[field] !== undefined)
  if (misplaced !== undefined) return `${at}.${misplaced[0]}: only for kind ${misplaced[1]}`
  switch (provider.kind) {
    case "azure":
      if (provider.api_version === undefined) return `${at}.api_version: required for kind azure (e.g. 2025-04-01-preview)`
      if (provider.responses_api) return `${at}.responses_api: kind azure always sends Responses clients to Azure's /openai/responses`
      return apiKeyProblem(provider, at, env)
    case "gemini":
      return apiKeyProblem(provider, at, env)
    case "vertex":
      if (provider.api_key !== undefined || provider.api_key_env !== undefined) {
        return `${at}.${provider.api_key !== undefined ? "api_key" : "api_key_env"}: kind vertex authenticates with a service account (credentials_file), not an API key`
      }
      if (provider.project === undefined) return `${at}.project: required for kind vertex (the Google Cloud project id)`
      if (!PROJECT.test(provider.project)) return `${at}.project: "${provider.project}" is not a Google Cloud project id`
      if (provider.location === undefined) return `${at}.location: required for kind vertex (e.g. us-east5, or global)`
      if (!LOCATION.test(provider.location)) return `${at}.location: "${provider.location}" is not a Google Cloud location (e.g. us-east5, or global)`
      if (provider.credentials_file === undefined) return `${at}.credentials_file: required for kind vertex (a service account key file)`
      return undefined
    default:
      return undefined
  }
}

/**
 * Azure OpenAI from `AZURE_OPENAI_API_KEY` and `AZURE_OPENAI_ENDPOINT` (the openai SDK's
 * AzureOpenAI reads the same two, and `OPENAI_API_VERSION`). A deployment's name is the model id
 * clients send; the routes cover deployments named after their model, as Azure's portal names
 * them by default.
 */
export const azureFromEnv = (env: Env): Found | undefined => {
  const endpoint = env.AZURE_OPENAI_ENDPOINT
  if (!env.AZURE_OPENAI_API_KEY || !endpoint || !/^https?:\/\//.test(endpoint)) return undefined
  const route = (match: string, max_tokens: number): typeof ModelConfig.Encoded => ({ match, provider: "azure", credits: 5, max_tokens })
  return {
    provider: {
      name: "azure",
      kind: "azure",
      base_url: endpoint,
      api_key_env: "AZURE_OPENAI_API_KEY",
      api_version: env.OPENAI_API_VERSION || "2025-04-01-preview"
    },
    models: [
      route("gpt-*", 128_000),
      route("o1*", 100_000),
      route("o3*", 100_000),
      route("o4*", 100_000),
      { match: "text-embedding-*", provider: "azure", credits: 1, endpoints: ["embeddings"] }
    ]
  }
}

/** Gemini's API from `GEMINI_API_KEY` (the variable Google's SDKs and the Gemini CLI read). */
export const geminiFromEnv = (env: Env): Found | undefined => {
  if (!env.GEMINI_API_KEY) return undefined
  return {
    provider: { name: "gemini", kind: "gemini", base_url: GEMINI_DEFAULT_BASE_URL, api_key_env: "GEMINI_API_KEY" },
    models: [
      { match: "gemini-*-embedding*", provider: "gemini", credits: 1, endpoints: ["embeddings"] },
      { match: "gemini-embedding-*", provider: "gemini", credits: 1, endpoints: ["embeddings"] },
      { match: "gemini-*", provider: "gemini", credits: 5, max_tokens: 65_536 }
    ]
  }
}

/**
 * Vertex AI from `GOOGLE_APPLICATION_CREDENTIALS` (a service account key file) and a project
 * (`GOOGLE_CLOUD_PROJECT`, or Claude Code's `ANTHROPIC_VERTEX_PROJECT_ID`); the location is
 * `GOOGLE_CLOUD_LOCATION` or Claude Code's `CLOUD_ML_REGION`, else `global`. Routes serve Claude
 * (Vertex ids such as `claude-sonnet-4-5@20250929`) and Gemini models.
 */
export const vertexFromEnv = (env: Env): Found | undefined => {
  const project = env.GOOGLE_CLOUD_PROJECT || env.ANTHROPIC_VERTEX_PROJECT_ID
  const location = env.GOOGLE_CLOUD_LOCATION || env.CLOUD_ML_REGION || "global"
  if (!env.GOOGLE_APPLICATION_CREDENTIALS || !project || !PROJECT.test(project) || !LOCATION.test(location)) return undefined
  return {
    provider: { name: "vertex", kind: "vertex", project, location, credentials_file: env.GOOGLE_APPLICATION_CREDENTIALS },
    models: [
      { match: "claude-*", provider: "vertex", credits: 5, max_tokens: 64_000 },
      { match: "gemini-*", provider: "vertex", credits: 5, max_tokens: 65_536 }
    ]
  }
}
