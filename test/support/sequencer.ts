/**
 * The order files start in. Vitest's own order puts files with a cached result longest first,
 * but a clean clone has no cache and it falls back to the largest file first: the fault tests
 * that mostly wait (leases lapsing, a store frozen, a browser stepping through the app) are
 * short files and started last, so the run ended with one of them waiting alone on an idle
 * machine. These start first, longest first (their wall time in a whole run on a loaded two-core
 * machine, 4.5 s and more in one of two runs); everything else follows in Vitest's order.
 */
import { existsSync } from "node:fs"
import { join } from "node:path"
import { BaseSequencer, type TestSpecification } from "vitest/node"

export const LONG_FIRST = [
  // Mostly waits (leases lapsing, a frozen store): first whatever its length; then by wall time.
  "test/faults/lease-clock.test.ts",
  // Issue 33: a replica gone with a request in flight waits for a live one's sweep (a lease of contact first).
  "test/limits/money-replicas.test.ts",
  // Issue 32: the amplification table in two parts (one request after another within each by
  // design: each is measured alone in its process), each 20-40 s at a load of 10.
  "test/hardening/amplification-2.test.ts",
  "test/hardening/amplification-1.test.ts",
  // Issue 31: 300,000 audit records upgraded from the previous release (Postgres busy 10-20 s).
  "test/services/store/migrations-large.test.ts",
  "test/services/store/migrations.test.ts",
  "test/limits/credit-blocks.test.ts",
  "test/cli/backup.test.ts",
  "test/app/app.e2e.test.ts",
  "test/limits/one-gateway.test.ts",
  "test/http/admin-key-list-postgres.test.ts",
  "test/http/admin-key-list-sqlite.test.ts",
  "test/app/key-list.e2e.test.ts",
  "test/pipelines/matrix.test.ts",
  // Issue 34: every capture replayed on seven kinds (about 12 s alone).
  "test/clients/every-kind.test.ts",
  "test/app/oidc-signin.e2e.test.ts",
  "test/faults/spools.test.ts",
  "test/faults/partition.test.ts",
  "test/http/metrics-credits.test.ts",
  "test/pipelines/mcp.test.ts",
  "test/http/sql-ssh.test.ts",
  "test/pipelines/mcp-upstreams.test.ts",
  "test/identity/oidc-tokens.test.ts",
  "test/faults/readyz.test.ts",
  "test/docs/readme-snippets.test.ts",
  "test/faults/credits-outage.test.ts",
  "test/services/limits/stream-slots.test.ts",
  "test/services/sql/tools/tools.test.ts",
  "test/faults/stop-during-outage.test.ts",
  // Issue 35: a lease lapsing after a kill (about 8 s), a cooldown waited out, a full disk.
  "test/faults/replica-lost-fallback.test.ts",
  "test/faults/clocks.test.ts",
  "test/faults/full-disk.test.ts",
  "test/hardening/metrics-usage.test.ts",
  "test/services/sql/guard/guard.test.ts",
  "test/hardening/protocol.test.ts",
  "test/services/store/store.test.ts",
  "test/http/traces.test.ts",
  "test/http/reload-live.test.ts",
  "test/limits/replicas.test.ts",
  // Issue 33: teams on SQLite and on Postgres with two gateways and Redis (about 10 s each alone).
  "test/limits/teams.test.ts",
  "test/http/admin-teams.test.ts",
  "test/pipelines/chat-completions-failures.test.ts",
  "test/pipelines/routing.test.ts",
  "test/http/admin-models.test.ts",
  "test/app/models.e2e.test.ts",
  "test/services/sql/tools/guard-mysql.test.ts",
  "test/hardening/result-bytes.test.ts",
  "test/services/sql/tools/guard-postgres.test.ts",
  "test/clients/replay.test.ts",
  // Issue 31.5: a spawned serve with SIGHUP (about 6 s); two replicas on Postgres (about 5 s).
  "test/cli/log-json.test.ts",
  "test/http/connections-next-id.test.ts",
  // A spawned serve stopped by SIGINT (about 6 s).
  "test/cli/sigint.test.ts",
  // Issue 39: a short replica still waiting after more than 2 s of asks (about 4 s).
  "test/services/credits/block-writer.test.ts"
]

// A file renamed or removed would silently lose its place: name it here.
const missing = LONG_FIRST.filter((file) => !existsSync(join(import.meta.dirname, "../..", file)))
if (missing.length > 0) throw new Error(`test/support/sequencer.ts names files that do not exist: ${missing.join(", ")}`)

export class LongFirstSequencer extends BaseSequencer {
  override async sort(files: Array<TestSpecification>): Promise<Array<TestSpecification>> {
    const sorted = await super.sort(files)
    const rank = (spec: TestSpecification) => {
      const relative = spec.moduleId.slice(spec.project.config.root.length + 1).replaceAll("\\", "/")
      const index = LONG_FIRST.indexOf(relative)
      return index === -1 ? LONG_FIRST.length : index
    }
    // A stable sort: the listed files in the list's order, then the rest as Vitest ordered them.
    return sorted.map((spec, at) => ({ spec, at, rank: rank(spec) }))
      .sort((a, b) => a.rank - b.rank || a.at - b.at)
      .map(({ spec }) => spec)
  }
}
