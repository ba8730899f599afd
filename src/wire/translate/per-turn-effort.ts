import type { MessagesMessage, MessagesRequest } from "../anthropic-messages.ts"

/**
 * The effort the next answer is asked at (issue 34). Claude Code sends `output_config.effort` on
 * a `role: "system"` message inside `messages` (a per-turn effort, which applies from that point
 * of the conversation on); the request's own `output_config.effort` applies until one does. So the
 * last per-turn effort wins, else the request's. Targets without per-turn efforts (Chat
 * Completions, Converse, Gemini, Vertex) take it as the request's effort or thinking budget: the
 * answer being asked for is the one after the last system message.
 */
export const effectiveEffort = (request: Pick<MessagesRequest, "messages" | "output_config">): string | undefined => {
  for (let index = request.messages.length - 1; index >= 0; index--) {
    const message: MessagesMessage = request.messages[index]!
    if (message.role === "system" && message.output_config?.effort != null) return message.output_config.effort
  }
  return request.output_config?.effort ?? undefined
}
