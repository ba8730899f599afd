/**
 * The request formats the gateway accepts are the vendors' formats of today: every request field
 * of the installed official SDKs' params types (at every depth: top level, messages, content
 * parts and blocks, tools) must be accepted by the strict schemas. When a newer SDK adds a field,
 * a content block type or a tool type, this test names it.
 */
import { beforeAll, describe, expect, it } from "vitest"
import { MessagesRequestSchema } from "../../src/wire/anthropic-messages.ts"
import { ChatRequestSchema } from "../../src/wire/openai-chat.ts"
import { BLOCK_FIELDS as FAKE_ANTHROPIC_BLOCK_FIELDS, KNOWN_FIELDS as FAKE_ANTHROPIC_FIELDS } from "../support/fake-anthropic.ts"
import { KNOWN_PARAMS as FAKE_OPENAI_FIELDS, PART_FIELDS as FAKE_OPENAI_PART_FIELDS } from "../support/fake-openai.ts"
import { preloadSdkDeclarations, sdkFieldPaths, schemaFieldPaths, uncovered } from "./sdk-fields.ts"

/** Params the Anthropic SDK sends as headers, not in the body. */
const ANTHROPIC_HEADER_PARAMS = ["betas", "user_profile_id", "workspace_id"]

/**
 * Fields the gateway accepts beyond the SDK types, each for a reason:
 * - sampling parameters the newest Anthropic types dropped, still valid with API version
 *   2023-06-01 and sent by most clients;
 * - `name` on OpenAI tool messages (the API accepts it, LangChain sends it) and `annotations` on
 *   assistant messages (what a client replaying a response's message sends).
 */
const ANTHROPIC_EXTRAS = ["temperature", "top_p", "top_k"]
const OPENAI_EXTRAS = ["messages[]{role=tool}.name", "messages[]{role=assistant}.annotations"]

const topLevel = (paths: ReadonlySet<string>): Array<string> => [...paths].filter((p) => /^\w+$/.test(p)).sort()

/** The direct fields under `prefix`. */
const childFields = (paths: ReadonlySet<string>, prefix: string): Array<string> =>
  [...paths].filter((p) => p.startsWith(prefix)).map((p) => p.slice(prefix.length)).filter((p) => /^\w+$/.test(p)).sort()

/** Concrete schema paths the SDK does not know (open `.*` nodes and their parents aside). */
const extras = (schema: ReadonlySet<string>, sdk: ReadonlySet<string>): Array<string> =>
  uncovered(new Set([...schema].filter((p) => !p.endsWith(".*"))), sdk)

describe("the strict request schemas know every field of the installed SDKs", () => {
  beforeAll(() =>
    preloadSdkDeclarations([
      ["openai", "resources/chat/completions/completions.d.ts"],
      ["@anthropic-ai/sdk", "resources/beta/messages/messages.d.ts"],
      ["@anthropic-ai/sdk", "resources/messages/messages.d.ts"]
    ])
  )

  it("OpenAI chat completions: ChatCompletionCreateParams (openai)", () => {
    const sdk = sdkFieldPaths("openai", "resources/chat/completions/completions.d.ts", "ChatCompletionCreateParamsBase")
    expect(sdk.size).toBeGreaterThan(100)
    expect(sdk).toContain("messages[]{role=user}.content[]{type=image_url}.image_url.detail")
    const schema = schemaFieldPaths(ChatRequestSchema.ast)
    expect(uncovered(sdk, schema)).toEqual([])
    expect(extras(schema, sdk)).toEqual(OPENAI_EXTRAS.sort())
    // The fake upstream refuses exactly what the real API does not know.
    expect([...FAKE_OPENAI_FIELDS].sort()).toEqual(topLevel(sdk))
    for (const [type, fields] of Object.entries(FAKE_OPENAI_PART_FIELDS)) {
      const role = type === "refusal" ? "assistant" : "user"
      expect([...fields].sort(), type).toEqual(childFields(sdk, `messages[]{role=${role}}.content[]{type=${type}}.`))
    }
  })

  it("Anthropic messages: the beta MessageCreateParams (@anthropic-ai/sdk)", () => {
    const sdk = sdkFieldPaths("@anthropic-ai/sdk", "resources/beta/messages/messages.d.ts", "MessageCreateParamsBase")
    expect(sdk).toContain("tools[]{type=custom}.eager_input_streaming")
    expect(sdk).toContain("messages[]{role=system}.content")
    const schema = schemaFieldPaths(MessagesRequestSchema.ast)
    expect(uncovered(sdk, schema)).toEqual(ANTHROPIC_HEADER_PARAMS)
    expect(extras(schema, sdk)).toEqual(ANTHROPIC_EXTRAS.sort())
    expect([...FAKE_ANTHROPIC_FIELDS].sort()).toEqual(topLevel(sdk).filter((p) => !ANTHROPIC_HEADER_PARAMS.includes(p)))
    for (const [type, fields] of Object.entries(FAKE_ANTHROPIC_BLOCK_FIELDS)) {
      expect([...fields].sort(), type).toEqual(childFields(sdk, `messages[]{role=user}.content[]{type=${type}}.`))
    }
  })

  it("Anthropic messages: the GA MessageCreateParams is a subset of what is accepted", () => {
    const sdk = sdkFieldPaths("@anthropic-ai/sdk", "resources/messages/messages.d.ts", "MessageCreateParamsBase")
    expect(uncovered(sdk, schemaFieldPaths(MessagesRequestSchema.ast))).toEqual(
      ANTHROPIC_HEADER_PARAMS.filter((p) => sdk.has(p))
    )
  })

  it("the comparison itself notices a missing field, block type and tool type", () => {
    const schema = new Set(["model", "tools", "tools[]{type=custom}.name", "messages[]{role=user}.content[]{type=text}.*"])
    expect(uncovered(new Set([
      "model",
      "speed",
      "tools[]{type=custom}.name",
      "tools[]{type=custom}.defer_loading",
      "tools[]{type=web_search_20991231}.name",
      "messages[]{role=user}.content[]{type=text}.citations",
      "messages[]{role=user}.content[]{type=novel}.data"
    ]), schema)).toEqual([
      "messages[]{role=user}.content[]{type=novel}.data",
      "speed",
      "tools[]{type=custom}.defer_loading",
      "tools[]{type=web_search_20991231}.name"
    ])
  })
})
