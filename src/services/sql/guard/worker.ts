/**
 * A guard worker thread: loads both dialects' parsers once, then classifies one statement per
 * message. It holds no state between statements, so the pool can terminate it mid-parse (a
 * statement over its time budget) and start another without losing anything.
 */
import { parentPort } from "node:worker_threads"
import { classifyExplainLoaded, classifyStatementLoaded, preloadGuard } from "./index.ts"
import type { GuardReply, GuardTask } from "./protocol.ts"

const port = parentPort
if (port === null) throw new Error("the SQL guard worker must run in a worker thread")

await preloadGuard()
// The first statement each parser reads costs 25-50 ms more than the next (its code is compiled
// and its caches filled then), ten times that on a loaded machine: paid here, before the worker
// says it is ready, it never counts against a statement's time budget (a worker that replaced
// one retired mid-parse refused the next ordinary statement as too complex under load).
for (const dialect of ["postgres", "mysql"] as const) classifyStatementLoaded(dialect, "SELECT 1 AS warm_up")

port.on("message", (task: GuardTask) => {
  let reply: GuardReply
  try {
    const result = task.op === "explain"
      ? classifyExplainLoaded(task.dialect, task.sql, { analyze: task.analyze })
      : classifyStatementLoaded(task.dialect, task.sql)
    reply = { id: task.id, ok: true, result }
  } catch (error) {
    // The analyzers fail closed on their own; this is a bug, reported to the pool as such.
    reply = { id: task.id, ok: false, error: error instanceof Error ? error.message : String(error) }
  }
  port.postMessage(reply)
})

port.postMessage({ ready: true } satisfies GuardReply)
