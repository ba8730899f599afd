/**
 * One fixture for suites that call models through the gateway: a fake OpenAI and a fake
 * Anthropic upstream (HTTP servers that speak and refuse what the vendors do), and the real
 * gateway in process with a `gpt` model on the first and a `claude` model on the second.
 * `useModelGateway()` registers the hooks (start once per file, reset the fakes before each
 * test, close at the end) and returns accessors.
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

export const useModelGateway = (extraConfig: Record<string, unknown> = {}): ModelGatewayFixture => {
  let openaiFake: FakeUpstream
  let anthropicFake: FakeUpstream
  let gateway: TestGateway
  beforeAll(async () => {
    ;[openaiFake, anthropicFake] = await Promise.all([
      startFakeOpenAI({ apiKey: OPENAI_KEY, models: [GPT_ID] }),
      startFakeAnthropic({ apiKey: ANTHROPIC_KEY, models: [CLAUDE_ID] })
    ])
    gateway = await startGateway(testConfig({
      workspace: { credits: 1_000_000 },
      limits: { requests_per_minute: 100_000, concurrent_streams: 100 },
      providers: [
        { name: "up-openai", kind: "openai", base_url: openaiFake.url, api_key: OPENAI_KEY },
        { name: "up-anthropic", kind: "anthropic", base_url: anthropicFake.url, api_key: ANTHROPIC_KEY }
      ],
      models: [
        { alias: "gpt", id: GPT_ID, provider: "up-openai", max_tokens: CAP },
        { alias: "claude", id: CLAUDE_ID, provider: "up-anthropic", max_tokens: CAP }
      ],
      ...extraConfig
    }))
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
