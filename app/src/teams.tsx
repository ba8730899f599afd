/**
 * Settings -> Teams (issue 33): the teams with their key counts, budgets and shared limits;
 * create, edit, delete (refused while keys are in the team: the API's message says so). Keys
 * join a team in the key form. Budget usage bars come with the budget usage of the admin API.
 */
import { useEffect, useState } from "preact/hooks"
import { ALL_TEAMS, api, type TeamView } from "./api.ts"
import { Dialog, Empty, Field, type FieldErrors, fieldErrors, FormError, fmtNumber, PageHead, valueOf } from "./ui.tsx"

const TEAM_FIELDS = [
  "name",
  "allowed_models",
  "budget.max_credits",
  "budget.max_requests",
  "budget.period",
  "budget",
  "limits.requests_per_minute",
  "limits.concurrent_streams",
  "limits.tokens_per_minute",
  "limits"
]

interface FormState {
  name: string
  models: string
  maxCredits: string
  maxRequests: string
  period: "" | "day" | "week" | "month"
  rpm: string
  streams: string
  tpm: string
}

const initialForm = (team: TeamView | undefined): FormState => ({
  name: team?.name ?? "",
  models: (team?.allowed_models ?? []).join(", "),
  maxCredits: team?.budget?.max_credits != null ? String(team.budget.max_credits) : "",
  maxRequests: team?.budget?.max_requests != null ? String(team.budget.max_requests) : "",
  period: team?.budget?.period ?? "",
  rpm: team?.limits?.requests_per_minute ? String(team.limits.requests_per_minute) : "",
  streams: team?.limits?.concurrent_streams ? String(team.limits.concurrent_streams) : "",
  tpm: team?.limits?.tokens_per_minute ? String(team.limits.tokens_per_minute) : ""
})

/** Numbers are sent as typed (a `0` or `1.5` reaches the API and comes back as its error). */
const numberOrText = (text: string): number | string => (text.trim() !== "" && !Number.isNaN(Number(text)) ? Number(text) : text)

const budgetText = (team: TeamView): string | undefined => {
  const budget = team.budget
  if (budget === null) return undefined
  const parts = [
    budget.max_credits !== null ? `${budget.max_credits.toLocaleString(undefined, { maximumFractionDigits: 6 })} credits` : undefined,
    budget.max_requests !== null ? `${fmtNumber(budget.max_requests)} requests` : undefined
  ].filter(Boolean)
  return `${parts.join(", ")} ${budget.period === null ? "in total" : `per ${budget.period}`}`
}

const limitsText = (team: TeamView): string | undefined => {
  const limits = team.limits
  if (limits === null) return undefined
  return [
    limits.requests_per_minute !== undefined ? `${fmtNumber(limits.requests_per_minute)} req/min` : undefined,
    limits.concurrent_streams !== undefined ? `${fmtNumber(limits.concurrent_streams)} streams` : undefined,
    limits.tokens_per_minute !== undefined ? `${fmtNumber(limits.tokens_per_minute)} tokens/min` : undefined
  ].filter(Boolean).join(", ")
}

