/**
 * The official SDKs pointed at a gateway (or a fake), as the suite makes them everywhere: no
 * retries (a test sees the first answer), the OpenAI SDK under `/v1`, the Anthropic SDK at the
 * root. `options` adds or overrides (a recording `fetch`, retries for the retry-hint tests).
 */
import Anthropic, { type ClientOptions as AnthropicOptions } from "@anthropic-ai/sdk"
import OpenAI, { type ClientOptions as OpenAIOptions } from "openai"

export const openaiFor = (base: string, apiKey: string, options: OpenAIOptions = {}) =>
  new OpenAI({ apiKey, baseURL: `${base}/v1`, maxRetries: 0, ...options })

export const anthropicFor = (base: string, apiKey: string, options: AnthropicOptions = {}) =>
  new Anthropic({ apiKey, baseURL: base, maxRetries: 0, ...options })
