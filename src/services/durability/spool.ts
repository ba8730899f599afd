/**
 * Spool files: what a stopping process could not hand to the store, written as JSON Lines to the
 * data directory and taken back by the next start (issue 21: spools that cannot be lost).
 *
 * - Each process writes a file of its own, `<name>.<instance>.jsonl` (process id and a random
 *   part): two processes sharing one data directory never write the same file. It is written to
 *   a temporary name, flushed to disk and renamed, so a file under a spool name is always whole.
 * - A start claims every spool file of the directory by renaming it to
 *   `<name>.replay.<pid>.<random>.jsonl` (a rename succeeds for one process only), including the
 *   claims of processes that died meanwhile, and the old single-file name of earlier versions.
 * - A claimed file is deleted only once its records are in the store, or in this process's own
 *   spool (`release`): a crash mid-replay leaves it to the next start, which writes its records
 *   again, idempotently (audit records by request id, credit movements by request and block id).
 *
 * - A write that fails (a full disk) removes its temporary file and throws a `SpoolWriteError`
 *   naming the cause (`ENOSPC`) and the path (issue 35 items 4 and 5); a temporary a killed
 *   process left behind (`<spool>.<pid>-<random>.jsonl.tmp` of a process no longer running) is
 *   removed by the next start's claim: it was never renamed, so none of it is a spool.
 *
 * Lines that do not parse are skipped (and counted) rather than failing the start.
 */
import { randomBytes } from "node:crypto"
import { closeSync, existsSync, fsyncSync, openSync, readdirSync, readFileSync, renameSync, rmSync, unlinkSync, writeSync } from "node:fs"
import { join } from "node:path"
import { ensurePrivateDir, PRIVATE_FILE_MODE, tighten } from "./private-files.ts"

export const spoolPath = (dir: string, name: string) => join(dir, name)

/** This process's part of its spool files' names. */
const INSTANCE = `${process.pid}-${randomBytes(4).toString("hex")}`

const stem = (name: string) => name.replace(/\.jsonl$/, "")

/** The spool file this process writes for `name` (e.g. `audit-spool.jsonl`) in `dir`. */
export const ownSpool = (dir: string, name: string) => join(dir, `${stem(name)}.${INSTANCE}.jsonl`)

/**
 * A spool that could not be written: the file system's cause (`ENOSPC`, `EACCES`, ...), the step
 * and the path, in the message (an operator reads it in the log, issue 35 item 4).
 */
export class SpoolWriteError extends Error {
  readonly code: string | undefined
  readonly path: string
  constructor(step: string, path: string, cause: unknown) {
    const code = (cause as NodeJS.ErrnoException | undefined)?.code
    const detail = cause instanceof Error ? cause.message : String(cause)
    super(`could not ${step} ${path}: ${code === undefined || detail.startsWith(code) ? detail : `${code}: ${detail}`}`, { cause })
    this.name = "SpoolWriteError"
    this.code = code
    this.path = path
  }
}

/** For `Effect.try`'s catch: the SpoolWriteError writeSpool threw (anything else, named as such). */
export const spoolFailure = (error: unknown): SpoolWriteError =>
  error instanceof SpoolWriteError ? error : new SpoolWriteError("write the spool", "(unknown path)", error)

/** `fn`, its file system error turned into a SpoolWriteError naming `step` and `path`. */
const step = <A>(name: string, path: string, fn: () => A): A => {
  try {
    return fn()
  } catch (error) {
    throw error instanceof SpoolWriteError ? error : new SpoolWriteError(name, path, error)
  }
}

const removeQuietly = (path: string) => {
  try {
    rmSync(path, { force: true })
  } catch {
    // Not removable (not ours): the error that brought us here is the one to report.
  }
}

/**
 * Writes `items` to `path` (after anything already there), whole or not at all, flushed to disk.
 * Throws a SpoolWriteError; the temporary file never outlives a failed write.
 */
