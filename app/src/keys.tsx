/**
 * Settings -> API keys: list, create (key shown once), edit, rotate, revoke/reactivate, delete.
 * The list is one page at a time (issue 31): a search by name and a status filter go to the
 * admin API, which pages by cursor, so an organisation with tens of thousands of keys gets a
 * page of rows as fast as one with ten.
 */
import { useEffect, useRef, useState } from "preact/hooks"
import { ALL_CONNECTIONS, ALL_TEAMS, api, type ConnectionView, type KeyView, type ModelView, query, type TeamView } from "./api.ts"
import {
  Dialog,
  Empty,
  Field,
  type FieldErrors,
  fieldErrors,
  FormError,
  fmtNumber,
  fromLocalInput,
  PageHead,
  Status,
  ShortTime,
  toLocalInput,
  valueOf
} from "./ui.tsx"

const keyStatus = (key: KeyView): { kind: "ok" | "bad" | "muted"; label: string } => {
  if (!key.is_active) return { kind: "muted", label: "inactive" }
  if (key.expires_at !== null) {
    // A key made outside the admin API (an old CLI) may hold an expiry that is no date at all.
    const expiry = Date.parse(key.expires_at)
    if (Number.isNaN(expiry)) return { kind: "bad", label: "invalid expiry" }
    if (expiry <= Date.now()) return { kind: "bad", label: "expired" }
  }
  if (key.budget !== null && key.budget.used >= key.budget.max_requests) return { kind: "bad", label: "budget used up" }
  return { kind: "ok", label: "active" }
}

const KEY_FIELDS = ["name", "allowed_models", "tools_enabled", "mcp_servers", "budget", "limits.requests_per_minute", "limits.concurrent_streams", "limits", "expires_at", "connections", "team_id"]

interface FormState {
  name: string
  allModels: boolean
  models: Array<string>
  otherModels: string
  tools: boolean
  mcpServers: string
  budget: string
  rpm: string
  streams: string
  expires: string
  grants: Record<number, "" | "read" | "edit">
  /** The team's id; "": none. */
  team: string
}

const initialForm = (key: KeyView | undefined, catalogue: ReadonlyArray<ModelView>): FormState => {
  const known = new Set(catalogue.map((m) => m.name))
  const allowed = key?.allowed_models ?? null
  return {
    name: key?.name ?? "",
    allModels: allowed === null,
    models: (allowed ?? []).filter((m) => known.has(m)),
    otherModels: (allowed ?? []).filter((m) => !known.has(m)).join(", "),
    tools: key?.tools_enabled ?? false,
    mcpServers: (key?.mcp_servers ?? []).join(", "),
    budget: key?.budget ? String(key.budget.max_requests) : "",
    rpm: key?.limits?.requests_per_minute ? String(key.limits.requests_per_minute) : "",
    streams: key?.limits?.concurrent_streams ? String(key.limits.concurrent_streams) : "",
    expires: toLocalInput(key?.expires_at),
    grants: Object.fromEntries((key?.connections ?? []).map((g) => [g.connection_id, g.role])),
    team: key?.team_id ?? ""
  }
}

/** Numbers are sent as typed (a `0` or `1.5` reaches the API and comes back as its error). */
const numberOrText = (text: string): number | string => (text.trim() !== "" && !Number.isNaN(Number(text)) ? Number(text) : text)