const TeamForm = (props: { team?: TeamView; onDone: (saved: TeamView) => void; onCancel: () => void }) => {
  const editing = props.team !== undefined
  const [form, setForm] = useState<FormState>(() => initialForm(props.team))
  const [errors, setErrors] = useState<FieldErrors>({})
  const [busy, setBusy] = useState(false)
  const set = <K extends keyof FormState>(field: K, value: FormState[K]) => {
    setForm((f) => ({ ...f, [field]: value }))
    setErrors({})
  }

  const submit = async (event: Event) => {
    event.preventDefault()
    const models = form.models.split(",").map((m) => m.trim()).filter((m) => m !== "")
    const budget: Record<string, unknown> = {}
    if (form.maxCredits.trim() !== "") budget.max_credits = numberOrText(form.maxCredits)
    if (form.maxRequests.trim() !== "") budget.max_requests = numberOrText(form.maxRequests)
    if (form.period !== "") budget.period = form.period
    const limits: Record<string, unknown> = {}
    if (form.rpm.trim() !== "") limits.requests_per_minute = numberOrText(form.rpm)
    if (form.streams.trim() !== "") limits.concurrent_streams = numberOrText(form.streams)
    if (form.tpm.trim() !== "") limits.tokens_per_minute = numberOrText(form.tpm)
    const body: Record<string, unknown> = {
      name: form.name,
      allowed_models: models.length === 0 ? null : models,
      budget: Object.keys(budget).length === 0 ? null : budget,
      limits: Object.keys(limits).length === 0 ? null : limits
    }
    if (!editing) for (const field of ["allowed_models", "budget", "limits"]) if (body[field] === null) delete body[field]
    setBusy(true)
    setErrors({})
    try {
      props.onDone(editing
        ? await api<TeamView>("PATCH", `/teams/${props.team!.id}`, body)
        : await api<TeamView>("POST", "/teams", body))
    } catch (e) {
      setErrors(fieldErrors(e, TEAM_FIELDS))
    } finally {
      setBusy(false)
    }
  }

  const input = (label: string, field: keyof FormState, error: string | undefined, hint?: string, numeric = true) => (
    <Field label={label} hint={hint} error={error}>
      {(id, d) => (
        <input
          id={id}
          inputMode={numeric ? "decimal" : undefined}
          aria-describedby={d}
          aria-invalid={error ? true : undefined}
          value={form[field]}
          onInput={(e) => set(field, valueOf(e) as never)}
        />
      )}
    </Field>
  )

  return (
    <form class="stack" onSubmit={submit} noValidate>
      <FormError message={errors._form} />
      {input("Name", "name", errors.name, undefined, false)}
      {input("Allowed models", "models", errors.allowed_models, "Names, full ids or patterns such as claude-*, comma separated; a member key may use a model only if both its list and this one allow it. Empty: no narrowing", false)}
      <fieldset class={`field ${errors.budget ? "has-error" : ""}`}>
        <legend>Budget</legend>
        <div class="row">
          {input("Credits", "maxCredits", errors["budget.max_credits"], "Up to 6 decimals; empty: no limit on credits")}
          {input("Requests", "maxRequests", errors["budget.max_requests"], "Empty: no limit on requests")}
          <Field label="Period" hint="UTC; weeks start on Monday" error={errors["budget.period"]}>
            {(id, d) => (
              <select id={id} aria-describedby={d} value={form.period} onChange={(e) => set("period", valueOf(e) as FormState["period"])}>
                <option value="">never resets</option>
                <option value="day">day</option>
                <option value="week">week</option>
                <option value="month">month</option>
              </select>
            )}
          </Field>
        </div>
        {errors.budget && <small class="field-error" role="alert">{errors.budget}</small>}
      </fieldset>
      <fieldset class={`field ${errors.limits ? "has-error" : ""}`}>
        <legend>Limits shared by the team's keys</legend>
        <div class="row">
          {input("Requests per minute", "rpm", errors["limits.requests_per_minute"], "Empty: none for the team")}
          {input("Concurrent streams", "streams", errors["limits.concurrent_streams"], "Empty: none for the team")}
          {input("Tokens per minute", "tpm", errors["limits.tokens_per_minute"], "Empty: none for the team")}
        </div>
        {errors.limits && <small class="field-error" role="alert">{errors.limits}</small>}
      </fieldset>
      <div class="actions">
        <button type="button" onClick={props.onCancel}>Cancel</button>
        <button class="primary" type="submit" disabled={busy}>{editing ? "Save changes" : "Create team"}</button>
      </div>
    </form>
  )
}

