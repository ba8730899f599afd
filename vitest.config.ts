import { defineConfig } from "vitest/config"
import { LongFirstSequencer } from "./test/support/sequencer.ts"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // `expect.poll` waits for a state; Vitest's default gives the state 1 s to arrive, which a page
    // re-rendering after an API call beside a second suite outran (npm run test:stress, mcp.e2e).
    // Only a test that fails waits this long.
    expect: { poll: { timeout: 15_000 } },
    // Two cores on CI: a few forks keep the suite fast without starving the servers under test.
    pool: "forks",
    maxWorkers: 3,
    // A worker runs file after file without a fresh module graph: a fork and importing Effect and
    // the gateway per file was most of the suite's CPU (test/wire + test/services: 45 s of CPU
    // isolated, 22 s not). The tests share no global state (no env writes, listeners or mocks);
    // each starts its own gateway, databases and fakes.
    isolate: false,
    // The fault tests that mostly wait start first, so the run does not end waiting on one alone.
    sequence: { sequencer: LongFirstSequencer }
  }
})
