/**
 * The SSH tunnel of a connection (issue 36): one SSH session per driver (so per pool), shared by
 * every database session of that pool, each of which is a `direct-tcpip` channel to the
 * connection's host and port opened by the bastion. The drivers get a stream factory and never
 * know; a session that drops is opened again by the next stream that needs it.
 *
 * The bastion's host key is checked against what the operator gave (`host_key_sha256` or a
 * `known_hosts_file`) during the key exchange, before any credential is sent: an unknown key
 * ends the handshake (an allow-list, never trust on first use). Credentials are read at each
 * connect (a rotated key file or variable is picked up) and never appear in a message.
 */
import { createHash, createHmac } from "node:crypto"
import { readFileSync, statSync } from "node:fs"
import { Duplex } from "node:stream"
import { Client, type ClientChannel, type ConnectConfig } from "ssh2"
import type { ConnectionSsh } from "../../../domain/records.ts"

/** Why a tunnel failed: `details.hop` and `details.reason` of the 502 a client sees. */
export class TunnelFailure extends Error {
  readonly hop: "ssh" | "database"
  readonly reason: string
  constructor(hop: "ssh" | "database", reason: string, message: string) {
    super(message)
    this.hop = hop
    this.reason = reason
  }
}

export const DEFAULT_SSH_CONNECT_TIMEOUT_MS = 10_000
/** A dead bastion (or a network that drops packets) is noticed within about this times 3. */
const KEEPALIVE_INTERVAL_MS = 10_000
/** Key files and known_hosts files are small; a bound keeps a wrong path (a log, a device) from being read whole. */
const MAX_KEY_FILE_BYTES = 64 * 1024
const MAX_KNOWN_HOSTS_BYTES = 4 * 1024 * 1024

export interface Tunnel {
  /** Resolves once an SSH session is up (opening one if needed); rejects with a TunnelFailure. */
  readonly ready: () => Promise<void>
  /** A stream to the database through the tunnel, for a driver's connect (writes wait for the channel). */
  readonly stream: () => Duplex
  readonly connected: () => boolean
  /** Incremented at each failure; `failureSince(n)` is the latest failure after the count was n. */
  readonly failures: () => number
  readonly failureSince: (count: number) => TunnelFailure | undefined
  /** The number of SSH sessions opened so far (tests, operators' curiosity). */
  readonly sessionsOpened: () => number
  readonly close: () => void
}

export const fingerprintOf = (key: Buffer): string => `SHA256:${createHash("sha256").update(key).digest("base64").replace(/=+$/, "")}`

const readBounded = (path: string, max: number, what: string): string => {
  let size: number
  try {
    size = statSync(path).size
  } catch (error) {
    throw new TunnelFailure("ssh", "credentials_unavailable", `cannot read the ${what} ${path}: ${(error as NodeJS.ErrnoException).code ?? "error"}`)
  }
  if (size > max) throw new TunnelFailure("ssh", "credentials_unavailable", `the ${what} ${path} is larger than ${max} bytes`)
  try {
    return readFileSync(path, "utf8")
  } catch (error) {
    throw new TunnelFailure("ssh", "credentials_unavailable", `cannot read the ${what} ${path}: ${(error as NodeJS.ErrnoException).code ?? "error"}`)
  }
}

const fromEnv = (name: string, what: string): string => {
  const value = process.env[name]
  if (value === undefined || value === "") {
    throw new TunnelFailure("ssh", "credentials_unavailable", `the environment variable ${name} (the ${what}) is not set`)
  }
  return value
}

/** The one credential the connection names, read now. */
const credentials = (ssh: ConnectionSsh): Pick<ConnectConfig, "privateKey" | "password"> => {
  if (ssh.private_key !== undefined) return { privateKey: ssh.private_key }
  if (ssh.private_key_file !== undefined) return { privateKey: readBounded(ssh.private_key_file, MAX_KEY_FILE_BYTES, "private key file") }
  if (ssh.private_key_env !== undefined) return { privateKey: fromEnv(ssh.private_key_env, "SSH private key") }
  if (ssh.password !== undefined) return { password: ssh.password }
  if (ssh.password_env !== undefined) return { password: fromEnv(ssh.password_env, "SSH password") }
  throw new TunnelFailure("ssh", "credentials_unavailable", "the tunnel names no private key or password")
}

const globToRegExp = (pattern: string): RegExp =>
  new RegExp(`^${pattern.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*").replace(/\?/g, ".")}$`, "i")

/** Whether one host pattern of a known_hosts line names `name` (plain, `[host]:port`, wildcard, or hashed `|1|salt|hash`). */
const patternMatches = (pattern: string, name: string): boolean => {
  if (pattern.startsWith("|1|")) {
    const [, , salt, hash] = pattern.split("|")
    if (salt === undefined || hash === undefined) return false
    return createHmac("sha1", Buffer.from(salt, "base64")).update(name).digest("base64") === hash
  }
  return pattern.includes("*") || pattern.includes("?") ? globToRegExp(pattern).test(name) : pattern.toLowerCase() === name.toLowerCase()
}

