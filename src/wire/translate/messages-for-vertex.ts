/**
 * A Messages body as Claude on Vertex AI takes it (issue 34). Vertex serves Anthropic's Messages
 * format minus some of Anthropic's newer fields, and refuses those by name
 * (`messages.1.role: Input should be 'user' or 'assistant'`, `messages.1.output_config: Extra
 * inputs are not permitted`), while Claude Code sends them on its own. So, before a Messages body
 * is forwarded to Vertex:
 *
 * - a `role: "system"` message inside `messages` joins the top-level `system`, after what is
 *   there, in order (as Bedrock's Converse takes it); one with `clear_at: "next_user_message"`
 *   is left out once a later user message exists, as Anthropic hides it then;
 * - its `output_config.effort` (a per-turn effort) becomes the request's `output_config.effort`
 *   (the last one set wins: it applies to the answer asked for);
 * - what has no equivalent is left out and returned in `dropped`: a system message's blocks other
 *   than text (`tool_addition` / `tool_removal`, changes of Anthropic's server-side tool list) and
 *   anything else on it besides `role`, `content`, `clear_at` and `output_config.effort`.
 *
 * Everything else is forwarded as the client sent it: the vendor judges its own format.
 */

export interface VertexBody {
  readonly body: Record<string, unknown>
  /** Paths of what was left out, for `x-modelgate-dropped`. */
  readonly dropped: ReadonlyArray<string>
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const SYSTEM_MESSAGE_FIELDS = new Set(["role", "content", "clear_at", "output_config"])

export const messagesForVertex = (raw: Readonly<Record<string, unknown>>): VertexBody => {
  const messages = raw["messages"]
  if (!Array.isArray(messages) || !messages.some((message) => isRecord(message) && message["role"] === "system")) {
    return { body: { ...raw }, dropped: [] }
  }
  const dropped: Array<string> = []
  const folded: Array<Record<string, unknown>> = []
  let effort: unknown
  const lastUser = messages.findLastIndex((message) => isRecord(message) && message["role"] === "user")
  const kept = messages.filter((message, index) => {
    if (!isRecord(message) || message["role"] !== "system") return true
    const path = `messages.${index}`
    for (const key of Object.keys(message)) if (!SYSTEM_MESSAGE_FIELDS.has(key)) dropped.push(`${path}.${key}`)
    const config = message["output_config"]
    if (isRecord(config)) {
      for (const key of Object.keys(config)) {
        if (key !== "effort") dropped.push(`${path}.output_config.${key}`)
        else if (config[key] != null) effort = config[key]
      }
    }
    if (message["clear_at"] === "next_user_message" && index < lastUser) return false
    const content = message["content"]
    if (typeof content === "string") {
      if (content !== "") folded.push({ type: "text", text: content })
    } else if (Array.isArray(content)) {
      content.forEach((block, at) => {
        if (isRecord(block) && block["type"] === "text") folded.push(block)
        else dropped.push(`${path}.content.${at}`)
      })
    }
    return false
  })
  const system = raw["system"]
  const body: Record<string, unknown> = { ...raw, messages: kept }
  if (folded.length > 0) {
    const before = typeof system === "string" ? (system === "" ? [] : [{ type: "text", text: system }]) : Array.isArray(system) ? system : []
    body["system"] = [...before, ...folded]
  }
  if (effort !== undefined) body["output_config"] = { ...(isRecord(raw["output_config"]) ? raw["output_config"] : {}), effort }
  return { body, dropped }
}
