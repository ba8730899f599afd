/**
 * The machine's MariaDB presented as a MySQL 8.0 server (issue 39): this machine has no MySQL 8
 * and no internet, and the MySQL driver branches on the flavor the server reports. A TCP proxy in
 * front of MariaDB rewrites the few commands where the two differ, so the driver's MySQL 8 paths
 * run against a real server and real sessions:
 *
 * - `SELECT VERSION()` answers `8.0.36`, so the driver takes its MySQL 8 branches;
 * - `max_execution_time = <ms>` (MySQL 8's statement limit, which MariaDB refuses as an unknown
 *   variable) becomes MariaDB's `max_statement_time = <s>`, which the server then enforces;
 * - `EXPLAIN ANALYZE <statement>` (MySQL 8's grammar, a syntax error on MariaDB) is answered
 *   with a tree in MySQL 8's format, one text column named EXPLAIN, as MySQL 8.0.18+ answers it.
 *
 * Every command the driver sent is recorded as it sent it, before any rewriting: a test asserts
 * what the driver asked a MySQL 8 server for. Commands start a packet sequence (sequence id 0):
 * the handshake and authentication packets are passed through untouched.
 */
import { createServer, type Server, type Socket, connect } from "node:net"

export interface Mysql8Face {
  readonly port: number
  /** The URL of the database `database` through the proxy, with the credentials of `url`. */
  readonly urlFor: (url: string) => string
  /** Every statement text the driver sent (COM_QUERY and COM_STMT_PREPARE), in order. */
  readonly statements: ReadonlyArray<string>
  readonly close: () => Promise<void>
}

export const MYSQL8_VERSION = "8.0.36"

/** A MySQL 8 EXPLAIN ANALYZE tree, as the server prints it (blank last line included). */
export const MYSQL8_TREE = [
  "-> Filter: (big.pad = 'y')  (cost=10106 rows=9970) (actual time=31.4..31.4 rows=0 loops=1)",
  "    -> Table scan on big  (cost=10106 rows=99700) (actual time=0.046..24.9 rows=100000 loops=1)",
  ""
].join("\n")

const COM_QUERY = 0x03
const COM_STMT_PREPARE = 0x16

const sqlString = (text: string) => `'${text.replaceAll("\\", "\\\\").replaceAll("'", "''")}'`

/** The statement MariaDB runs for one the driver sent to "MySQL 8". */
const translate = (sql: string): string => {
  if (/^\s*SELECT\s+VERSION\(\)/i.test(sql)) return `SELECT ${sqlString(MYSQL8_VERSION)} AS version`
  if (/^\s*EXPLAIN\s+ANALYZE\s/i.test(sql)) return `SELECT ${sqlString(MYSQL8_TREE)} AS \`EXPLAIN\``
  return sql.replace(/\bmax_execution_time\s*=\s*(\d+)/gi, (_all, ms: string) => `max_statement_time = ${(Number(ms) / 1000).toFixed(3)}`)
}

const packet = (sequence: number, payload: Buffer) => {
  const header = Buffer.alloc(4)
  header.writeUIntLE(payload.length, 0, 3)
  header[3] = sequence
  return Buffer.concat([header, payload])
}

export const startMysql8Face = async (targetPort: number): Promise<Mysql8Face> => {
  const statements: Array<string> = []
  const sockets = new Set<Socket>()
  const server: Server = createServer((client) => {
    const upstream = connect(targetPort, "127.0.0.1")
    sockets.add(client)
    sockets.add(upstream)
    let pending = Buffer.alloc(0)
    client.on("data", (chunk) => {
      pending = Buffer.concat([pending, chunk])
      // Whole packets only; a packet of 16 MiB or more (split by the protocol) never comes from these tests.
      while (pending.length >= 4) {
        const length = pending.readUIntLE(0, 3)
        if (pending.length < 4 + length) break
        const sequence = pending[3]!
        const payload = pending.subarray(4, 4 + length)
        pending = pending.subarray(4 + length)
        const command = payload[0]
        if (sequence === 0 && (command === COM_QUERY || command === COM_STMT_PREPARE)) {
          const sql = payload.subarray(1).toString("utf8")
          statements.push(sql)
          upstream.write(packet(0, Buffer.concat([Buffer.from([command]), Buffer.from(translate(sql), "utf8")])))
        } else {
          upstream.write(packet(sequence, payload))
        }
      }
    })
    upstream.on("data", (chunk) => client.write(chunk))
    const close = () => {
      client.destroy()
      upstream.destroy()
      sockets.delete(client)
      sockets.delete(upstream)
    }
    client.on("close", close)
    upstream.on("close", close)
    client.on("error", close)
    upstream.on("error", close)
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as { port: number }).port
  return {
    port,
    urlFor: (url) => {
      const parsed = new URL(url)
      parsed.hostname = "127.0.0.1"
      parsed.port = String(port)
      return parsed.toString()
    },
    statements,
    close: async () => {
      for (const socket of sockets) socket.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
}
