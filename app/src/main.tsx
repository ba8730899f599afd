/**
 * The admin app's shell: sign-in with the admin token (or through the identity provider of
 * `admin.oidc`, a flow the gateway runs), then one page per admin area, routed by the URL hash
 * (the gateway serves one page at /app; nothing else needs server routes).
 */
import { render } from "preact"
import { useEffect, useState } from "preact/hooks"
import { api, ApiError, setCsrfToken, whenSignedOut } from "./api.ts"
import { AuditPage } from "./audit.tsx"
import { ConnectionsPage } from "./connections.tsx"
import { CreditsPage } from "./credits.tsx"
import { KeysPage } from "./keys.tsx"
import { TeamsPage } from "./teams.tsx"
import { McpPage } from "./mcp.tsx"
import { ModelsPage } from "./models.tsx"
import { FormError, valueOf } from "./ui.tsx"
import { SpendPage } from "./spend.tsx"
import { UsagePage } from "./usage.tsx"
import "./styles.css"

interface Session {
  signed_in: true
  csrf_token: string
  expires_at: string
  /** The identity-provider admin who signed in; null after a sign-in with the admin token. */
  admin: { subject: string; name: string } | null
  /** The running gateway's release (package.json's version), shown in the footer. */
  version: string
}

interface SignInOptions {
  identity_provider: { name: string; start_url: string } | null
}

/**
 * Why an identity-provider sign-in came back refused (`/app?sign_in_error=<code>`). The gateway
 * only sends these codes and the page only shows these sentences, so nothing in the URL can
 * put words of someone else's choosing on it.
 */
const SIGN_IN_ERRORS: Record<string, string> = {
  not_admin: "Your identity-provider account is not an admin of this gateway. Ask its operator to give you the admin group or role (admin.oidc.admin_claim).",
  denied: "The sign-in was cancelled at the identity provider.",
  invalid_state: "The sign-in could not be verified: it took too long, was started in another browser, or was tampered with. Start again.",
  failed: "The identity provider's answer was not accepted. Try again; the gateway's log says why if it keeps failing.",
  unavailable: "The identity provider could not be reached. Try again later, or sign in with the admin token.",
  throttled: "Too many failed sign-in attempts from this address. Wait a minute and try again.",
  disabled: "The admin API is disabled on this gateway (no admin token configured)."
}

/** The refusal the last identity-provider sign-in came back with, read once and removed from the address bar. */
const takeSignInError = (): string | undefined => {
  const params = new URLSearchParams(location.search)
  const code = params.get("sign_in_error")
  if (code === null) return undefined
  history.replaceState(null, "", location.pathname + location.hash)
  return SIGN_IN_ERRORS[code] ?? SIGN_IN_ERRORS.failed
}

const pages = [
  { path: "keys", title: "API keys", Page: KeysPage },
  { path: "teams", title: "Teams", Page: TeamsPage },
  { path: "connections", title: "Connections", Page: ConnectionsPage },
  { path: "mcp", title: "MCP servers", Page: McpPage },
  { path: "credits", title: "Credits", Page: CreditsPage },
  { path: "usage", title: "Usage", Page: UsagePage },
  { path: "spend", title: "Spend", Page: SpendPage },
  { path: "audit", title: "Audit", Page: AuditPage },
  { path: "models", title: "Models", Page: ModelsPage }
] as const

