/**
 * Input-token estimates for providers that cannot count them (`POST /v1/messages/count_tokens`
 * toward an OpenAI-kind or echo model), with `gpt-tokenizer`'s o200k_base encoding (the
 * encoding of current OpenAI models; pure JavaScript, no native code).
 *
 * It is an estimate, and it says so in the README: the text of the system prompt, every message
 * (text, tool calls' inputs, tool results, thinking) and the tool definitions is counted, plus a
 * small overhead per message and a flat count per image or document, whose real cost depends on
 * their size. Work is bounded: at most `EXACT_CHARS` characters are tokenized exactly, the rest
 * is extrapolated at the ratio measured on that part, and the tokenizer sees slices of at most
 * `SLICE_CHARS` characters, so the cost is linear (./slicing.ts, issue 22 finding 1).
 *
 * The encoding lives on its own thread (issue 32: no input may hold the event loop more than
 * 50 ms): compiling its 200,000 ranks costs 150-300 ms of CPU, which on the gateway's thread
 * stalled every request in flight when the first count came. The thread is started by the first
 * estimate, not at start (a deployment that never counts never pays its memory); that estimate
 * waits for it without holding the loop, and each estimate after costs the loop a message of at
 * most 32 KB. A thread that cannot start (a broken installation) leaves the estimates to the
 * gateway's own thread, with a warning in the log; one that dies is started again.
 */
import { Context, Effect, Layer } from "effect"
import { Worker } from "node:worker_threads"
import { countSliced, type Counter } from "./slicing.ts"
import type { TokenizerReply, TokenizerTask } from "./tokenizer-protocol.ts"

export { countSliced, SLICE_CHARS } from "./slicing.ts"

const EXACT_CHARS = 32_768
const PER_MESSAGE = 3
const PER_IMAGE = 1_600
const PER_DOCUMENT = 3_000

/** Collects the countable text of a Messages-format request, and the media it references. */
const collect = (body: Record<string, unknown>) => {
  const parts: Array<string> = []
  let media = 0
  let documents = 0
  let messages = 0
  const visitBlock = (block: unknown): void => {
    if (typeof block === "string") return void parts.push(block)
    if (typeof block !== "object" || block === null) return
    const b = block as Record<string, unknown>
    switch (b.type) {
      case "image":
        media++
        return
      case "document":
        documents++
        return
      case "tool_use":
      case "server_tool_use":
        parts.push(String(b.name ?? ""), JSON.stringify(b.input ?? {}))
        return
      case "tool_result":
        if (Array.isArray(b.content)) b.content.forEach(visitBlock)
        else visitBlock(b.content)
        return
      default:
        for (const key of ["text", "thinking"]) if (typeof b[key] === "string") parts.push(b[key] as string)
    }
  }
  const system = body.system
  if (typeof system === "string") parts.push(system)
  else if (Array.isArray(system)) system.forEach(visitBlock)
  if (Array.isArray(body.messages)) {
    for (const message of body.messages) {
      messages++
      const content = (message as { content?: unknown })?.content
      if (Array.isArray(content)) content.forEach(visitBlock)
      else visitBlock(content)
    }
  }
  if (Array.isArray(body.tools)) for (const tool of body.tools) parts.push(JSON.stringify(tool))
  return { text: parts.join("\n"), media, documents, messages }
}

/**
 * What to tokenize of a body (at most EXACT_CHARS characters), how to scale its count to the
 * whole text, and the flat part of the estimate (messages, images, documents).
 */
export const estimateParts = (body: Record<string, unknown>) => {
  const { text, media, documents, messages } = collect(body)
  return {
    sample: text.length <= EXACT_CHARS ? text : text.slice(0, EXACT_CHARS),
    scale: text.length <= EXACT_CHARS ? 1 : text.length / EXACT_CHARS,
    flat: messages * PER_MESSAGE + media * PER_IMAGE + documents * PER_DOCUMENT
  }
}

const combine = (parts: ReturnType<typeof estimateParts>, sampleTokens: number) =>
  (parts.scale === 1 ? sampleTokens : Math.ceil(sampleTokens * parts.scale)) + parts.flat

/** The estimate of `body` with `count` on this thread (tests; the service counts on the tokenizer's thread). */
export const estimateWith = (count: Counter, body: Record<string, unknown>): number => {
  const parts = estimateParts(body)
  return combine(parts, countSliced(count, parts.sample))
}

const loadInProcess = () =>
  import("gpt-tokenizer/encoding/o200k_base").then((m) => m.countTokens as Counter)

/**
 * The thread's own V8 heap: a young generation of 2 MiB instead of V8's default for a new
 * isolate. The encoding's ranks (about 41 MiB of live heap) survive into the old generation at
 * once, and a count allocates little, so a large young generation only held pages: the thread
 * added 115-119 MiB resident after 300 counts of 28,000 characters with the default and 78-90 MiB
 * with 2 MiB, at the same CPU per count (0.6-0.7 ms; issue 38). 1 MiB was slower per count.
 */
const TOKENIZER_LIMITS = { maxYoungGenerationSizeMb: 2 }

/**
 * The tokenizer's thread: started by the first count, unref'd (an idle one never keeps a
 * process alive), one text per message. Counts run in the order they were asked; each is a few
 * milliseconds, so one thread serves the whole process.
 */
