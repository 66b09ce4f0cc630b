//! The schema and every statement of the MySQL / MariaDB backend
//! (`docs/MYSQL.md`). `@P` stands for the table prefix (default
//! `mistri_`); [`with_prefix`] fills it in. Every value the client sends
//! is an integer it formatted or a hex literal ([`hex`]): nothing is
//! escaped, nothing can be injected, and names and keys are byte-exact
//! (`VARBINARY`, no collation).
//!
//! Every time is integer microseconds of the DATABASE clock ([`NOW_US`]:
//! UTC whatever the session's `time_zone`), never a `TIMESTAMP` column and
//! never the client's clock. Per key, acquire, release, break and
//! leave_queue lock the key's `fences` row first, so they run one at a
//! time per key; inside a procedure each statement reads the clock anew,
//! so the clock read after that lock is the time after it.

/// The schema version this client writes and reads. 2: the procedures'
/// transactions run READ COMMITTED (no gap locks), made again in place.
pub(crate) const VERSION: i64 = 2;

/// The database clock in integer microseconds since the Unix epoch, UTC.
/// (Inside one statement `UTC_TIMESTAMP` is the statement's start.)
pub(crate) const NOW_US: &str =
    "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";

/// The tables, one statement each (`CREATE TABLE IF NOT EXISTS`).
pub(crate) const TABLES: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS @Pmeta (
  id INT NOT NULL PRIMARY KEY,
  version BIGINT NOT NULL
) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS @Pleases (
  ns VARBINARY(1024) NOT NULL,
  k VARBINARY(1024) NOT NULL,
  token VARBINARY(64) NOT NULL,
  fence BIGINT NOT NULL,
  lim INT NOT NULL,
  expires_us BIGINT NOT NULL,
  acquired_us BIGINT NOT NULL,
  renewed_us BIGINT NOT NULL,
  ttl_ms BIGINT NOT NULL,
  heartbeat_ms BIGINT NOT NULL,
  label VARBINARY(4096) NOT NULL,
  beat_tag BIGINT NULL,
  PRIMARY KEY (ns, k, token),
  KEY @Pleases_expiry (expires_us)
) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS @Pfences (
  ns VARBINARY(1024) NOT NULL,
  k VARBINARY(1024) NOT NULL,
  fence BIGINT NOT NULL,
  PRIMARY KEY (ns, k)
) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS @Pflags (
  ns VARBINARY(1024) NOT NULL,
  k VARBINARY(1024) NOT NULL,
  raised_us BIGINT NOT NULL,
  expires_us BIGINT NOT NULL,
  PRIMARY KEY (ns, k),
  KEY @Pflags_expiry (expires_us)
) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS @Pqueue (
  ns VARBINARY(1024) NOT NULL,
  k VARBINARY(1024) NOT NULL,
  line VARBINARY(64) NOT NULL,
  queued_us BIGINT NOT NULL,
  deadline_us BIGINT NOT NULL,
  PRIMARY KEY (ns, k, line),
  KEY @Pqueue_order (ns, k, queued_us, line)
) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS @Pfence_seen (
  resource VARBINARY(1024) NOT NULL PRIMARY KEY,
  fence BIGINT NOT NULL
) ENGINE=InnoDB",
];

/// The procedures, dropped and made again when the schema's version is
/// older than [`VERSION`] (under the schema lock).
pub(crate) const PROCEDURES: &[(&str, &str)] = &[
    ("@Pacquire", ACQUIRE_PROC),
    ("@Prelease", RELEASE_PROC),
    ("@Pbreak", BREAK_PROC),
    ("@Pleave_queue", LEAVE_PROC),
    ("@Pfence_check", FENCE_CHECK_PROC),
];

/// Acquire (exclusive with `p_limit` ≤ 1, else one of `p_limit` slots):
/// one CALL, one short transaction. The fence, or 0 (refused; the line,
/// if given, waits in the queue, keeping its place).
const ACQUIRE_PROC: &str = "CREATE PROCEDURE @Pacquire(IN p_ns VARBINARY(1024),
  IN p_key VARBINARY(1024), IN p_token VARBINARY(64), IN p_ttl_ms BIGINT,
  IN p_label VARBINARY(4096), IN p_heartbeat_ms BIGINT, IN p_limit INT,
  IN p_line VARBINARY(64), IN p_queue_ms BIGINT)
