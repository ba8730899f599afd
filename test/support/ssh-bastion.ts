/**
 * An SSH bastion for tests (ssh2's Server on 127.0.0.1:0): it accepts one user with one public
 * key or one password, forwards `direct-tcpip` to names it alone resolves (so a database URL
 * naming `db.internal` can only be reached through it), and records what it saw.
 */
import { connect as netConnect, type Socket } from "node:net"
import { createHash } from "node:crypto"
import { Server, type Connection, utils } from "ssh2"

export interface KeyPair {
  readonly private: string
  readonly public: string
}

/**
 * A fresh ed25519 pair that ssh2 itself can read back. ssh2's generator writes a public key
 * whose first byte is zero as 31 bytes, a key its own parser then refuses as malformed (about
 * one pair in 200): a test given such a "wrong" key saw `credentials_unavailable` where it
 * expected the bastion's `auth_refused`. Keys an operator makes with ssh-keygen have no such
 * flaw; only this generator does, so the pair is drawn again until it reads back.
 */
export const generateKey = (): KeyPair => {
  for (;;) {
    const pair = utils.generateKeyPairSync("ed25519")
    if (!(utils.parseKey(pair.private) instanceof Error) && !(utils.parseKey(pair.public) instanceof Error)) {
      return { private: pair.private, public: pair.public }
    }
  }
}

const publicBlob = (publicKey: string): Buffer => {
  const parsed = utils.parseKey(publicKey)
  if (parsed instanceof Error) throw parsed
  return (Array.isArray(parsed) ? parsed[0] : parsed).getPublicSSH()
}

export const fingerprint = (publicKey: string): string =>
  `SHA256:${createHash("sha256").update(publicBlob(publicKey)).digest("base64").replace(/=+$/, "")}`

export interface Bastion {
  readonly port: number
  readonly hostKey: KeyPair
  /** The host key as OpenSSH shows it. */
  readonly fingerprint: string
  /** `[127.0.0.1]:port ssh-ed25519 AAAA...` for a known_hosts file. */
  readonly knownHostsLine: string
  /** Every authentication attempt (method names), in order: none may come before a refused host key. */
  readonly authAttempts: Array<string>
  /** Sessions that logged in. */
  readonly logins: () => number
  /** Each forward asked for, as `host:port`. */
  readonly forwards: Array<string>
  /** Ends every open SSH connection (a tunnel dropped mid-session). */
  readonly dropSessions: () => void
  readonly close: () => Promise<void>
}

export const startBastion = async (options: {
  readonly user: string
  readonly clientKey?: KeyPair
  readonly password?: string
  /** Names the bastion resolves for forwards (`db.internal` -> 127.0.0.1). */
  readonly resolve?: Readonly<Record<string, string>>
}): Promise<Bastion> => {
  const hostKey = generateKey()
  const allowed = options.clientKey === undefined ? undefined : utils.parseKey(options.clientKey.public)
  const allowedKey = allowed === undefined || allowed instanceof Error ? undefined : Array.isArray(allowed) ? allowed[0] : allowed
  const authAttempts: Array<string> = []
  const forwards: Array<string> = []
  const connections = new Set<Connection>()
  const sockets = new Set<Socket>()
  let logins = 0

  const server = new Server({ hostKeys: [hostKey.private] }, (client) => {
    connections.add(client)
    // ssh2 leaves Nagle on: every statement would wait for a delayed ACK.
    ;(client as unknown as { setNoDelay: (on: boolean) => void }).setNoDelay(true)
    client.on("close", () => connections.delete(client))
    client.on("error", () => {})
    client.on("authentication", (ctx) => {
      authAttempts.push(ctx.method)
      if (ctx.username !== options.user) return ctx.reject()
      if (ctx.method === "password" && options.password !== undefined && ctx.password === options.password) return ctx.accept()
      if (ctx.method === "publickey" && allowedKey !== undefined) {
        const same = ctx.key.algo === allowedKey.type && ctx.key.data.equals(allowedKey.getPublicSSH())
        if (!same) return ctx.reject()
        if (ctx.signature === undefined) return ctx.accept()
        if (ctx.blob !== undefined && allowedKey.verify(ctx.blob, ctx.signature, ctx.hashAlgo) === true) return ctx.accept()
        return ctx.reject()
      }
      ctx.reject()
    })
    client.on("ready", () => {
      logins++
      client.on("tcpip", (accept, reject, info) => {
        forwards.push(`${info.destIP}:${info.destPort}`)
        const host = options.resolve?.[info.destIP] ?? info.destIP
        const socket = netConnect({ port: info.destPort, host, noDelay: true })
        sockets.add(socket)
        socket.on("close", () => sockets.delete(socket))
        socket.once("error", () => reject())
        socket.once("connect", () => {
          const channel = accept()
          socket.removeAllListeners("error")
          socket.on("error", () => channel.destroy())
          channel.on("error", () => socket.destroy())
          channel.on("close", () => socket.destroy())
          socket.on("close", () => channel.destroy())
          channel.pipe(socket).pipe(channel)
        })
      })
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as { port: number }).port
  const dropSessions = () => {
    for (const c of connections) c.end()
    for (const s of sockets) s.destroy()
  }
  return {
    port,
    hostKey,
    fingerprint: fingerprint(hostKey.public),
    knownHostsLine: `[127.0.0.1]:${port} ${hostKey.public.trim().split(/\s+/).slice(0, 2).join(" ")}`,
    authAttempts,
    logins: () => logins,
    forwards,
    dropSessions,
    close: () =>
      new Promise<void>((resolve) => {
        dropSessions()
        server.close(() => resolve())
      })
  }
}
