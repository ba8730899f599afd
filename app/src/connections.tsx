/** Connections: databases for the SQL tools (DSNs redacted), add, test, and grants per key. */
import { useEffect, useState } from "preact/hooks"
import { ALL_CONNECTIONS, api, KEY_CHOICES, ApiError, type ConnectionView, type KeyView } from "./api.ts"
import { Dialog, Empty, Field, type FieldErrors, fieldErrors, FormError, PageHead, Status, valueOf } from "./ui.tsx"

interface ProbeResult {
  role: "edit" | "read"
  url: string
  ok: boolean
  version?: string
  flavor?: string
  error?: { error: string; message: string; details?: { hop: "ssh" | "database"; reason?: string } }
  duration_ms: number
}

const AddConnection = (props: { onAdded: () => void; nextId: number }) => {
  const empty = { name: "", dialect: "postgres", url: "", read_url: "", default_schema: "", environment: "development", ssh: "" }
  const [form, setForm] = useState({ id: String(props.nextId), ...empty })
  const [errors, setErrors] = useState<FieldErrors>({})
  const set = (field: keyof typeof form, value: string) => {
    setForm((f) => ({ ...f, [field]: value }))
    // A corrected field drops its error at once, not at the next submit.
    setErrors(({ [field]: _, _form: __, ...rest }) => rest)
  }
  const submit = async (event: Event) => {
    event.preventDefault()
    setErrors({})
    // The tunnel is the admin API's `ssh` object, typed as JSON (README: "Databases behind a bastion").
    let ssh: unknown
    try {
      ssh = form.ssh.trim() === "" ? undefined : JSON.parse(form.ssh)
    } catch {
      return setErrors({ ssh: "Expected a JSON object, e.g. {\"host\": \"bastion\", \"user\": \"tunnel\", ...}" })
    }
    try {
      await api("POST", "/connections", {
        id: Number(form.id),
        name: form.name,
        dialect: form.dialect,
        url: form.url,
        ...(form.read_url ? { read_url: form.read_url } : {}),
        ...(form.default_schema ? { default_schema: form.default_schema } : {}),
        environment: form.environment,
        ...(ssh === undefined ? {} : { ssh })
      })
      setForm({ id: String(Number(form.id) + 1), ...empty })
      props.onAdded()
    } catch (e) {
      const mapped = fieldErrors(e, ["id", "name", "dialect", "url", "read_url", "default_schema", "environment", "ssh"])
      // A taken id is a 409 naming no field, but it is about the id.
      if (e instanceof ApiError && e.slug === "conflict") setErrors({ id: e.message })
      else setErrors(mapped)
    }
  }
  const text = (field: keyof typeof form, label: string, hint?: string) => (
    <Field label={label} error={errors[field]} hint={hint}>
      {(id, d) => (
        <input id={id} aria-describedby={d} aria-invalid={errors[field] ? true : undefined} value={form[field]} onInput={(e) => set(field, valueOf(e))} />
      )}
    </Field>
  )
  return (
    <form class="card stack" onSubmit={submit} noValidate aria-labelledby="add-connection">
      <h2 id="add-connection">Add a connection</h2>
      <FormError message={errors._form} />
      <div class="row">
        {text("id", "Id")}
        {text("name", "Name")}
        <Field label="Dialect" error={errors.dialect}>
          {(id) => (
            <select id={id} value={form.dialect} onChange={(e) => set("dialect", valueOf(e))}>
              <option value="postgres">Postgres</option>
              <option value="mysql">MySQL / MariaDB</option>
            </select>
          )}
        </Field>
      </div>
      {text("url", "URL (edit role)", "postgres://user:password@host:5432/db; the password is never shown again")}
      {text("read_url", "Read URL (read role)", "Optional: a read-only database user; recommended")}
      {text("default_schema", "Default schema", "Optional")}
      <Field label="Environment" error={errors.environment} hint="Production refuses schema changes for every key">
        {(id, d) => (
          <select id={id} aria-describedby={d} value={form.environment} onChange={(e) => set("environment", valueOf(e))}>
            <option value="development">Development</option>
            <option value="production">Production</option>
          </select>
        )}
      </Field>
      {text("ssh", "SSH tunnel (JSON)", "Optional: {\"host\", \"user\", \"private_key_file\" or \"password_env\", \"host_key_sha256\" or \"known_hosts_file\"}")}
      <div class="actions">
        <button class="primary" type="submit">Add connection</button>
      </div>
    </form>
  )
}

/**
 * Edits a connection added through the admin API. The URLs are shown redacted, so they start
 * empty: a field left empty keeps what is stored (the usual change is a rotated password).
 */
