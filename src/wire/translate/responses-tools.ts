/**
 * Codex's tools for providers without the Responses API (issue 24 item 2). Codex offers some
 * tools in forms only OpenAI's models take: `custom` tools, whose input is free text (its
 * `apply_patch`, with a Lark grammar), and `namespace` tools grouping functions and custom tools,
 * sent in `tools` or in an `additional_tools` input item. Chat Completions and Messages know
 * only functions with JSON arguments, so on the way up:
 *
 * - `additional_tools` items are taken out of `input` and their tools join `tools`;
 * - a namespace's tools become top-level tools named `<namespace>__<name>` (made valid for
 *   `^[a-zA-Z0-9_-]{1,64}$`, a hash appended when shortened). Every flattened name is unique
 *   among the tools sent (issue 32 item 8): namespace `a` with tool `b__c`, namespace `a__b`
 *   with tool `c` and a plain function `a__b__c` would otherwise all be `a__b__c`, and the
 *   model's call would run whichever the map found. A name already taken gets a hash of what it
 *   stands for appended, so each maps back to exactly one offered tool;
 * - a custom tool becomes a function with one string argument, `input` (its grammar, if any, in
 *   the argument's description so the model knows the syntax);
 * - earlier calls in the input (`function_call` with a `namespace`, `custom_tool_call`) are
 *   renamed the same way, and `tool_choice` forcing a custom tool forces its function.
 *
 * On the way back `ToolNames.outputItem` turns a call of such a function into what the client
 * offered: a `custom_tool_call` whose `input` is the `input` argument, or a `function_call`
 * with its own name and `namespace`. Requests without such tools are returned unchanged.
 */
import { createHash } from "node:crypto"

type Json = Record<string, unknown>

/** What a flattened function name stands for. */
export interface OfferedTool {
  readonly name: string
  readonly namespace: string | undefined
  readonly custom: boolean
}

const isObject = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value)

const VALID = /^[a-zA-Z0-9_-]{1,64}$/

const digest = (text: string) => createHash("sha256").update(text).digest("hex").slice(0, 8)

const withDigest = (joined: string, of: string) => `${joined.replace(/[^a-zA-Z0-9_-]/g, "_").slice(0, 55)}_${digest(of)}`

const flatName = (namespace: string | undefined, name: string): string => {
  const joined = namespace === undefined ? name : `${namespace}__${name}`
  return VALID.test(joined) ? joined : withDigest(joined, joined)
}

const customParameters = (tool: Json) => {
  const format = isObject(tool["format"]) ? tool["format"] : undefined
  const grammar = format?.["type"] === "grammar" && typeof format["definition"] === "string"
    ? ` It must follow this ${typeof format["syntax"] === "string" ? format["syntax"] : ""} grammar:\n${format["definition"]}`
    : ""
  return {
    type: "object",
    properties: { input: { type: "string", description: `The tool's whole input, as free text.${grammar}` } },
    required: ["input"],
    additionalProperties: false
  }
}

export class ToolNames {
  readonly #byFlat = new Map<string, OfferedTool>()
  readonly #byOffered = new Map<string, string>()
  /** Every name sent upstream: plain functions' own names and the flattened ones. */
  readonly #taken = new Set<string>()

  get empty(): boolean {
    return this.#byFlat.size === 0
  }

  /** A plain function keeps its name: nothing flattened may take it. */
  reserve(name: string): void {
    this.#taken.add(name)
  }