/**
 * Whether OpenSSH's known_hosts text accepts `key` for the host as it names it (`host` on port
 * 22, `[host]:port` otherwise). `@revoked` lines refuse their key; `@cert-authority` lines are
 * not supported and so accept nothing. Negated patterns (`!host`) exclude a line.
 */
export const knownHostsAccepts = (text: string, host: string, port: number, key: Buffer): boolean => {
  const name = port === 22 ? host : `[${host}]:${port}`
  let accepted = false
  for (const raw of text.split("\n")) {
    const line = raw.trim()
    if (line === "" || line.startsWith("#")) continue
    const fields = line.split(/\s+/)
    const marker = fields[0]!.startsWith("@") ? fields.shift() : undefined
    const [hosts, , blob] = fields
    if (hosts === undefined || blob === undefined) continue
    const patterns = hosts.split(",")
    if (patterns.some((p) => p.startsWith("!") && patternMatches(p.slice(1), name))) continue
    if (!patterns.some((p) => !p.startsWith("!") && patternMatches(p, name))) continue
    const listed = Buffer.from(blob, "base64")
    if (!listed.equals(key)) continue
    if (marker === "@revoked") return false
    if (marker === undefined) accepted = true
  }
  return accepted
}

const SOCKET_CODES = new Set(["ECONNREFUSED", "EHOSTUNREACH", "ENETUNREACH", "ENOTFOUND", "EAI_AGAIN", "ETIMEDOUT", "ECONNRESET", "EPIPE"])

/**
 * A stream a driver can use at once: what it writes waits for the channel, which opens once
 * the SSH session is up and the bastion has connected to the database.
 */
class ForwardedStream extends Duplex {
  private channel: ClientChannel | undefined
  private readonly opening: Promise<ClientChannel | undefined>

  constructor(open: Promise<ClientChannel>) {
    super()
    this.opening = open.then(
      (channel) => {
        if (this.destroyed) {
          channel.destroy()
          return undefined
        }
        this.channel = channel
        channel.on("data", (chunk: Buffer) => {
          if (!this.push(chunk)) channel.pause()
        })
        channel.on("end", () => this.push(null))
        channel.on("close", () => this.destroy())
        channel.on("error", (error: Error) => this.destroy(error))
        return channel
      },
      (error: Error) => {
        this.destroy(error)
        return undefined
      }
    )
  }

  override _read() {
    this.channel?.resume()
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void) {
    void this.opening.then((channel) => {
      if (channel === undefined || channel.destroyed) return callback(new Error("the SSH channel to the database is closed"))
      channel.write(chunk, (error?: Error | null) => callback(error))
    })
  }

  override _final(callback: (error?: Error | null) => void) {
    void this.opening.then((channel) => {
      channel?.end()
      callback()
    })
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void) {
    this.channel?.destroy()
    callback(error)
  }
}