const EditConnection = (props: { connection: ConnectionView; onDone: (message: string) => void; onClose: () => void }) => {
  const c = props.connection
  const [form, setForm] = useState({
    name: c.name, dialect: c.dialect, url: "", read_url: "", default_schema: c.default_schema ?? "", environment: c.environment, clear_read_url: false
  })
  const [errors, setErrors] = useState<FieldErrors>({})
  const set = (field: keyof typeof form, value: string | boolean) => {
    setForm((f) => ({ ...f, [field]: value }))
    // A corrected field loses its error at once, not at the next submit.
    setErrors(({ [field]: _, ...rest }) => rest)
  }
  const submit = async (event: Event) => {
    event.preventDefault()
    const change: Record<string, unknown> = {}
    if (form.name !== c.name) change.name = form.name
    if (form.dialect !== c.dialect) change.dialect = form.dialect
    if (form.url !== "") change.url = form.url
    if (form.clear_read_url) change.read_url = null
    else if (form.read_url !== "") change.read_url = form.read_url
    if (form.default_schema !== (c.default_schema ?? "")) change.default_schema = form.default_schema === "" ? null : form.default_schema
    if (form.environment !== c.environment) change.environment = form.environment
    if (Object.keys(change).length === 0) return setErrors({ _form: "Nothing changed." })
    try {
      await api("PATCH", `/connections/${c.id}`, change)
      props.onDone(`Saved “${form.name}”.`)
    } catch (e) {
      setErrors(fieldErrors(e, ["name", "dialect", "url", "read_url", "default_schema"]))
    }
  }
  const text = (field: "name" | "url" | "read_url" | "default_schema", label: string, hint?: string) => (
    <Field label={label} error={errors[field]} hint={hint}>
      {(id, d) => (
        <input id={id} aria-describedby={d} aria-invalid={errors[field] ? true : undefined} value={form[field]} onInput={(e) => set(field, valueOf(e))} />
      )}
    </Field>
  )
  return (
    <Dialog title={`Edit “${c.name}”`} onClose={props.onClose}>
      <form class="stack" onSubmit={submit} noValidate aria-label={`Edit ${c.name}`}>
        <FormError message={errors._form} />
        {text("name", "Name")}
        <Field label="Dialect" error={errors.dialect}>
          {(id) => (
            <select id={id} value={form.dialect} onChange={(e) => set("dialect", valueOf(e))}>
              <option value="postgres">Postgres</option>
              <option value="mysql">MySQL / MariaDB</option>
            </select>
          )}
        </Field>
        {text("url", "New URL (edit role)", `Now ${c.url}; leave empty to keep it`)}
        {text("read_url", "New read URL (read role)", c.read_url === null ? "None now: the URL serves reads" : `Now ${c.read_url}; leave empty to keep it`)}
        {c.read_url !== null && (
          <label class="check">
            <input type="checkbox" checked={form.clear_read_url} onChange={(e) => set("clear_read_url", (e.target as HTMLInputElement).checked)} />
            Remove the read URL
          </label>
        )}
        {text("default_schema", "Default schema", "Empty: none")}
        <Field label="Environment" error={errors.environment}>
          {(id) => (
            <select id={id} value={form.environment} onChange={(e) => set("environment", valueOf(e))}>
              <option value="development">Development</option>
              <option value="production">Production (refuses schema changes)</option>
            </select>
          )}
        </Field>
        <div class="actions">
          <button type="button" onClick={props.onClose}>Cancel</button>
          <button class="primary" type="submit">Save</button>
        </div>
      </form>
    </Dialog>
  )
}

const DeleteConnection = (props: { connection: ConnectionView; onDone: (message: string) => void; onClose: () => void }) => {
  const [error, setError] = useState<string>()
  const confirm = async () => {
    try {
      await api("DELETE", `/connections/${props.connection.id}`)
      props.onDone(`Deleted “${props.connection.name}”.`)
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e))
    }
  }
  return (
    <Dialog title={`Delete “${props.connection.name}”?`} onClose={props.onClose}>
      <p>Every key's grant on it goes too; the SQL tools stop offering it. Its query history and audit records stay.</p>
      <FormError message={error} />
      <div class="actions">
        <button type="button" onClick={props.onClose}>Cancel</button>
        <button type="button" class="danger" onClick={confirm}>Delete connection</button>
      </div>
    </Dialog>
  )
}

