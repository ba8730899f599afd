/** Audit: the trail with filters, paging, one record's details, and a JSON Lines export. */
import { useEffect, useState } from "preact/hooks"
import { api, KEY_CHOICES, type AuditRecord, type KeyView, query, request } from "./api.ts"
import { Dialog, Empty, Field, FormError, fmtTime, fromLocalInput, PageHead, Status, valueOf } from "./ui.tsx"

const PAGE = 50
const EXPORT_PAGE = 1000

interface Filters {
  key_id: string
  status: string
  error: string
  endpoint: string
  since: string
  until: string
  /** The app's own pages and session checks, and health probes: off by default, they flood the trail. */
  app_and_health: boolean
  /** Only requests that change something (admin actions, model calls), not reads. */
  writes_only: boolean
}

const empty: Filters = { key_id: "", status: "", error: "", endpoint: "", since: "", until: "", app_and_health: false, writes_only: false }

const toQuery = (f: Filters) => ({
  key_id: f.key_id,
  status: f.status,
  error: f.error,
  endpoint: f.endpoint,
  since: f.since ? fromLocalInput(f.since) : undefined,
  until: f.until ? fromLocalInput(f.until) : undefined,
  exclude: f.app_and_health ? undefined : "app,health",
  writes_only: f.writes_only ? "true" : undefined
})

const endpoints = [
  "/v1/chat/completions", "/v1/messages", "/v1/mcp", "/v1/models", "/api-keys", "/api-keys/:id", "/api-keys/:id/rotate",
  "/api-keys/:id/revoke", "/workspace/credits", "/connections", "/app/session"
]
const slugs = [
  "unauthorized", "key_inactive", "scope_violation", "tools_disabled", "not_found", "validation_failed", "rate_limited",
  "budget_exhausted", "insufficient_credits", "conflict", "csrf_rejected", "provider_error", "upstream_timeout", "internal_error"
]

const statusKind = (status: number) => (status < 300 ? "ok" : status < 500 ? "warn" : "bad")

