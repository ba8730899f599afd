#!/usr/bin/env node
// Runs on the Node 24 that `npm ci` installs into node_modules/.bin (npm and npx put it first on PATH).
import "../src/main.ts"
