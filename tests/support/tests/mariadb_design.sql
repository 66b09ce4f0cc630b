-- The proposed MySQL/MariaDB schema of issue 41 (docs/MYSQL.md, "Proposed
-- SQL"), version 1, checked on a throwaway MariaDB 10.11 by
-- tests/support/tests/mariadb.rs (proposed_design_*). Statements end with
-- `$$` (procedure bodies hold `;`). Every table is InnoDB; every time is an
-- integer count of microseconds of the database's clock,
-- TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)):
-- UTC, no session time zone involved, read in the statement after the
-- key's lock is held (inside a procedure each statement reads the clock
-- anew; the test measures it).

CREATE TABLE IF NOT EXISTS mistri_meta (
  id INT PRIMARY KEY,
  version BIGINT NOT NULL
) ENGINE=InnoDB$$
INSERT IGNORE INTO mistri_meta VALUES (1, 1)$$

CREATE TABLE IF NOT EXISTS mistri_leases (
  ns VARBINARY(191) NOT NULL,
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
  PRIMARY KEY (ns, k, token),
  KEY mistri_leases_expiry (expires_us)
) ENGINE=InnoDB$$

CREATE TABLE IF NOT EXISTS mistri_fences (
  ns VARBINARY(191) NOT NULL,
  k VARBINARY(1024) NOT NULL,
  fence BIGINT NOT NULL,
  PRIMARY KEY (ns, k)
) ENGINE=InnoDB$$

CREATE TABLE IF NOT EXISTS mistri_flags (
  ns VARBINARY(191) NOT NULL,
  k VARBINARY(1024) NOT NULL,
  raised_us BIGINT NOT NULL,
  expires_us BIGINT NOT NULL,
  PRIMARY KEY (ns, k)
) ENGINE=InnoDB$$

CREATE TABLE IF NOT EXISTS mistri_queue (
  ns VARBINARY(191) NOT NULL,
  k VARBINARY(1024) NOT NULL,
  line VARBINARY(64) NOT NULL,
  queued_us BIGINT NOT NULL,
  deadline_us BIGINT NOT NULL,
  -- The waiting process's doorbell connection (CONNECTION_ID()), if it
  -- parks one; NULL for a process that only polls.
  bell_conn BIGINT UNSIGNED NULL,
  PRIMARY KEY (ns, k, line),
  KEY mistri_queue_order (ns, k, queued_us, line)
) ENGINE=InnoDB$$

-- Acquire (exclusive with p_limit <= 1, else one of p_limit slots): one
-- CALL, one short transaction. The key's fences row is taken first (an
-- upsert locks it), so acquires and releases of one key run one at a
-- time; the clock is read after it. Returns the fence, or 0 (refused; the
-- line, if given, waits in the queue).
DROP PROCEDURE IF EXISTS mistri_acquire$$
CREATE PROCEDURE mistri_acquire(IN p_ns VARBINARY(191), IN p_key VARBINARY(1024),
  IN p_token VARBINARY(64), IN p_ttl_ms BIGINT, IN p_label VARBINARY(4096),
  IN p_heartbeat_ms BIGINT, IN p_limit INT, IN p_line VARBINARY(64), IN p_queue_ms BIGINT,
  IN p_bell_conn BIGINT UNSIGNED)
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
  START TRANSACTION;
  INSERT INTO mistri_fences (ns, k, fence) VALUES (p_ns, p_key, 0)
    ON DUPLICATE KEY UPDATE fence = fence;
  SELECT fence INTO v_counter FROM mistri_fences WHERE ns = p_ns AND k = p_key FOR UPDATE;
  SET v_now = TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6));
  DELETE FROM mistri_leases WHERE ns = p_ns AND k = p_key AND expires_us <= v_now;
  DELETE FROM mistri_queue WHERE ns = p_ns AND k = p_key AND deadline_us <= v_now;
  SELECT COUNT(*), COALESCE(SUM(lim = 1), 0) INTO v_live, v_excl
    FROM mistri_leases WHERE ns = p_ns AND k = p_key;
  IF p_limit <= 1 THEN
    SET v_free = IF(v_live = 0, 1, 0);
  ELSEIF v_excl > 0 THEN
    SET v_free = 0;
  ELSE
    SET v_free = GREATEST(p_limit - v_live, 0);
  END IF;
  IF v_free > 0 THEN
    SELECT COUNT(*), COALESCE(SUM(h.line = p_line), 0) INTO v_ahead, v_mine FROM (
      SELECT q.line FROM mistri_queue q WHERE q.ns = p_ns AND q.k = p_key
      ORDER BY q.queued_us, q.line LIMIT v_free) h;
    IF v_ahead >= v_free AND v_mine = 0 THEN
      SET v_free = 0;
    END IF;
  END IF;
  IF v_free > 0 THEN
    SET v_fence = GREATEST(v_counter + 1, v_now);
    UPDATE mistri_fences SET fence = v_fence WHERE ns = p_ns AND k = p_key;
    INSERT INTO mistri_leases (ns, k, token, fence, lim, expires_us, acquired_us, renewed_us,
      ttl_ms, heartbeat_ms, label)
    VALUES (p_ns, p_key, p_token, v_fence, GREATEST(p_limit, 1), v_now + p_ttl_ms * 1000,
      v_now, v_now, p_ttl_ms, p_heartbeat_ms, p_label);
    IF p_line IS NOT NULL THEN
      DELETE FROM mistri_queue WHERE ns = p_ns AND k = p_key AND line = p_line;
    END IF;
  ELSEIF p_line IS NOT NULL THEN
    INSERT INTO mistri_queue (ns, k, line, queued_us, deadline_us, bell_conn)
    VALUES (p_ns, p_key, p_line, v_now, v_now + p_queue_ms * 1000, p_bell_conn)
    ON DUPLICATE KEY UPDATE deadline_us = VALUES(deadline_us), bell_conn = VALUES(bell_conn);
  END IF;
  COMMIT;
  SELECT v_fence AS fence;
