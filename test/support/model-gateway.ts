/**
 * One fixture for suites that call models through the gateway: a fake OpenAI and a fake
 * Anthropic upstream (HTTP servers that speak and refuse what the vendors do), and the real
 * gateway in process with a `gpt` model on the first and a `claude` model on the second.
 * `useModelGateway()` registers the hooks (start once per file, reset the fakes before each
 * test, close at the end) and returns accessors. A suite that needs other model ids, more
 * providers or models (short timeouts, routes, echo) says so in the options instead of copying
 * the hooks; its own `beforeAll`, registered after, runs once the gateway is up.
 */
import { afterAll, beforeAll, beforeEach } from "vitest"
import { startFakeAnthropic } from "./fake-anthropic.ts"
import type { FakeUpstream } from "./fake-common.ts"
import { startFakeOpenAI } from "./fake-openai.ts"
import { startGateway, testConfig, type TestGateway } from "./gateway.ts"

export const OPENAI_KEY = "sk-fake-openai-0123456789abcdef"
export const ANTHROPIC_KEY = "sk-ant-fake-0123456789abcdef"
export const GPT_ID = "gpt-4o-mini-2024-07-18"
export const CLAUDE_ID = "claude-sonnet-4-5-20250929"
export const CAP = 4096

export interface ProviderUnderTest {
  readonly kind: "openai" | "anthropic"
  /** The alias clients name. */
  readonly model: string
  readonly fake: () => FakeUpstream
}

export interface ModelGatewayFixture {
  readonly gateway: () => TestGateway
  readonly openaiFake: () => FakeUpstream
  readonly anthropicFake: () => FakeUpstream
  /** Both provider kinds, for `describe.each`. */
  readonly providers: ReadonlyArray<ProviderUnderTest>
}

type Entry = Record<string, unknown>

/** What a suite changes in the one shape; everything else is shared. */
export interface ModelGatewayOptions {
  /** The upstream ids of the `gpt` and `claude` models, and their `max_tokens` cap. */
  readonly gptId?: string
  readonly claudeId?: string
  readonly cap?: number
  /** The models each fake serves (default: its one model; "any": whatever it is asked for). */
  readonly openaiModels?: ReadonlyArray<string> | "any"
  readonly anthropicModels?: ReadonlyArray<string> | "any"
  /** The providers, from the defaults (`up-openai`, `up-anthropic`) and the fakes' URLs. */
  readonly providers?: (defaults: ReadonlyArray<Entry>, urls: { readonly openai: string; readonly anthropic: string }) => ReadonlyArray<Entry>
  /** The models, from the defaults (`gpt`, `claude`). */
  readonly models?: (defaults: ReadonlyArray<Entry>) => ReadonlyArray<Entry>
  /** Further top-level config sections (they replace the defaults of the same name). */
  readonly config?: Record<string, unknown>
  /** Where the gateway looks up `api_key_env` names. */
  readonly env?: Readonly<Record<string, string>>
}

export const useModelGateway = (options: ModelGatewayOptions = {}): ModelGatewayFixture => {
  const gptId = options.gptId ?? GPT_ID
  const claudeId = options.claudeId ?? CLAUDE_ID
  const cap = options.cap ?? CAP
  const served = (models: ReadonlyArray<string> | "any" | undefined, own: string) =>
    models === "any" ? {} : { models: models ?? [own] }
  let openaiFake: FakeUpstream
  let anthropicFake: FakeUpstream
  let gateway: TestGateway
  beforeAll(async () => {
    ;[openaiFake, anthropicFake] = await Promise.all([
      startFakeOpenAI({ apiKey: OPENAI_KEY, ...served(options.openaiModels, gptId) }),
      startFakeAnthropic({ apiKey: ANTHROPIC_KEY, ...served(options.anthropicModels, claudeId) })
    ])
    const providers: ReadonlyArray<Entry> = [
      { name: "up-openai", kind: "openai", base_url: openaiFake.url, api_key: OPENAI_KEY },
      { name: "up-anthropic", kind: "anthropic", base_url: anthropicFake.url, api_key: ANTHROPIC_KEY }
    ]
    const models: ReadonlyArray<Entry> = [
      { alias: "gpt", id: gptId, provider: "up-openai", max_tokens: cap },
      { alias: "claude", id: claudeId, provider: "up-anthropic", max_tokens: cap }
    ]
    gateway = await startGateway(testConfig({
      workspace: { credits: 1_000_000 },
      limits: { requests_per_minute: 100_000, concurrent_streams: 100 },
      providers: options.providers?.(providers, { openai: openaiFake.url, anthropic: anthropicFake.url }) ?? providers,
      models: options.models?.(models) ?? models,
      ...options.config
    }), options.env === undefined ? {} : { env: options.env })
  })
  afterAll(async () => {
    await gateway?.close()
    await Promise.all([openaiFake?.close(), anthropicFake?.close()])
  })
  beforeEach(() => {
    openaiFake.reset()
    anthropicFake.reset()
  })
  return {
    gateway: () => gateway,
    openaiFake: () => openaiFake,
    anthropicFake: () => anthropicFake,
    providers: [
      { kind: "openai", model: "gpt", fake: () => openaiFake },
      { kind: "anthropic", model: "claude", fake: () => anthropicFake }
    ]
  }
}
