// Loaded with `--import` into a child Node by test/cli/loading.test.ts: writes the Node-internal
// modules the process loaded (process.moduleLoadList) to TEST_BUILTINS_FILE as it exits. Plain
// JavaScript on purpose: a TypeScript hook would itself make Node load its type stripper.
import { writeFileSync } from "node:fs"

const file = process.env.TEST_BUILTINS_FILE
if (file !== undefined) process.on("exit", () => writeFileSync(file, process.moduleLoadList.join("\n")))
