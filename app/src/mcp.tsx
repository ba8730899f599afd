/**
 * MCP servers (issue 37): the upstream MCP servers behind /v1/mcp as this replica sees them
 * (`GET /mcp/servers`), and the tools withheld because their definition changed since it was
 * pinned, with the difference, and approval of the new definition.
 */
import { useEffect, useState } from "preact/hooks"
import { api } from "./api.ts"
import { Empty, FormError, fmtTime, PageHead, Status } from "./ui.tsx"

interface WithheldTool {
  tool: string
  pinned: Record<string, unknown>
  current: Record<string, unknown>
}

interface McpServerView {
  name: string
  status: "up" | "down" | "unknown"
  last_error: string | null
  last_checked_at: string | null
  tool_count: number | null
  withheld: Array<WithheldTool>
}

const json = (value: unknown) => JSON.stringify(value, null, 2)

/** The fields of a definition that differ, each pinned against current. */
const Difference = (props: { tool: WithheldTool }) => {
  const fields = ["description", "inputSchema"].filter((f) => json(props.tool.pinned[f]) !== json(props.tool.current[f]))
  return (
    <div class="stack">
      {fields.map((field) => (
        <div key={field} class="row">
          <div>
            <h4>{field}: approved</h4>
            <pre class="mono" aria-label={`${props.tool.tool} ${field} approved`}>{json(props.tool.pinned[field])}</pre>
          </div>
          <div>
            <h4>{field}: now served</h4>
            <pre class="mono" aria-label={`${props.tool.tool} ${field} now served`}>{json(props.tool.current[field])}</pre>
          </div>
        </div>
      ))}
    </div>
  )
}

export const McpPage = () => {
  const [servers, setServers] = useState<Array<McpServerView>>()
  const [error, setError] = useState<string>()
  const [busy, setBusy] = useState(false)
  const load = () =>
    api<{ data: Array<McpServerView> }>("GET", "/mcp/servers").then(
      (r) => setServers(r.data),
      (e: Error) => setError(e.message)
    )
  useEffect(() => {
    void load()
  }, [])
  const approve = async (server: string, tool: string) => {
    setBusy(true)
    setError(undefined)
    try {
      await api("POST", `/mcp/servers/${encodeURIComponent(server)}/approve`, { tools: [tool] })
      await load()
    } catch (e) {
      setError((e as Error).message)
    } finally {
      setBusy(false)
    }
  }
  return (
    <>
      <PageHead title="MCP servers">
        <button type="button" onClick={() => void load()}>Refresh</button>
      </PageHead>
      <FormError message={error} />
      {servers !== undefined && servers.length === 0 && <Empty>No MCP servers are configured (mcp.servers).</Empty>}
      {servers?.map((s) => (
        <section key={s.name} class="card stack" aria-label={`MCP server ${s.name}`}>
          <h2>{s.name}</h2>
          <div>
            {s.status === "up" ? <Status kind="ok">up</Status> : s.status === "down" ? <Status kind="bad">down</Status> : <Status kind="muted">not used yet</Status>}
            {s.tool_count !== null && <span> {s.tool_count} {s.tool_count === 1 ? "tool" : "tools"} served</span>}
            {s.last_checked_at !== null && <span class="small muted"> (checked {fmtTime(s.last_checked_at, true)})</span>}
          </div>
          {s.last_error !== null && s.status === "down" && <p class="small">Last error: <span class="mono">{s.last_error}</span></p>}
          {s.withheld.map((t) => (
            <div key={t.tool} class="stack" aria-label={`withheld tool ${t.tool}`}>
              <p>
                <Status kind="warn">withheld</Status> <span class="mono">{s.name}__{t.tool}</span> changed its definition since it was approved.
              </p>
              <Difference tool={t} />
              <div>
                <button type="button" disabled={busy} onClick={() => void approve(s.name, t.tool)}>Approve the new definition of {t.tool}</button>
              </div>
            </div>
          ))}
        </section>
      ))}
    </>
  )
}