END$$

-- Renew: one short transaction that locks only its own lease row (not the
-- key's fences row: renewals never wait for the key's acquires). 1 renewed,
-- 0 gone or expired, -1 refused as late (less than p_min_ms left).
DROP PROCEDURE IF EXISTS mistri_renew$$
CREATE PROCEDURE mistri_renew(IN p_ns VARBINARY(191), IN p_key VARBINARY(1024),
  IN p_token VARBINARY(64), IN p_ttl_ms BIGINT, IN p_min_ms BIGINT)
BEGIN
  DECLARE v_now BIGINT;
  DECLARE v_exp BIGINT DEFAULT NULL;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  START TRANSACTION;
  SELECT expires_us INTO v_exp FROM mistri_leases
    WHERE ns = p_ns AND k = p_key AND token = p_token FOR UPDATE;
  SET v_now = TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6));
  IF v_exp IS NULL OR v_exp <= v_now THEN
    COMMIT;
    SELECT 0 AS renewed;
  ELSEIF p_min_ms > 0 AND v_exp - v_now < p_min_ms * 1000 THEN
    COMMIT;
    SELECT -1 AS renewed;
  ELSE
    UPDATE mistri_leases SET expires_us = v_now + p_ttl_ms * 1000, renewed_us = v_now,
      ttl_ms = p_ttl_ms WHERE ns = p_ns AND k = p_key AND token = p_token;
    COMMIT;
    SELECT 1 AS renewed;
  END IF;
END$$

-- Release: the key's fences row first (as acquire), then the lease; a
-- live one returns 1 and the doorbell connections of the lines that may
-- now take it (the releaser rings them with KILL QUERY; pollers need
-- nothing: their tick reads the queue).
DROP PROCEDURE IF EXISTS mistri_release$$
CREATE PROCEDURE mistri_release(IN p_ns VARBINARY(191), IN p_key VARBINARY(1024),
  IN p_token VARBINARY(64))
BEGIN
  DECLARE v_now BIGINT;
  DECLARE v_exp BIGINT DEFAULT NULL;
  DECLARE v_lim INT DEFAULT 1;
  DECLARE v_free INT DEFAULT 1;
  DECLARE v_counter BIGINT;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  START TRANSACTION;
  SELECT fence INTO v_counter FROM mistri_fences WHERE ns = p_ns AND k = p_key FOR UPDATE;
  SELECT expires_us, lim INTO v_exp, v_lim FROM mistri_leases
    WHERE ns = p_ns AND k = p_key AND token = p_token FOR UPDATE;
  SET v_now = TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6));
  DELETE FROM mistri_leases WHERE ns = p_ns AND k = p_key AND token = p_token;
  IF v_exp IS NULL OR v_exp <= v_now THEN
    COMMIT;
    SELECT 0 AS released, NULL AS bell_conn;
  ELSE
    IF v_lim > 1 THEN
      SELECT GREATEST(v_lim - COUNT(*), 1) INTO v_free FROM mistri_leases
        WHERE ns = p_ns AND k = p_key AND expires_us > v_now;
    END IF;
    -- Read under the key's lock: a refused try that queued has committed.
    SELECT 1 AS released, h.bell_conn FROM (
      SELECT 1 AS one) x LEFT JOIN (
      SELECT q.bell_conn FROM mistri_queue q WHERE q.ns = p_ns AND q.k = p_key
        AND q.deadline_us > v_now ORDER BY q.queued_us, q.line LIMIT v_free) h ON TRUE;
    COMMIT;
  END IF;
END$$
