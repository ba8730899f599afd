import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Two cores on CI: a few forks keep the suite fast without starving the servers under test.
    pool: "forks",
    maxWorkers: 3
  }
})