const KeyForm = (props: {
  keyView?: KeyView
  catalogue: ReadonlyArray<ModelView>
  connections: ReadonlyArray<ConnectionView>
  teams: ReadonlyArray<TeamView>
  onDone: (saved: KeyView) => void
  onCancel: () => void
}) => {
  const editing = props.keyView !== undefined
  const [form, setForm] = useState<FormState>(() => initialForm(props.keyView, props.catalogue))
  const [errors, setErrors] = useState<FieldErrors>({})
  const [busy, setBusy] = useState(false)
  // Editing a field clears its error (and the form-level one): a corrected value must not keep
  // the old complaint until the next submit.
  const errorFieldsOf: Partial<Record<keyof FormState, ReadonlyArray<string>>> = {
    name: ["name"],
    allModels: ["allowed_models"],
    models: ["allowed_models"],
    otherModels: ["allowed_models"],
    tools: ["tools_enabled"],
    mcpServers: ["mcp_servers"],
    budget: ["budget"],
    rpm: ["limits.requests_per_minute", "limits"],
    streams: ["limits.concurrent_streams", "limits"],
    expires: ["expires_at"],
    grants: ["connections"],
    team: ["team_id"]
  }
  const set = <K extends keyof FormState>(field: K, value: FormState[K]) => {
    setForm((f) => ({ ...f, [field]: value }))
    setErrors((current) => {
      const cleared = [...(errorFieldsOf[field] ?? []), "_form"]
      if (!cleared.some((f) => current[f] !== undefined)) return current
      const next = { ...current }
      for (const f of cleared) delete next[f]
      return next
    })
  }

  const submit = async (event: Event) => {
    event.preventDefault()
    const other = form.otherModels.split(",").map((m) => m.trim()).filter((m) => m !== "")
    const models = form.allModels ? null : [...form.models, ...other]
    const limits: Record<string, number | string> = {}
    if (form.rpm.trim() !== "") limits.requests_per_minute = numberOrText(form.rpm)
    if (form.streams.trim() !== "") limits.concurrent_streams = numberOrText(form.streams)
    const body: Record<string, unknown> = {
      name: form.name,
      allowed_models: models,
      tools_enabled: form.tools,
      mcp_servers: form.mcpServers.split(",").map((m) => m.trim()).filter((m) => m !== ""),
      budget: form.budget.trim() === "" ? null : { max_requests: numberOrText(form.budget) },
      limits: Object.keys(limits).length === 0 ? null : limits,
      expires_at: fromLocalInput(form.expires),
      team_id: form.team === "" ? null : form.team
    }
    if (!editing) {
      for (const field of ["allowed_models", "budget", "limits", "expires_at", "team_id"]) if (body[field] === null) delete body[field]
      body.connections = Object.entries(form.grants)
        .filter(([, role]) => role !== "")
        .map(([id, role]) => ({ connection_id: Number(id), role }))
    }
    setBusy(true)
    setErrors({})
    try {
      const saved = editing
        ? await api<KeyView>("PATCH", `/api-keys/${props.keyView!.id}`, body)
        : await api<KeyView>("POST", "/api-keys", body)
      props.onDone(saved)
    } catch (e) {
      setErrors(fieldErrors(e, KEY_FIELDS))
    } finally {
      setBusy(false)
    }
  }

  const limitError = errors["limits.requests_per_minute"] ?? errors.limits
  return (
    <form class="stack" onSubmit={submit} noValidate>
      <FormError message={errors._form} />
      <Field label="Name" error={errors.name}>
        {(id, d) => (
          <input id={id} aria-describedby={d} aria-invalid={errors.name ? true : undefined} value={form.name} onInput={(e) => set("name", valueOf(e))} />
        )}
      </Field>
      <fieldset class={`field ${errors.allowed_models ? "has-error" : ""}`}>
        <legend>Allowed models</legend>
        <label class="check">
          <input type="checkbox" checked={form.allModels} onChange={(e) => set("allModels", e.currentTarget.checked)} />
          Every model (now and added later)
        </label>
        {!form.allModels && (
          <>
            <div class="checks">
              {props.catalogue.map((m) => (
                <label class="check" key={m.name}>
                  <input
                    type="checkbox"
                    checked={form.models.includes(m.name)}
                    onChange={(e) =>
                      set("models", e.currentTarget.checked ? [...form.models, m.name] : form.models.filter((x) => x !== m.name))}
                  />
                  {m.name} <small class="muted">{m.provider}, {m.credits} credit{m.credits === 1 ? "" : "s"}</small>
                </label>
              ))}
            </div>
            <Field label="Other models or patterns" hint="Names, full ids or patterns such as claude-*, comma separated" error={errors.allowed_models}>
              {(id, d) => <input id={id} aria-describedby={d} value={form.otherModels} onInput={(e) => set("otherModels", valueOf(e))} />}
            </Field>
          </>
        )}
      </fieldset>
      <label class="check">
        <input type="checkbox" checked={form.tools} onChange={(e) => set("tools", e.currentTarget.checked)} />
        Tools enabled (MCP SQL tools at <code>/v1/mcp</code>)
      </label>
      <Field label="MCP servers" hint="Upstream MCP servers (mcp.servers names) this key may use through /v1/mcp, comma separated; empty: none" error={errors.mcp_servers}>
        {(id, d) => <input id={id} aria-describedby={d} value={form.mcpServers} onInput={(e) => set("mcpServers", valueOf(e))} />}
      </Field>
      <div class="row">
        <Field label="Request budget" hint="Empty: no budget" error={errors.budget}>
          {(id, d) => <input id={id} inputMode="numeric" aria-describedby={d} value={form.budget} onInput={(e) => set("budget", valueOf(e))} />}
        </Field>
        <Field label="Requests per minute" hint="Empty: the gateway default" error={limitError}>
          {(id, d) => <input id={id} inputMode="numeric" aria-describedby={d} value={form.rpm} onInput={(e) => set("rpm", valueOf(e))} />}
        </Field>
        <Field label="Concurrent streams" hint="Empty: the gateway default" error={errors["limits.concurrent_streams"]}>
          {(id, d) => <input id={id} inputMode="numeric" aria-describedby={d} value={form.streams} onInput={(e) => set("streams", valueOf(e))} />}
        </Field>
      </div>
      <Field label="Team" hint="A team's models narrow the key's; its budget and limits are shared by its keys" error={errors.team_id}>
        {(id, d) => (
          <select id={id} aria-describedby={d} value={form.team} onChange={(e) => set("team", valueOf(e))}>
            <option value="">No team</option>
            {props.teams.map((t) => <option key={t.id} value={t.id}>{t.name}</option>)}
          </select>
        )}
      </Field>
      <Field label="Expires" hint="Empty: never" error={errors.expires_at}>
        {(id, d) => <input id={id} type="datetime-local" aria-describedby={d} value={form.expires} onInput={(e) => set("expires", valueOf(e))} />}
      </Field>
      {!editing && props.connections.length > 0 && (
        <fieldset class={`field ${errors.connections ? "has-error" : ""}`}>
          <legend>Connection grants</legend>
          {props.connections.map((c) => (
            <div class="grant-row" key={c.id}>
              <label for={`grant-${c.id}`}>{c.name} <small class="muted">#{c.id} {c.dialect}</small></label>
              <select
                id={`grant-${c.id}`}
                value={form.grants[c.id] ?? ""}
                onChange={(e) => set("grants", { ...form.grants, [c.id]: valueOf(e) as "" | "read" | "edit" })}
              >
                <option value="">no access</option>
                <option value="read">read</option>
                <option value="edit">edit</option>
              </select>
            </div>
          ))}
          {errors.connections && <small class="field-error" role="alert">{errors.connections}</small>}
        </fieldset>
      )}
      <div class="actions">
        <button type="button" onClick={props.onCancel}>Cancel</button>
        <button class="primary" type="submit" disabled={busy}>{editing ? "Save changes" : "Create key"}</button>
      </div>
    </form>
  )
}

