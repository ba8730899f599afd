/**
 * Throwaway databases on the machine's real Postgres and MariaDB, one per test file, so test
 * files can run in parallel and leave nothing behind.
 */
import { randomBytes } from "node:crypto"
import { createConnection } from "mysql2/promise"
import { Client } from "./pg-admin.ts"

export const POSTGRES_ADMIN_URL = process.env.MODELGATE_TEST_POSTGRES ?? "postgres://postgres@127.0.0.1:5432/postgres"
export const MYSQL_ADMIN_URL = process.env.MODELGATE_TEST_MYSQL ?? "mysql://root@127.0.0.1:3306/test"

const uniqueName = (prefix: string) => `${prefix}_${Date.now().toString(36)}_${randomBytes(4).toString("hex")}`

export interface TempDatabase {
  readonly name: string
  readonly url: string
  readonly drop: () => Promise<void>
}

export const createPostgresDatabase = async (prefix = "mg_test"): Promise<TempDatabase> => {
  const name = uniqueName(prefix)
  const admin = new Client(POSTGRES_ADMIN_URL)
  await admin.query(`CREATE DATABASE ${name}`)
  const url = new URL(POSTGRES_ADMIN_URL)
  url.pathname = `/${name}`
  return {
    name,
    url: url.toString(),
    drop: () => admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).then(() => undefined)
  }
}

export const createMysqlDatabase = async (prefix = "mg_test"): Promise<TempDatabase> => {
  const name = uniqueName(prefix)
  const admin = await createConnection(MYSQL_ADMIN_URL)
  await admin.query(`CREATE DATABASE \`${name}\``)
  await admin.end()
  const url = new URL(MYSQL_ADMIN_URL)
  url.pathname = `/${name}`
  return {
    name,
    url: url.toString(),
    drop: async () => {
      const conn = await createConnection(MYSQL_ADMIN_URL)
      await conn.query(`DROP DATABASE IF EXISTS \`${name}\``)
      await conn.end()
    }
  }
}
