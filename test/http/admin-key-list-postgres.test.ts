/** GET /api-keys with 50,000 keys on postgres (the suite is admin-key-list.ts; the other store's file runs beside this one). */
import { describeKeyList } from "./admin-key-list.ts"

describeKeyList("postgres")