const currentPath = () => location.hash.replace(/^#\/?/, "").split("?")[0] || "keys"

const SignIn = (props: { onSignedIn: (session: Session) => void; refusal: string | undefined }) => {
  const [token, setToken] = useState("")
  const [error, setError] = useState<string>()
  const [busy, setBusy] = useState(false)
  const [options, setOptions] = useState<SignInOptions>({ identity_provider: null })
  useEffect(() => {
    api<SignInOptions>("GET", "/app/sign-in").then(setOptions, () => undefined)
  }, [])
  const provider = options.identity_provider
  const submit = async (event: Event) => {
    event.preventDefault()
    setBusy(true)
    setError(undefined)
    try {
      props.onSignedIn(await api<Session>("POST", "/app/session", { token }))
    } catch (e) {
      setError(e instanceof ApiError ? e.message : String(e))
    } finally {
      setBusy(false)
    }
  }
  return (
    <main class="signin">
      <form class="card" onSubmit={submit} aria-labelledby="signin-title">
        <h1 id="signin-title">modelgate admin</h1>
        {props.refusal && <p class="form-error" role="alert" id="signin-refusal">{props.refusal}</p>}
        {provider && (
          <>
            {/* A plain navigation: the gateway runs the whole flow and comes back to /app. */}
            <a class="button primary signin-provider" href={provider.start_url}>Sign in with {provider.name}</a>
            <p class="signin-or">or</p>
          </>
        )}
        <p>Sign in with the gateway's admin token (<code>admin.token</code> or <code>MODELGATE_ADMIN_TOKEN</code>).</p>
        <div class={`field ${error ? "has-error" : ""}`}>
          <label for="admin-token">Admin token</label>
          <input
            id="admin-token"
            type="password"
            autoComplete="current-password"
            required
            value={token}
            aria-describedby={error ? "signin-error" : undefined}
            aria-invalid={error ? true : undefined}
            onInput={(e) => setToken(valueOf(e))}
          />
          {error && <small id="signin-error" class="field-error" role="alert">{error}</small>}
        </div>
        <button class={provider ? "" : "primary"} type="submit" disabled={busy}>{busy ? "Signing in…" : "Sign in"}</button>
      </form>
    </main>
  )
}

const App = () => {
  const [session, setSession] = useState<Session | null | undefined>(undefined)
  const [path, setPath] = useState(currentPath())
  const [error, setError] = useState<string>()
  const [refusal] = useState(takeSignInError)

  const signedIn = (s: Session) => {
    setCsrfToken(s.csrf_token)
    setSession(s)
  }

  useEffect(() => {
    whenSignedOut(() => setSession(null))
    // 200 {signed_in: false} when there is no session: no 401 in the console on every sign-in page load.
    api<Session | { signed_in: false }>("GET", "/app/session").then((s) => (s.signed_in ? signedIn(s) : setSession(null)), () => setSession(null))
    // Only `#/page` hashes are routes; `#main` (the skip link) is an in-page jump.
    const onHash = () => location.hash.startsWith("#/") && setPath(currentPath())
    addEventListener("hashchange", onHash)
    return () => removeEventListener("hashchange", onHash)
  }, [])

  useEffect(() => {
    // Moving focus to the new page's heading tells keyboard and screen-reader users where they are.
    document.querySelector<HTMLElement>("main h1")?.focus()
    const page = pages.find((p) => p.path === path)
    document.title = `${page?.title ?? "Not found"} · modelgate admin`
  }, [path, session])

  const signOut = async () => {
    try {
      await api("DELETE", "/app/session")
      setSession(null)
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e))
    }
  }

  if (session === undefined) return <main class="loading" aria-busy="true">Loading…</main>
  if (session === null) return <SignIn onSignedIn={signedIn} refusal={refusal} />

  const page = pages.find((p) => p.path === path)
  return (
    <>
      <a class="skip" href="#main">Skip to content</a>
      <header class="top">
        <span class="brand">modelgate</span>
        <nav aria-label="Sections">
          <ul>
            {pages.map((p) => (
              <li key={p.path}>
                <a href={`#/${p.path}`} aria-current={p.path === path ? "page" : undefined}>{p.title}</a>
              </li>
            ))}
          </ul>
        </nav>
        {session.admin && <span class="signed-in-as" title={session.admin.subject}>{session.admin.name}</span>}
        <button type="button" class="signout" onClick={signOut}>Sign out</button>
      </header>
      <main id="main" tabIndex={-1}>
        <FormError message={error} />
        {page ? <page.Page /> : <h1 tabIndex={-1}>Not found</h1>}
      </main>
      <footer class="bottom">modelgate {session.version}</footer>
    </>
  )
}

render(<App />, document.getElementById("root")!)
