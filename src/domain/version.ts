/**
 * The release this build is: package.json's `version`, the one source of truth (CHANGELOG.md
 * names the same number; README "Versions and changes"). Read once, when the module loads, so
 * `modelgate --version`, `/readyz`, the `modelgate_build_info` gauge, the admin app's footer,
 * the MCP server info, the OpenAPI document and the traces' service.version all say the same
 * and no request reads a file. package.json ships with every install (the container copies it).
 */
import { readFileSync } from "node:fs"

const read = (): string => {
  const manifest = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version?: unknown }
  // A build whose manifest has no version is broken, not unversioned: say so where it shows.
  return typeof manifest.version === "string" && manifest.version.length > 0 ? manifest.version : "unknown"
}

export const VERSION: string = read()
