/**
 * A Postgres group commit in one round trip (issue 38). `runCreditBatch` in a transaction costs a
 * Postgres commit five round trips (BEGIN, the workspace row, the budget rows, the writes,
 * COMMIT), each a wake-up of the server's backend and of this process; a lone paid request waited
 * for all of them before its provider was called. The batches that make up nearly every commit
 * (budget counts, charges of a block this replica holds, the settlements of ended requests) run
 * instead as one call of `modelgate_commit_batch`, a function migration 19 installs: the same
 * steps in the same order (the workspace row locked first, then the budget rows in sorted order,
 * then the blocks), decided by the same rules, in the implicit transaction of one statement, whose
 * end is the commit. Any other batch (a lease, a refund, a block returned, a retried charge, a
 * release, an identity subject's first count) keeps the transaction path. A test runs random
 * batches through both and compares every result and row (test/services/store/commit-batch-pg.test.ts).
 *
 * The function's text is part of migration 19 and so frozen: a change to it is a new migration
 * that replaces it (CREATE OR REPLACE), with the TypeScript below changed in the same commit.
 */
import { type BatchResult, type BudgetVerdict, type CreditBatch, encodeBudgetRows } from "./credit-batches.ts"
import { DEFAULT_WORKSPACE } from "./rows.ts"

/** Whether the one-call path takes this batch: only the movements it implements, nothing else. */
export const commitsInOneCall = (batch: CreditBatch): boolean =>
  batch.releases.length === 0 &&
  batch.partialSettles.length === 0 &&
  batch.refunds.length === 0 &&
  batch.returns.length === 0 &&
  batch.strays === undefined &&
  batch.lease === undefined &&
  batch.charges.every((c) => !c.retried && c.refundNote === undefined && c.keep === undefined) &&
  batch.checks.every((c) => c.holds.every((h) => h.subject === undefined))

/** The function's argument: the batch as JSON (maximums absent as null), with the commit's timestamp. */
export const commitCallArgument = (batch: CreditBatch, ts: string): string =>
  JSON.stringify({
    workspace: DEFAULT_WORKSPACE,
    owner: batch.owner,
    ts,
    checks: batch.checks.map((c) => ({
      id: c.id,
      amount: c.amount,
      requests: c.requests ?? 1,
      holds: c.holds.map((h) => ({ holder: h.holder, period: h.period, max_requests: h.max_requests ?? null, max_credits: h.max_credits ?? null }))
    })),
    charges: batch.charges.map((c) => ({
      block: c.block,
      request_id: c.request_id,
      amount: c.amount,
      key_id: c.key_id,
      model: c.model,
      open: c.open !== undefined,
      method: c.open?.method ?? null,
      endpoint: c.open?.endpoint ?? null,
      check: c.check ?? null,
      budgets: c.budgets === undefined || c.budgets.length === 0 ? null : c.budgets,
      // As the transaction path stores it (jsonb's own text would space it differently).
      budgets_text: encodeBudgetRows(c.budgets)
    })),
    settles: batch.settles
  })

interface CallResult {
  readonly checks: Record<string, { readonly _tag: "Counted" } | { readonly _tag: "Refused"; readonly refusal: Record<string, unknown> }>
  readonly written: ReadonlyArray<string>
  readonly dropped: ReadonlyArray<string>
  readonly unbudgeted: ReadonlyArray<string>
  readonly usage: ReadonlyArray<{ holder: string; period: string; credits: number | string; max_credits: number | string }>
  readonly balance: number | string
  readonly reclaim: number | string
}

/** The function's answer as the transaction path's result. */
export const commitCallResult = (value: unknown): BatchResult => {
  const r = (typeof value === "string" ? JSON.parse(value) : value) as CallResult
  const checks = new Map<string, BudgetVerdict>()
  for (const [id, verdict] of Object.entries(r.checks)) {
    if (verdict._tag === "Counted") checks.set(id, { _tag: "Counted" })
    else {
      const f = verdict.refusal
      checks.set(id, {
        _tag: "Refused",
        refusal: {
          holder: String(f.holder),
          period: String(f.period),
          limit: f.limit === "max_credits" ? "max_credits" : "max_requests",
          max: Number(f.max),
          used: Number(f.used)
        }
      })
    }
  }
  return {
    checks,
    written: new Set(r.written),
    found: new Set(),
    dropped: new Set(r.dropped),
    unbudgeted: new Set(r.unbudgeted),
    refunded: [],
    lease: undefined,
    reclaim: Number(r.reclaim),
    live: 1,
    budgetUsage: r.usage.map((u) => ({ holder: u.holder, period: u.period, credits: Number(u.credits), max_credits: Number(u.max_credits) })),
    balance: Number(r.balance)
  }
}

