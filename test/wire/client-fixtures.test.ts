/**
 * Every model request captured from real coding clients (test/fixtures/clients: Claude Code,
 * opencode) decodes strictly and in passthrough, and what the wire package builds from it
 * (the passthrough body on a model capped below the client's max_tokens, and the translation
 * for the other provider kind) is accepted by the fake vendor, which refuses what the real API
 * refuses.
 */
import { Result } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  chatPassthroughBody,
  chatRequestToAnthropic,
  decodeChatPassthrough,
  decodeChatRequest,
  decodeMessagesPassthrough,
  decodeMessagesRequest,
  messagesPassthroughBody,
  messagesRequestToChat
} from "../../src/wire/index.ts"
import { listFixtures, loadFixture, modelRequests } from "../support/client-fixtures.ts"
import { startFakeAnthropic } from "../support/fake-anthropic.ts"
import type { FakeUpstream } from "../support/fake-common.ts"
import { startFakeOpenAI } from "../support/fake-openai.ts"

const KEY = "sk-upstream"
const CAP = 8192

const captured = listFixtures().flatMap(({ set, scenario }) =>
  modelRequests(loadFixture(set, scenario)).flatMap((request, index) =>
    request.path === "/v1/messages" || request.path === "/v1/chat/completions"
      ? [{ name: `${set}/${scenario} #${index} ${request.path}`, path: request.path, body: request.body }]
      : []
  )
)

let anthropic: FakeUpstream
let openai: FakeUpstream

beforeAll(async () => {
  anthropic = await startFakeAnthropic({ apiKey: KEY })
  openai = await startFakeOpenAI({ apiKey: KEY })
})
afterAll(async () => {
  await anthropic.close()
  await openai.close()
})

const send = async (kind: "anthropic" | "openai", body: Record<string, unknown>) => {
  const response = kind === "anthropic"
    ? await fetch(`${anthropic.url}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": KEY, "anthropic-version": "2023-06-01" },
      body: JSON.stringify(body)
    })
    : await fetch(`${openai.url}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${KEY}` },
      body: JSON.stringify(body)
    })
  const text = await response.text()
  return { status: response.status, text }
}

const ok = <A>(result: { ok: true; value: A } | { ok: false; message: string }): A => {
  if (!result.ok) throw new Error(result.message)
  return result.value
}

describe("captured client requests", () => {
  it("there are some of each format", () => {
    expect(captured.filter((c) => c.path === "/v1/messages").length).toBeGreaterThan(10)
    expect(captured.filter((c) => c.path === "/v1/chat/completions").length).toBeGreaterThan(3)
  })

  it.each(captured)("$name", async ({ path, body }) => {
    if (path === "/v1/messages") {
      const request = ok(decodeMessagesRequest(body))
      ok(decodeMessagesPassthrough(body))
      const forwarded = ok(messagesPassthroughBody(body, { model: "claude-sonnet-4-5-20250929", maxTokensCap: CAP }))
      expect(await send("anthropic", forwarded)).toMatchObject({ status: 200 })
      const translated = messagesRequestToChat(request, { model: "gpt-5", maxTokensCap: CAP })
      if (Result.isFailure(translated)) throw new Error(translated.failure.message)
      ok(decodeChatRequest(translated.success))
      expect(await send("openai", translated.success)).toMatchObject({ status: 200 })
    } else {
      const request = ok(decodeChatRequest(body))
      ok(decodeChatPassthrough(body))
      expect(await send("openai", chatPassthroughBody(body, { model: "gpt-5", maxTokensCap: CAP }))).toMatchObject({ status: 200 })
      const translated = chatRequestToAnthropic(request, { model: "claude-sonnet-4-5-20250929", maxTokensCap: CAP })
      if (Result.isFailure(translated)) throw new Error(translated.failure.message)
      ok(decodeMessagesRequest(translated.success))
      expect(await send("anthropic", translated.success as unknown as Record<string, unknown>)).toMatchObject({ status: 200 })
    }
  })
})