/** The full key, once: a read-only field, a copy button and a warning that it is not kept. */
const ShownOnce = (props: { title: string; keyView: KeyView; note?: string; onClose: () => void }) => {
  const [copied, setCopied] = useState<boolean | "failed">(false)
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(props.keyView.key ?? "")
      setCopied(true)
    } catch {
      // No clipboard access (an insecure origin, a denied permission): the field stays selectable.
      setCopied("failed")
      document.getElementById("shown-key")?.focus()
    }
  }
  return (
    <Dialog title={props.title} onClose={props.onClose}>
      <p class="warning" role="status">
        <strong>Copy this key now: you will not see it again.</strong> The gateway keeps only its hash.
      </p>
      {props.note && <p>{props.note}</p>}
      <div class="field">
        <label for="shown-key">Key for “{props.keyView.name}”</label>
        <div class="copy-row">
          <input id="shown-key" class="mono" readOnly value={props.keyView.key} onFocus={(e) => e.currentTarget.select()} />
          <button type="button" class="primary" onClick={copy}>{copied === true ? "Copied" : "Copy"}</button>
        </div>
        {copied === "failed" && <small class="field-error" role="alert">Copying is not allowed here: the key is selected, copy it with Ctrl+C or ⌘C.</small>}
      </div>
      <div class="actions">
        <button type="button" onClick={props.onClose}>I have copied it</button>
      </div>
    </Dialog>
  )
}

