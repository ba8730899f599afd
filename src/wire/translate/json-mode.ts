/**
 * OpenAI JSON mode on Anthropic models, by forced-tool emulation (docs/wire-translation.md 3.7, strategy 2): the
 * request gains a tool whose input schema is the wanted JSON shape, the model is made to call it,
 * and the tool's input comes back to the client as the message content with finish `stop`.
 */
import { Predicate } from "effect"
import type { ChatRequest } from "../openai-chat.ts"

export const JSON_RESPONSE_TOOL = "json_response"

/**
 * What the response side needs to undo the emulation. `wrapped`: Anthropic tool inputs must be
 * objects, so a schema for anything else (an array, a string...) is wrapped as `{values: ...}`
 * and unwrapped on the way back.
 */
export interface JsonMode {
  readonly tool: string
  readonly wrapped: boolean
}

type JsonSchemaObject = Readonly<Record<string, unknown>>

const isObjectSchema = (schema: JsonSchemaObject): boolean =>
  schema["type"] === "object" || (schema["type"] === undefined && Predicate.isObject(schema["properties"]))

/** The JSON mode a chat request asks for, if any. Pass it to the response and stream translators. */
export const jsonModeOf = (request: ChatRequest): JsonMode | undefined => {
  const format = request.response_format
  if (format === undefined || format.type === "text") return undefined
  if (format.type === "json_object") return { tool: JSON_RESPONSE_TOOL, wrapped: false }
  const schema = format.json_schema.schema
  return { tool: JSON_RESPONSE_TOOL, wrapped: schema !== undefined && !isObjectSchema(schema) }
}

/** The Anthropic tool that carries the JSON answer. */
export const jsonResponseTool = (request: ChatRequest, mode: JsonMode) => {
  const format = request.response_format
  const schema = format?.type === "json_schema" ? format.json_schema.schema : undefined
  const described = format?.type === "json_schema" ? format.json_schema.description : undefined
  return {
    name: mode.tool,
    description: described ?? "Respond with the final answer as JSON by calling this tool.",
    input_schema: toolInputSchema(schema, mode)
  }
}

const toolInputSchema = (schema: JsonSchemaObject | undefined, mode: JsonMode): JsonSchemaObject => {
  if (schema === undefined) return { type: "object", additionalProperties: true, properties: {} }
  if (!mode.wrapped) return { ...schema, type: "object" }
  // Definitions stay at the root so `#/$defs/...` references keep resolving.
  const { $defs, definitions, ...inner } = schema
  return {
    type: "object",
    properties: { values: inner },
    required: ["values"],
    ...($defs === undefined ? {} : { $defs }),
    ...(definitions === undefined ? {} : { definitions })
  }
}

/** The JSON text for the client, from the tool's (parsed) input. */
export const jsonTextFromInput = (input: unknown, mode: JsonMode): string => {
  if (mode.wrapped && Predicate.isObject(input) && "values" in input) return JSON.stringify(input["values"])
  return JSON.stringify(input)
}

/** The same from the raw streamed JSON text, which is passed on untouched when not wrapped. */
export const jsonTextFromRaw = (raw: string, mode: JsonMode): string => {
  if (raw.trim() === "") return "{}"
  if (!mode.wrapped) return raw
  try {
    return jsonTextFromInput(JSON.parse(raw), mode)
  } catch {
    return raw
  }
}
