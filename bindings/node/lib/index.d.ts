// Type declarations of mistri-locks (hand-written; `tsc --strict` checks
// them and the README's quick start in test/types.test.mjs).
/// <reference types="node" />
import type { IncomingMessage, ServerResponse } from 'node:http';

/** Seconds (a JavaScript number; fractions allowed). */
export type Seconds = number;

/** How `open` connects: passed by name to the core (`io_timeout` as `ioTimeout`). */
export interface OpenOptions {
  /** Every key under this namespace (Redis, Postgres). */
  namespace?: string;
  /** How this handle's leases describe their holder (default `host:pid node`). */
  label?: string;
  /** Postgres: the schema the tables live in (default `mistri_locks`). */
  schema?: string;
  /** Redis and Postgres: the per-operation I/O timeout. */
  ioTimeout?: Seconds;
}

/** How to hold a lease: Web Locks' `signal` and `ifAvailable`, the rest by name to the core. */
export interface HoldOptions {
  /** How long the lease outlives its last renewal (default 180). */
  ttl?: Seconds;
  /** The longest wait between renewals, and (up to 1 s) the stop-flag tick (default 60). */
  heartbeat?: Seconds;
  /** How long to wait in line (default: without limit; `ifAvailable`: not at all). */
  wait?: Seconds;
  /** Only try once: a lease held elsewhere gives `null`. */
  ifAvailable?: boolean;
  /** Up to this many holders at once (default 1). */
  limit?: number;
  /** A flag that, raised by anyone, aborts `lease.signal`. */
  stopKey?: string;
  /** Cancels a wait in line; aborting it later also stops the lease. */
  signal?: AbortSignal;
  /** How this holder describes itself (default: the handle's label). */
  label?: string;
  /** How long before the lease could expire the holder is told it may have lost it. */
  safetyMargin?: Seconds;
  /** Never renew past this total age. */
  maxHold?: Seconds;
  /** Renewals stop when `lease.touch()` was not called for this long. */
  progressTimeout?: Seconds;
}

export type ReleaseOutcome =
  | 'released'
  | 'not_held'
  | 'lost'
  | 'already_released'
  | 'expired'
  | 'other_process';

/** One holder's description, as the backend stores it. */
export interface HolderInfo {
  holder: string | null;
  fence: number | null;
  /** Unix seconds. */
  acquiredAt: number | null;
  /** Unix seconds. */
  renewedAt: number | null;
  ttl: Seconds | null;
  heartbeat: Seconds | null;
  stopKey: string | null;
}

/** Who holds a key. */
export interface LeaseInfo extends HolderInfo {
  key: string;
  timeLeft: Seconds | null;
  limit: number;
  /** Every holder of an N-holder lease, by fence. */
  holders: HolderInfo[];
}

export interface FlagInfo {
  key: string;
  timeLeft: Seconds | null;
}

export interface Listing {
  leases: LeaseInfo[];
  flags: FlagInfo[];
  waiting: { key: string; lines: number; oldestWait: Seconds }[];
}

export interface StopOutcome {
  /** raised: `flags` were raised; not_held; no_stop_key; outside (`stopKey` lies outside the prefix). */
  outcome: 'raised' | 'not_held' | 'no_stop_key' | 'outside' | 'unknown';
  flags: string[];
  stopKey?: string;
}

/** The core's counters by name (`holds_active`, `renewals_sent`, …): counts, or seconds / null. */
export type Stats = Record<string, number | null>;

/**
 * An error of the core, with its kind as `code`. (A value of the wrong kind
 * for its option is a `TypeError` instead, with `code`
 * `'MISTRI_INVALID_ARGUMENT'`.)
 */
export declare class LocksError extends Error {
  readonly code:
    | 'MISTRI_INVALID_ARGUMENT'
    | 'MISTRI_CONFIG'
    | 'MISTRI_CONNECTION'
    | 'MISTRI_BACKEND'
    | 'MISTRI_SYSTEM'
    | 'MISTRI_ERROR';
  constructor(message: string, code: string);
}

