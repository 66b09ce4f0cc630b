// Types of the BullMQ face (lib/bullmq.cjs). Structural: a BullMQ Job, Queue
// or Worker fits them without this file importing bullmq.
import type { Lease, Locks, Interrupted, LocksError } from './index';

export { Interrupted, LocksError };

/** The fields of a BullMQ Job the face reads. */
export interface JobLike {
  readonly id?: string;
  readonly queueName: string;
  readonly attemptsStarted: number;
  moveToDelayed(timestamp: number, token?: string): Promise<void>;
}

/** The core's policy names: run again later, end as done, fail the run. */
export type Policy = 'retry' | 'skip' | 'raise';

export interface LeasedOptions<J extends JobLike = JobLike> {
  /** The handle leases are held on, or a function returning it (called per run). */
  locks: Locks | (() => Locks);
  /** The lease key, or a function of the job giving it. */
  key: string | ((job: J) => string);
  /** Seconds (default 180). */
  ttl?: number;
  /** Seconds between renewals at most (default min(60, ttl / 3)). */
  heartbeat?: number;
  /** Runs holding the key at once (default 1). */
  limit?: number;
  /** Seconds a run waits in line for a busy key (default 0: it does not; Infinity: no limit). */
  wait?: number;
  /** Runs in all before a job that keeps conflicting fails with Conflict (default 20). */
  attempts?: number;
  /** Fixed seconds before a retry (default: min(ttl/4 × 2^(n−1), ttl), ±25 %). */
  backoff?: number;
  /** When the key is held elsewhere (default 'retry': BullMQ's delay). */
  onConflict?: Policy | 'discard';
  /** When the job was stopped (default 'skip': it completes). */
  onStopped?: Policy | 'discard';
  /** When the lease was lost (default 'retry'). */
  onLost?: Policy | 'discard';
}

/** A processor that runs holding the job's lease. */
export type LeasedProcessor<J extends JobLike, R> = (
  job: J,
  lease: Lease,
  token?: string,
  signal?: AbortSignal,
) => Promise<R>;

/** The processor BullMQ's Worker runs: `undefined` when the run was skipped. */
export type Processor<J extends JobLike, R> = (job: J, token?: string, signal?: AbortSignal) => Promise<R | undefined>;

/** Wraps `processor`: each run of a job holds the lease `options.key` names. */
export function leased<J extends JobLike, R>(
  processor: LeasedProcessor<J, R>,
  options: LeasedOptions<J>,
): Processor<J, R> & { readonly leaseOptions: CheckedJobOptions };

/** The options the core checked, with every default applied. */
export interface CheckedJobOptions {
  ttl: number;
  heartbeat: number;
  limit: number;
  wait: number;
  attempts: number;
  backoff: number | null;
  onConflict: Policy;
  onStopped: Policy;
  onLost: Policy;
}

/** A queue named by itself or by its name. */
export type QueueLike = string | { readonly name: string };

export interface StopOptions {
  locks: Locks;
  /** Seconds the flag stays up (default the flag TTL, 300). */
  ttl?: number;
}

/** Raises a leased job's stop flag, from any process; resolves with the key raised. */
export function stop(job: { readonly queueName: string; readonly id?: string }, options: StopOptions): Promise<string>;
export function stop(queue: QueueLike, jobId: string | number, options: StopOptions): Promise<string>;

/** The stop key of a leased job: the core's job stop key of `<queue>:<id>`. */
export function stopKey(job: { readonly queueName: string; readonly id?: string }): string;
export function stopKey(queue: QueueLike, jobId: string | number): string;

/** `<queue>:<id>`: the job's identity in its stop key. */
export function jobRef(job: { readonly queueName: string; readonly id?: string }): string;
export function jobRef(queue: QueueLike, jobId: string | number): string;

/** The lease on a job's key was held elsewhere ('raise', or 'retry' out of attempts). */
export class Conflict extends Error {
  readonly name: 'Conflict';
  readonly key: string;
  readonly attempts: number;
}
