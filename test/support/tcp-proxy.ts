/**
 * A TCP proxy in front of a private Postgres, for partition tests (issue 21): one replica talks
 * to the store through it, and the test cuts it. A cut keeps every socket open and silently drops
 * whatever either side sends (what a partition does: no reset, no FIN), until `heal` (new
 * connections then work; the cut ones stay dead, as after a real partition of their packets).
 *
 * `cutInTransaction` cuts at the moment the server has just told the replica it is inside a
 * transaction (a ReadyForQuery message with status `T`): the server's session is left idle in
 * transaction holding whatever it locked, the replica's next statement never arrives. That is
 * the worst place for a partition to land (the group commit holds the workspace row from its
 * first statement), and the place a real one lands most often under paid load.
 */
import { createServer, type Server, type Socket, connect } from "node:net"

export interface TcpProxy {
  readonly port: number
  /** Drop everything from now on, both ways, on every connection (open ones stay open). */
  readonly cut: () => void
  /** The next time any connection's server side says "in transaction", cut there. Resolves when it did. */
  readonly cutInTransaction: () => Promise<void>
  readonly heal: () => void
  readonly isCut: () => boolean
  readonly close: () => Promise<void>
}

/** ReadyForQuery, length 5, status T (in a transaction block). */
const IN_TRANSACTION = Buffer.from([0x5a, 0, 0, 0, 5, 0x54])

export const startTcpProxy = async (targetPort: number): Promise<TcpProxy> => {
  let cut = false
  let armed: (() => void) | undefined
  const sockets = new Set<Socket>()
  // A connection that lived through a cut stays dead after the heal: its bytes were dropped.
  const connections = new Set<{ dead: boolean }>()
  const doCut = () => {
    cut = true
    for (const c of connections) c.dead = true
  }
  const server: Server = createServer((client) => {
    const upstream = connect(targetPort, "127.0.0.1")
    // Connections opened during a cut get nowhere, like SYNs into a partition.
    const state = { dead: cut }
    connections.add(state)
    sockets.add(client)
    sockets.add(upstream)
    client.on("data", (chunk) => {
      if (!state.dead) upstream.write(chunk)
    })
    upstream.on("data", (chunk) => {
      if (state.dead) return
      client.write(chunk)
      if (armed !== undefined && chunk.subarray(chunk.length - IN_TRANSACTION.length).equals(IN_TRANSACTION)) {
        doCut()
        const done = armed
        armed = undefined
        done()
      }
    })
    const close = () => {
      client.destroy()
      upstream.destroy()
      sockets.delete(client)
      sockets.delete(upstream)
      connections.delete(state)
    }
    client.on("error", close)
    upstream.on("error", close)
    client.on("close", close)
    upstream.on("close", close)
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    port: (server.address() as { port: number }).port,
    cut: doCut,
    cutInTransaction: () => new Promise<void>((resolve) => (armed = resolve)),
    heal: () => {
      cut = false
    },
    isCut: () => cut,
    close: async () => {
      for (const socket of sockets) socket.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
}
