/**
 * Spool files: what a stopping process could not hand to the store, written as JSON Lines to the
 * data directory and taken back by the next start. Written to a temporary name and renamed, so a
 * crash mid-write never leaves a half file that the next start would misread; lines that do not
 * parse are skipped (and counted) rather than failing the start.
 */
import { appendFileSync, existsSync, readFileSync, renameSync, unlinkSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { ensurePrivateDir, PRIVATE_FILE_MODE, tighten } from "./private-files.ts"

export const spoolPath = (dir: string, name: string) => join(dir, name)

/** Adds `items` to the spool at `path` (after anything already there). */
export const writeSpool = (path: string, items: ReadonlyArray<unknown>): void => {
  if (items.length === 0) return
  ensurePrivateDir(dirname(path))
  const text = items.map((item) => JSON.stringify(item)).join("\n") + "\n"
  if (existsSync(path)) {
    tighten(path)
    appendFileSync(path, text, { mode: PRIVATE_FILE_MODE })
    return
  }
  const temporary = `${path}.${process.pid}.tmp`
  // 600 whatever the umask (issue 22, finding 6): spools hold audit records and credit movements.
  writeFileSync(temporary, text, { mode: PRIVATE_FILE_MODE })
  renameSync(temporary, path)
}

/**
 * Takes the spool at `path`: its items, and the file is gone. The caller owns them from here (in
 * memory, written or spooled again on its own stop).
 */
export const takeSpool = <A>(path: string): { readonly items: Array<A>; readonly skipped: number } => {
  if (!existsSync(path)) return { items: [], skipped: 0 }
  const text = readFileSync(path, "utf8")
  unlinkSync(path)
  const items: Array<A> = []
  let skipped = 0
  for (const line of text.split("\n")) {
    if (line.trim() === "") continue
    try {
      items.push(JSON.parse(line) as A)
    } catch {
      skipped++
    }
  }
  return { items, skipped }
}
