/**
 * The tokenizer's thread (TokenEstimator.ts): loads gpt-tokenizer's o200k_base encoding once
 * (compiling its 200,000 ranks takes 150-300 ms of CPU, which on the gateway's thread would stall
 * every request in flight), then counts one text per message, in slices (./slicing.ts).
 */
import { parentPort } from "node:worker_threads"
import { countSliced, type Counter } from "./slicing.ts"
import type { TokenizerReply, TokenizerTask } from "./tokenizer-protocol.ts"

const port = parentPort
if (port === null) throw new Error("the tokenizer worker must run in a worker thread")

const { countTokens } = await import("gpt-tokenizer/encoding/o200k_base")
const count = countTokens as Counter

port.on("message", (task: TokenizerTask) => {
  let reply: TokenizerReply
  try {
    reply = { id: task.id, ok: true, count: countSliced(count, task.text) }
  } catch (error) {
    reply = { id: task.id, ok: false, error: error instanceof Error ? error.message : String(error) }
  }
  port.postMessage(reply)
})

port.postMessage({ ready: true } satisfies TokenizerReply)
