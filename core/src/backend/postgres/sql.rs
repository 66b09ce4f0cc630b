//! The schema and every statement of the Postgres backend
//! (`docs/PROTOCOL.md`, "Postgres"). `@S` stands for the quoted schema
//! name; [`in_schema`] fills it in.
//!
//! Every operation is ONE statement, most a call of a function installed
//! with the schema (like the Lua scripts on Redis: any client in any
//! language can call them and gets the same atomic step). Per key, the
//! operations that decide who holds it (acquire, slot acquire) and those
//! that announce a free lease to the queue (release, break_lease,
//! leave_queue) first lock the key's row of `@S.fences` (`FOR UPDATE`), so
//! they run one at a time per key and an announcement reads a queue that
//! every earlier refused try has committed to; a renewal locks only its own lease row, and an acquire's
//! pruning of expired rows waits for it and re-checks. The database clock
//! (`clock_timestamp()`, read after the locks are taken) decides expiry.

/// The schema version this client writes and reads.
/// 2: `release`, `break_lease` and `leave_queue` lock the key's `fences` row
/// first (a waiter's refused try could commit unseen, its line never rung);
/// channel names come from the client ([`channel`]), kept in the queue row
/// for a line, passed to `set_flag` for a flag.
/// 3: a release of a slot of an N-holder lease announces itself to the
/// first `free` live lines of the queue (`free` = its limit − live slots
/// after it, at least 1), not to the first one only; `break_lease` to as
/// many as the limit; a leaving line that was one of those tells the line
/// that moves up (`announce` takes a count; `free_slots`). Upgraded in
/// place from 1 and 2 (`CREATE OR REPLACE`, the 3-argument `announce`
/// dropped).
pub(crate) const VERSION: i64 = 3;

/// The DDL: idempotent, one transaction, serialized across processes by a
/// transaction-scoped advisory lock; refuses (SQLSTATE `MLV01`) to touch a
/// schema of a newer version.
pub(crate) const SCHEMA: &str = r#"BEGIN;
SELECT pg_advisory_xact_lock(7402, hashtext('@N'));
DO $mistri$
DECLARE v bigint;
BEGIN
  IF to_regclass('@S.meta') IS NOT NULL THEN
    EXECUTE 'SELECT version FROM @S.meta WHERE id = 1' INTO v;
    IF v > @V THEN
      RAISE EXCEPTION 'mistri_locks: schema @N is at version %, newer than this client''s @V: upgrade mistri_locks', v
        USING ERRCODE = 'MLV01';
    END IF;
  END IF;