export const writeSpool = (path: string, items: ReadonlyArray<unknown>): void => {
  if (items.length === 0) return
  const dir = join(path, "..")
  // 700 and 600 whatever the umask (issue 22, finding 6): spools hold audit records and credit movements.
  step("create the data directory", dir, () => ensurePrivateDir(dir))
  const before = step("read", path, () => existsSync(path) ? readFileSync(path, "utf8") : "")
  const text = before + items.map((item) => JSON.stringify(item)).join("\n") + "\n"
  const temporary = `${path}.tmp`
  const fd = step("create", temporary, () => openSync(temporary, "w", PRIVATE_FILE_MODE))
  try {
    try {
      step("write", temporary, () => writeSync(fd, text))
      step("flush", temporary, () => fsyncSync(fd))
    } finally {
      step("close", temporary, () => closeSync(fd))
    }
    tighten(temporary)
    step(`rename ${temporary} to`, path, () => renameSync(temporary, path))
  } catch (error) {
    removeQuietly(temporary)
    throw error
  }
  // The rename itself is durable only once the directory is.
  try {
    const dirFd = openSync(dir, "r")
    try {
      fsyncSync(dirFd)
    } finally {
      closeSync(dirFd)
    }
  } catch {
    // Not every platform lets a directory be opened for fsync; the file itself is on disk.
  }
}

const alive = (pid: number) => {
  if (pid === process.pid) return true
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    // EPERM: it exists, owned by someone else.
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
}

export interface Claimed<A> {
  readonly items: Array<A>
  readonly skipped: number
  /** The claimed files (this process's now). */
  readonly files: ReadonlyArray<string>
  /** Their records are in the store (or this process's own spool): the files go. */
  readonly release: () => void
}

/**
 * Claims every spool of `name` in `dir` left by processes that are not running: their items, in
 * file order. Nothing is deleted until `release`.
 */
export const claimSpools = <A>(dir: string, name: string): Claimed<A> => {
  const base = stem(name)
  let names: Array<string> = []
  try {
    names = readdirSync(dir)
  } catch {
    return { items: [], skipped: 0, files: [], release: () => {} }
  }
  const escaped = base.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
  const claims = new RegExp(`^${escaped}\\.replay\\.(\\d+)\\.[0-9a-f]+\\.jsonl$`)
  // A temporary of a process that is gone (killed mid-write): never renamed, so never a spool.
  const temporaries = new RegExp(`^${escaped}\\.(\\d+)-[0-9a-f]+\\.jsonl\\.tmp$`)
  for (const file of names) {
    const temporary = temporaries.exec(file)
    if (temporary !== null && !alive(Number(temporary[1]))) removeQuietly(join(dir, file))
  }
  const own = `${base}.${INSTANCE}.jsonl`
  const files: Array<string> = []
  for (const file of names.sort()) {
    const claim = claims.exec(file)
    const candidate = file === `${base}.jsonl` ||
      (claim !== null ? !alive(Number(claim[1])) : file.startsWith(`${base}.`) && file.endsWith(".jsonl") && file !== own)
    if (!candidate) continue
    const target = join(dir, `${base}.replay.${process.pid}.${randomBytes(4).toString("hex")}.jsonl`)
    try {
      renameSync(join(dir, file), target)
      files.push(target)
    } catch {
      // Claimed by another process first (or gone): theirs.
    }
  }
  const items: Array<A> = []
  let skipped = 0
  for (const file of files) {
    for (const line of readFileSync(file, "utf8").split("\n")) {
      if (line.trim() === "") continue
      try {
        items.push(JSON.parse(line) as A)
      } catch {
        skipped++
      }
    }
  }
  let released = false
  return {
    items,
    skipped,
    files,
    release: () => {
      if (released) return
      released = true
      for (const file of files) {
        try {
          unlinkSync(file)
        } catch {
          // Already gone.
        }
      }
    }
  }
}