export const makeTunnel = (ssh: ConnectionSsh, target: { readonly host: string; readonly port: number }): Tunnel => {
  const port = ssh.port ?? 22
  const where = `${ssh.host}:${port}`
  const timeoutMs = ssh.connect_timeout_ms ?? DEFAULT_SSH_CONNECT_TIMEOUT_MS
  let client: Client | undefined
  let connecting: Promise<Client> | undefined
  let closed = false
  let failureCount = 0
  let lastFailure: TunnelFailure | undefined
  let opened = 0

  const record = (failure: TunnelFailure) => {
    failureCount++
    lastFailure = failure
    return failure
  }

  /** Throws (a TunnelFailure) unless the key is one the operator listed for this bastion. */
  const hostKeyAccepted = (key: Buffer): boolean => {
    if (ssh.host_key_sha256 !== undefined) return fingerprintOf(key) === ssh.host_key_sha256.replace(/=+$/, "")
    if (ssh.known_hosts_file !== undefined) {
      return knownHostsAccepts(readBounded(ssh.known_hosts_file, MAX_KNOWN_HOSTS_BYTES, "known_hosts file"), ssh.host, port, key)
    }
    return false
  }

  const connect = (): Promise<Client> => {
    if (closed) return Promise.reject(record(new TunnelFailure("ssh", "connection_lost", "the tunnel is closed")))
    if (client !== undefined) return Promise.resolve(client)
    if (connecting !== undefined) return connecting
    const attempt = new Promise<Client>((resolve, reject) => {
      let secret: Pick<ConnectConfig, "privateKey" | "password">
      try {
        secret = credentials(ssh)
      } catch (error) {
        return reject(error)
      }
      const c = new Client()
      let settled = false
      let hostKeyProblem: TunnelFailure | undefined
      const fail = (failure: TunnelFailure) => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        c.removeAllListeners("ready")
        c.on("error", () => {})
        c.destroy()
        reject(failure)
      }
      // ssh2's readyTimeout covers the handshake; this covers everything, DNS and TCP included.
      const timer = setTimeout(
        () => fail(new TunnelFailure("ssh", "timeout", `no SSH session with ${where} within ${timeoutMs} ms`)),
        timeoutMs
      )
      // Statements are one write then a wait for the answer: Nagle would hold each write back
      // for the bastion's delayed ACK (about 40 ms a round trip).
      c.on("connect", () => c.setNoDelay(true))
      c.on("ready", () => {
        if (settled) return
        // The pool closed while this login was under way: nobody will use or end this session.
        if (closed) return fail(new TunnelFailure("ssh", "connection_lost", "the tunnel is closed"))
        settled = true
        clearTimeout(timer)
        opened++
        client = c
        resolve(c)
      })
      c.on("error", (error: Error & { level?: string; code?: string }) => {
        if (settled) return
        if (hostKeyProblem !== undefined) return fail(hostKeyProblem)
        if (error.level === "client-authentication") {
          return fail(new TunnelFailure("ssh", "auth_refused", `the SSH server ${where} refused the login of user ${ssh.user}`))
        }
        if (error.level === "client-timeout") return fail(new TunnelFailure("ssh", "timeout", `no SSH handshake with ${where} within ${timeoutMs} ms`))
        if (error.code !== undefined && SOCKET_CODES.has(error.code)) {
          return fail(new TunnelFailure("ssh", "server_unreachable", `cannot reach the SSH server ${where}: ${error.code}`))
        }
        fail(new TunnelFailure("ssh", "handshake_failed", `the SSH handshake with ${where} failed: ${error.message}`))
      })
      c.on("close", () => {
        if (client === c) {
          client = undefined
          // A call whose database session died with this session reports the SSH hop (SqlDrivers.ts).
          if (!closed) record(new TunnelFailure("ssh", "connection_lost", `the SSH session with ${where} ended`))
        }
        fail(hostKeyProblem ?? new TunnelFailure("ssh", "connection_lost", `the SSH server ${where} closed the connection`))
      })
      try {
        c.connect({
          host: ssh.host,
          port,
          username: ssh.user,
          ...secret,
          hostVerifier: (key: Buffer) => {
            let accepted: boolean
            try {
              accepted = hostKeyAccepted(key)
            } catch (error) {
              hostKeyProblem = error instanceof TunnelFailure
                ? new TunnelFailure("ssh", "host_key_mismatch", `the host key of ${where} cannot be checked: ${error.message}`)
                : new TunnelFailure("ssh", "host_key_mismatch", `the host key of ${where} cannot be checked`)
              return false
            }
            if (!accepted) {
              hostKeyProblem = new TunnelFailure(
                "ssh",
                "host_key_mismatch",
                `the SSH server ${where} presented host key ${fingerprintOf(key)}, which is not the one configured; nothing was sent`
              )
            }
            return accepted
          },
          readyTimeout: timeoutMs,
          keepaliveInterval: KEEPALIVE_INTERVAL_MS,
          keepaliveCountMax: 3,
          tryKeyboard: false
        })
      } catch (error) {
        // ssh2 parses the private key before connecting: a key it cannot read fails here (its text is never quoted).
        fail(new TunnelFailure("ssh", "credentials_unavailable", `the SSH private key cannot be used: ${(error as Error).message.replace(/:.*$/s, "")}`))
      }
    })
    connecting = attempt
    attempt.then(
      () => {
        connecting = undefined
      },
      (failure: TunnelFailure) => {
        connecting = undefined
        record(failure)
      }
    )
    return attempt
  }

  const forward = (c: Client): Promise<ClientChannel> =>
    new Promise((resolve, reject) => {
      // A bastion that cannot get an answer from the database's host would hold the open as long
      // as its own TCP timeout: the same deadline as the login bounds it.
      let answered = false
      const timer = setTimeout(() => {
        answered = true
        reject(record(new TunnelFailure(
          "database",
          "timeout",
          `the SSH server ${where} did not connect to ${target.host}:${target.port} within ${timeoutMs} ms`
        )))
      }, timeoutMs)
      try {
        c.forwardOut("127.0.0.1", 0, target.host, target.port, (error, channel) => {
          clearTimeout(timer)
          if (answered) {
            channel?.destroy()
            return
          }
          answered = true
          if (error === undefined || error === null) return resolve(channel)
          // The session itself died: the SSH hop; the bastion answered but could not connect: the database's.
          reject(record(
            client === c
              ? new TunnelFailure(
                "database",
                "forward_refused",
                `the SSH server ${where} could not open a connection to ${target.host}:${target.port}: ${error.message}`
              )
              : new TunnelFailure("ssh", "connection_lost", `the SSH session with ${where} ended`)
          ))
        })
      } catch {
        clearTimeout(timer)
        if (client === c) client = undefined
        reject(record(new TunnelFailure("ssh", "connection_lost", `the SSH session with ${where} ended`)))
      }
    })

  return {
    ready: () => connect().then(() => undefined),
    stream: () => new ForwardedStream(connect().then(forward)),
    connected: () => client !== undefined,
    failures: () => failureCount,
    failureSince: (count) => (failureCount > count ? lastFailure : undefined),
    sessionsOpened: () => opened,
    close: () => {
      closed = true
      const c = client
      client = undefined
      c?.end()
    }
  }
}