const RotateDialog = (props: { keyView: KeyView; onDone: (rotated: KeyView, grace: number) => void; onClose: () => void }) => {
  const [grace, setGrace] = useState("")
  const [errors, setErrors] = useState<FieldErrors>({})
  const submit = async (event: Event) => {
    event.preventDefault()
    try {
      const body = grace.trim() === "" ? {} : { grace_seconds: numberOrText(grace) }
      props.onDone(await api<KeyView>("POST", `/api-keys/${props.keyView.id}/rotate`, body), Number(grace) || 0)
    } catch (e) {
      setErrors(fieldErrors(e, ["grace_seconds"]))
    }
  }
  return (
    <Dialog title={`Rotate “${props.keyView.name}”`} onClose={props.onClose}>
      <form class="stack" onSubmit={submit} noValidate>
        <p>A new secret replaces the current one. The key keeps its id, settings, grants and usage.</p>
        <FormError message={errors._form} />
        <Field label="Grace period (seconds)" hint="How long the old secret keeps working; empty or 0: it stops at once" error={errors.grace_seconds}>
          {(id, d) => <input id={id} inputMode="numeric" aria-describedby={d} value={grace} onInput={(e) => {
            setGrace(valueOf(e))
            setErrors({})
          }} />}
        </Field>
        <div class="actions">
          <button type="button" onClick={props.onClose}>Cancel</button>
          <button class="primary" type="submit">Rotate</button>
        </div>
      </form>
    </Dialog>
  )
}

const DeleteDialog = (props: { keyView: KeyView; onDone: () => void; onClose: () => void }) => {
  const [error, setError] = useState<string>()
  const confirm = async () => {
    try {
      await api("DELETE", `/api-keys/${props.keyView.id}`)
      props.onDone()
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e))
    }
  }
  return (
    <Dialog title={`Delete “${props.keyView.name}”?`} onClose={props.onClose}>
      <p>
        Requests with this key will get <code>401 unauthorized</code>. Its usage and audit records stay. This cannot be
        undone; to stop the key for a while, revoke it instead.
      </p>
      <FormError message={error} />
      <div class="actions">
        <button type="button" onClick={props.onClose}>Cancel</button>
        <button type="button" class="danger" onClick={confirm}>Delete key</button>
      </div>
    </Dialog>
  )
}

type Modal =
  | { kind: "create" }
  | { kind: "edit"; key: KeyView }
  | { kind: "shown"; key: KeyView; title: string; note?: string }
  | { kind: "rotate"; key: KeyView }
  | { kind: "delete"; key: KeyView }

/** Rows on one page of the list. */
export const KEYS_PAGE_SIZE = 50

type StatusFilter = "" | "active" | "inactive" | "expired"