export class TokenizerThread {
  private starting: Promise<Worker | undefined> | undefined
  private readonly pending = new Map<number, { readonly resolve: (count: number) => void; readonly reject: (error: Error) => void }>()
  private nextId = 1
  private inProcess: Promise<Counter> | undefined
  private closed = false
  /** Why the estimates run on the gateway's thread, once, for the log. */
  private unsaidFallback: string | undefined
  private readonly workerUrl: URL

  constructor(workerUrl: URL = new URL("./tokenizer-worker.ts", import.meta.url)) {
    this.workerUrl = workerUrl
  }

  /** The tokens of `text` (countSliced with o200k_base); never rejects for a thread that died. */
  async count(text: string): Promise<number> {
    // A thread that dies on this text is started again once; a second death is not the thread's.
    for (let attempt = 0; attempt < 2 && this.inProcess === undefined && !this.closed; attempt++) {
      const worker = await this.started()
      if (worker === undefined) break
      try {
        return await this.ask(worker, text)
      } catch (error) {
        this.unsaidFallback = `the tokenizer thread stopped: ${(error as Error).message}`
      }
    }
    this.inProcess ??= loadInProcess()
    return countSliced(await this.inProcess, text)
  }

  /** A reason to log, once, that estimates run on the gateway's own thread. */
  takeFallback(): string | undefined {
    const reason = this.inProcess === undefined ? undefined : this.unsaidFallback
    if (reason !== undefined) this.unsaidFallback = undefined
    return reason
  }

  /** Whether the thread is started (tests). */
  get running(): boolean {
    return this.starting !== undefined
  }

  async close(): Promise<void> {
    this.closed = true
    const worker = await this.starting
    this.starting = undefined
    this.failPending(new Error("the tokenizer is shut down"))
    await worker?.terminate()
  }

  private ask(worker: Worker, text: string): Promise<number> {
    return new Promise((resolve, reject) => {
      const id = this.nextId++
      this.pending.set(id, { resolve, reject })
      worker.postMessage({ id, text } satisfies TokenizerTask)
    })
  }

  private failPending(error: Error): void {
    const pending = [...this.pending.values()]
    this.pending.clear()
    for (const { reject } of pending) reject(error)
  }

  private started(): Promise<Worker | undefined> {
    this.starting ??= new Promise((resolve) => {
      let ready = false
      let worker: Worker
      try {
        worker = new Worker(this.workerUrl, { resourceLimits: TOKENIZER_LIMITS })
      } catch (error) {
        this.unsaidFallback = `the tokenizer thread could not start: ${(error as Error).message}`
        return resolve(undefined)
      }
      worker.unref()
      worker.on("message", (reply: TokenizerReply) => {
        if ("ready" in reply) {
          ready = true
          return resolve(worker)
        }
        const pending = this.pending.get(reply.id)
        if (pending === undefined) return
        this.pending.delete(reply.id)
        if (reply.ok) pending.resolve(reply.count)
        else pending.reject(new Error(reply.error))
      })
      const died = (reason: string) => {
        if (!ready) {
          // It cannot even load the encoding: a second try will not do better, so the estimates
          // stay on this thread (this.starting stays resolved to undefined).
          this.unsaidFallback = `the tokenizer thread could not start: ${reason}`
          return resolve(undefined)
        }
        worker.removeAllListeners()
        worker.on("error", () => undefined)
        void worker.terminate()
        if (!this.closed) this.starting = undefined
        this.failPending(new Error(reason))
      }
      worker.on("error", (error) => died(error instanceof Error ? error.message : String(error)))
      worker.on("exit", (code) => died(`it exited with code ${code}`))
    })
    return this.starting
  }
}

/** How many characters of a text `textTokens` counts exactly; a caller keeps no more than this of it. */
export const TEXT_SAMPLE_CHARS = EXACT_CHARS

export class TokenEstimator extends Context.Service<TokenEstimator, {
  /** Estimated input tokens of a Messages-format request body. */
  readonly messagesInput: (body: Record<string, unknown>) => Effect.Effect<number>
  /** Estimated tokens of a text of `totalChars` characters whose first ones are `sample` (the first EXACT_CHARS counted, the rest extrapolated at their ratio): the gateway's own count of a stream cut before its usage (issue 33). */
  readonly textTokens: (sample: string, totalChars: number) => Effect.Effect<number>
}>()("modelgate/TokenEstimator") {
  static readonly layer = Layer.effect(
    TokenEstimator,
    Effect.gen(function*() {
      const thread = new TokenizerThread()
      yield* Effect.addFinalizer(() => Effect.promise(() => thread.close()))
      const warnFallback = Effect.suspend(() => {
        const fallback = thread.takeFallback()
        return fallback === undefined ? Effect.void : Effect.logWarning(`token estimates run on the gateway's thread: ${fallback}`)
      })
      return TokenEstimator.of({
        messagesInput: Effect.fnUntraced(function*(body) {
          const parts = estimateParts(body)
          const tokens = yield* Effect.promise(() => thread.count(parts.sample))
          yield* warnFallback
          return combine(parts, tokens)
        }),
        textTokens: Effect.fnUntraced(function*(sample, totalChars) {
          const exact = sample.length <= EXACT_CHARS ? sample : sample.slice(0, EXACT_CHARS)
          if (exact.length === 0) return 0
          const tokens = yield* Effect.promise(() => thread.count(exact))
          yield* warnFallback
          return totalChars <= exact.length ? tokens : Math.ceil(tokens * (totalChars / exact.length))
        })
      })
    })
  )
}
