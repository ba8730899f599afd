/**
 * Builds the admin app into app/dist, which the gateway serves at /app (src/http/routes/app.ts).
 * Run by `npm ci` through the `prepare` script. No inline script or style may be emitted: the
 * app is served under a CSP without 'unsafe-inline'.
 */
import { fileURLToPath } from "node:url"
import { defineConfig } from "vite"

export default defineConfig({
  root: fileURLToPath(new URL(".", import.meta.url)),
  base: "/app/",
  logLevel: "warn",
  oxc: { jsx: { runtime: "automatic", importSource: "preact" } },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    // Vite's module-preload helper is injected inline-free, but its polyfill is not needed:
    // every browser the app supports preloads modules natively.
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    chunkSizeWarningLimit: 600,
    sourcemap: false
  }
})
