/**
 * What Claude Code and opencode were captured sending (test/fixtures/clients), replayed through
 * the gateway exactly as sent (headers, betas, bodies; only the key and the model name
 * substituted), once passthrough to an Anthropic-kind or OpenAI-kind provider of the client's own
 * format and once translated to the other kind. Every model request must be answered 200 with a
 * complete answer, and what reached the fake vendor must be what it accepts (the fakes refuse
 * unknown fields, a thinking budget >= max_tokens, and system roles where the vendor has none).
 * Codex's captures are replayed in responses.test.ts.
 */
import { describe, expect, it } from "vitest"
import { listFixtures, loadFixture, modelRequests, replayInit, replayUrl } from "../support/client-fixtures.ts"
import { useModelGateway } from "../support/model-gateway.ts"

const fixture = useModelGateway()

/** Each fixture's surface: Messages clients replay against both kinds, Chat clients too. */
const FIXTURES = listFixtures().filter((f) => f.client === "claude-code" || (f.client === "opencode" && !f.scenario.startsWith("openai-")))

describe.each(FIXTURES)("$set $scenario", ({ set, scenario }) => {
  it.each([
    { target: "an Anthropic-kind provider", model: "claude" },
    { target: "an OpenAI-kind provider", model: "gpt" }
  ])("is answered 200 through $target", async ({ model }) => {
    const { key } = await fixture.gateway().createKey()
    const captured = loadFixture(set, scenario, { apiKey: key, model })
    const requests = modelRequests(captured)
    expect(requests.length).toBeGreaterThan(0)
    for (const request of requests) {
      const response = await fetch(replayUrl(fixture.gateway().url, request), replayInit(request))
      const text = await response.text()
      expect(response.status, `${request.path}: ${text.slice(0, 600)}`).toBe(200)
      if (request.path.endsWith("/count_tokens")) {
        expect(JSON.parse(text).input_tokens).toBeGreaterThan(0)
      } else if (request.body.stream === true) {
        expect(text).not.toMatch(/event: error|"error":"/)
        expect(text).toMatch(request.path.endsWith("/chat/completions") ? /data: \[DONE\]/ : /event: message_stop/)
      }
    }
  })
})