END
$mistri$;
CREATE SCHEMA IF NOT EXISTS @S;
CREATE TABLE IF NOT EXISTS @S.meta (
  id int PRIMARY KEY CHECK (id = 1),
  version bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS @S.leases (
  ns text NOT NULL,
  key text NOT NULL,
  token text NOT NULL,
  fence bigint NOT NULL,
  lim int NOT NULL,
  expires_at timestamptz NOT NULL,
  acquired_at timestamptz NOT NULL,
  renewed_at timestamptz NOT NULL,
  ttl_ms bigint NOT NULL,
  heartbeat_ms bigint NOT NULL,
  label text NOT NULL,
  PRIMARY KEY (ns, key, token)
) WITH (fillfactor = 70);
CREATE TABLE IF NOT EXISTS @S.fences (
  ns text NOT NULL,
  key text NOT NULL,
  fence bigint NOT NULL,
  PRIMARY KEY (ns, key)
);
CREATE TABLE IF NOT EXISTS @S.flags (
  ns text NOT NULL,
  key text NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (ns, key)
);
CREATE TABLE IF NOT EXISTS @S.queue (
  ns text NOT NULL,
  key text NOT NULL,
  line text NOT NULL,
  queued_at timestamptz NOT NULL,
  deadline timestamptz NOT NULL,
  PRIMARY KEY (ns, key, line)
);
CREATE TABLE IF NOT EXISTS @S.fence_seen (
  resource text PRIMARY KEY,
  fence bigint NOT NULL
);

-- Version 2: channel names come from the client (computed in Rust, in
-- UTF-8, whatever the database encoding): the line's channel is kept in its
-- queue row, a flag's is passed to set_flag. The version-1 functions that
-- computed them in SQL go.
ALTER TABLE @S.queue ADD COLUMN IF NOT EXISTS channel text;
DROP FUNCTION IF EXISTS @S.acquire(text, text, text, bigint, text, bigint, int, text, bigint);
DROP FUNCTION IF EXISTS @S.set_flag(text, text, bigint);
DROP FUNCTION IF EXISTS @S.channel(text, text, text, text);

-- Version 3: announce to the first p_count live lines (the free slots of
-- an N-holder lease); the 3-argument announce of versions 1 and 2 goes.
DROP FUNCTION IF EXISTS @S.announce(text, text, text);
CREATE OR REPLACE FUNCTION @S.announce(p_ns text, p_key text, p_payload text, p_count int)
RETURNS void LANGUAGE plpgsql AS $f$
DECLARE ch text;
BEGIN
  FOR ch IN SELECT q.channel FROM @S.queue q
    WHERE q.ns = p_ns AND q.key = p_key AND q.deadline > clock_timestamp()
    ORDER BY q.queued_at, q.line LIMIT greatest(p_count, 1)
  LOOP
    IF ch IS NOT NULL THEN
      PERFORM pg_notify(ch, p_payload);
    END IF;
  END LOOP;
END
$f$;

-- The free slots of the N-holder lease on the key (its limit, as its live
-- slots recorded it, minus the live slots) and that limit; (0, 1) when no
-- slot is live (an exclusive key, or one whose slots all lapsed).
CREATE OR REPLACE FUNCTION @S.free_slots(p_ns text, p_key text, OUT free int, OUT lim int)
LANGUAGE plpgsql AS $f$
DECLARE live int;
BEGIN
  SELECT count(*), max(l.lim) INTO live, lim FROM @S.leases l
    WHERE l.ns = p_ns AND l.key = p_key AND l.lim > 1 AND l.expires_at > clock_timestamp();
  IF live = 0 OR lim IS NULL THEN
    free := 0;
    lim := 1;
  ELSE
    free := greatest(lim - live, 0);
  END IF;
END
$f$;

CREATE OR REPLACE FUNCTION @S.acquire(p_ns text, p_key text, p_token text, p_ttl_ms bigint,
  p_label text, p_heartbeat_ms bigint, p_limit int, p_line text, p_queue_ms bigint,
  p_channel text)
RETURNS bigint LANGUAGE plpgsql AS $f$
DECLARE
  counter bigint;
  now_ts timestamptz;
  v_fence bigint;
  live int;
  excl int;
  free int;
  ahead text[];
BEGIN
  INSERT INTO @S.fences AS f (ns, key, fence) VALUES (p_ns, p_key, 0) ON CONFLICT DO NOTHING;
  SELECT f.fence INTO counter FROM @S.fences f WHERE f.ns = p_ns AND f.key = p_key FOR UPDATE;
  now_ts := clock_timestamp();
  DELETE FROM @S.leases l WHERE l.ns = p_ns AND l.key = p_key AND l.expires_at <= now_ts;
  DELETE FROM @S.queue q WHERE q.ns = p_ns AND q.key = p_key AND q.deadline <= now_ts;
  SELECT count(*), count(*) FILTER (WHERE l.lim = 1) INTO live, excl
    FROM @S.leases l WHERE l.ns = p_ns AND l.key = p_key;
  IF p_limit <= 1 THEN
    free := CASE WHEN live = 0 THEN 1 ELSE 0 END;
  ELSIF excl > 0 THEN
    free := 0;
  ELSE
    free := greatest(p_limit - live, 0);
  END IF;
  IF free > 0 THEN
    SELECT array_agg(h.line) INTO ahead FROM (
      SELECT q.line FROM @S.queue q WHERE q.ns = p_ns AND q.key = p_key
      ORDER BY q.queued_at, q.line LIMIT free) h;
    IF ahead IS NOT NULL AND NOT coalesce(p_line = ANY (ahead), false)
       AND cardinality(ahead) >= free THEN
      free := 0;
    END IF;
  END IF;
  IF free > 0 THEN
    v_fence := greatest(counter + 1, (extract(epoch FROM now_ts) * 1000000)::bigint);
    UPDATE @S.fences f SET fence = v_fence WHERE f.ns = p_ns AND f.key = p_key;
    INSERT INTO @S.leases (ns, key, token, fence, lim, expires_at, acquired_at, renewed_at,
      ttl_ms, heartbeat_ms, label)
    VALUES (p_ns, p_key, p_token, v_fence, greatest(p_limit, 1),
      now_ts + p_ttl_ms * interval '1 millisecond', now_ts, now_ts, p_ttl_ms, p_heartbeat_ms,
      p_label);
    IF p_line IS NOT NULL THEN
      DELETE FROM @S.queue q WHERE q.ns = p_ns AND q.key = p_key AND q.line = p_line;
    END IF;
  ELSE
    v_fence := 0;
    IF p_line IS NOT NULL THEN
      INSERT INTO @S.queue AS q (ns, key, line, queued_at, deadline, channel)
      VALUES (p_ns, p_key, p_line, now_ts, now_ts + p_queue_ms * interval '1 millisecond',
        p_channel)
      ON CONFLICT (ns, key, line) DO UPDATE SET deadline = EXCLUDED.deadline,
        channel = EXCLUDED.channel;
    END IF;
  END IF;
  -- Now and then, sweep a few long-dead rows of other keys.
  IF random() < 0.02 THEN
    DELETE FROM @S.leases l WHERE l.ctid IN (SELECT x.ctid FROM @S.leases x
      WHERE x.expires_at < now_ts - interval '1 minute' LIMIT 32 FOR UPDATE SKIP LOCKED);
    DELETE FROM @S.flags l WHERE l.ctid IN (SELECT x.ctid FROM @S.flags x
      WHERE x.expires_at < now_ts - interval '1 minute' LIMIT 32 FOR UPDATE SKIP LOCKED);
    DELETE FROM @S.queue l WHERE l.ctid IN (SELECT x.ctid FROM @S.queue x
      WHERE x.deadline < now_ts - interval '1 minute' LIMIT 32 FOR UPDATE SKIP LOCKED);
    -- A fence counter idle for 7 days is below the clock floor by that
    -- much: without it the next fence is the same or higher.
    DELETE FROM @S.fences l WHERE l.ctid IN (SELECT x.ctid FROM @S.fences x
      WHERE x.fence < (extract(epoch FROM now_ts - interval '7 days') * 1000000)::bigint
        AND NOT EXISTS (SELECT 1 FROM @S.leases y WHERE y.ns = x.ns AND y.key = x.key)
      LIMIT 32 FOR UPDATE SKIP LOCKED);
  END IF;
  RETURN v_fence;
END
$f$;

CREATE OR REPLACE FUNCTION @S.renew(p_ns text, p_key text, p_token text, p_ttl_ms bigint,
  p_min_ms bigint)
RETURNS int LANGUAGE plpgsql AS $f$
DECLARE
  exp timestamptz;
  now_ts timestamptz;
BEGIN
  SELECT l.expires_at INTO exp FROM @S.leases l
    WHERE l.ns = p_ns AND l.key = p_key AND l.token = p_token FOR UPDATE;
  now_ts := clock_timestamp();
  IF NOT FOUND OR exp <= now_ts THEN
    RETURN 0;
  END IF;
  IF p_min_ms > 0 AND exp - now_ts < p_min_ms * interval '1 millisecond' THEN
    RETURN -1;
  END IF;
  UPDATE @S.leases l SET expires_at = now_ts + p_ttl_ms * interval '1 millisecond',
    renewed_at = now_ts, ttl_ms = p_ttl_ms
    WHERE l.ns = p_ns AND l.key = p_key AND l.token = p_token;
  RETURN 1;
END
$f$;

CREATE OR REPLACE FUNCTION @S.release(p_ns text, p_key text, p_token text, p_payload text)
RETURNS int LANGUAGE plpgsql AS $f$
DECLARE
  was_live boolean;
  v_lim int;
  v_count int := 1;
BEGIN
  -- The key's fences row first, as acquire takes it: a refused try that
  -- queued a line commits before this reads the queue, so its line is rung.
  PERFORM 1 FROM @S.fences f WHERE f.ns = p_ns AND f.key = p_key FOR UPDATE;
  DELETE FROM @S.leases l WHERE l.ns = p_ns AND l.key = p_key AND l.token = p_token
    RETURNING l.expires_at > clock_timestamp(), l.lim INTO was_live, v_lim;
  IF NOT coalesce(was_live, false) THEN
    RETURN 0;
  END IF;
  -- A slot: the first `free` live lines may take the free slots; tell them.
  IF v_lim > 1 THEN
    SELECT greatest(v_lim - count(*), 1) INTO v_count FROM @S.leases l
      WHERE l.ns = p_ns AND l.key = p_key AND l.expires_at > clock_timestamp();
  END IF;
  PERFORM @S.announce(p_ns, p_key, p_payload, v_count);
  RETURN 1;
END
$f$;

CREATE OR REPLACE FUNCTION @S.break_lease(p_ns text, p_key text)
RETURNS int LANGUAGE plpgsql AS $f$
DECLARE
  n int;
  v_lim int;
BEGIN
  -- The key's fences row first, as acquire takes it: a refused try that
  -- queued a line commits before this reads the queue, so its line is rung.
  PERFORM 1 FROM @S.fences f WHERE f.ns = p_ns AND f.key = p_key FOR UPDATE;
  WITH gone AS (
    DELETE FROM @S.leases l WHERE l.ns = p_ns AND l.key = p_key
      RETURNING l.expires_at > clock_timestamp() AS live, l.lim
  ) SELECT count(*) FILTER (WHERE gone.live), max(gone.lim) FILTER (WHERE gone.live)
    INTO n, v_lim FROM gone;
  IF n > 0 THEN
    -- Every slot is free now: as many lines as the limit.
    PERFORM @S.announce(p_ns, p_key, '0', coalesce(v_lim, 1));
  END IF;
  RETURN n;
END
$f$;

CREATE OR REPLACE FUNCTION @S.leave_queue(p_ns text, p_key text, p_line text)
RETURNS int LANGUAGE plpgsql AS $f$
DECLARE
  w int;
  lines text[];
  channels text[];
BEGIN
  -- The key's fences row first, as acquire takes it: a refused try that
  -- queued a line commits before this reads the queue, so its line is rung.
  PERFORM 1 FROM @S.fences f WHERE f.ns = p_ns AND f.key = p_key FOR UPDATE;
  -- The lines a release tells: the first w live ones (w = the free slots,
  -- at least 1). One of them leaving tells the line that moves up.
  SELECT greatest(s.free, 1) INTO w FROM @S.free_slots(p_ns, p_key) s;
  SELECT array_agg(h.line ORDER BY h.n), array_agg(h.channel ORDER BY h.n)
    INTO lines, channels FROM (
      SELECT q.line, q.channel, row_number() OVER (ORDER BY q.queued_at, q.line) AS n
      FROM @S.queue q
      WHERE q.ns = p_ns AND q.key = p_key AND q.deadline > clock_timestamp()
      ORDER BY q.queued_at, q.line LIMIT w + 1) h;
  DELETE FROM @S.queue q WHERE q.ns = p_ns AND q.key = p_key AND q.line = p_line;
  IF coalesce(p_line = ANY (lines[1:w]), false) AND cardinality(lines) > w
     AND channels[w + 1] IS NOT NULL THEN
    PERFORM pg_notify(channels[w + 1], '0');
  END IF;
  RETURN 0;
END
$f$;

CREATE OR REPLACE FUNCTION @S.set_flag(p_ns text, p_key text, p_ttl_ms bigint,
  p_channel text)
RETURNS void LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO @S.flags AS f (ns, key, expires_at)
  VALUES (p_ns, p_key, clock_timestamp() + p_ttl_ms * interval '1 millisecond')
  ON CONFLICT (ns, key) DO UPDATE SET expires_at = EXCLUDED.expires_at;
  PERFORM pg_notify(p_channel, '1');
END
$f$;

CREATE OR REPLACE FUNCTION @S.beat(p_ns text, p_keys text[], p_tokens text[],
  p_ttls bigint[], p_mins bigint[], p_flags text[])
RETURNS TABLE (kind text, idx bigint, answer int) LANGUAGE plpgsql AS $f$
BEGIN
  RETURN QUERY
  WITH r AS (SELECT * FROM unnest(p_keys, p_tokens, p_ttls, p_mins)
      WITH ORDINALITY AS r(k, t, ttl, m, i)),
    u AS (UPDATE @S.leases l SET
        expires_at = clock_timestamp() + r.ttl * interval '1 millisecond',
        renewed_at = clock_timestamp(), ttl_ms = r.ttl
      FROM r WHERE l.ns = p_ns AND l.key = r.k AND l.token = r.t
        AND l.expires_at > clock_timestamp()
        AND l.expires_at - clock_timestamp() >= r.m * interval '1 millisecond'
      RETURNING r.i)
  SELECT 'r'::text, r.i, CASE WHEN u.i IS NOT NULL THEN 1
      WHEN EXISTS (SELECT 1 FROM @S.leases x WHERE x.ns = p_ns AND x.key = r.k
        AND x.token = r.t AND x.expires_at > clock_timestamp()) THEN -1 ELSE 0 END
    FROM r LEFT JOIN u ON u.i = r.i
  UNION ALL
  SELECT 'f'::text, f.i, (EXISTS (SELECT 1 FROM @S.flags x WHERE x.ns = p_ns AND x.key = f.k
      AND x.expires_at > clock_timestamp()))::int
    FROM unnest(p_flags) WITH ORDINALITY AS f(k, i);
END
$f$;

CREATE OR REPLACE FUNCTION @S.fence_check(p_resource text, p_fence bigint)
RETURNS bigint LANGUAGE plpgsql AS $f$
DECLARE seen bigint;
BEGIN
  INSERT INTO @S.fence_seen AS s (resource, fence) VALUES (p_resource, p_fence)
    ON CONFLICT DO NOTHING;
  IF FOUND THEN
    RETURN p_fence;
  END IF;
  SELECT s.fence INTO seen FROM @S.fence_seen s WHERE s.resource = p_resource FOR UPDATE;
  IF seen > p_fence THEN
    RAISE EXCEPTION 'mistri_locks: stale fence % for resource % (fence % already seen)',
      p_fence, p_resource, seen
      USING ERRCODE = 'ML409',
        HINT = 'the lease was lost and taken by another holder: roll back, do not write';
  END IF;
  IF seen < p_fence THEN
    UPDATE @S.fence_seen s SET fence = p_fence WHERE s.resource = p_resource;
  END IF;
  RETURN p_fence;
END
$f$;

INSERT INTO @S.meta (id, version) VALUES (1, @V)
  ON CONFLICT (id) DO UPDATE SET version = greatest(@S.meta.version, EXCLUDED.version);
COMMIT;
"#;

/// The schema's version row (`42P01` / `3F000` when it is not there yet).
pub(crate) const READ_VERSION: &str = "SELECT version FROM @S.meta WHERE id = 1";

/// `$1` ns, `$2` key, `$3` token, `$4` ttl ms, `$5` label, `$6` heartbeat
/// ms, `$7` limit, `$8` line (NULL: none), `$9` queue entry ttl ms, `$10`
/// the line's `LISTEN` channel ([`channel`]; NULL with no line). The fence,
/// 0 when refused.
pub(crate) const ACQUIRE: &str =
    "SELECT @S.acquire($1, $2, $3, $4::bigint, $5, $6::bigint, $7::int, $8, $9::bigint, $10)";

/// `$1` ns, `$2` key, `$3` token, `$4` ttl ms, `$5` least ms left: 1 / 0 / -1.
pub(crate) const RENEW: &str = "SELECT @S.renew($1, $2, $3, $4::bigint, $5::bigint)";

/// `$1` ns, `$2` key, `$3` token, `$4` the announcement (the fence): 1 / 0.
pub(crate) const RELEASE: &str = "SELECT @S.release($1, $2, $3, $4)";

/// `$1` ns, `$2` key: how many live leases were deleted.
pub(crate) const BREAK: &str = "SELECT @S.break_lease($1, $2)";

/// `$1` ns, `$2` key, `$3` line: out of the queue; a leaving line that a
/// release may have told (the head, or for an N-holder lease one of the
/// first `free` live lines) announces to the line that moves up (it
/// leaves without trying).
pub(crate) const LEAVE_QUEUE: &str = "SELECT @S.leave_queue($1, $2, $3)";

/// `$1` ns, `$2` key: is a live lease there.
pub(crate) const HELD: &str = "SELECT EXISTS (SELECT 1 FROM @S.leases l \
     WHERE l.ns = $1 AND l.key = $2 AND l.expires_at > clock_timestamp())";

/// `$1` ns, `$2` key: ms until the soonest live lease row lapses, NULL if none.
pub(crate) const EXPIRES_IN: &str = "SELECT ceil(extract(epoch FROM \
     (min(l.expires_at) - clock_timestamp())) * 1000)::bigint FROM @S.leases l \
     WHERE l.ns = $1 AND l.key = $2 AND l.expires_at > clock_timestamp()";

/// The columns of a lease row as `info` and `list` read them: key, fence,
/// limit, ms left, acquired ms, renewed ms, ttl ms, heartbeat ms, label.
macro_rules! lease_columns {
    () => {
        "l.key, l.fence, l.lim, \
         floor(extract(epoch FROM (l.expires_at - clock_timestamp())) * 1000)::bigint, \
         floor(extract(epoch FROM l.acquired_at) * 1000)::bigint, \
         floor(extract(epoch FROM l.renewed_at) * 1000)::bigint, \
         l.ttl_ms, l.heartbeat_ms, l.label"
    };
}

/// `$1` ns, `$2` key: the live rows of the key.
pub(crate) const INFO: &str = concat!(
    "SELECT ",
    lease_columns!(),
    " FROM @S.leases l WHERE l.ns = $1 AND l.key = $2 \
     AND l.expires_at > clock_timestamp() ORDER BY l.fence"
);

/// `$1` ns, `$2` prefix: the live rows under the prefix.
pub(crate) const LIST_LEASES: &str = concat!(
    "SELECT ",
    lease_columns!(),
    " FROM @S.leases l WHERE l.ns = $1 AND left(l.key, length($2)) = $2 \
     AND l.expires_at > clock_timestamp() ORDER BY l.key, l.fence"
);

/// `$1` ns, `$2` prefix: the raised flags under the prefix and their ms left.
pub(crate) const LIST_FLAGS: &str = "SELECT f.key, \
     floor(extract(epoch FROM (f.expires_at - clock_timestamp())) * 1000)::bigint \
     FROM @S.flags f WHERE f.ns = $1 AND left(f.key, length($2)) = $2 \
     AND f.expires_at > clock_timestamp() ORDER BY f.key";

/// `$1` ns, `$2` key, `$3` ttl ms, `$4` the flag's `LISTEN` channel
/// ([`channel`], announced on).
pub(crate) const SET_FLAG: &str = "SELECT @S.set_flag($1, $2, $3::bigint, $4)";

/// `$1` ns, `$2` key: is the flag up.
pub(crate) const FLAG: &str = "SELECT EXISTS (SELECT 1 FROM @S.flags f \
     WHERE f.ns = $1 AND f.key = $2 AND f.expires_at > clock_timestamp())";

/// `$1` ns, `$2` key.
pub(crate) const CLEAR_FLAG: &str = "DELETE FROM @S.flags f WHERE f.ns = $1 AND f.key = $2";

/// One heartbeat tick, ONE statement: `$1` ns, `$2`..`$5` the renewals as
/// arrays (keys, tokens, ttl ms, least ms left), `$6` the flag keys. Rows
/// `(kind, index, answer)`: `r` renewals (1 renewed / 0 not held / -1
/// too late), `f` flags (1 / 0). `@S.beat` runs the renewals as ONE
/// set-based `UPDATE` (the rows it locks and re-checks as `@S.renew`
/// does; a function, so the server plans it once per session); a renewal
/// it did not apply answers -1 if the token's row is live in the
/// statement's snapshot (less than the least life was left), else 0.
/// Each row also carries the server's clock (`clock_timestamp()` in
/// microseconds since the Unix epoch, read after the renewals), which the
/// engine watches for steps; no schema change.
pub(crate) const BEAT: &str =
    "SELECT b.*, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint \
     FROM @S.beat($1, $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[]) b";

/// `sql` with the schema filled in (`schema` already checked: a plain
/// identifier).
pub(crate) fn in_schema(sql: &str, schema: &str) -> String {
    sql.replace("@S", &format!("\"{schema}\""))
        .replace("@N", schema)
        .replace("@V", &VERSION.to_string())
}

/// A text array literal of `items` (`{"a","b\"c"}`), for a `text[]`
/// parameter.
pub(crate) fn text_array<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = String::from("{");
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        for c in item.chars() {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
    }
    out.push('}');
    out
}