  /** The function a client tool is offered as (and registers it). */
  register(tool: OfferedTool): string {
    const key = `${tool.namespace ?? ""}\u0000${tool.name}`
    const known = this.#byOffered.get(key)
    if (known !== undefined) return known
    let flat = flatName(tool.namespace, tool.name)
    // Taken by another tool: the hash of what this one is makes it unique (a counter past a clash of hashes).
    for (let attempt = 0; this.#taken.has(flat); attempt++) flat = withDigest(flatName(tool.namespace, tool.name), `${key}\u0000${attempt}`)
    this.#taken.add(flat)
    this.#byOffered.set(key, flat)
    if (tool.custom || tool.namespace !== undefined) this.#byFlat.set(flat, tool)
    return flat
  }

  /** A function name as the model called it -> what the client offered, when it was mapped. */
  offered(name: string): OfferedTool | undefined {
    return this.#byFlat.get(name)
  }

  /** An output item as the client expects it: a custom tool call, or a namespaced function call. */
  outputItem(item: Json): Json {
    if (item["type"] !== "function_call" || typeof item["name"] !== "string") return item
    const tool = this.#byFlat.get(item["name"])
    if (tool === undefined) return item
    const namespace = tool.namespace === undefined ? {} : { namespace: tool.namespace }
    if (!tool.custom) return { ...item, name: tool.name, ...namespace }
    const { arguments: args, ...rest } = item
    return { ...rest, type: "custom_tool_call", name: tool.name, input: customInput(args), ...namespace }
  }
}

/** The `input` argument of an emulated custom tool's call; the raw text if the model sent no JSON object. */
export const customInput = (args: unknown): string => {
  if (typeof args !== "string") return ""
  try {
    const parsed: unknown = JSON.parse(args)
    if (isObject(parsed) && typeof parsed["input"] === "string") return parsed["input"]
  } catch {
    // Not JSON: the model wrote the input itself.
  }
  return args
}

/** Tools as offered, flattened to functions where needed. */
const flattenTools = (tools: ReadonlyArray<unknown>, names: ToolNames): Array<unknown> =>
  tools.flatMap((tool): Array<unknown> => {
    if (!isObject(tool)) return [tool]
    if (tool["type"] === "custom" && typeof tool["name"] === "string") {
      const name = names.register({ name: tool["name"], namespace: undefined, custom: true })
      return [{
        type: "function",
        name,
        ...(typeof tool["description"] === "string" ? { description: tool["description"] } : {}),
        parameters: customParameters(tool)
      }]
    }
    if (tool["type"] === "namespace" && typeof tool["name"] === "string" && Array.isArray(tool["tools"])) {
      const namespace = tool["name"]
      return tool["tools"].flatMap((inner): Array<unknown> => {
        if (!isObject(inner) || typeof inner["name"] !== "string") return []
        const custom = inner["type"] === "custom"
        const name = names.register({ name: inner["name"], namespace, custom })
        if (custom) {
          return [{
            type: "function",
            name,
            ...(typeof inner["description"] === "string" ? { description: inner["description"] } : {}),
            parameters: customParameters(inner)
          }]
        }
        const { namespace: _, ...fn } = inner
        const description = [tool["description"], inner["description"]].filter((text) => typeof text === "string" && text !== "").join("\n")
        return [{ ...fn, type: "function", name, ...(description === "" ? {} : { description }) }]
      })
    }
    return [tool]
  })

/** Earlier calls renamed as their tools were. */
const renameCall = (item: unknown, names: ToolNames): unknown => {
  if (!isObject(item) || typeof item["name"] !== "string") return item
  const namespace = typeof item["namespace"] === "string" ? item["namespace"] : undefined
  if (item["type"] === "function_call" && namespace !== undefined) {
    const { namespace: _, ...rest } = item
    return { ...rest, name: names.register({ name: item["name"], namespace, custom: false }) }
  }
  if (item["type"] === "custom_tool_call") {
    const { namespace: _, ...rest } = item
    return { ...rest, name: names.register({ name: item["name"], namespace, custom: true }) }
  }
  return item
}

/**
 * The body with Codex's tool forms flattened, and the names to map the answer back with. The
 * body is returned as it was when it has none of them.
 */
export const flattenResponsesTools = (raw: Json): { readonly raw: Json; readonly names: ToolNames } => {
  const names = new ToolNames()
  const input = raw["input"]
  const items = Array.isArray(input) ? input : undefined
  const extra = (items ?? []).flatMap((item) => isObject(item) && item["type"] === "additional_tools" && Array.isArray(item["tools"]) ? item["tools"] : [])
  const hasAdditional = (items ?? []).some((item) => isObject(item) && item["type"] === "additional_tools")
  const offered = [...(Array.isArray(raw["tools"]) ? raw["tools"] : []), ...extra]
  const needs = hasAdditional ||
    offered.some((tool) => isObject(tool) && (tool["type"] === "custom" || tool["type"] === "namespace")) ||
    (items ?? []).some((item) => isObject(item) && (item["type"] === "custom_tool_call" || (item["type"] === "function_call" && typeof item["namespace"] === "string")))
  if (!needs) return { raw, names }
  for (const tool of offered) if (isObject(tool) && tool["type"] === "function" && typeof tool["name"] === "string") names.reserve(tool["name"])
  const tools = flattenTools(offered, names)
  const next: Json = { ...raw }
  if (tools.length > 0) next["tools"] = tools
  if (items !== undefined) {
    next["input"] = items.filter((item) => !(isObject(item) && item["type"] === "additional_tools")).map((item) => renameCall(item, names))
  }
  const choice = raw["tool_choice"]
  if (isObject(choice) && choice["type"] === "custom" && typeof choice["name"] === "string") {
    next["tool_choice"] = { type: "function", name: names.register({ name: choice["name"], namespace: undefined, custom: true }) }
  }
  return { raw: next, names }
}