BEGIN
  DECLARE v_counter BIGINT;
  DECLARE v_now BIGINT;
  DECLARE v_live INT;
  DECLARE v_excl INT;
  DECLARE v_free INT;
  DECLARE v_ahead INT DEFAULT 0;
  DECLARE v_mine INT DEFAULT 0;
  DECLARE v_fence BIGINT DEFAULT 0;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  -- No gap locks: under REPEATABLE READ, inserts of new keys next to
  -- each other deadlock on them (200 processes at once, measured).
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  INSERT INTO @Pfences (ns, k, fence) VALUES (p_ns, p_key, 0)
    ON DUPLICATE KEY UPDATE fence = fence;
  SELECT fence INTO v_counter FROM @Pfences WHERE ns = p_ns AND k = p_key FOR UPDATE;
  SET v_now = TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6));
  DELETE FROM @Pleases WHERE ns = p_ns AND k = p_key AND expires_us <= v_now;
  DELETE FROM @Pqueue WHERE ns = p_ns AND k = p_key AND deadline_us <= v_now;
  SELECT COUNT(*), COALESCE(SUM(lim = 1), 0) INTO v_live, v_excl
    FROM @Pleases WHERE ns = p_ns AND k = p_key;
  IF p_limit <= 1 THEN
    SET v_free = IF(v_live = 0, 1, 0);
  ELSEIF v_excl > 0 THEN
    SET v_free = 0;
  ELSE
    SET v_free = GREATEST(p_limit - v_live, 0);
  END IF;
  IF v_free > 0 THEN
    SELECT COUNT(*), COALESCE(SUM(h.line = p_line), 0) INTO v_ahead, v_mine FROM (
      SELECT q.line FROM @Pqueue q WHERE q.ns = p_ns AND q.k = p_key
      ORDER BY q.queued_us, q.line LIMIT v_free) h;
    IF v_ahead >= v_free AND v_mine = 0 THEN
      SET v_free = 0;
    END IF;
  END IF;
  IF v_free > 0 THEN
    SET v_fence = GREATEST(v_counter + 1, v_now);
    UPDATE @Pfences SET fence = v_fence WHERE ns = p_ns AND k = p_key;
    INSERT INTO @Pleases (ns, k, token, fence, lim, expires_us, acquired_us, renewed_us,
      ttl_ms, heartbeat_ms, label)
    VALUES (p_ns, p_key, p_token, v_fence, GREATEST(p_limit, 1), v_now + p_ttl_ms * 1000,
      v_now, v_now, p_ttl_ms, p_heartbeat_ms, p_label);
    IF p_line IS NOT NULL THEN
      DELETE FROM @Pqueue WHERE ns = p_ns AND k = p_key AND line = p_line;
    END IF;
  ELSEIF p_line IS NOT NULL THEN
    INSERT INTO @Pqueue (ns, k, line, queued_us, deadline_us)
    VALUES (p_ns, p_key, p_line, v_now, v_now + p_queue_ms * 1000)
    ON DUPLICATE KEY UPDATE deadline_us = v_now + p_queue_ms * 1000;
  END IF;
  COMMIT;
  SELECT v_fence;
END";

/// Release: the key's fences row first (as acquire), then the lease. 1
/// if it was live, else 0.
const RELEASE_PROC: &str = "CREATE PROCEDURE @Prelease(IN p_ns VARBINARY(1024),
  IN p_key VARBINARY(1024), IN p_token VARBINARY(64))
BEGIN
  DECLARE v_now BIGINT;
  DECLARE v_exp BIGINT DEFAULT NULL;
  DECLARE v_counter BIGINT;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  -- No gap locks: under REPEATABLE READ, inserts of new keys next to
  -- each other deadlock on them (200 processes at once, measured).
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT fence INTO v_counter FROM @Pfences WHERE ns = p_ns AND k = p_key FOR UPDATE;
  SELECT expires_us INTO v_exp FROM @Pleases
    WHERE ns = p_ns AND k = p_key AND token = p_token FOR UPDATE;
  SET v_now = TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6));
  DELETE FROM @Pleases WHERE ns = p_ns AND k = p_key AND token = p_token;
  COMMIT;
  SELECT IF(v_exp IS NOT NULL AND v_exp > v_now, 1, 0);
