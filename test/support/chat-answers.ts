/**
 * The chat completion a scripted provider answers with (test/pipelines/scripted.test.ts shows the
 * scripted layer): one shape for the suite instead of a literal per file. `usage` is
 * [prompt_tokens, completion_tokens]; the total is their sum.
 */
import type { ChatResponse } from "../../src/wire/openai-chat.ts"

export const chatCompletion = (
  content = "ok",
  options: { readonly id?: string; readonly usage?: readonly [number, number] } = {}
): ChatResponse => {
  const [prompt, completion] = options.usage ?? [1, 1]
  return {
    id: options.id ?? "chatcmpl-r",
    object: "chat.completion",
    created: 1,
    model: "up",
    choices: [{ index: 0, message: { role: "assistant", content }, logprobs: null, finish_reason: "stop" }],
    usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion }
  } as ChatResponse
}