/// A `bigint[]` literal of `items`.
pub(crate) fn int_array(items: impl IntoIterator<Item = u64>) -> String {
    let items: Vec<String> = items.into_iter().map(|n| n.to_string()).collect();
    format!("{{{}}}", items.join(","))
}

/// The `LISTEN` channel of a raised flag (`kind` `r`) or a waiting line
/// (`n`): `ml` kind `_` md5 of the UTF-8 of the length-prefixed (in chars)
/// namespace, key and line, an identifier of 36 bytes whatever the key's
/// length. Computed here only, and passed to the SQL (`set_flag`, the
/// queue row), so the database encoding never changes it.
pub(crate) fn channel(kind: char, ns: &str, key: &str, line: Option<&str>) -> String {
    use md5::{Digest, Md5};
    let text = format!(
        "{}:{ns}{}:{key}:{}",
        ns.chars().count(),
        key.chars().count(),
        line.unwrap_or("")
    );
    let digest = Md5::digest(text.as_bytes());
    let mut name = format!("ml{kind}_");
    for b in digest {
        name.push_str(&format!("{b:02x}"));
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_are_quoted() {
        assert_eq!(
            text_array(["a", "b\"c", "d\\e", ""]),
            r#"{"a","b\"c","d\\e",""}"#
        );
        assert_eq!(text_array(std::iter::empty()), "{}");
        assert_eq!(int_array([1, 2]), "{1,2}");
    }

    #[test]
    fn schema_is_filled_in() {
        let s = in_schema(ACQUIRE, "x_1");
        assert!(s.starts_with("SELECT \"x_1\".acquire("), "{s}");
        assert!(!in_schema(SCHEMA, "x_1").contains('@'));
    }

    #[test]
    fn channels_are_short_identifiers() {
        let c = channel('n', "mistri:locks", &"k".repeat(500), Some("line"));
        assert_eq!(c.len(), 36);
        assert!(c.starts_with("mln_"));
        assert_ne!(
            channel('r', "a", "b:c", None),
            channel('r', "a", "b", Some("c"))
        );
    }
}