const Grants = (props: { keys: ReadonlyArray<KeyView>; connections: ReadonlyArray<ConnectionView>; onChanged: () => void }) => {
  const [keyId, setKeyId] = useState(props.keys[0]?.id ?? "")
  const [roles, setRoles] = useState<Record<number, string>>({})
  const [messages, setMessages] = useState<Record<number, { kind: "ok" | "error"; text: string; conflict?: boolean }>>({})
  const key = props.keys.find((k) => k.id === keyId)
  const held = (connectionId: number) => key?.connections?.find((g) => g.connection_id === connectionId)?.role

  useEffect(() => {
    setRoles({})
    setMessages({})
  }, [keyId])

  const save = async (connectionId: number) => {
    const role = roles[connectionId] ?? held(connectionId) ?? "read"
    try {
      await api("PUT", `/api-keys/${keyId}/connections/${connectionId}`, { role })
      setMessages({ ...messages, [connectionId]: { kind: "ok", text: `Granted ${role}.` } })
      props.onChanged()
    } catch (e) {
      const conflict = e instanceof ApiError && e.status === 409
      setMessages({ ...messages, [connectionId]: { kind: "error", text: e instanceof Error ? e.message : String(e), conflict } })
    }
  }
  const revoke = async (connectionId: number) => {
    try {
      await api("DELETE", `/api-keys/${keyId}/connections/${connectionId}`)
      setMessages({ ...messages, [connectionId]: { kind: "ok", text: "Grant revoked." } })
      setRoles({ ...roles, [connectionId]: "" })
      props.onChanged()
    } catch (e) {
      setMessages({ ...messages, [connectionId]: { kind: "error", text: e instanceof Error ? e.message : String(e) } })
    }
  }

  if (props.keys.length === 0) return <Empty>Create a key first to grant it connections.</Empty>
  return (
    <div class="card stack" aria-labelledby="grants-title">
      <h2 id="grants-title">Grants per key</h2>
      <p class="muted">
        A role can only be raised here (read → edit). Lowering one is refused with <code>409 conflict</code>: a grant
        that silently weakens access is usually a mistake, so revoke the grant first, then grant the lower role.
      </p>
      <Field label="Key">
        {(id) => (
          <select id={id} value={keyId} onChange={(e) => setKeyId(valueOf(e))}>
            {props.keys.map((k) => <option value={k.id} key={k.id}>{k.name} ({k.key_hint})</option>)}
          </select>
        )}
      </Field>
      {key && !key.tools_enabled && <p class="warning">This key has tools disabled: its grants apply once tools are enabled.</p>}
      <div class="table-wrap">
        <table class="cards" aria-label="Grants of the key">
          <thead>
            <tr><th scope="col">Connection</th><th scope="col">Holds</th><th scope="col">Role</th><th scope="col"><span class="sr-only">Actions</span></th></tr>
          </thead>
          <tbody>
            {props.connections.map((c) => {
              const message = messages[c.id]
              return [
                <tr key={c.id} data-connection-id={c.id}>
                  <th scope="row" data-label="Connection">{c.name} <span class="muted">#{c.id}</span></th>
                  <td data-label="Holds">{held(c.id) ?? <span class="muted">no access</span>}</td>
                  <td data-label="Role">
                    <label class="sr-only" for={`role-${c.id}`}>Role on {c.name}</label>
                    <select id={`role-${c.id}`} value={roles[c.id] ?? held(c.id) ?? "read"} onChange={(e) => setRoles({ ...roles, [c.id]: valueOf(e) })}>
                      <option value="read">read</option>
                      <option value="edit">edit</option>
                    </select>
                  </td>
                  <td class="row-actions">
                    <button type="button" onClick={() => save(c.id)}>Grant</button>
                    {held(c.id) && <button type="button" class="danger" onClick={() => revoke(c.id)}>Revoke grant</button>}
                  </td>
                </tr>,
                message && (
                  <tr key={`${c.id}-message`} class="message-row">
                    <td colSpan={4}>
                      <div class={message.kind === "ok" ? "ok-text" : "field-error"} role={message.kind === "ok" ? "status" : "alert"}>
                        {message.text}
                        {message.conflict && (
                          <p class="explain">
                            Roles only go up through a grant. To lower this key to {roles[c.id]}, use “Revoke grant”, then grant {roles[c.id]}.
                          </p>
                        )}
                      </div>
                    </td>
                  </tr>
                )
              ]
            })}
          </tbody>
        </table>
      </div>
    </div>
  )
}

