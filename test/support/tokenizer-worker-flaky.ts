/**
 * A stand-in for the tokenizer's thread (src/services/tokens/tokenizer-worker.ts) for
 * test/services/tokens/tokenizer-thread.test.ts: counts characters, and exits when asked to
 * count "die" (a thread that dies mid-count).
 */
import { parentPort } from "node:worker_threads"
import type { TokenizerReply, TokenizerTask } from "../../src/services/tokens/tokenizer-protocol.ts"

const port = parentPort!
port.on("message", (task: TokenizerTask) => {
  if (task.text === "die") process.exit(3)
  port.postMessage({ id: task.id, ok: true, count: task.text.length } satisfies TokenizerReply)
})
port.postMessage({ ready: true } satisfies TokenizerReply)
