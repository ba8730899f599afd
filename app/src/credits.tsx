/** Credits: the workspace pool, top-up, and the ledger with filters and paging. */
import { useEffect, useState } from "preact/hooks"
import { api, KEY_CHOICES, type KeyView, type LedgerEntry, query } from "./api.ts"
import { Empty, Field, type FieldErrors, fieldErrors, FormError, fmtNumber, fmtTime, PageHead, valueOf } from "./ui.tsx"

const PAGE = 25

interface Filters {
  key_id: string
  kind: string
  request_id: string
}

export const CreditsPage = () => {
  const [balance, setBalance] = useState<number>()
  const [keys, setKeys] = useState<Array<KeyView>>([])
  const [filters, setFilters] = useState<Filters>({ key_id: "", kind: "", request_id: "" })
  const [applied, setApplied] = useState<Filters>(filters)
  const [rows, setRows] = useState<Array<LedgerEntry>>()
  const [cursor, setCursor] = useState<string | null>(null)
  const [amount, setAmount] = useState("")
  const [note, setNote] = useState("")
  const [errors, setErrors] = useState<FieldErrors>({})
  const [notice, setNotice] = useState<string>()

  const loadPage = async (f: Filters, after: string | null) => {
    const page = await api<{ data: Array<LedgerEntry>; next_cursor: string | null }>(
      "GET",
      `/workspace/ledger${query({ ...f, limit: PAGE, cursor: after })}`
    )
    setRows((current) => (after === null ? page.data : [...(current ?? []), ...page.data]))
    setCursor(page.next_cursor)
  }
  const loadBalance = async () => setBalance((await api<{ credits: number }>("GET", "/workspace")).credits)

  useEffect(() => {
    void loadBalance().catch((e) => setErrors({ _form: String(e.message) }))
    void api<{ data: Array<KeyView> }>("GET", KEY_CHOICES).then((k) => setKeys(k.data), () => {})
  }, [])
  useEffect(() => {
    void loadPage(applied, null).catch((e) => setErrors({ _form: String(e.message) }))
  }, [applied])

  const topUp = async (event: Event) => {
    event.preventDefault()
    setErrors({})
    try {
      const answer = await api<{ credits: number }>("POST", "/workspace/credits", {
        credits: amount.trim() === "" ? amount : Number(amount),
        ...(note.trim() ? { note } : {})
      })
      setBalance(answer.credits)
      setNotice(`Added ${fmtNumber(Number(amount))} credits.`)
      setAmount("")
      setNote("")
      await loadPage(applied, null)
    } catch (e) {
      setErrors(fieldErrors(e, ["credits", "note"]))
    }
  }

  return (
    <section>
      <PageHead title="Credits" />
      <div class="two-col">
        <div class="card">
          <h2>Workspace pool</h2>
          <p class="big-number" data-testid="balance">{balance === undefined ? "…" : fmtNumber(balance)}</p>
          <p class="muted">credits available to every key. Each model costs its configured credits per request.</p>
        </div>
        <form class="card stack" onSubmit={topUp} noValidate aria-labelledby="topup-title">
          <h2 id="topup-title">Top up</h2>
          <FormError message={errors._form} />
          <div class="row">
            <Field label="Credits" error={errors.credits}>
              {(id, d) => <input id={id} inputMode="numeric" aria-describedby={d} aria-invalid={errors.credits ? true : undefined} value={amount} onInput={(e) => {
                setAmount(valueOf(e))
                setErrors(({ credits: _, _form: __, ...rest }) => rest)
              }} />}
            </Field>
            <Field label="Note" hint="Optional, shown in the ledger" error={errors.note}>
              {(id, d) => <input id={id} aria-describedby={d} value={note} onInput={(e) => {
                setNote(valueOf(e))
                setErrors(({ note: _, _form: __, ...rest }) => rest)
              }} />}
            </Field>
          </div>
          <div class="actions"><button class="primary" type="submit">Add credits</button></div>
          <p class="notice" role="status">{notice}</p>
        </form>
      </div>

      <h2>Ledger</h2>
      <form
        class="filters"
        aria-label="Ledger filters"
        onSubmit={(e) => {
          e.preventDefault()
          setApplied({ ...filters })
        }}
      >
        <Field label="Key">
          {(id) => (
            <select id={id} value={filters.key_id} onChange={(e) => setFilters({ ...filters, key_id: valueOf(e) })}>
              <option value="">any key</option>
              {keys.map((k) => <option key={k.id} value={k.id}>{k.name}</option>)}
            </select>
          )}
        </Field>
        <Field label="Kind">
          {(id) => (
            <select id={id} value={filters.kind} onChange={(e) => setFilters({ ...filters, kind: valueOf(e) })}>
              <option value="">any kind</option>
              <option value="charge">charge</option>
              <option value="refund">refund</option>
              <option value="topup">top-up</option>
              <option value="initial">initial</option>
            </select>
          )}
        </Field>
        <Field label="Request id">
          {(id) => <input id={id} class="mono" value={filters.request_id} onInput={(e) => setFilters({ ...filters, request_id: valueOf(e).trim() })} />}
        </Field>
        <button type="submit">Apply filters</button>
      </form>
      {rows === undefined ? <p aria-busy="true">Loading…</p> : rows.length === 0 ? <Empty>No ledger entries match.</Empty> : (
        <div class="table-wrap">
          <table class="cards" aria-label="Credit ledger">
            <thead>
              <tr>
                <th scope="col">Time</th><th scope="col">Kind</th><th scope="col" class="num">Amount</th>
                <th scope="col" class="num">Balance after</th><th scope="col">Actor</th><th scope="col">Model</th>
                <th scope="col">Request</th><th scope="col">Note</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((r) => (
                <tr key={r.seq}>
                  <td data-label="Time" class="nowrap">{fmtTime(r.ts, true)}</td>
                  <td data-label="Kind">{r.kind}</td>
                  <td data-label="Amount" class={`num ${r.amount < 0 ? "neg" : "pos"}`}>{r.amount > 0 ? "+" : ""}{fmtNumber(r.amount)}</td>
                  <td data-label="Balance after" class="num">{fmtNumber(r.balance_after)}</td>
                  <td data-label="Actor">{keys.find((k) => k.id === r.actor)?.name ?? r.actor}</td>
                  <td data-label="Model" class={r.model ? undefined : "blank"}>{r.model ?? ""}</td>
                  <td data-label="Request" class={`mono small ${r.request_id ? "" : "blank"}`}>{r.request_id ?? ""}</td>
                  <td data-label="Note" class={r.note ? undefined : "blank"}>{r.note ?? ""}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {cursor !== null && <button type="button" onClick={() => loadPage(applied, cursor)}>Load more</button>}
    </section>
  )
}
