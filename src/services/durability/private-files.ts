/**
 * The data directory and the files in it (SQLite database, WAL, spools) hold API key hashes,
 * audit records and connection DSNs: readable by the gateway's user only (issue 22, finding 6:
 * they were 755/644 under umask 022). Modes are given at creation (a umask can only narrow
 * them) and tightened with chmod on files that already exist, so an older install is fixed too.
 */
import { chmodSync, closeSync, existsSync, mkdirSync, openSync } from "node:fs"

export const PRIVATE_DIR_MODE = 0o700
export const PRIVATE_FILE_MODE = 0o600

/** Creates `dir` (and missing parents) as 700; a directory that already exists is left as it is (it may be shared, `.`). */
export const ensurePrivateDir = (dir: string): void => {
  if (!existsSync(dir)) mkdirSync(dir, { recursive: true, mode: PRIVATE_DIR_MODE })
}

/** `path` exists and is 600: created so if absent, tightened if present (chmod errors, e.g. a file of another user, are left to the open that follows). */
export const ensurePrivateFile = (path: string): void => {
  closeSync(openSync(path, "a", PRIVATE_FILE_MODE))
  tighten(path)
}

/** chmod 600 when the file exists. */
export const tighten = (path: string): void => {
  try {
    if (existsSync(path)) chmodSync(path, PRIVATE_FILE_MODE)
  } catch {
    // Not ours to change: the operator's choice stands.
  }
}