const DeleteDialog = (props: { team: TeamView; onDone: () => void; onClose: () => void }) => {
  const [error, setError] = useState<string>()
  const confirm = async () => {
    try {
      await api("DELETE", `/teams/${props.team.id}`)
      props.onDone()
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e))
    }
  }
  return (
    <Dialog title={`Delete “${props.team.name}”?`} onClose={props.onClose}>
      <p>A team can be deleted once no key is in it: move its keys to another team, or out of any, in the key form.</p>
      <FormError message={error} />
      <div class="actions">
        <button type="button" onClick={props.onClose}>Cancel</button>
        <button type="button" class="danger" onClick={confirm}>Delete team</button>
      </div>
    </Dialog>
  )
}

type Modal = { kind: "create" } | { kind: "edit"; team: TeamView } | { kind: "delete"; team: TeamView }

export const TeamsPage = () => {
  const [teams, setTeams] = useState<Array<TeamView>>()
  const [modal, setModal] = useState<Modal>()
  const [error, setError] = useState<string>()
  const [notice, setNotice] = useState<string>()

  const load = async () => {
    try {
      setTeams((await api<{ data: Array<TeamView> }>("GET", ALL_TEAMS)).data)
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e))
    }
  }
  useEffect(() => void load(), [])

  const close = (message?: string) => {
    setModal(undefined)
    if (message !== undefined) setNotice(message)
    void load()
  }

  return (
    <section aria-labelledby="teams-title">
      <PageHead title="Teams">
        <button class="primary" type="button" onClick={() => setModal({ kind: "create" })}>Create team</button>
      </PageHead>
      <FormError message={error} />
      <p class="notice" role="status">{notice}</p>
      {teams === undefined ? <p aria-busy="true">Loading…</p> : teams.length === 0 ? (
        <Empty>No teams yet. A team groups keys under one list of models, a budget and shared limits.</Empty>
      ) : (
        <div class="table-wrap">
          <table class="cards">
            <caption class="sr-only">Teams</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Keys</th>
                <th scope="col">Models</th>
                <th scope="col">Budget</th>
                <th scope="col">Limits</th>
                <th scope="col"><span class="sr-only">Actions</span></th>
              </tr>
            </thead>
            <tbody>
              {teams.map((team) => (
                <tr key={team.id} data-team-id={team.id}>
                  <th scope="row" data-label="Name">{team.name}<div class="muted mono small break">{team.id}</div></th>
                  <td data-label="Keys">{fmtNumber(team.key_count)}</td>
                  <td data-label="Models">{team.allowed_models === null ? <span class="muted">all</span> : team.allowed_models.join(", ")}</td>
                  <td data-label="Budget">{budgetText(team) ?? <span class="muted">none</span>}</td>
                  <td data-label="Limits">{limitsText(team) ?? <span class="muted">none</span>}</td>
                  <td class="row-actions">
                    <div class="action-grid">
                      <button type="button" onClick={() => setModal({ kind: "edit", team })} aria-label={`Edit ${team.name}`}>Edit</button>
                      <button type="button" class="danger" onClick={() => setModal({ kind: "delete", team })} aria-label={`Delete ${team.name}`}>Delete</button>
                    </div>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {modal?.kind === "create" && (
        <Dialog title="Create a team" wide onClose={() => setModal(undefined)}>
          <TeamForm onCancel={() => setModal(undefined)} onDone={(saved) => close(`Created “${saved.name}”.`)} />
        </Dialog>
      )}
      {modal?.kind === "edit" && (
        <Dialog title={`Edit “${modal.team.name}”`} wide onClose={() => setModal(undefined)}>
          <TeamForm team={modal.team} onCancel={() => setModal(undefined)} onDone={(saved) => close(`Saved “${saved.name}”.`)} />
        </Dialog>
      )}
      {modal?.kind === "delete" && (
        <DeleteDialog team={modal.team} onClose={() => setModal(undefined)} onDone={() => close(`Deleted “${modal.team.name}”.`)} />
      )}
    </section>
  )
}
