/**
 * Azure OpenAI: the OpenAI format behind Azure's URLs and key header, so the OpenAI client and
 * every adapter of the `openai` kind serve it unchanged. Chat Completions and embeddings go to
 * the deployment named by the model id (`{base}/openai/deployments/{deployment}/chat/completions`),
 * Responses to `{base}/openai/responses` with the deployment as `model`; every call carries the
 * configured `api-version` and the key in `api-key`. Azure's streams open with a chunk that has
 * no choices (its prompt filter results), which the OpenAI adapters already pass over.
 */
import type { Agent } from "undici"
import type { ProviderConfig } from "../config/schema.ts"
import { type FirstByteRecorder, makeOpenAIClient, type OpenAIClient, type OpenAIOperation } from "./clients.ts"
import { makeRedactor } from "./redact.ts"

export const makeAzureClient = (
  provider: ProviderConfig,
  agent: Agent,
  env: Readonly<Record<string, string | undefined>>,
  firstByte?: FirstByteRecorder
): OpenAIClient => {
  const key = provider.api_key ?? (provider.api_key_env === undefined ? undefined : env[provider.api_key_env])
  const base = provider.base_url!.replace(/\/+$/, "")
  const version = `api-version=${encodeURIComponent(provider.api_version ?? "")}`
  const url = (operation: OpenAIOperation, body: Record<string, unknown>) =>
    operation === "/responses"
      ? `${base}/openai/responses?${version}`
      : `${base}/openai/deployments/${encodeURIComponent(String(body.model ?? ""))}${operation}?${version}`
  return makeOpenAIClient(provider, agent, env, firstByte, {
    url,
    headers: key ? { "api-key": key } : {},
    redact: makeRedactor([key]),
    responses: true
  })
}
