/** Every guard case through sql_run on MySQL/MariaDB, with a read key and an edit key (see guard-suite.ts). */
import { defineGuardSuite } from "./guard-suite.ts"

defineGuardSuite("mysql")
