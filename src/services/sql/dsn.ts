/**
 * The secrets a database URL can carry, and how to show it without them. A password travels
 * in the user-info (`postgres://user:secret@host/db`), but drivers also read it from the query
 * string (`?password=...`, libpq's `sslpassword`, MySQL's `password1`...), so every parameter
 * named like a credential counts as one.
 */
const SECRET_PARAM = /pass|pwd|secret|token|credential/i

export const isSecretParam = (name: string): boolean => SECRET_PARAM.test(name)

const withDecoded = (value: string): Array<string> => {
  try {
    const decoded = decodeURIComponent(value.replaceAll("+", " "))
    return decoded === value ? [value] : [value, decoded]
  } catch {
    return [value]
  }
}

/** Every secret value in `url`, raw and percent-decoded; the whole string when it does not parse. */
export const dsnSecrets = (url: string): Array<string> => {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return [url]
  }
  const secrets: Array<string> = []
  if (parsed.password !== "") secrets.push(...withDecoded(parsed.password))
  // The raw query, not URLSearchParams alone: a secret must be found as it was written, too.
  for (const pair of parsed.search.replace(/^\?/, "").split("&")) {
    const eq = pair.indexOf("=")
    if (eq < 0) continue
    const name = pair.slice(0, eq)
    const value = pair.slice(eq + 1)
    if (value !== "" && withDecoded(name).some(isSecretParam)) secrets.push(...withDecoded(value))
  }
  return secrets.filter((secret) => secret.length > 0)
}

/** A DSN with its password and every password-like parameter replaced, for anything a person or client may see. */
export const redactDsn = (url: string): string => {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return "(unparsable DSN)"
  }
  if (parsed.password !== "") parsed.password = "***"
  for (const name of [...new Set(parsed.searchParams.keys())]) {
    if (isSecretParam(name)) parsed.searchParams.set(name, "***")
  }
  return parsed.toString()
}
