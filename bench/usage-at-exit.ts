/**
 * Loaded into a CLI child with `--import` by bench/startup.ts: as the process exits, writes its
 * own CPU time and peak resident set (getrusage) to the file named by BENCH_USAGE_FILE, which is
 * exact where sampling /proc from outside would miss a process that lives 0.2 s.
 */
import { writeFileSync } from "node:fs"

const file = process.env.BENCH_USAGE_FILE
if (file !== undefined) {
  process.on("exit", () => {
    const usage = process.resourceUsage()
    writeFileSync(file, JSON.stringify({ cpuMs: (usage.userCPUTime + usage.systemCPUTime) / 1000, maxRssKiB: usage.maxRSS }))
  })
}