END";

/// Break: every lease row of the key; how many were live.
const BREAK_PROC: &str = "CREATE PROCEDURE @Pbreak(IN p_ns VARBINARY(1024),
  IN p_key VARBINARY(1024))
BEGIN
  DECLARE v_now BIGINT;
  DECLARE v_live INT DEFAULT 0;
  DECLARE v_counter BIGINT;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  -- No gap locks: under REPEATABLE READ, inserts of new keys next to
  -- each other deadlock on them (200 processes at once, measured).
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT fence INTO v_counter FROM @Pfences WHERE ns = p_ns AND k = p_key FOR UPDATE;
  SET v_now = TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6));
  SELECT COUNT(*) INTO v_live FROM @Pleases
    WHERE ns = p_ns AND k = p_key AND expires_us > v_now FOR UPDATE;
  DELETE FROM @Pleases WHERE ns = p_ns AND k = p_key;
  COMMIT;
  SELECT v_live;
END";

/// Leave the queue: the key's fences row first (as acquire), then the line.
const LEAVE_PROC: &str = "CREATE PROCEDURE @Pleave_queue(IN p_ns VARBINARY(1024),
  IN p_key VARBINARY(1024), IN p_line VARBINARY(64))
BEGIN
  DECLARE v_counter BIGINT;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  -- No gap locks: under REPEATABLE READ, inserts of new keys next to
  -- each other deadlock on them (200 processes at once, measured).
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT fence INTO v_counter FROM @Pfences WHERE ns = p_ns AND k = p_key FOR UPDATE;
  DELETE FROM @Pqueue WHERE ns = p_ns AND k = p_key AND line = p_line;
  COMMIT;
  SELECT 0;
END";

/// Fencing at the resource: records `p_fence` for `p_resource` unless a
/// higher one was seen, then it signals SQLSTATE 45000 (`ML409` in the
/// message): roll back, do not write.
const FENCE_CHECK_PROC: &str = "CREATE PROCEDURE @Pfence_check(IN p_resource VARBINARY(1024),
  IN p_fence BIGINT)
BEGIN
  DECLARE v_seen BIGINT DEFAULT NULL;
  INSERT INTO @Pfence_seen (resource, fence) VALUES (p_resource, p_fence)
    ON DUPLICATE KEY UPDATE fence = fence;
  SELECT fence INTO v_seen FROM @Pfence_seen WHERE resource = p_resource FOR UPDATE;
  IF v_seen > p_fence THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
      'mistri_locks ML409: stale fence (a higher one was already seen): the lease was lost and taken by another holder: roll back, do not write';
  END IF;
  IF v_seen < p_fence THEN
    UPDATE @Pfence_seen SET fence = p_fence WHERE resource = p_resource;
  END IF;
  SELECT p_fence;
END";

/// The schema's version row (1146 when the table is not there yet).
pub(crate) const READ_VERSION: &str = "SELECT version FROM @Pmeta WHERE id = 1";

/// `sql` with the prefix filled in (already checked: a plain identifier
/// part).
pub(crate) fn with_prefix(sql: &str, prefix: &str) -> String {
    sql.replace("@P", prefix)
}

/// `bytes` as a hex literal (`X'6b31'`; `X''` for none).
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2 + 3);
    out.push_str("X'");
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out.push('\'');
    out
}

/// `text` as a hex literal, or `NULL`.
pub(crate) fn hex_or_null(text: Option<&str>) -> String {
    text.map_or_else(|| "NULL".to_owned(), |t| hex(t.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_hex() {
        assert_eq!(hex(b""), "X''");
        assert_eq!(hex("k'1ü".as_bytes()), "X'6b2731c3bc'");
        assert_eq!(hex_or_null(None), "NULL");
        let all: String = TABLES.concat() + &PROCEDURES.iter().map(|p| p.1).collect::<String>();
        assert!(!with_prefix(&all, "mistri_").contains('@'));
    }
}
