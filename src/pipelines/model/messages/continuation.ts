/**
 * Stream continuation for Messages clients (issue 20): the continuation's `message_start` is
 * dropped, its first text block is merged into the text block the cut left open, and the
 * indices of its blocks carry on from the client's, so the client sees one message.
 */
import type { ClientEvent, ContinuationSupport } from "../adapter.ts"
import { continuedMessages } from "../chat/continuation.ts"

interface EventLike {
  type?: unknown
  index?: number
  content_block?: { type?: unknown }
  delta?: { type?: unknown; text?: unknown }
}

const parse = (event: ClientEvent): EventLike | undefined => {
  try {
    const value = event.value ?? JSON.parse(event.data)
    return typeof value === "object" && value !== null ? value as EventLike : undefined
  } catch {
    return undefined
  }
}

const withIndex = (event: EventLike, index: number): ClientEvent => {
  const value = { ...event, index }
  return { event: String(event.type), data: JSON.stringify(value), value }
}

export const messagesContinuation: ContinuationSupport = {
  follower: () => {
    let text = ""
    let blocked = false
    let blocks = 0
    let open: { index: number; type: unknown } | undefined
    return {
      observe: (event) => {
        const e = parse(event)
        if (e === undefined) return
        if (e.type === "content_block_start") {
          blocks++
          open = { index: e.index ?? blocks - 1, type: e.content_block?.type }
          // Only text resumes: a tool call or thinking half-streamed cannot be continued.
          if (e.content_block?.type !== "text") blocked = true
        } else if (e.type === "content_block_delta") {
          if (e.delta?.type === "text_delta" && typeof e.delta.text === "string") text += e.delta.text
          else blocked = true
        } else if (e.type === "content_block_stop") {
          open = undefined
        }
      },
      partial: () => (blocked ? undefined : text),
      continueBody: (raw, partial, kind) =>
        partial === "" ? raw : { ...raw, messages: continuedMessages(raw.messages, partial, kind !== "openai") },
      splice: () => {
        let offset: number | undefined
        return (event) => {
          const e = parse(event)
          if (e === undefined) return [event]
          switch (e.type) {
            case "message_start":
              return []
            case "content_block_start": {
              if (offset !== undefined) return [withIndex(e, (e.index ?? 0) + offset)]
              if (open !== undefined && open.type === "text" && e.index === 0 && e.content_block?.type === "text") {
                offset = open.index
                return []
              }
              const closing = open === undefined ? [] : [withIndex({ type: "content_block_stop" }, open.index)]
              offset = blocks
              return [...closing, withIndex(e, (e.index ?? 0) + offset)]
            }
            case "content_block_delta":
            case "content_block_stop":
              return [withIndex(e, (e.index ?? 0) + (offset ?? 0))]
            default:
              return [event]
          }
        }
      }
    }
  }
}