export const AuditPage = () => {
  const [keys, setKeys] = useState<Array<KeyView>>([])
  const [filters, setFilters] = useState<Filters>(empty)
  const [applied, setApplied] = useState<Filters>(empty)
  const [rows, setRows] = useState<Array<AuditRecord>>()
  const [cursor, setCursor] = useState<string | null>(null)
  const [selected, setSelected] = useState<AuditRecord>()
  const [error, setError] = useState<string>()
  const [exporting, setExporting] = useState<string>()

  const loadPage = async (f: Filters, after: string | null) => {
    try {
      const page = await api<{ data: Array<AuditRecord>; next_cursor: string | null }>(
        "GET",
        `/audit${query({ ...toQuery(f), limit: PAGE, cursor: after })}`
      )
      setRows((current) => (after === null ? page.data : [...(current ?? []), ...page.data]))
      setError(undefined)
      setCursor(page.next_cursor)
      setError(undefined)
    } catch (e) {
      // Rows of the previous filter under an error about this one would read as its answer.
      if (after === null) setRows([])
      setError(e instanceof Error ? e.message : String(e))
    }
  }

  useEffect(() => {
    void api<{ data: Array<KeyView> }>("GET", KEY_CHOICES).then((k) => setKeys(k.data), () => {})
  }, [])
  useEffect(() => void loadPage(applied, null), [applied])

  /** Every record of the applied filter, page after page, saved as one .jsonl file. */
  const exportJsonl = async () => {
    setExporting("Exporting…")
    try {
      const parts: Array<string> = []
      let after: string | null = null
      let count = 0
      do {
        const response = await request("GET", `/audit${query({ ...toQuery(applied), format: "jsonl", limit: EXPORT_PAGE, cursor: after })}`)
        const text = await response.text()
        parts.push(text)
        count += text.split("\n").filter((l) => l !== "").length
        after = response.headers.get("x-next-cursor")
        setExporting(`Exporting… ${count} records`)
      } while (after !== null)
      const link = document.createElement("a")
      link.href = URL.createObjectURL(new Blob(parts, { type: "application/x-ndjson" }))
      link.download = `modelgate-audit-${new Date().toISOString().replace(/[:.]/g, "-")}.jsonl`
      document.body.append(link)
      link.click()
      link.remove()
      setTimeout(() => URL.revokeObjectURL(link.href), 10_000)
      setExporting(`Exported ${count} records.`)
    } catch (e) {
      setExporting(undefined)
      setError(e instanceof Error ? e.message : String(e))
    }
  }

  const keyName = (id: string | null) => (id ? keys.find((k) => k.id === id)?.name ?? id : "")
  const set = (field: keyof Filters) => (e: Parameters<typeof valueOf>[0]) => setFilters({ ...filters, [field]: valueOf(e) })

  return (
    <section>
      <PageHead title="Audit">
        <button type="button" onClick={exportJsonl}>Export JSON Lines</button>
      </PageHead>
      <p class="notice" role="status">{exporting}</p>
      <form
        class="filters"
        aria-label="Audit filters"
        onSubmit={(e) => {
          e.preventDefault()
          setApplied({ ...filters })
        }}
      >
        <Field label="Key">
          {(id) => (
            <select id={id} value={filters.key_id} onChange={set("key_id")}>
              <option value="">any key</option>
              {keys.map((k) => <option key={k.id} value={k.id}>{k.name}</option>)}
            </select>
          )}
        </Field>
        <Field label="Status">{(id) => <input id={id} inputMode="numeric" size={5} value={filters.status} onInput={set("status")} />}</Field>
        <Field label="Error slug">
          {(id) => (
            <>
              <input id={id} list="slugs" value={filters.error} onInput={set("error")} />
              <datalist id="slugs">{slugs.map((s) => <option key={s} value={s} />)}</datalist>
            </>
          )}
        </Field>
        <Field label="Endpoint">
          {(id) => (
            <>
              <input id={id} list="endpoints" value={filters.endpoint} onInput={set("endpoint")} />
              <datalist id="endpoints">{endpoints.map((s) => <option key={s} value={s} />)}</datalist>
            </>
          )}
        </Field>
        <Field label="From" class="when">{(id) => <input id={id} type="datetime-local" value={filters.since} onInput={set("since")} />}</Field>
        <Field label="Until" class="when">{(id) => <input id={id} type="datetime-local" value={filters.until} onInput={set("until")} />}</Field>
        <label class="check">
          <input type="checkbox" checked={filters.app_and_health} onChange={(e) => setFilters({ ...filters, app_and_health: (e.target as HTMLInputElement).checked })} />
          App and health traffic
        </label>
        <label class="check">
          <input type="checkbox" checked={filters.writes_only} onChange={(e) => setFilters({ ...filters, writes_only: (e.target as HTMLInputElement).checked })} />
          Changes only
        </label>
        <button type="submit">Apply filters</button>
        <button type="button" onClick={() => { setFilters(empty); setApplied(empty) }}>Clear</button>
      </form>
      <FormError message={error} />
      {rows === undefined ? <p aria-busy="true">Loading…</p> : rows.length === 0 ? <Empty>No records match.</Empty> : (
        <div class="table-wrap">
          <table class="cards" aria-label="Audit records">
            <thead>
              <tr>
                <th scope="col">Time</th><th scope="col">Request</th><th scope="col">Status</th><th scope="col">Key</th>
                <th scope="col">Model / tool</th><th scope="col" class="num">Credits</th><th scope="col" class="num">ms</th>
                <th scope="col"><span class="sr-only">Details</span></th>
              </tr>
            </thead>
            <tbody>
              {rows.map((r) => (
                <tr key={r.seq} data-request-id={r.request_id}>
                  <td data-label="Time" class="nowrap">{fmtTime(r.ts, true)}</td>
                  <td data-label="Request"><span class="mono">{r.method}</span> {r.endpoint}</td>
                  <td data-label="Status"><Status kind={statusKind(r.status)}>{r.status}{r.error ? ` ${r.error}` : ""}</Status></td>
                  {/* An empty cell is left out of a phone's card (class blank): no label over nothing. */}
                  <td data-label="Key" class={r.key_id ? undefined : "blank"}>{keyName(r.key_id)}</td>
                  <td data-label="Model / tool" class={(r.model ?? r.tool) ? undefined : "blank"}>{r.model ?? r.tool ?? ""}</td>
                  <td data-label="Credits" class="num">{r.credits}</td>
                  <td data-label="ms" class="num">{Math.round(r.duration_ms)}</td>
                  <td class="row-actions">
                    <button type="button" onClick={() => setSelected(r)} aria-label={`Details of ${r.request_id}`}>Details</button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {cursor !== null && <button type="button" onClick={() => loadPage(applied, cursor)}>Load more</button>}
      {selected && (
        <Dialog title={`Request ${selected.request_id}`} wide onClose={() => setSelected(undefined)}>
          <dl class="details">
            {Object.entries(selected).filter(([name]) => name !== "details" && name !== "seq").map(([name, value]) => (
              <div key={name}><dt>{name}</dt><dd class="mono">{value === null ? "—" : String(value)}</dd></div>
            ))}
          </dl>
          {selected.details && (
            <>
              <h3>Details</h3>
              <pre class="mono">{JSON.stringify(selected.details, null, 2)}</pre>
            </>
          )}
        </Dialog>
      )}
    </section>
  )
}