export const KeysPage = () => {
  const [keys, setKeys] = useState<Array<KeyView>>()
  const [catalogue, setCatalogue] = useState<Array<ModelView>>([])
  const [connections, setConnections] = useState<Array<ConnectionView>>([])
  const [teams, setTeams] = useState<Array<TeamView>>([])
  const [modal, setModal] = useState<Modal>()
  const [error, setError] = useState<string>()
  const [notice, setNotice] = useState<string>()
  // What is typed in the search box, and the search the list shows (the typing, once it pauses).
  const [typed, setTyped] = useState("")
  const [search, setSearch] = useState("")
  const [status, setStatus] = useState<StatusFilter>("")
  // The cursor of every page up to the one shown (the first page has none): Previous goes back one.
  const [cursors, setCursors] = useState<Array<string | null>>([null])
  const [nextCursor, setNextCursor] = useState<string | null>(null)
  // An answer for a search typed over since is dropped: only the latest request may fill the list.
  const latest = useRef(0)

  const cursor = cursors[cursors.length - 1] ?? null
  const filtered = search !== "" || status !== ""

  const loadPage = async () => {
    const asked = ++latest.current
    try {
      const page = await api<{ data: Array<KeyView>; next_cursor: string | null }>(
        "GET",
        `/api-keys${query({ limit: KEYS_PAGE_SIZE, name: search, status, cursor })}`
      )
      if (asked !== latest.current) return
      setKeys(page.data)
      setNextCursor(page.next_cursor)
    } catch (e) {
      if (asked === latest.current) setError(e instanceof Error ? e.message : String(e))
    }
  }
  useEffect(() => void loadPage(), [search, status, cursor])

  const load = async () => {
    try {
      const [m, c, t] = await Promise.all([
        api<{ data: Array<ModelView> }>("GET", "/models"),
        api<{ data: Array<ConnectionView> }>("GET", ALL_CONNECTIONS),
        api<{ data: Array<TeamView> }>("GET", ALL_TEAMS)
      ])
      setCatalogue(m.data)
      setConnections(c.data)
      setTeams(t.data)
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e))
    }
  }
  useEffect(() => void load(), [])

  useEffect(() => {
    const trimmed = typed.trim()
    if (trimmed === search) return
    const timer = setTimeout(() => {
      setSearch(trimmed)
      setCursors([null])
    }, 250)
    return () => clearTimeout(timer)
  }, [typed])

  const act = async (label: string, run: () => Promise<unknown>) => {
    setError(undefined)
    try {
      await run()
      setNotice(label)
      await loadPage()
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e))
    }
  }

  const pageNumber = cursors.length
  const pager = (keys !== undefined && (pageNumber > 1 || nextCursor !== null)) && (
    <nav class="pager" aria-label="Pages of keys">
      <button type="button" disabled={pageNumber === 1} onClick={() => setCursors((c) => c.slice(0, -1))}>Previous</button>
      <span aria-live="polite">Page {pageNumber}</span>
      <button type="button" disabled={nextCursor === null} onClick={() => nextCursor !== null && setCursors((c) => [...c, nextCursor])}>Next</button>
    </nav>
  )

  return (
    <section aria-labelledby="keys-title">
      <PageHead title="API keys">
        <button class="primary" type="button" onClick={() => setModal({ kind: "create" })}>Create key</button>
      </PageHead>
      <FormError message={error} />
      <p class="notice" role="status">{notice}</p>
      <form class="filters" role="search" aria-label="Find keys" onSubmit={(e) => {
        e.preventDefault()
        setSearch(typed.trim())
        setCursors([null])
      }}>
        <Field label="Name contains">
          {(id) => <input id={id} type="search" maxLength={200} value={typed} onInput={(e) => setTyped(valueOf(e))} />}
        </Field>
        <Field label="Status">
          {(id) => (
            <select id={id} value={status} onChange={(e) => {
              setStatus(valueOf(e) as StatusFilter)
              setCursors([null])
            }}>
              <option value="">any</option>
              <option value="active">active</option>
              <option value="inactive">inactive</option>
              <option value="expired">expired</option>
            </select>
          )}
        </Field>
      </form>
      {keys === undefined ? <p aria-busy="true">Loading…</p> : keys.length === 0 ? (
        filtered || pageNumber > 1 ? <Empty>No keys match.</Empty> : <Empty>No keys yet. Create one to call the gateway.</Empty>
      ) : (
        <div class="table-wrap">
          <table class="cards">
            <caption class="sr-only">API keys</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Key</th>
                <th scope="col">Status</th>
                <th scope="col">Models</th>
                <th scope="col">Tools</th>
                <th scope="col">Budget</th>
                <th scope="col">Last used, created</th>
                <th scope="col"><span class="sr-only">Actions</span></th>
              </tr>
            </thead>
            <tbody>
              {keys.map((key) => {
                const status = keyStatus(key)
                return (
                  <tr key={key.id} data-key-id={key.id}>
                    <th scope="row" data-label="Name">
                      {key.name}
                      <div class="muted mono small break">{key.id}</div>
                      {key.team_id && <div class="small">team {teams.find((t) => t.id === key.team_id)?.name ?? key.team_id}</div>}
                    </th>
                    <td data-label="Key" class="mono nowrap">{key.key_hint}</td>
                    <td data-label="Status"><Status kind={status.kind}>{status.label}</Status></td>
                    <td data-label="Models">{key.allowed_models === null ? <span class="muted">all</span> : key.allowed_models.join(", ") || <span class="muted">none</span>}</td>
                    <td data-label="Tools">{key.tools_enabled ? "on" : "off"}</td>
                    <td data-label="Budget">{key.budget ? `${fmtNumber(key.budget.used)} / ${fmtNumber(key.budget.max_requests)}` : <span class="muted">none</span>}</td>
                    {/* One column for both dates, each on one line: the table fits its card at 1024 px. */}
                    <td data-label="Last used, created">
                      <ShortTime iso={key.last_used_at} />
                      <div class="muted small">created <ShortTime iso={key.created_at} /></div>
                    </td>
                    <td class="row-actions">
                      <div class="action-grid">
                      <button type="button" onClick={() => setModal({ kind: "edit", key })} aria-label={`Edit ${key.name}`}>Edit</button>
                      <button type="button" onClick={() => setModal({ kind: "rotate", key })} aria-label={`Rotate ${key.name}`}>Rotate</button>
                      {key.is_active
                        ? <button type="button" onClick={() => act(`Revoked “${key.name}”.`, () => api("POST", `/api-keys/${key.id}/revoke`))} aria-label={`Revoke ${key.name}`}>Revoke</button>
                        : <button type="button" onClick={() => act(`Reactivated “${key.name}”.`, () => api("PATCH", `/api-keys/${key.id}`, { is_active: true }))} aria-label={`Reactivate ${key.name}`}>Reactivate</button>}
                      {key.budget && key.budget.used > 0 && (
                        <button type="button" onClick={() => act(`Budget of “${key.name}” reset.`, () => api("POST", `/api-keys/${key.id}/budget/reset`))} aria-label={`Reset budget of ${key.name}`}>Reset budget</button>
                      )}
                      <button type="button" class="danger" onClick={() => setModal({ kind: "delete", key })} aria-label={`Delete ${key.name}`}>Delete</button>
                      </div>
                    </td>
                  </tr>
                )
              })}
            </tbody>
          </table>
        </div>
      )}
      {pager}
      {modal?.kind === "create" && (
        <Dialog title="Create an API key" wide onClose={() => setModal(undefined)}>
          <KeyForm
            catalogue={catalogue}
            connections={connections}
            teams={teams}
            onCancel={() => setModal(undefined)}
            onDone={(created) => {
              setModal({ kind: "shown", key: created, title: "Key created" })
              // The new key is the newest: back to the first page, where it is (unless a filter hides it).
              if (cursors.length > 1) setCursors([null])
              else void loadPage()
            }}
          />
        </Dialog>
      )}
      {modal?.kind === "edit" && (
        <Dialog title={`Edit “${modal.key.name}”`} wide onClose={() => setModal(undefined)}>
          <KeyForm
            keyView={modal.key}
            catalogue={catalogue}
            connections={connections}
            teams={teams}
            onCancel={() => setModal(undefined)}
            onDone={(saved) => {
              setModal(undefined)
              setNotice(`Saved “${saved.name}”.`)
              void loadPage()
            }}
          />
        </Dialog>
      )}
      {modal?.kind === "shown" && (
        <ShownOnce title={modal.title} keyView={modal.key} note={modal.note} onClose={() => setModal(undefined)} />
      )}
      {modal?.kind === "rotate" && (
        <RotateDialog
          keyView={modal.key}
          onClose={() => setModal(undefined)}
          onDone={(rotated, grace) => {
            setModal({
              kind: "shown",
              key: rotated,
              title: "Key rotated",
              note: grace > 0 ? `The old secret keeps working for ${grace} seconds.` : "The old secret has stopped working."
            })
            void loadPage()
          }}
        />
      )}
      {modal?.kind === "delete" && (
        <DeleteDialog
          keyView={modal.key}
          onClose={() => setModal(undefined)}
          onDone={() => {
            setNotice(`Deleted “${modal.key.name}”.`)
            setModal(undefined)
            void loadPage()
          }}
        />
      )}
    </section>
  )
}