export const ConnectionsPage = () => {
  const [connections, setConnections] = useState<Array<ConnectionView>>()
  const [keys, setKeys] = useState<Array<KeyView>>([])
  const [tests, setTests] = useState<Record<number, Array<ProbeResult> | "running" | string>>({})
  const [error, setError] = useState<string>()
  const [modal, setModal] = useState<{ kind: "edit" | "delete"; connection: ConnectionView }>()
  const [notice, setNotice] = useState<string>()

  const load = async () => {
    try {
      const [c, k] = await Promise.all([
        api<{ data: Array<ConnectionView> }>("GET", ALL_CONNECTIONS),
        api<{ data: Array<KeyView> }>("GET", KEY_CHOICES)
      ])
      setConnections(c.data)
      setKeys(k.data)
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e))
    }
  }
  useEffect(() => void load(), [])

  const test = async (id: number) => {
    setTests((t) => ({ ...t, [id]: "running" }))
    try {
      const answer = await api<{ results: Array<ProbeResult> }>("POST", `/connections/${id}/test`)
      setTests((t) => ({ ...t, [id]: answer.results }))
    } catch (e) {
      setTests((t) => ({ ...t, [id]: e instanceof Error ? e.message : String(e) }))
    }
  }

  return (
    <section>
      <PageHead title="Connections" />
      <FormError message={error} />
      <p class="notice" role="status">{notice}</p>
      {connections === undefined ? <p aria-busy="true">Loading…</p> : connections.length === 0 ? (
        <Empty>No databases yet. Add one below, or list them under <code>connections:</code> in the config file.</Empty>
      ) : (
        <div class="table-wrap">
          <table class="cards" aria-label="Connections">
            <thead>
              <tr>
                <th scope="col">Name</th><th scope="col">Dialect</th><th scope="col">URL</th><th scope="col">Read URL</th>
                <th scope="col">Source</th><th scope="col">Test</th><th scope="col"><span class="sr-only">Actions</span></th>
              </tr>
            </thead>
            <tbody>
              {connections.map((c) => {
                const result = tests[c.id]
                return (
                  <tr key={c.id} data-connection-id={c.id}>
                    <th scope="row" data-label="Name">{c.name} <span class="muted">#{c.id}</span></th>
                    <td data-label="Dialect">{c.dialect}{c.environment === "production" ? <> <Status kind="warn">production</Status></> : null}{c.ssh !== null ? <span class="muted small"> via SSH {String(c.ssh.host)}</span> : null}</td>
                    <td data-label="URL" class="mono small break">{c.url}</td>
                    <td data-label="Read URL" class="mono small break">{c.read_url ?? <span class="muted">same as URL</span>}</td>
                    <td data-label="Source">{c.source}</td>
                    <td data-label="Test" class="test-cell">
                      <button type="button" onClick={() => test(c.id)} disabled={result === "running"} aria-label={`Test ${c.name}`}>
                        {result === "running" ? "Testing…" : "Test"}
                      </button>
                      <div role="status">
                        {typeof result === "string" && result !== "running" && <span class="field-error">{result}</span>}
                        {Array.isArray(result) && result.map((r) => (
                          <div key={r.role} class="probe">
                            {r.ok
                              ? <Status kind="ok">{r.role}: {r.flavor} {r.version}</Status>
                              : <><Status kind="bad">{r.role}: {r.error?.error}{r.error?.details ? ` (${r.error.details.hop}${r.error.details.reason ? `: ${r.error.details.reason}` : ""})` : ""}</Status> <span class="small">{r.error?.message}</span></>}
                          </div>
                        ))}
                      </div>
                    </td>
                    <td class="row-actions">
                      {c.source === "admin"
                        ? (
                          <>
                            <button type="button" onClick={() => setModal({ kind: "edit", connection: c })} aria-label={`Edit ${c.name}`}>Edit</button>
                            <button type="button" class="danger" onClick={() => setModal({ kind: "delete", connection: c })} aria-label={`Delete ${c.name}`}>
                              Delete
                            </button>
                          </>
                        )
                        : <span class="muted small">edit in the config file</span>}
                    </td>
                  </tr>
                )
              })}
            </tbody>
          </table>
        </div>
      )}
      {connections && (
        <div class="two-col">
          {connections.length > 0 && <Grants keys={keys} connections={connections} onChanged={load} />}
          <AddConnection onAdded={load} nextId={Math.max(0, ...connections.map((c) => c.id)) + 1} />
        </div>
      )}
      {modal !== undefined && (() => {
        const done = (message: string) => {
          setModal(undefined)
          setNotice(message)
          void load()
        }
        const close = () => setModal(undefined)
        return modal.kind === "edit"
          ? <EditConnection connection={modal.connection} onDone={done} onClose={close} />
          : <DeleteConnection connection={modal.connection} onDone={done} onClose={close} />
      })()}
    </section>
  )
}
