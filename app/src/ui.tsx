/** Small shared pieces: labelled fields with their error, dialogs, formatting. */
import type { ComponentChildren, TargetedEvent } from "preact"
import { useEffect, useRef } from "preact/hooks"
import { ApiError } from "./api.ts"

/** Errors keyed by field path; `_form` for those that name no field. */
export type FieldErrors = Record<string, string>

/**
 * Puts an API error next to the field it names. `fields` maps a field path prefix (`budget`)
 * to the form field showing it; anything else goes to the form-level message.
 */
export const fieldErrors = (error: unknown, fields: ReadonlyArray<string>): FieldErrors => {
  if (!(error instanceof ApiError)) return { _form: String(error instanceof Error ? error.message : error) }
  const path = error.field ?? /^([a-z_][\w.]*):/.exec(error.message)?.[1]
  if (path !== undefined) {
    const match = fields.find((f) => path === f || path.startsWith(`${f}.`))
    if (match !== undefined) return { [match]: error.message }
  }
  return { _form: error.message }
}

let ids = 0
const useId = () => {
  const ref = useRef<string | undefined>(undefined)
  if (ref.current === undefined) ref.current = `f${++ids}`
  return ref.current
}

export const Field = (props: {
  label: string
  error?: string | undefined
  hint?: string
  children: (id: string, describedBy: string | undefined) => ComponentChildren
  class?: string
}) => {
  const id = useId()
  const hintId = props.hint ? `${id}-hint` : undefined
  const errorId = props.error ? `${id}-error` : undefined
  const describedBy = [hintId, errorId].filter(Boolean).join(" ") || undefined
  return (
    <div class={`field ${props.class ?? ""} ${props.error ? "has-error" : ""}`}>
      <label for={id}>{props.label}</label>
      {props.children(id, describedBy)}
      {props.hint && <small id={hintId} class="hint">{props.hint}</small>}
      {props.error && <small id={errorId} class="field-error" role="alert">{props.error}</small>}
    </div>
  )
}

export const FormError = (props: { message?: string | undefined }) =>
  props.message ? <p class="form-error" role="alert">{props.message}</p> : null

/** A modal <dialog>: the browser traps focus, Escape closes it, focus returns to the opener. */
export const Dialog = (props: { title: string; onClose: () => void; children: ComponentChildren; wide?: boolean }) => {
  const ref = useRef<HTMLDialogElement>(null)
  // Closing on unmount fires `close` later; by then the owner may show another dialog, which a
  // late onClose from this one must not dismiss.
  const mounted = useRef(true)
  useEffect(() => {
    const dialog = ref.current
    if (dialog && !dialog.open) dialog.showModal()
    return () => {
      mounted.current = false
      dialog?.close()
    }
  }, [])
  return (
    <dialog ref={ref} class={props.wide ? "wide" : ""} aria-labelledby="dialog-title" onClose={() => mounted.current && props.onClose()}>
      <div class="dialog-head">
        <h2 id="dialog-title">{props.title}</h2>
        <button type="button" class="icon" aria-label="Close" onClick={props.onClose}>×</button>
      </div>
      {props.children}
    </dialog>
  )
}

export const fmtTime = (iso: string | null | undefined, seconds = false): string => {
  if (!iso) return "never"
  const date = new Date(iso)
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString(undefined, { dateStyle: "medium", timeStyle: seconds ? "medium" : "short" })
}

/**
 * A date and time short enough for a table cell on one line ("11/26/26, 3:28 AM" in en-US, in the
 * browser's locale); the cell's title holds the long form.
 */
export const fmtShortTime = (iso: string | null | undefined): string => {
  if (!iso) return "never"
  const date = new Date(iso)
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString(undefined, { dateStyle: "short", timeStyle: "short" })
}

/** A time on one line, short; its full form in the tooltip. */
export const ShortTime = (props: { iso: string | null | undefined }) =>
  props.iso
    ? <time class="nowrap" dateTime={props.iso} title={fmtTime(props.iso, true)}>{fmtShortTime(props.iso)}</time>
    : <span class="nowrap">never</span>

export const fmtNumber = (n: number): string => n.toLocaleString()

export const Empty = (props: { children: ComponentChildren }) => <p class="empty">{props.children}</p>

export const PageHead = (props: { title: string; children?: ComponentChildren }) => (
  <div class="page-head">
    <h1 tabIndex={-1}>{props.title}</h1>
    <div class="page-actions">{props.children}</div>
  </div>
)

export type InputEvent = TargetedEvent<HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement, Event>
export const valueOf = (event: InputEvent) => event.currentTarget.value

/** `datetime-local` value (local time) from an ISO instant, and back. */
export const toLocalInput = (iso: string | null | undefined): string => {
  if (!iso) return ""
  const d = new Date(iso)
  const pad = (n: number) => String(n).padStart(2, "0")
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`
}
export const fromLocalInput = (value: string): string | null => (value === "" ? null : new Date(value).toISOString())

export const Status = (props: { kind: "ok" | "warn" | "bad" | "muted"; children: ComponentChildren }) => (
  <span class={`badge badge-${props.kind}`}>{props.children}</span>
)

/**
 * A budget's use in its current period as bars (issue 33): credits and requests, whichever it
 * limits, each with what is used of the maximum; when it resets. A bar near or at its end is
 * marked, so a used-up budget stands out in a list.
 */
export const BudgetBars = (props: { budget: import("./api.ts").BudgetView | null }) => {
  const budget = props.budget
  if (budget === null) return <span class="muted">none</span>
  const bar = (label: string, used: number, max: number, text: string) => {
    const share = max > 0 ? Math.min(1, used / max) : 1
    return (
      <div class="budget-bar">
        <meter min={0} max={1} low={0.8} high={0.99} optimum={0} value={share} aria-label={`${label}: ${text}`} />
        <span class="small">{text}</span>
      </div>
    )
  }
  const credits = (n: number) => n.toLocaleString(undefined, { maximumFractionDigits: 6 })
  return (
    <div>
      {budget.max_credits !== null && bar("Credits", budget.used_credits, budget.max_credits, `${credits(budget.used_credits)} / ${credits(budget.max_credits)} credits`)}
      {budget.max_requests !== null && bar("Requests", budget.used_requests, budget.max_requests, `${fmtNumber(budget.used_requests)} / ${fmtNumber(budget.max_requests)} requests`)}
      <div class="muted small" title={budget.resets_at === null ? undefined : `resets ${new Date(budget.resets_at).toLocaleString()}`}>
        {budget.period === null ? "in total" : `per ${budget.period}`}
      </div>
    </div>
  )
}