/**
 * `runCreditBatch`'s steps for the batches `commitsInOneCall` takes, as PL/pgSQL. Budget rows are
 * kept in arrays indexed by `period || chr(1) || holder` (a handful per batch).
 */
export const COMMIT_BATCH_FUNCTION = `
CREATE OR REPLACE FUNCTION modelgate_commit_batch(batch jsonb) RETURNS jsonb LANGUAGE plpgsql AS $fn$
DECLARE
  ws_credits bigint;
  ws_leased bigint;
  ws_reclaim bigint;
  bal bigint;
  held bigint;
  at_ts text := batch->>'ts';
  owner_id text := batch->>'owner';
  ukeys text[] := '{}';
  uholder text[] := '{}';
  uperiod text[] := '{}';
  ureq bigint[] := '{}';
  ucred bigint[] := '{}';
  udirty boolean[] := '{}';
  umax bigint[] := '{}';
  loaded record;
  chk jsonb;
  hold jsonb;
  charge jsonb;
  budget jsonb;
  idx int;
  bidx int;
  counted bigint;
  amt bigint;
  used_r bigint;
  used_c bigint;
  refusal jsonb;
  verdicts jsonb := '{}';
  refused text[] := '{}';
  written jsonb := '[]';
  dropped jsonb := '[]';
  unbudgeted jsonb := '[]';
  blocks text[] := '{}';
  totals bigint[] := '{}';
  blk text;
  paid boolean;
  raised jsonb := '[]';
BEGIN
  SELECT w.credits, w.leased, w.reclaim INTO ws_credits, ws_leased, ws_reclaim FROM workspaces w WHERE w.id = batch->>'workspace' FOR UPDATE;
  IF NOT FOUND THEN RAISE EXCEPTION 'workspace % is missing', batch->>'workspace'; END IF;
  bal := ws_credits;
  held := ws_leased;

  -- Every row a check counts against: made if missing and locked, in (period, holder) order.
  IF jsonb_array_length(batch->'checks') > 0 THEN
    FOR loaded IN
      INSERT INTO budget_usage (holder, period_start, requests, credits)
        SELECT d.holder, d.period, 0::bigint, 0::bigint FROM (
          SELECT DISTINCT h->>'holder' AS holder, h->>'period' AS period
            FROM jsonb_array_elements(batch->'checks') c, jsonb_array_elements(c->'holds') h
        ) d ORDER BY d.period COLLATE "C", d.holder COLLATE "C"
        ON CONFLICT (holder, period_start) DO UPDATE SET requests = budget_usage.requests
        RETURNING budget_usage.holder, budget_usage.period_start, budget_usage.requests, budget_usage.credits
    LOOP
      ukeys := ukeys || (loaded.period_start || chr(1) || loaded.holder);
      uholder := uholder || loaded.holder;
      uperiod := uperiod || loaded.period_start;
      ureq := ureq || loaded.requests;
      ucred := ucred || loaded.credits;
      udirty := udirty || false;
      umax := umax || NULL::bigint;
    END LOOP;
  END IF;

  -- Each check in order: all its holds or none.
  FOR chk IN SELECT value FROM jsonb_array_elements(batch->'checks') LOOP
    counted := (chk->>'requests')::bigint;
    amt := (chk->>'amount')::bigint;
    refusal := NULL;
    FOR hold IN SELECT value FROM jsonb_array_elements(chk->'holds') LOOP
      idx := array_position(ukeys, (hold->>'period') || chr(1) || (hold->>'holder'));
      used_r := CASE WHEN idx IS NULL THEN 0 ELSE ureq[idx] END;
      used_c := CASE WHEN idx IS NULL THEN 0 ELSE ucred[idx] END;
      IF hold->>'max_requests' IS NOT NULL AND counted > 0 AND used_r + counted > (hold->>'max_requests')::bigint THEN
        refusal := jsonb_build_object('holder', hold->>'holder', 'period', hold->>'period', 'limit', 'max_requests', 'max', (hold->>'max_requests')::bigint, 'used', used_r);
        EXIT;
      END IF;
      IF hold->>'max_credits' IS NOT NULL AND used_c + amt > (hold->>'max_credits')::bigint THEN
        refusal := jsonb_build_object('holder', hold->>'holder', 'period', hold->>'period', 'limit', 'max_credits', 'max', (hold->>'max_credits')::bigint, 'used', used_c);
        EXIT;
      END IF;
    END LOOP;
    IF refusal IS NOT NULL THEN
      verdicts := verdicts || jsonb_build_object(chk->>'id', jsonb_build_object('_tag', 'Refused', 'refusal', refusal));
      refused := refused || (chk->>'id');
      CONTINUE;
    END IF;
    FOR hold IN SELECT value FROM jsonb_array_elements(chk->'holds') LOOP
      idx := array_position(ukeys, (hold->>'period') || chr(1) || (hold->>'holder'));
      IF idx IS NULL THEN CONTINUE; END IF;
      ureq[idx] := ureq[idx] + counted;
      ucred[idx] := ucred[idx] + amt;
      udirty[idx] := true;
      IF hold->>'max_credits' IS NOT NULL AND amt > 0 THEN umax[idx] := (hold->>'max_credits')::bigint; END IF;
    END LOOP;
    verdicts := verdicts || jsonb_build_object(chk->>'id', jsonb_build_object('_tag', 'Counted'));
  END LOOP;

  -- Ended requests' reservations go before this batch's own are written (the transaction path
  -- deletes and inserts in one statement, where the delete cannot see the new rows).
  IF jsonb_array_length(batch->'settles') > 0 THEN
    DELETE FROM credit_reservations WHERE request_id IN (SELECT jsonb_array_elements_text(batch->'settles'));
  END IF;

  -- Charges by block, blocks in the order of their first charge; a refused check's charge is not written.
  FOR charge IN SELECT value FROM jsonb_array_elements(batch->'charges') LOOP
    IF charge->>'check' IS NOT NULL AND (charge->>'check') = ANY(refused) THEN
      unbudgeted := unbudgeted || to_jsonb(charge->>'request_id');
      CONTINUE;
    END IF;
    idx := array_position(blocks, charge->>'block');
    IF idx IS NULL THEN
      blocks := blocks || (charge->>'block');
      totals := totals || (charge->>'amount')::bigint;
    ELSE
      totals[idx] := totals[idx] + (charge->>'amount')::bigint;
    END IF;
  END LOOP;
  FOR bidx IN 1 .. coalesce(array_length(blocks, 1), 0) LOOP
    blk := blocks[bidx];
    UPDATE credit_blocks SET remaining = remaining - totals[bidx] WHERE id = blk AND remaining >= totals[bidx];
    paid := FOUND;
    IF paid THEN held := held - totals[bidx]; END IF;
    FOR charge IN SELECT value FROM jsonb_array_elements(batch->'charges') LOOP
      IF charge->>'block' <> blk OR (charge->>'check' IS NOT NULL AND (charge->>'check') = ANY(refused)) THEN CONTINUE; END IF;
      amt := (charge->>'amount')::bigint;
      IF NOT paid THEN
        dropped := dropped || to_jsonb(charge->>'request_id');
        -- Not charged: what its budgets counted for it goes back.
        IF jsonb_typeof(charge->'budgets') = 'array' AND amt > 0 THEN
          FOR budget IN SELECT value FROM jsonb_array_elements(charge->'budgets') LOOP
            idx := array_position(ukeys, (budget->>1) || chr(1) || (budget->>0));
            IF idx IS NULL THEN
              UPDATE budget_usage SET credits = CASE WHEN budget_usage.credits > amt THEN budget_usage.credits - amt ELSE 0 END
                WHERE holder = budget->>0 AND period_start = budget->>1;
            ELSE
              ucred[idx] := greatest(0, ucred[idx] - amt);
              udirty[idx] := true;
            END IF;
          END LOOP;
        END IF;
        CONTINUE;
      END IF;
      bal := bal - amt;
      INSERT INTO credit_ledger (ts, workspace_id, kind, amount, balance_after, actor, key_id, request_id, model, note)
        VALUES (at_ts, batch->>'workspace', 'charge', -amt, bal, charge->>'key_id', charge->>'key_id', charge->>'request_id', charge->>'model', NULL);
      written := written || to_jsonb(charge->>'request_id');
      IF (charge->>'open')::boolean THEN
        INSERT INTO credit_reservations (request_id, owner, amount, key_id, model, method, endpoint, created_at, budgets)
          VALUES (charge->>'request_id', owner_id, amt, charge->>'key_id', charge->>'model', charge->>'method', charge->>'endpoint', at_ts,
                  charge->>'budgets_text');
      END IF;
    END LOOP;
  END LOOP;

  FOR idx IN 1 .. coalesce(array_length(ukeys, 1), 0) LOOP
    IF udirty[idx] THEN
      UPDATE budget_usage SET requests = ureq[idx], credits = ucred[idx] WHERE holder = uholder[idx] AND period_start = uperiod[idx];
    END IF;
    IF umax[idx] IS NOT NULL THEN
      raised := raised || jsonb_build_object('holder', uholder[idx], 'period', uperiod[idx], 'credits', ucred[idx], 'max_credits', umax[idx]);
    END IF;
  END LOOP;

  IF bal <> ws_credits OR held <> ws_leased THEN
    UPDATE workspaces SET credits = bal, leased = held WHERE id = batch->>'workspace';
  END IF;

  RETURN jsonb_build_object('checks', verdicts, 'written', written, 'dropped', dropped, 'unbudgeted', unbudgeted,
    'usage', raised, 'balance', bal, 'reclaim', ws_reclaim);
END
$fn$`
