/**
 * Ending a Responses event stream, and following one the gateway forwards unchanged.
 *
 * After the 200 an error can only be said in-band. OpenAI's sequence for that is an `error`
 * event followed by `response.failed` carrying the response with `status: "failed"` and its
 * `error`; both continue the stream's `sequence_number`s. The SDKs raise the `error` event as an
 * API error, so it carries the failure's `code`, `message` and `param`, and any extra fields the
 * caller adds (the gateway's error envelope) ride along on it.
 */
import { Predicate } from "effect"
import { newResponseId } from "./ids.ts"
import type { ResponsesErrorEvent, ResponsesLifecycleEvent, ResponsesResponse } from "./openai-responses.ts"
import { auditUsageFromResponses, responseShell } from "./translate/chat-response-to-responses.ts"
import { nowSeconds } from "./translate/responses.ts"
import { type AuditUsage, emptyAuditUsage } from "./translate/usage.ts"

export interface ResponsesFailure {
  /** Goes to the `error` event's `code` and to `response.error.code`. */
  readonly code: string
  readonly message: string
  readonly param?: string | null
  /** Extra fields for the `error` event (for example the gateway's error envelope). */
  readonly extra?: Readonly<Record<string, unknown>>
}

/** The `error` + `response.failed` pair, numbered from `sequenceNumber`. */
export const responsesFailureEvents = (options: {
  readonly sequenceNumber: number
  readonly response: ResponsesResponse
  readonly failure: ResponsesFailure
}): [ResponsesErrorEvent, ResponsesLifecycleEvent] => {
  const { failure } = options
  return [
    {
      ...failure.extra,
      type: "error",
      code: failure.code,
      message: failure.message,
      param: failure.param ?? null,
      sequence_number: options.sequenceNumber
    },
    {
      type: "response.failed",
      sequence_number: options.sequenceNumber + 1,
      response: {
        ...options.response,
        status: "failed",
        error: { code: failure.code, message: failure.message },
        incomplete_details: null
      }
    }
  ]
}

const TERMINAL = new Set(["response.completed", "response.incomplete", "response.failed"])

/** The events by which a Responses stream says it is done. */
export const isTerminalResponsesEvent = (type: string): boolean => TERMINAL.has(type)

/**
 * Follows the events of a stream forwarded from a provider's own `/responses`: the last
 * `sequence_number`, the latest response snapshot, the usage of the terminal event. So the
 * audit can record usage and a failure can still be told in-band, numbered after the
 * provider's last event.
 */
export class ResponsesPassthroughStream {
  readonly #model: string
  #nextSequence = 0
  #response: ResponsesResponse | undefined
  #usage: AuditUsage = emptyAuditUsage
  #finished = false

  /** `model`: reported in a failure that comes before the provider sent `response.created`. */
  constructor(options: { readonly model: string }) {
    this.#model = options.model
  }

  observe(event: unknown): void {
    if (!Predicate.isObject(event)) return
    const sequence = event["sequence_number"]
    if (typeof sequence === "number" && Number.isFinite(sequence)) {
      this.#nextSequence = Math.max(this.#nextSequence, sequence + 1)
    }
    const response = event["response"]
    if (Predicate.isString(event["type"]) && Predicate.isObject(response)) {
      this.#response = response as unknown as ResponsesResponse
      if (TERMINAL.has(event["type"])) {
        this.#finished = true
        this.#usage = auditUsageFromResponses(response["usage"] as Parameters<typeof auditUsageFromResponses>[0])
      }
    }
  }

  /** Whether a terminal event (`response.completed`, `.incomplete` or `.failed`) went by. */
  finished(): boolean {
    return this.#finished
  }

  usage(): AuditUsage {
    return this.#usage
  }

  /** The in-band failure, numbered after the last event seen; nothing once the stream finished. */
  fail(failure: ResponsesFailure): Array<ResponsesErrorEvent | ResponsesLifecycleEvent> {
    if (this.#finished) return []
    this.#finished = true
    const response = this.#response ?? responseShell({ model: this.#model, id: newResponseId(), createdAt: nowSeconds() })
    const events = responsesFailureEvents({ sequenceNumber: this.#nextSequence, response, failure })
    this.#nextSequence += events.length
    return events
  }
}
