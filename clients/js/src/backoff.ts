export interface BackoffOptions {
  /** First delay in ms (default 500). */
  initialMs?: number;
  /** Largest delay in ms (default 30000). */
  maxMs?: number;
  /** Random source in [0, 1) (default Math.random); tests pass their own. */
  random?: () => number;
}

/**
 * Backoff gives capped exponential delays with jitter: attempt n waits a
 * random time in [d/2, d) with d = min(max, initial·2ⁿ), so that clients
 * cut off together do not come back together.
 */
export class Backoff {
  private attempt = 0;
  private readonly initial: number;
  private readonly max: number;
  private readonly random: () => number;

  constructor(o: BackoffOptions = {}) {
    this.initial = o.initialMs ?? 500;
    this.max = o.maxMs ?? 30000;
    this.random = o.random ?? Math.random;
    if (!(this.initial > 0) || !(this.max >= this.initial)) {
      throw new RangeError("gomsg: backoff needs 0 < initialMs <= maxMs");
    }
  }

  /** The delay before the next attempt, in ms. */
  next(): number {
    const d = Math.min(this.max, this.initial * 2 ** Math.min(this.attempt, 30));
    this.attempt++;
    return Math.round(d / 2 + (this.random() * d) / 2);
  }

  /** Starts over (after a session reached Ready). */
  reset(): void {
    this.attempt = 0;
  }
}