/** Why a lease's work must stop. */
export declare class Interrupted extends Error {
  readonly code: 'MISTRI_STOPPED' | 'MISTRI_LOST';
  /** stopped: a stop flag was raised (`flag`); lost: the lease may be anyone's (`cause`). */
  readonly reason: 'stopped' | 'lost';
  readonly key: string;
  /** The core's reason text. */
  readonly detail: string | null;
  readonly flag: string | null;
  readonly cause: string | null;
}

/** A held lease, renewed in the background until released or lost. */
export declare class Lease {
  private constructor();
  readonly key: string;
  /** Strictly greater than any fence issued before on this key. */
  readonly fence: number;
  /** Whether the lease may be lost. */
  readonly lost: boolean;
  /** Aborted with an `Interrupted` on stop or loss (or the caller's signal's reason). */
  readonly signal: AbortSignal;
  /** Throws the signal's reason once the work must stop. */
  checkpoint(): void;
  /** Progress for `progressTimeout`. */
  touch(): void;
  info(): Promise<LeaseInfo | null>;
  release(): Promise<boolean>;
  releaseOutcome(): Promise<ReleaseOutcome>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** One backend. */
export declare class Locks {
  private constructor();
  /** memory, local, redis, postgres, … */
  readonly family: string;
  readonly label: string;
  newOwner(): Locks;
  request<T>(key: string, callback: (lease: Lease) => T | PromiseLike<T>): Promise<T>;
  request<T>(
    key: string,
    options: HoldOptions & { ifAvailable: true },
    callback: (lease: Lease | null) => T | PromiseLike<T>,
  ): Promise<T>;
  request<T>(
    key: string,
    options: HoldOptions & { wait: Seconds },
    callback: (lease: Lease | null) => T | PromiseLike<T>,
  ): Promise<T>;
  request<T>(key: string, options: HoldOptions, callback: (lease: Lease) => T | PromiseLike<T>): Promise<T>;
  hold(key: string, options?: HoldOptions): Promise<Lease | null>;
  acquire(key: string, ttl: Seconds): Promise<boolean>;
  renew(key: string, ttl: Seconds): Promise<boolean>;
  release(key: string): Promise<boolean>;
  held(key: string): Promise<boolean>;
  fence(key: string): number | null;
  setFlag(key: string, options?: { ttl?: Seconds }): Promise<void>;
  flag(key: string): Promise<boolean>;
  clearFlag(key: string): Promise<void>;
  breakLease(key: string): Promise<boolean>;
  info(key: string): Promise<LeaseInfo | null>;
  list(prefix?: string): Promise<Listing>;
  stopHolders(key: string, options?: { ttl?: Seconds }): Promise<StopOutcome>;
  stopJob(id: string, options?: { ttl?: Seconds }): Promise<string>;
  stats(): Stats;
  prometheus(): string;
  activeHolds(): number;
}

export declare function open(url: string, options?: OpenOptions): Promise<Locks>;
export declare function configure(locks: Locks | null): void;
export declare function hold(key: string, options?: HoldOptions): Promise<Lease | null>;
export declare function request<T>(key: string, callback: (lease: Lease) => T | PromiseLike<T>): Promise<T>;
export declare function request<T>(
  key: string,
  options: HoldOptions,
  callback: (lease: Lease | null) => T | PromiseLike<T>,
): Promise<T>;
export declare function jobStopKey(id: string): string;

export interface OperatorOptions {
  /** Enables actions for requests carrying `Authorization: Bearer <token>` (16+ characters). */
  token?: string;
  /** Enables actions for requests it approves (same origin and the page's CSRF token also needed). */
  authorize?: (req: IncomingMessage) => boolean | Promise<boolean>;
  allowActions?: boolean;
  /** Only keys under this prefix are shown and acted on. */
  prefix?: string;
  /** Host names answered (default: the loopback names); `*` any. */
  allowedHosts?: string[];
  /** Take scheme and host from X-Forwarded-Proto / X-Forwarded-Host. */
  trustForwarded?: boolean;
  /** A request whose body is not complete within this of the handler's call gets 408 and a closed connection (default 10). */
  requestTimeout?: Seconds;
}

/** The operator's page as a `node:http` / Express handler. */
export declare function operatorHandler(
  locks: Locks,
  options?: OperatorOptions,
): (req: IncomingMessage, res: ServerResponse, next?: (err?: unknown) => void) => void;

export declare const version: string;
