/**
 * Stream continuation for Chat Completions clients (issue 20, `routing.stream_continuation`):
 * what was streamed is followed chunk by chunk; the continuation's chunks carry the first
 * stream's id and lose their opening role-only chunk, so the client sees one completion.
 */
import type { ClientEvent, ContinuationSupport } from "../adapter.ts"

/** Said to a provider kind that does not continue a trailing assistant turn by itself. */
export const CONTINUE_INSTRUCTION = "Continue your previous answer exactly where it stopped, without repeating any of it."

interface ChunkLike {
  id?: unknown
  usage?: unknown
  choices?: Array<{ index?: number; delta?: Record<string, unknown> | null; finish_reason?: unknown }>
}

const parse = (event: ClientEvent): ChunkLike | undefined => {
  try {
    const value = event.value ?? JSON.parse(event.data)
    return typeof value === "object" && value !== null ? value as ChunkLike : undefined
  } catch {
    return undefined
  }
}

/** The client's messages with the partial assistant turn (and, where needed, the instruction) appended. */
export const continuedMessages = (messages: unknown, partial: string, prefill: boolean): Array<unknown> => {
  const list = Array.isArray(messages) ? [...messages] : []
  // Anthropic refuses a final assistant turn ending in whitespace; the continuation supplies it.
  list.push({ role: "assistant", content: prefill ? partial.trimEnd() : partial })
  if (!prefill) list.push({ role: "user", content: CONTINUE_INSTRUCTION })
  return list
}

const isEmptyDelta = (delta: Record<string, unknown> | null | undefined) =>
  delta == null || Object.values(delta).every((value) => value == null || value === "")

export const chatContinuation: ContinuationSupport = {
  follower: () => {
    let text = ""
    let blocked = false
    let id: string | undefined
    return {
      observe: (event) => {
        const chunk = parse(event)
        if (chunk === undefined) return
        if (id === undefined && typeof chunk.id === "string") id = chunk.id
        for (const choice of chunk.choices ?? []) {
          // Several choices, or a tool call on the way: no partial turn says where to resume.
          if ((choice.index ?? 0) !== 0) blocked = true
          const delta = choice.delta
          if (delta == null) continue
          if (delta.tool_calls != null || delta.function_call != null) blocked = true
          if (typeof delta.content === "string") text += delta.content
        }
      },
      partial: () => (blocked ? undefined : text),
      continueBody: (raw, partial, kind) =>
        partial === "" ? raw : { ...raw, messages: continuedMessages(raw.messages, partial, kind !== "openai") },
      splice: () => (event) => {
        const chunk = parse(event)
        if (chunk === undefined || !Array.isArray(chunk.choices)) return [event]
        const rewritten: ChunkLike = { ...chunk, ...(id === undefined ? {} : { id }) }
        rewritten.choices = chunk.choices.map((choice) => {
          if (choice.delta == null || !("role" in choice.delta)) return choice
          const { role: _role, ...delta } = choice.delta
          return { ...choice, delta }
        })
        // The continuation's opening (a role and nothing else) would tell the client a new turn began.
        if (rewritten.choices.length > 0 && rewritten.choices.every((c) => isEmptyDelta(c.delta) && c.finish_reason == null) && chunk.usage == null) return []
        return [{ data: JSON.stringify(rewritten) }]
      }
    }
  }
}
